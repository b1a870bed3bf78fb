"""The offsets log's shared vocabulary: its errors, flush policy and in-memory records.

Why a module of its own: recovery, commit rounds and checkpoints (each in its own module) all work on
the same partitions, writes and journal files; declaring them once here keeps those modules about
their one job.
"""
from __future__ import annotations

import asyncio
import errno as errno_mod
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cohort.coordinator.log.journal import PartitionMark
from cohort.coordinator.log.partition_lock import PartitionLock
from cohort.coordinator.contracts.store import LogLoadError, StorageError  # noqa: F401  (raised throughout the log)
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.log")

ROLL_MIN_BYTES = 8 << 20  # the active segment rolls at no smaller size (unless segment.bytes is smaller)
ROLL_DIRTY_RATIO = 2  # ... and at this many times the bytes its partition's closed segments hold


class FlushPolicy:
    """`always` (fsync before acknowledging), `never` (benchmarks only), or an interval in ms."""

    def __init__(self, spec: str | int) -> None:
        spec = str(spec).strip().lower()
        if spec == "always":
            self.sync_each_write, self.interval_ms = True, None
        elif spec == "never":
            self.sync_each_write, self.interval_ms = False, None
        elif spec.isdigit() and int(spec) > 0:
            self.sync_each_write, self.interval_ms = False, int(spec)
        else:
            raise ValueError(f"flush policy must be 'always', 'never' or a positive number of ms, not {spec!r}")
        self.spec = spec


ROUNDS_IN_FLIGHT = 2  # a round may start while the previous one syncs: the loop never idles on the disk
# A loop turn that queues this many appends starts a round before it ends (if a round may start): appends
# that arrive together (answered by one round) then split over two rounds, one syncing while the other is
# written, instead of all waiting for one fsync with the loop idle.
EARLY_ROUND_APPENDS = 32
SYNC_LANES = 8  # threads a checkpoint fans its fsyncs out to (measured: 8 beat 4 and 16 for 16-64 files)
JOURNAL_CHECKPOINT_BYTES = 32 * 1024 * 1024  # bounds what a restart after a crash replays from the journal
JOURNAL_PREALLOCATE = 1024 * 1024
CHECKPOINT_RETRY_S = 1.0
# Segment write-behind (see commit_rounds): a partition's batches reach its active segment once they add
# up to this many bytes, or at most this long after they were journaled.
CATCH_UP_BYTES = 64 * 1024
CATCH_UP_S = 0.1
CATCH_UP_PER_TURN = 2  # partitions a timed catch-up writes per loop turn


@dataclass(slots=True, eq=False)
class PendingWrite:
    """One batch written to its partition, not yet acknowledged: where it starts, whose appends it answers."""

    start: int  # position in the active segment
    base: int  # offset of its first record
    acks: list  # [(future, offset of the append's last record)]
    data: bytes | None = None  # the batch, until it is in the journal


@dataclass(slots=True, eq=False)
class OpenJournal:
    """The journal file being written: how much of it is written and how much is durable."""

    owner: str
    seq: int
    path: Path
    fd: int
    size: int = 0
    synced: int = 0
    allocated: int = 0  # the file is zero-filled up to here (see _journal_write)
    broken_tail: int | None = None  # a failed write could not be cut back: cut before the next write


@dataclass(slots=True, eq=False)
class CheckpointPlan:
    """A journal switch taken on the loop; the thread part makes the marks true and records them."""

    marks: dict[int, PartitionMark]
    active: list[tuple[Partition, int]]  # (partition, fd) of files written since the last checkpoint
    closed: list[tuple[Partition, int]]  # (partition, fd) of segments closed since the last checkpoint
    retired: OpenJournal


@dataclass(slots=True, eq=False)
class SyncRound:
    """One fdatasync of the journal in flight and the writes it makes durable; rounds are answered in order."""

    writes: list[tuple[Partition, list[PendingWrite]]]
    journal: OpenJournal
    upto: int  # the journal's size when the round started: durable once it succeeds
    plan: CheckpointPlan | None  # the checkpoint whose journal switch this round ends
    sync: asyncio.Future


@dataclass(slots=True, eq=False)
class Partition:
    """What the log holds of one partition: its files, its writes in flight, its directory lock.

    Where it is in its life is not here but in the node's tracker (`OffsetsLog.states`, by `index`);
    `error` says why its last load or mark failed.
    """

    index: int
    path: Path
    error: Exception | None = None
    segments: list[Path] = field(default_factory=list)
    fd: int = -1
    active_size: int = 0  # of the active segment, the batches not written to it yet included
    unwritten: list[bytes] = field(default_factory=list)  # batches of the active segment not in its file yet
    unwritten_bytes: int = 0
    catch_up_failing: bool = False  # its last catch-up failed (logged once until one succeeds)
    next_offset: int = 0
    pending: list = field(default_factory=list)  # [(records, future)] waiting for the next flush
    due: bool = False  # queued for the next flush
    unsynced: list[PendingWrite] = field(default_factory=list)  # journaled, waiting for the next sync round
    in_round: list[PendingWrite] = field(default_factory=list)  # journaled, in sync rounds in flight (oldest first)
    held: bool = False  # a write waits for the unacknowledged ones (it must roll)
    written_since_checkpoint: bool = False
    closed_fds: list[int] = field(default_factory=list)  # closed segments no checkpoint has fsynced yet
    checkpoint_base: int = 0  # active segment at the last checkpoint: compaction stays below it
    broken_tail: int | None = None  # a failed write could not be cut back: cut before the next write
    rolled_since_clean: int = 0
    closed_bytes: int = 0  # bytes in closed segments at the last compaction (or load): about the live records
    roll_bytes: int = 0  # the active segment rolls at this size (see OffsetsLog._set_roll_bytes)
    active_first_ms: int | None = None  # append time of the active segment's first batch (time-based roll)
    tombstone_due_ms: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    owner_lock: PartitionLock | None = None  # this process's hold on the partition directory
    mark: PartitionMark | None = None  # the last mark written for it (by this instance or, until then, found)
    compacting: asyncio.Future | None = None  # a compaction of it in flight on the cleaner thread
    marking: asyncio.Future | None = None  # its first mark of this owner being written: no write goes before it
    releasing: asyncio.Future | None = None  # a `release` in progress: a new load waits for it

    def holds_anything(self) -> bool:
        """Whether releasing it has work to do: files, a directory lock, appends or a mark in flight."""
        return (self.owner_lock is not None or self.fd >= 0 or bool(self.closed_fds) or bool(self.pending)
                or bool(self.unsynced) or bool(self.in_round) or self.marking is not None)


def write_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    done = 0
    while done < len(data):
        written = os.pwrite(fd, view[done:], position + done)
        if written <= 0:
            raise OSError(errno_mod.EIO, "the disk accepted no bytes")
        done += written



def disk_error(where: str, what: str, exc: OSError) -> StorageError:
    """Log a disk failure once and turn it into the StorageError the client's error is mapped from."""
    name = errno_mod.errorcode.get(exc.errno or 0, "error")
    log.error("%s: %s failed: %s %s", where, what, name, exc.strerror or exc)
    return StorageError(f"{where}: {what} failed: {name} {exc.strerror or exc}", ErrorCode.KAFKA_STORAGE_ERROR,
                        exc.errno)


def fdatasync_and_close(fd: int) -> None:
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def close_quietly(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0

