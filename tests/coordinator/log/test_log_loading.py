"""Loading: a partition is LOADING until its replay callback has run, then LOADED; one log line per
partition (records, ms) and a total."""
from __future__ import annotations

import logging

from log_helpers import commit, open_log

from cohort.coordinator.log import OffsetsLog, PartitionState


async def test_partitions_load_one_by_one_with_a_line_each_and_a_total(tmp_path, caplog):
    log, _ = await open_log(tmp_path, num_partitions=3)
    await log.append(2, [commit("g", "t", 0, 1), commit("g", "t", 1, 1)])
    await log.append(2, [commit("g", "t", 0, 2)])
    await log.close()

    states_seen = []
    log = OffsetsLog(tmp_path, num_partitions=3)
    assert [log.partition_state(p) for p in range(3)] == [PartitionState.LOADING] * 3

    def on_loaded(partition, live):
        states_seen.append((partition, [log.partition_state(p) for p in range(3)], len(live)))

    with caplog.at_level(logging.DEBUG, logger="cohort.log"):
        await log.open(on_loaded)
    L, D = PartitionState.LOADING, PartitionState.LOADED
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
