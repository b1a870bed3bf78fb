"""One owner per partition directory, across processes: an exclusive `flock` on ``<partition dir>/.lock``.

Why: with `cohort serve --workers N` several processes share one data dir, each owning some offsets
partitions; two of them writing the same partition's segments would interleave batches and lose
acknowledged commits.  The kernel drops the lock when its holder exits (even on kill -9), so a
crashed owner's partitions can be taken at once by whoever owns them next.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from cohort.coordinator.log.file_modes import FILE_MODE, make_private_dir

LOCK_NAME = ".lock"


class PartitionOwnedError(Exception):
    """Another process holds the partition directory."""


class PartitionLock:
    """The exclusive lock on one partition directory, held from `acquire` to `release`."""

    def __init__(self, pdir: Path) -> None:
        self.path = Path(pdir) / LOCK_NAME
        self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def acquire(self) -> None:
        """Take the lock now or raise `PartitionOwnedError` naming the holder's pid."""
        make_private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise PartitionOwnedError(f"{self.path.parent} is owned by another process"
                                      f"{f' (pid {holder})' if holder else ''}") from None
        except OSError:
            os.close(fd)
            raise
        # One fixed-width write, no truncation (a truncation costs the file system a journal entry, once per
        # partition at every start): every holder writes the same 11 bytes, and readers strip the padding.
        os.pwrite(fd, f"{os.getpid():>10}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1


def partition_in_use(pdir: Path) -> str | None:
    """`" (pid N)"` (or "") if a process owns the partition directory now, else None; never holds it."""
    path = Path(pdir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        return f" (pid {holder})" if holder else ""
    finally:
        os.close(fd)
    return None


def _read_pid(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
