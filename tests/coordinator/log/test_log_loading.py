"""Loading: a partition is LOADING until its replay callback has run, then LOADED; one log line per
partition (records, ms) and a total."""
from __future__ import annotations

import asyncio
import logging

import pytest

from log_helpers import commit, open_log, wait_for

from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle
from cohort.coordinator.log import OffsetsLog


async def test_partitions_load_one_by_one_with_a_line_each_and_a_total(tmp_path, caplog):
    log, _ = await open_log(tmp_path, num_partitions=3)
    await log.append(2, [commit("g", "t", 0, 1), commit("g", "t", 1, 1)])
    await log.append(2, [commit("g", "t", 0, 2)])
    await log.close()

    states_seen = []
    log = OffsetsLog(tmp_path, num_partitions=3)
    assert [log.partition_state(p) for p in range(3)] == [PartitionLifecycle.LOADING] * 3

    def on_loaded(partition, live):
        states_seen.append((partition, [log.partition_state(p) for p in range(3)], len(live)))

    with caplog.at_level(logging.DEBUG, logger="cohort.log"):
        await log.open(on_loaded)
    L, D = PartitionLifecycle.LOADING, PartitionLifecycle.LOADED
    assert states_seen == [(0, [L, L, L], 0), (1, [D, L, L], 0), (2, [D, D, L], 2)]
    assert [log.partition_state(p) for p in range(3)] == [D, D, D]
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    # One summary line at INFO; the per-partition lines are DEBUG (INFO only for a slow partition).
    assert [line for line in info if line.startswith("offsets ")] == [
        next(line for line in info if line.startswith("offsets log loaded: 3 partitions, 3 records, 2 live keys in "))]
    assert any(line.startswith("offsets partition 2 loaded: 3 records, 2 live keys in ") for line in debug)
    assert sum(line.startswith("offsets partition ") for line in debug) == 3
    await log.close()



@pytest.mark.timeout(20)
async def test_close_finishes_when_a_background_write_is_done_but_not_yet_forgotten(tmp_path):
    """A background write that finishes while close() waits is forgotten by its done callback, queued
    behind close's own wake-up; close must let that callback run.  (Python 3.12's gather over done
    futures returns without yielding: close spun forever.)"""
    log, _ = await open_log(tmp_path, num_partitions=2)
    await wait_for(lambda: not log._inflight)  # the first marks are written
    loop = asyncio.get_running_loop()
    first, late = loop.create_future(), loop.create_future()

    def in_flight(fut: asyncio.Future) -> None:
        log._inflight.add(fut)
        fut.add_done_callback(log._inflight.discard)

    def finish_late() -> None:  # runs after close's wake-up was queued, before close runs
        in_flight(late)
        late.set_result(None)

    def finish_first() -> None:
        first.set_result(None)
        loop.call_soon(finish_late)

    in_flight(first)
    loop.call_later(0.2, finish_first)
    await log.close()  # a spin never yields, so only the test timeout can stop it
    assert not log._inflight
