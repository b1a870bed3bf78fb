"""The active segment rolls before its history dwarfs the live records (hardening, item 18).

Compaction only rewrites closed segments; an active segment that never reached segment.bytes kept
every commit ever made and a restart read all of it (0.4 s -> 3.7 s as it grew to 81 MB for ~40 k
live keys). It now also rolls once it holds twice what its partition's closed (compacted) segments
hold, and by age (offsets.topic.segment.ms), so what a restart reads follows the live key count.
"""
from __future__ import annotations

from log_helpers import reopen, FakeClock, commit, open_log

from cohort.coordinator.log import state as log_state
from cohort.coordinator.log.batch import iter_batches

KEYS = 20


def records_on_disk(log, partition: int = 0) -> int:
    return sum(b.record_count for path in log.segments(partition) for b in iter_batches(path.read_bytes()))


async def test_a_long_history_of_few_keys_is_compacted_down_to_about_the_live_records(tmp_path, monkeypatch):
    monkeypatch.setattr(log_state, "ROLL_MIN_BYTES", 4096)
    log, _ = await open_log(tmp_path, cleaner_backoff_ms=10**9)  # compaction only when the test asks
    for i in range(4000):
        await log.append(0, [commit("g", "t", i % KEYS, i)])
        if i % 100 == 99:  # the cleaner's pass
            await log.checkpoint()
            await log.compact(0)
    await log.checkpoint()
    await log.compact(0)
    on_disk = records_on_disk(log)
    await log.close()

    assert len(log.segments(0)) >= 2  # it rolled, although segment.bytes (100 MiB) was never reached
    # The live keys, the active segment (4 KiB: ~50 records) and what the last pass had not reached.
    assert on_disk < 250, on_disk
    live = await reopen(tmp_path)
    assert live == dict(commit("g", "t", i % KEYS, i) for i in range(4000 - KEYS, 4000))


async def test_the_active_segment_rolls_by_age(tmp_path):
    clock = FakeClock()
    log, _ = await open_log(tmp_path, clock=clock, segment_ms=60_000)
    await log.append(0, [commit("g", "t", 0, 1)])
    clock.now += 30
    await log.append(0, [commit("g", "t", 0, 2)])
    assert len(log.segments(0)) == 1
    clock.now += 31  # the active segment's first batch is now older than segment.ms
    await log.append(0, [commit("g", "t", 0, 3)])
    assert len(log.segments(0)) == 2
    await log.close()
