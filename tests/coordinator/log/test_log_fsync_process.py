"""Policy `always` fsyncs the journal in a helper process: an append is acknowledged only after the helper's
fdatasync; the helper's errors reach the caller; a helper that dies (even mid-request) costs no append, and
the next round starts a new one; closing the log ends it."""
from __future__ import annotations

import asyncio
import errno
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from log_helpers import commit, open_log, wait_for

from cohort.coordinator.log.fsync_process import FsyncProcess


def _helpers() -> set[int]:
    """Pids of this process's fsync helpers that are still running (not zombies)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == os.getpid() and state != "Z" and b"fsync_child.py" in cmdline:
            found.add(int(entry.name))
    return found


@pytest.fixture
def executor():
    pool = ThreadPoolExecutor(max_workers=2)
    yield pool
    pool.shutdown(wait=True)


async def test_the_helper_syncs_a_file_and_reports_how_long_it_took(tmp_path, executor):
    fsync = FsyncProcess(asyncio.get_running_loop(), executor)
    fsync.start()
    try:
        assert fsync.pid is not None and fsync.pid != os.getpid()
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
        try:
            os.write(fd, b"x" * 4096)
            for _ in range(3):
                took = await asyncio.wait_for(fsync.sync(fd, "f"), 10)
                assert 0 <= took < 10
        finally:
            os.close(fd)
    finally:
        fsync.close()


async def test_a_failed_fdatasync_in_the_helper_raises_its_errno(executor):
    fsync = FsyncProcess(asyncio.get_running_loop(), executor)
    fsync.start()
    read_end, write_end = os.pipe()  # a pipe cannot be synced: fdatasync fails with EINVAL
    try:
        with pytest.raises(OSError) as failure:
            await asyncio.wait_for(fsync.sync(write_end, "pipe"), 10)
        assert failure.value.errno == errno.EINVAL
        assert fsync.pid is not None  # an fsync error is the file's, not the helper's: it stays
    finally:
        os.close(read_end)
        os.close(write_end)
        fsync.close()


async def test_a_request_in_flight_when_the_helper_dies_is_done_again_and_a_new_helper_takes_over(
        tmp_path, executor):
    fsync = FsyncProcess(asyncio.get_running_loop(), executor)
    fsync.start()
    first = fsync.pid
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        os.kill(first, signal.SIGSTOP)  # the request waits in its socket, unanswered
        pending = fsync.sync(fd, "f")
        await asyncio.sleep(0.05)  # (the scenario: a window for a wrong answer from a stopped helper)
        assert not pending.done()
        os.kill(first, signal.SIGKILL)
        assert await asyncio.wait_for(pending, 10) >= 0  # answered by the fallback
        assert await asyncio.wait_for(fsync.sync(fd, "f"), 10) >= 0
        assert fsync.pid not in (None, first)
    finally:
        os.close(fd)
        fsync.close()


async def _reopen(data_dir, **kwargs) -> dict[bytes, bytes]:
    log, live = await open_log(data_dir, **kwargs)
    await log.close()
    return live


async def _open_with_helpers(data_dir, **kwargs):
    """Open a log and append once; returns it, its helpers' pids and the pids of helpers that were there before."""
    others = _helpers()
    log, _ = await open_log(data_dir, **kwargs)
    await log.append(0, [commit("g", "t", 0, 0)])
    helpers = _helpers() - others
    assert helpers
    return log, helpers, others


async def test_an_append_waits_for_the_helpers_fsync(tmp_path):
    log, helpers, _ = await _open_with_helpers(tmp_path)
    try:
        for pid in helpers:
            os.kill(pid, signal.SIGSTOP)
        try:
            append = asyncio.ensure_future(log.append(0, [commit("g", "t", 0, 2)]))
            await asyncio.sleep(0.2)  # (the scenario: a window for a wrong early acknowledgement to show up)
            assert not append.done(), "acknowledged before the journal was fsynced"
        finally:
            for pid in helpers:
                os.kill(pid, signal.SIGCONT)
        assert await asyncio.wait_for(append, 10) == 1
    finally:
        await log.close()
    assert await _reopen(tmp_path) == dict([commit("g", "t", 0, 2)])


async def test_appends_go_on_when_the_helpers_are_killed_and_closing_the_log_ends_the_new_ones(tmp_path):
    log, first, others = await _open_with_helpers(tmp_path, num_partitions=3)
    closed = False
    try:
        for pid in first:
            os.kill(pid, signal.SIGKILL)
        for i in range(1, 40):
            await asyncio.wait_for(log.append(i % 3, [commit("g", "t", i % 3, i)]), 10)
        await wait_for(lambda: _helpers() - others and not first & _helpers())  # new helper(s), none of the old
        await log.close()
        closed = True
        await wait_for(lambda: not _helpers() - others)
    finally:
        if not closed:
            await log.close()
    assert await _reopen(tmp_path, num_partitions=3) == dict(commit("g", "t", i % 3, i) for i in range(37, 40))


async def test_when_no_helper_can_be_started_the_fsync_runs_on_a_thread(tmp_path, executor, monkeypatch, caplog):
    monkeypatch.setattr("sys.executable", str(tmp_path / "no-python-here"))
    fsync = FsyncProcess(asyncio.get_running_loop(), executor)
    fsync.start()
    try:
        assert fsync.pid is None
        assert "cannot start the fsync helper" in caplog.text
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
        try:
            assert await asyncio.wait_for(fsync.sync(fd, "f"), 10) >= 0
            assert await asyncio.wait_for(fsync.sync(fd, "f"), 10) >= 0  # within the back-off: a thread again
        finally:
            os.close(fd)
    finally:
        fsync.close()
