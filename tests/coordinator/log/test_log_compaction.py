"""Compaction keeps the latest record per key in closed segments, keeps tombstones for delete.retention.ms
(by the log's clock) then drops them, never changes what a replay gives, and survives a crash at any step."""
from __future__ import annotations

import shutil

from bounded_wait import wait_until_async
from log_helpers import reopen, FakeClock, commit, open_log

from cohort.coordinator.log import compact_closed_segments, read_partition
from cohort.coordinator.log.segments import partition_dir, read_partition_history, segment_base, swap_name

TOMBSTONE_KEY = commit("gone", "t", 0, 0)[0]


async def _churn(log, rounds: int = 30):
    for i in range(rounds):
        await log.append(0, [commit("g", "t", p, i) for p in range(3)])
    await log.append(0, [commit("gone", "t", 0, 1)])
    await log.append(0, [(TOMBSTONE_KEY, None)])
    for i in range(10):  # roll past the tombstone so it sits in a closed segment
        await log.append(0, [commit("g", "t", 0, 100 + i)])


def _records(data_dir):
    return list(read_partition(data_dir, 0))


async def test_compaction_keeps_the_latest_per_key_and_tombstones_until_retention(tmp_path):
    clock = FakeClock()
    log, _ = await open_log(tmp_path, segment_bytes=300, clock=clock, delete_retention_ms=60_000,
                            cleaner_backoff_ms=3_600_000)
    await _churn(log)
    log.catch_up()  # the active segment holds every record written (segments are written behind the journal)
    before = _records(tmp_path)
    segments_before = len(log.segments(0))
    assert segments_before > 5

    [result] = await log.compact(0)
    after = _records(tmp_path)
    assert result.records_after < result.records_before
    assert len(log.segments(0)) < segments_before
    closed_end = segment_base(log.segments(0)[-1])
    closed_keys = [k for o, k, _ in after if o < closed_end]
    assert len(closed_keys) == len(set(closed_keys))  # one record per key in the closed part
    # Offsets are kept, and every surviving record is the latest of its key.
    latest = {k: o for o, k, _ in before if o < closed_end}  # the active segment is not compacted
    assert all(latest[k] == o for o, k, _ in after if o < closed_end)
    assert (TOMBSTONE_KEY, None) in [(k, v) for _, k, v in after]

    clock.now += 59  # not yet
    await log.compact(0)
    assert (TOMBSTONE_KEY, None) in [(k, v) for _, k, v in _records(tmp_path)]
    clock.now += 1
    [result] = await log.compact(0)
    assert result.tombstones_dropped == 1
    assert TOMBSTONE_KEY not in [k for _, k, _ in _records(tmp_path)]

    await log.close()
    live = await reopen(tmp_path)
    expected = {k: v for _, k, v in before}
    expected = {k: v for k, v in expected.items() if v is not None}
    assert live == expected
    # Appends continue after the highest offset ever used, even if compaction removed it.
    log, _ = await open_log(tmp_path, segment_bytes=300)
    assert await log.append(0, [commit("g", "t", 9, 1)]) == before[-1][0] + 1
    await log.close()


async def test_compaction_keeps_every_history_record_younger_than_the_window_then_the_latest(tmp_path):
    clock = FakeClock()
    history_keys = (commit("g", "t", 0, 0)[0][:2],)  # offset commits keep a history; other keys do not
    log, _ = await open_log(tmp_path, segment_bytes=300, clock=clock, cleaner_backoff_ms=3_600_000,
                            history_retention_ms=60_000, history_key_prefixes=history_keys)
    other = (b"\x00\x64other", b"v")  # a key of another record type (a topic), overwritten each round
    for i in range(20):
        await log.append(0, [commit("g", "t", 0, i), other])
        clock.now += 1  # one second apart: each append is its own batch with its own time
    await log.append(0, [commit("g", "t", 1, 0)] * 12)  # roll: what came before is closed
    closed_end = segment_base(log.segments(0)[-1])
    [result] = await log.compact(0)
    after = [(o, k, v) for o, k, v in _records(tmp_path) if o < closed_end]
    commits = [v for _, k, v in after if k == commit("g", "t", 0, 0)[0]]
    assert len(commits) == 20  # all within the window: every one kept, with its time
    assert sum(1 for _, k, _ in after if k == other[0]) == 1  # not a history key: the latest only
    times = [t for t, k, _ in read_partition_history(tmp_path, 0, history_keys) if k == commit("g", "t", 0, 0)[0]]
    assert times == sorted(times) and len(set(times)) == 20

    clock.now += 50  # 50 s on: commits 0..10 (appended 60 s or more ago) leave the window
    await log.compact(0)
    kept = [v for o, k, v in _records(tmp_path) if o < closed_end and k == commit("g", "t", 0, 0)[0]]
    assert kept == [commit("g", "t", 0, i)[1] for i in range(11, 20)]
    await log.close()
    live = await reopen(tmp_path)
    assert live[commit("g", "t", 0, 0)[0]] == commit("g", "t", 0, 19)[1]  # replay: still the latest


async def test_the_background_cleaner_compacts_rolled_segments(tmp_path):
    log, _ = await open_log(tmp_path, segment_bytes=200, cleaner_backoff_ms=20)
    for i in range(40):
        await log.append(0, [commit("g", "t", 0, i)])
    records_before = 40  # the cleaner may already be at work: count from what was appended
    await wait_until_async(lambda: len(_records(tmp_path)) < records_before, 10, "the cleaner to compact",
                           interval=0.02)
    await log.close()


async def test_a_compaction_interrupted_at_any_step_recovers_to_the_same_state(tmp_path):
    source = tmp_path / "source"
    log, _ = await open_log(source, segment_bytes=300, delete_retention_ms=0)
    await _churn(log)
    await log.close()
    expected = await reopen(source)  # also closes nothing: read-only use below
    pdir = partition_dir(source, 0)
    segments = sorted(pdir.glob("*.log"))
    closed, active = segments[:-1], segments[-1]

    # The finished rewrite, produced once in a scratch copy.
    scratch = tmp_path / "scratch"
    shutil.copytree(source, scratch)
    spdir = partition_dir(scratch, 0)
    result = compact_closed_segments(spdir, sorted(spdir.glob("*.log"))[:-1], segment_base(active),
                                     segment_bytes=10_000, delete_retention_ms=0, now_ms=2**62)
    [written] = result.written
    base = segment_base(written)
    rewritten = written.read_bytes()

    def crash_state(name, make):
        work = tmp_path / name
        shutil.copytree(source, work)
        make(partition_dir(work, 0))
        return work

    states = {
        # died while writing the .cleaned file
        "cleaned": lambda d: (d / (swap_name(base, segment_base(active)) + ".cleaned")).write_bytes(rewritten[:50]),
        # died after the rename to .swap, before deleting the old segments
        "swap": lambda d: (d / swap_name(base, segment_base(active))).write_bytes(rewritten),
        # died half-way through deleting the old segments
        "swap-half-deleted": lambda d: (
            (d / swap_name(base, segment_base(active))).write_bytes(rewritten),
            [(d / c.name).unlink() for c in closed[: len(closed) // 2]],
        ),
    }
    for name, make in states.items():
        work = crash_state(name, make)
        log, live = await open_log(work)
        await log.close()
        assert live == expected, name
        leftovers = [p.name for p in partition_dir(work, 0).iterdir()
                     if not p.name.endswith(".log") and p.name not in ("checkpoint.json", ".lock")]
        assert leftovers == [], name
