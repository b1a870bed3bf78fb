"""The read-only segment reader (for tools and the Spark source) works beside a running log."""
from __future__ import annotations

import pytest
from log_helpers import commit, open_log, wait_for

from cohort.coordinator.log import CorruptLogError, list_partitions, list_segments, read_segment
from cohort.coordinator.log.batch import iter_batches


async def test_reader_sees_every_record_and_stops_quietly_at_an_unfinished_tail(tmp_path):
    log, _ = await open_log(tmp_path, num_partitions=3, segment_bytes=150)
    for i in range(10):
        await log.append(i % 3, [commit("g", "t", 0, i), (b"\x00\x02\x00\x01g", None)])
    assert list_partitions(tmp_path) == [0, 1, 2]

    def read_all() -> dict[int, list]:
        listed = list_segments(tmp_path)
        assert [p for p, _ in listed] == sorted(p for p, _ in listed)
        records: dict[int, list] = {p: [] for p in range(3)}
        for p, path in listed:
            records[p] += read_segment(path)
        return records

    # Segments are written behind the journal: a reader sees every acknowledged record within CATCH_UP_S.
    await wait_for(lambda: [o for o, _, _ in read_all()[0]] == list(range(8)), timeout=5)
    records = read_all()
    assert records[0][1][2] is None  # tombstones come back as None
    # A write in progress at the end of the active segment is not visible, and not an error.
    active = log.segments(0)[-1]
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01\x00partial")
    assert list(read_segment(active)) == list(read_segment(active))
    await log.close()


async def test_reader_reports_damage_before_the_end(tmp_path):
    log, _ = await open_log(tmp_path)
    for i in range(3):
        await log.append(0, [commit("g", "t", 0, i)])
    await log.close()
    [(_, path)] = list_segments(tmp_path)
    data = bytearray(path.read_bytes())
    first = list(iter_batches(bytes(data)))[0]
    data[first.end - 1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match=f"position {first.position}: checksum"):
        list(read_segment(path))
