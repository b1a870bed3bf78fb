"""`FsyncProcess`: the journal's fdatasync, done by a helper process instead of a thread of ours.

Why a process: a writer thread needs the GIL to take a request, and again to
report the result, while the event loop holds the GIL nearly all the time
under load.  Every round then cost several GIL hand-overs, and each of the
loop's own syscalls became one.  Measured here (2 cores, 32 committers, policy
always): the loop spent 63 µs of CPU per
commit with the thread against 41 µs with no fsync at all, and about 25 000
futex calls in 4 s.  The helper shares no GIL; the loop sends one message and
later reads one reply, both non-blocking.

The helper syncs the same open file description the coordinator wrote (it is
passed over the socket, SCM_RIGHTS), so an fsync error reaches it exactly as it
would reach us.  If the helper dies, the request in flight is done again on
the fallback executor (fdatasync twice is harmless) and the next request starts
a new helper; if none can be started, requests go to the executor until one can.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import Executor
from pathlib import Path

from cohort.coordinator.log.fsync_child import REPLY

log = logging.getLogger("cohort.log")

_CHILD = Path(__file__).with_name("fsync_child.py")
_RESPAWN_BACKOFF_S = 1.0


def fdatasync_timed(fd: int) -> float:
    """fdatasync `fd`; the seconds it took."""
    started = time.perf_counter()
    os.fdatasync(fd)
    return time.perf_counter() - started


class FsyncProcess:
    """fdatasync one file at a time in a helper process; `sync` answers with the seconds it took."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fallback: Executor) -> None:
        self._loop = loop
        self._fallback = fallback
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._file: object = None  # the identity of the file the helper holds
        self._waiting: tuple[asyncio.Future, int] | None = None  # (future, fd) of the request in flight
        self._respawn_at = 0.0
        self._closed = False

    @property
    def busy(self) -> bool:
        """A request is in flight."""
        return self._waiting is not None

    @property
    def pid(self) -> int | None:
        """The helper's process id (None while there is none)."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the helper now rather than at the first request (a process start takes ~20 ms)."""
        if self._sock is None and not self._closed:
            self._spawn()

    def sync(self, fd: int, file: object) -> asyncio.Future:
        """fdatasync `fd` (the file known as `file`: a new identity sends the fd along); one at a time."""
        if self._waiting is not None:
            raise RuntimeError("FsyncProcess.sync: a request is already in flight")
        fut = self._loop.create_future()
        if self._closed:
            fut.set_exception(OSError(9, "the fsync helper is closed"))
            return fut
        if self._sock is None and time.monotonic() >= self._respawn_at:
            self._spawn()
        if self._sock is None:
            return self._on_fallback(fd)
        try:
            if file is not self._file:
                socket.send_fds(self._sock, [b"s"], [fd])
                self._file = file
            else:
                self._sock.send(b"s")
        except OSError as exc:
            self._lost(f"cannot reach it: {exc}")
            return self._on_fallback(fd)
        self._waiting = (fut, fd)
        return fut

    def close(self) -> None:
        """Close our end: the helper exits when it sees that.  Reaped on a thread."""
        self._closed = True
        self._drop()
        waiting, self._waiting = self._waiting, None
        if waiting is not None and not waiting[0].done():
            waiting[0].set_exception(OSError(9, "the fsync helper was closed"))

    # ------------------------------------------------------------------ internals
    def _spawn(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # Its own session: a Ctrl-C meant for the coordinator does not interrupt an fsync.
            self._proc = subprocess.Popen([sys.executable, "-I", str(_CHILD), str(theirs.fileno())],
                                          pass_fds=[theirs.fileno()], start_new_session=True,
                                          stdin=subprocess.DEVNULL)
        except OSError as exc:
            ours.close()
            log.error("offsets log: cannot start the fsync helper, fsyncing on a thread: %s", exc)
            self._respawn_at = time.monotonic() + _RESPAWN_BACKOFF_S
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self._file = None
        self._loop.add_reader(ours.fileno(), self._on_reply)

    def _on_reply(self) -> None:
        try:
            data = self._sock.recv(64)
        except BlockingIOError:
            return
        except OSError as exc:
            data, reason = b"", str(exc)
        else:
            reason = "it exited"
        if len(data) != REPLY.size:
            self._lost(reason if not data else f"it sent {len(data)} bytes")
            return
        errno, nanos = REPLY.unpack(data)
        waiting, self._waiting = self._waiting, None
        if waiting is None:
            return
        fut = waiting[0]
        if fut.done():
            return
        if errno:
            fut.set_exception(OSError(errno, os.strerror(errno)))
        else:
            fut.set_result(nanos / 1e9)

    def _lost(self, reason: str) -> None:
        """The helper is gone: redo its request in flight on the fallback; the next request starts another."""
        if not self._closed:
            log.warning("offsets log: the fsync helper (pid %s) is gone (%s); fsyncing on a thread until it is "
                        "restarted", self.pid, reason)
        self._drop()
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            fut, fd = waiting
            if not fut.done():
                redo = self._on_fallback(fd)
                redo.add_done_callback(lambda r: _copy_outcome(r, fut))

    def _on_fallback(self, fd: int) -> asyncio.Future:
        return self._loop.run_in_executor(self._fallback, fdatasync_timed, fd)

    def _drop(self) -> None:
        if self._sock is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        self._file = None
        proc, self._proc = self._proc, None
        if proc is not None:
            self._loop.run_in_executor(self._fallback, _reap, proc)


def _reap(proc: subprocess.Popen) -> None:
    """(thread) Wait for a helper whose socket closed; one that lingers is killed."""
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _copy_outcome(source: asyncio.Future, target: asyncio.Future) -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())
