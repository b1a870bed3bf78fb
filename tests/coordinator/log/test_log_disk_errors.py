"""A journal write or fsync the disk refuses fails the append with Kafka's storage error, leaves nothing
behind, and the next append works once the disk does; a segment write the disk refuses loses nothing (the
journal holds the batch) and is made again."""
from __future__ import annotations

import asyncio
import errno
import os
import resource
import signal
import threading

import pytest
from log_helpers import reopen, commit, open_log, wait_for

from cohort.coordinator.log import list_segments, read_segment
from cohort.coordinator.contracts.store import StorageError
from cohort.protocol.errors import ErrorCode


@pytest.fixture
def file_size_limit():
    """Set RLIMIT_FSIZE for this process (writes past it fail with EFBIG), restored afterwards."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def set_limit(size: int) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, old_limit[1]))

    yield set_limit
    resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
    signal.signal(signal.SIGXFSZ, old_handler)


async def test_a_write_past_the_file_size_limit_fails_cleanly_and_the_log_recovers(tmp_path, file_size_limit):
    log, _ = await open_log(tmp_path)
    await log.append(0, [commit("g", "t", 0, 1)])
    log.catch_up()
    [(_, segment)] = list_segments(tmp_path)
    size = segment.stat().st_size

    file_size_limit(size + 10)  # the journal (zero-filled ahead) is past it already: its write fails
    try:
        with pytest.raises(StorageError) as info:
            await log.append(0, [commit("g", "t", 0, 2), commit("g", "t", 1, 2)])
    finally:
        file_size_limit(resource.RLIM_INFINITY)
    assert info.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert info.value.errno == errno.EFBIG
    log.catch_up()
    assert segment.stat().st_size == size  # the failed batch never reaches the segment
    assert [o for o, _, _ in read_segment(segment)] == [0]

    assert await log.append(0, [commit("g", "t", 0, 3)]) == 1
    await log.close()
    live = await reopen(tmp_path)
    assert live == dict([commit("g", "t", 0, 3)])


async def test_a_segment_write_past_the_file_size_limit_loses_nothing_and_is_made_again(tmp_path, file_size_limit,
                                                                                      caplog):
    log, _ = await open_log(tmp_path)
    await log.append(0, [commit("g", "t", 0, 1)])
    log.catch_up()
    [(_, segment)] = list_segments(tmp_path)
    size = segment.stat().st_size
    # Durable in the journal and acknowledged; its segment write comes later.
    assert await log.append(0, [commit("g", "t", 0, 2), commit("g", "t", 1, 2)]) == 2

    # Room for a few bytes only: the kernel writes part of the batch, then refuses the rest.
    file_size_limit(size + 10)
    try:
        with caplog.at_level("INFO", logger="cohort.log"):
            log.catch_up()
            log.catch_up()  # refused again: not logged again
        assert [r.levelname for r in caplog.records if "EFBIG" in r.getMessage()] == ["ERROR"]
        assert segment.stat().st_size == size + 10
        assert [o for o, _, _ in read_segment(segment)] == [0]  # the part written is an unfinished tail
    finally:
        file_size_limit(resource.RLIM_INFINITY)
    # The next catch-up writes the batch again, over the part written, and says so.
    with caplog.at_level("INFO", logger="cohort.log"):
        await wait_for(lambda: [o for o, _, _ in read_segment(segment)] == [0, 1, 2], timeout=5)
    assert any("caught up with the journal again" in r.getMessage() for r in caplog.records)

    assert await log.append(0, [commit("g", "t", 0, 3)]) == 3
    await log.close()
    live = await reopen(tmp_path)
    assert live == dict([commit("g", "t", 0, 3), commit("g", "t", 1, 2)])


@pytest.mark.parametrize("caught_up", [False, True], ids=["segment behind", "segment caught up"])
async def test_a_failed_fsync_fails_every_waiting_append_and_keeps_none_of_them(tmp_path, monkeypatch, caught_up):
    log, _ = await open_log(tmp_path, fsync_process=False)  # the fsync on a thread, where the patch reaches it
    await log.append(0, [commit("g", "t", 0, 1)])
    log.catch_up()
    [(_, segment)] = list_segments(tmp_path)
    size = segment.stat().st_size

    real_fdatasync = os.fdatasync
    syncing, fail = threading.Event(), threading.Event()

    def failing_fdatasync(fd):
        syncing.set()
        assert fail.wait(10), "the test never let the fsync fail"
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    appends = asyncio.gather(*[log.append(0, [commit("g", "t", i, 5)]) for i in range(5)], return_exceptions=True)
    await wait_for(syncing.is_set)
    if caught_up:  # the batches reach the segment while their fsync runs: the failure must cut them off again
        log.catch_up()
        assert segment.stat().st_size > size
    fail.set()
    results = await appends
    assert all(isinstance(r, StorageError) and r.errno == errno.EIO for r in results)
    log.catch_up()
    assert segment.stat().st_size == size
    monkeypatch.setattr(os, "fdatasync", real_fdatasync)

    assert await log.append(0, [commit("g", "t", 0, 6)]) == 1
    await log.close()
    live = await reopen(tmp_path)
    assert live == dict([commit("g", "t", 0, 6)])


async def test_appends_are_refused_while_loading_and_after_close(tmp_path):
    from cohort.coordinator.log import OffsetsLog

    log = OffsetsLog(tmp_path, num_partitions=1)
    with pytest.raises(StorageError) as loading:
        await log.append(0, [commit("g", "t", 0, 1)])
    assert loading.value.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await log.open()
    await log.close()
    with pytest.raises(StorageError) as closed:
        await log.append(0, [commit("g", "t", 0, 1)])
    assert closed.value.error_code == ErrorCode.NOT_COORDINATOR
    with pytest.raises(TypeError):
        log2, _ = await open_log(tmp_path / "x")
        try:
            await log2.append(0, [("not bytes", b"v")])
        finally:
            await log2.close()
