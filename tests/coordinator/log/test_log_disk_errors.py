"""A write the disk refuses fails the append with Kafka's storage error, leaves nothing behind, and the
next append works once the disk does."""
from __future__ import annotations

import errno
import os
import resource
import signal

import pytest
from log_helpers import reopen, commit, open_log

from cohort.coordinator.log import StorageError, list_segments, read_segment
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
    [(_, segment)] = list_segments(tmp_path)
    size = segment.stat().st_size

    # Room for a few bytes only: the kernel writes part of the batch, then refuses the rest.
    file_size_limit(size + 10)
    try:
        with pytest.raises(StorageError) as info:
            await log.append(0, [commit("g", "t", 0, 2), commit("g", "t", 1, 2)])
    finally:
        file_size_limit(resource.RLIM_INFINITY)
    assert info.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert info.value.errno == errno.EFBIG
    assert segment.stat().st_size == size  # the partial batch was cut off
    assert [o for o, _, _ in read_segment(segment)] == [0]

    assert await log.append(0, [commit("g", "t", 0, 3)]) == 1
    await log.close()
    live = await reopen(tmp_path)
    assert live == dict([commit("g", "t", 0, 3)])


async def test_a_failed_fsync_fails_every_waiting_append_and_keeps_none_of_them(tmp_path, monkeypatch):
    log, _ = await open_log(tmp_path, fsync_process=False)  # the fsync on a thread, where the patch reaches it
    await log.append(0, [commit("g", "t", 0, 1)])
    [(_, segment)] = list_segments(tmp_path)
    size = segment.stat().st_size

    real_fdatasync = os.fdatasync

    def failing_fdatasync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    import asyncio

    results = await asyncio.gather(*[log.append(0, [commit("g", "t", i, 5)]) for i in range(5)],
                                   return_exceptions=True)
    assert all(isinstance(r, StorageError) and r.errno == errno.EIO for r in results)
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
