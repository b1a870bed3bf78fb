"""Appends that arrive while a write is in flight share the next write (group commit), each keeps its own
contiguous offsets, and each append is one atomic unit."""
from __future__ import annotations

import asyncio

import pytest
from log_helpers import reopen, commit, open_log

from cohort.coordinator.log import list_segments, read_segment
from cohort.coordinator.log.batch import iter_batches


async def test_concurrent_appends_share_batches_and_get_their_own_offsets(tmp_path):
    log, _ = await open_log(tmp_path, num_partitions=2)
    appends = [[commit(f"g{i}", "t", p, i) for p in range(i % 3 + 1)] for i in range(64)]
    lasts = await asyncio.gather(*[log.append(1, recs) for recs in appends])
    await log.close()

    segment = [path for p, path in list_segments(tmp_path) if p == 1][0]
    batches = list(iter_batches(segment.read_bytes()))
    assert len(batches) < len(appends)  # fsyncs were shared
    records = list(read_segment(segment))
    offset_of = {(o_k, o_v): o for o, o_k, o_v in records}
    for recs, last in zip(appends, lasts):
        # An append's records are contiguous and end at the offset it was given.
        assert [offset_of[r] for r in recs] == list(range(last - len(recs) + 1, last + 1))
    assert [o for o, _, _ in records] == list(range(sum(map(len, appends))))


@pytest.mark.parametrize("bad", [
    (b"k", b"v", b"extra"),  # not a pair
    42,  # not a sequence
    None,  # nothing
    ("k", b"v"),  # a str key
    (b"", b"v"),  # an empty key
    (b"k", b""),  # an empty value (a tombstone is None)
    (b"k", bytearray(b"v")),  # bytes-like, not bytes
    b"kv",  # two items, but ints
])
async def test_a_malformed_record_fails_its_append_naming_it_and_writes_nothing(tmp_path, bad):
    log, _ = await open_log(tmp_path)
    try:
        good = commit("g", "t", 0, 1)
        with pytest.raises(TypeError, match="a record is .key: non-empty bytes") as refused:
            await log.append(0, [good, bad])
        assert repr(bad)[:20] in str(refused.value)
        assert await log.append(0, [good, (good[0], None)]) == 1  # nothing of the refused append was written
    finally:
        await log.close()


async def test_flush_policies_all_persist_on_close(tmp_path):
    for policy in ("always", "never", "5"):
        data_dir = tmp_path / policy
        log, _ = await open_log(data_dir, flush_policy=policy)
        await asyncio.gather(*[log.append(0, [commit("g", "t", i, i)]) for i in range(10)])
        await log.close()  # at once: close itself must persist what a lazy policy has not flushed yet
        live = await reopen(data_dir)
        assert live == dict(commit("g", "t", i, i) for i in range(10))


def test_bad_flush_policy_is_refused(tmp_path):
    import pytest

    from cohort.coordinator.log import OffsetsLog

    with pytest.raises(ValueError, match="flush policy"):
        OffsetsLog(tmp_path, flush_policy="sometimes")
