"""Damage that is not a torn tail is a hard error for its partition, naming file and position; it is
never skipped and never loaded, and the other partitions still load."""
from __future__ import annotations

import pytest
from log_helpers import commit, open_log

from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle
from cohort.coordinator.log import OffsetsLog, list_segments
from cohort.coordinator.contracts.store import LogLoadError, StorageError
from cohort.coordinator.log.batch import iter_batches
from cohort.protocol.errors import ErrorCode


async def _fill(data_dir, **kwargs):
    log, _ = await open_log(data_dir, num_partitions=2, **kwargs)
    for i in range(6):
        await log.append(1, [commit("g", "t", 0, i), commit("g", "t", 1, i)])
        await log.append(0, [commit("h", "t", 0, i)])
    await log.close()


async def test_bad_checksum_mid_segment_fails_the_partition_with_file_and_position(tmp_path):
    await _fill(tmp_path)
    segment = [path for p, path in list_segments(tmp_path) if p == 1][-1]
    data = bytearray(segment.read_bytes())
    middle = list(iter_batches(bytes(data)))[2]
    data[middle.position + 40] ^= 0x01
    segment.write_bytes(bytes(data))

    loaded = {}
    log = OffsetsLog(tmp_path, num_partitions=2)
    with pytest.raises(LogLoadError) as info:
        await log.open(lambda p, live: loaded.__setitem__(p, live))
    message = str(info.value)
    assert str(segment) in message and f"position {middle.position}" in message and "checksum" in message
    assert set(loaded) == {0}
    assert log.partition_state(0) is PartitionLifecycle.LOADED
    assert log.partition_state(1) is PartitionLifecycle.FAILED
    with pytest.raises(StorageError) as refused:
        await log.append(1, [commit("g", "t", 0, 99)])
    assert refused.value.error_code == ErrorCode.NOT_COORDINATOR
    assert await log.append(0, [commit("h", "t", 0, 99)]) == 6
    await log.close()
    # Nothing was "repaired" behind the operator's back.
    assert segment.read_bytes() == bytes(data)


async def test_a_cut_closed_segment_is_damage_not_a_torn_tail(tmp_path):
    await _fill(tmp_path, segment_bytes=100)
    segments = [path for p, path in list_segments(tmp_path) if p == 1]
    assert len(segments) >= 3
    closed = segments[0]
    closed.write_bytes(closed.read_bytes()[:-5])
    log = OffsetsLog(tmp_path, num_partitions=2)
    with pytest.raises(LogLoadError, match=f"{closed}: position 0: .*runs past the end"):
        await log.open()
    await log.close()


async def test_a_partition_count_change_is_refused(tmp_path):
    await _fill(tmp_path)
    log = OffsetsLog(tmp_path, num_partitions=1)
    with pytest.raises(LogLoadError, match="partition count must never change"):
        await log.open()
    await log.close()
