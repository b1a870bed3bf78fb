"""The local log moves its partitions along the shared partition lifecycle, and only along its table."""
from __future__ import annotations

import asyncio

import pytest

from log_helpers import commit, open_log, wait_for

from cohort.coordinator.contracts.partition_lifecycle import IllegalPartitionTransition, PartitionLifecycle as L
from cohort.coordinator.contracts.store import LogLoadError, StorageError
from cohort.coordinator.log import OffsetsLog
from cohort.coordinator.log import offsets_log
from cohort.coordinator.log.partition_lock import partition_in_use
from cohort.coordinator.log.segments import partition_dir
from cohort.protocol.errors import ErrorCode


async def unloaded_log(data_dir, records: int) -> OffsetsLog:
    """An open log of one partition holding `records` commits, not loaded yet (its owner calls `load`)."""
    log, _ = await open_log(data_dir, num_partitions=1)
    await log.append(0, [commit("g", "t", i, 1) for i in range(records)])
    await log.close()
    log = OffsetsLog(data_dir, num_partitions=1, partitions=())
    await log.open()
    return log


def test_the_log_keeps_its_partitions_states_in_one_tracker_that_refuses_a_move_off_the_table(tmp_path):
    log = OffsetsLog(tmp_path, num_partitions=4, partitions=())
    for illegal in (L.LOADED, L.RELEASING, L.FAILED):
        with pytest.raises(IllegalPartitionTransition, match="partition 3: unowned -> "):
            log.states.move(3, illegal)
        assert log.partition_state(3) is L.UNOWNED
    log.states.move(3, L.LOADING)
    log.states.move(3, L.LOADED)
    with pytest.raises(IllegalPartitionTransition, match="loaded -> loading"):
        log.states.move(3, L.LOADING)
    assert log.partition_state(3) is L.LOADED and log.states.loaded == {3}


async def test_release_passes_through_releasing_where_appends_are_refused_and_accepted_ones_finish(tmp_path):
    log, _ = await open_log(tmp_path, num_partitions=2)
    try:
        accepted = log.append(1, [commit("g", "t", 0, 1)])
        releasing = asyncio.ensure_future(log.release(1))
        await asyncio.sleep(0)  # the release has begun: it waits for the accepted append
        assert log.partition_state(1) is L.RELEASING
        refused = log.append(1, [commit("g", "t", 0, 2)])
        with pytest.raises(StorageError, match="being released") as info:
            await refused
        assert info.value.error_code == ErrorCode.NOT_COORDINATOR
        assert await accepted == 0
        await releasing
        assert log.partition_state(1) is L.UNOWNED
        assert log.partition_state(0) is L.LOADED
    finally:
        await log.close()


async def test_a_partition_released_while_its_load_is_read_stays_unowned_when_the_load_finishes(tmp_path, monkeypatch):
    monkeypatch.setattr(offsets_log, "LOAD_CHUNK_RECORDS", 2)
    log = await unloaded_log(tmp_path, 3)
    try:
        chunks = log.load(0)
        first = await chunks.__anext__()
        assert len(first) == 2 and log.partition_state(0) is L.LOADING
        await log.release(0)  # lost while its records were being replayed
        assert [len(chunk) async for chunk in chunks] == [1]  # the reader still takes the rest
        # UNOWNED -> LOADED is no move of the table: the partition is not served from a released directory.
        assert log.partition_state(0) is L.UNOWNED
        with pytest.raises(StorageError, match="not owned") as info:
            await log.append(0, [commit("g", "t", 0, 2)])
        assert info.value.error_code == ErrorCode.NOT_COORDINATOR
        async for _ in log.load(0):  # and it can be loaded again
            pass
        assert log.partition_state(0) is L.LOADED
        assert await log.append(0, [commit("g", "t", 0, 2)]) == 3
    finally:
        await log.close()


async def test_a_partition_whose_first_mark_fails_while_its_load_is_read_stays_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(offsets_log, "LOAD_CHUNK_RECORDS", 2)
    log = await unloaded_log(tmp_path, 3)
    # The disk refuses the next owner's first mark: its temporary file's name is taken by a directory.
    (partition_dir(tmp_path, 0) / "checkpoint.json.tmp").mkdir()
    try:
        chunks = log.load(0)
        await chunks.__anext__()
        await wait_for(lambda: log.partition_state(0) is L.FAILED)  # the mark, written beside the load, failed
        assert len(await chunks.__anext__()) == 1
        with pytest.raises(LogLoadError, match="partition 0"):  # the load ends failed, not loaded
            await chunks.__anext__()
        # FAILED -> LOADED is no move of the table: appends are not taken without the partition's mark.
        assert log.partition_state(0) is L.FAILED
        with pytest.raises(StorageError, match="failed to load") as info:
            await log.append(0, [commit("g", "t", 0, 2)])
        assert info.value.error_code == ErrorCode.NOT_COORDINATOR
    finally:
        await log.close()


async def test_a_partition_released_while_it_is_recovered_gives_its_directory_back(tmp_path):
    log = await unloaded_log(tmp_path, 1)
    try:
        loading = asyncio.ensure_future(log.load(0).__anext__())
        await asyncio.sleep(0)  # recovery runs on a writer thread
        assert log.partition_state(0) is L.LOADING
        await log.release(0)
        with pytest.raises(StorageError, match="released while loading") as info:
            await loading
        assert info.value.error_code == ErrorCode.NOT_COORDINATOR
        assert log.partition_state(0) is L.UNOWNED
        assert partition_in_use(partition_dir(tmp_path, 0)) is None  # the directory lock went with it
        async for _ in log.load(0):
            pass
        assert log.partition_state(0) is L.LOADED
    finally:
        await log.close()
