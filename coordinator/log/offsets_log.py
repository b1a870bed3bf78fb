"""`OffsetsLog`: the partitioned, durable, compacted log under the coordinator, and its `Store` face.

See the package docstring for the API contract.  The machinery lives in one module per job:
`recovery` (a partition back to its checkpoint mark plus its journaled batches), `commit_rounds`
(appends, group commit, fsync rounds, failure cut-back) and `checkpoints` (journal switches, marks,
rolls, compaction).  This module is the life of the whole: `open` (node-wide set-up: this
instance's journal, fsync helpers, cleaner), `load`/`release` of one partition (a lock on the
partition directory makes this instance its only writer), `close`.

It satisfies `cohort.coordinator.contracts.store.Store`: `load(p, epoch)` yields the live records in chunks
(the epoch is ignored: the directory lock is the fencing on a local disk), `append` returns once
durable, `release(p)` finishes p's accepted appends, checkpoints it and gives its directory up.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cohort.coordinator.contracts.partition_lifecycle import OWNED_STATES, PartitionLifecycle, PartitionStates
from cohort.coordinator.log.checkpoints import Checkpoints
from cohort.coordinator.log.commit_rounds import CommitRounds
from cohort.coordinator.log.fsync_process import FsyncProcess
from cohort.coordinator.log.journal import CheckpointError, PartitionMark, write_partition_mark
from cohort.coordinator.log.partition_lock import PartitionLock, PartitionOwnedError
from cohort.coordinator.log.recovery import JournalScans, effective_mark, recover_partition
from cohort.coordinator.log.segments import (
    CorruptLogError,
    list_partitions,
    partition_dir,
    read_partition_history,
    segment_base,
)
from cohort.coordinator.log.state import (
    JOURNAL_CHECKPOINT_BYTES,
    ROUNDS_IN_FLIGHT,
    SYNC_LANES,
    FlushPolicy,
    LogLoadError,
    OpenJournal,
    Partition,
    StorageError,
    SyncRound,
    close_quietly,
    file_size,
)
from cohort.protocol.errors import ErrorCode
from cohort.coordinator.log.file_modes import make_private_dir

__all__ = ["OffsetsLog", "FlushPolicy", "ReplayCallback"]

log = logging.getLogger("cohort.log")

ReplayCallback = Callable[[int, list[tuple[bytes, bytes]]], None]

_SLOW_PARTITION_LOAD_MS = 1000  # a partition that takes this long to load gets its own INFO line
LOAD_CHUNK_RECORDS = 65536  # `load` hands the live records over in chunks of this many
_SCANS_KEPT_S = 2.0  # journal scans are kept this long after the last load (the next one may need them)


class OffsetsLog(CommitRounds, Checkpoints):
    """The offsets log: compacted logs of (key, value) records under `data_dir`, one per offsets partition.

    An instance owns the partitions it has loaded (`partitions`: the ones `open()` loads; `load`
    takes more, `release` gives one up); several instances, in several processes, may share one
    data dir with disjoint partitions.
    """

    # Slots: see GroupCoordinator (an instance dict past 30 attributes slows every self.x on the request path).
    __slots__ = (
        "_behind", "_catch_up_timer", "_checkpoint", "_checkpoint_due", "_checkpoint_retry_at", "_cleaner_pool",
        "_clock", "_closed", "_continuations", "_due", "_flush_scheduled", "_fsyncs", "_inflight", "_journal",
        "_loads_running", "_loop", "_marks", "_metrics", "_open_loads", "_opened", "_parts", "_queued", "_rounds",
        "_scans", "_sync_lanes", "_syncs_in_flight", "_tasks", "_to_sync", "_use_fsync_process", "_write_ms",
        "_writers",
        "cleaner_backoff_ms", "data_dir", "delete_retention_ms", "flush_policy", "history_key_prefixes",
        "history_retention_ms", "journal_checkpoint_bytes", "num_partitions", "owner", "segment_bytes",
        "segment_ms", "states",
    )

    def __init__(
        self,
        data_dir: str | os.PathLike,
        num_partitions: int = 50,
        segment_bytes: int = 104857600,
        flush_policy: str = "always",
        delete_retention_ms: int = 86400000,
        history_retention_ms: int = 0,
        history_key_prefixes: tuple[bytes, ...] = (),
        cleaner_backoff_ms: int = 15000,
        clock: Callable[[], float] = time.time,
        writer_threads: int = 16,
        metrics=None,
        journal_checkpoint_bytes: int = JOURNAL_CHECKPOINT_BYTES,
        fsync_process: bool = True,
        segment_ms: int | None = None,
        partitions: Iterable[int] | None = None,
    ) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be at least 1")
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        self.data_dir = Path(data_dir)
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms or None
        self._write_ms = 0  # append time of the writes being made now (set per flush)
        self.flush_policy = FlushPolicy(flush_policy)
        self.delete_retention_ms = delete_retention_ms
        # Compaction keeps every record this young of the keys starting with these prefixes (the history).
        self.history_retention_ms = history_retention_ms
        self.history_key_prefixes = tuple(history_key_prefixes)
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.journal_checkpoint_bytes = journal_checkpoint_bytes
        self._clock = clock
        self._metrics = metrics  # cohort.coordinator.metrics.CoordinatorMetrics: log_flushed / log_compacted
        self._open_loads = list(range(num_partitions)) if partitions is None else sorted(set(partitions))
        for p in self._open_loads:
            if not 0 <= p < num_partitions:
                raise ValueError(f"no offsets partition {p} (0..{num_partitions - 1})")
        self.owner = secrets.token_hex(6)  # names this instance's journals (see journal.py)
        self._parts = [Partition(i, partition_dir(self.data_dir, i)) for i in range(num_partitions)]
        # The node's one tracker of its partitions (the partition runtime and the ownership read and move it
        # too). The log moves a partition to LOADING when it loads it on its own (`open`, or a `load` called
        # by a tool), to LOADED once its load's last chunk was taken, to FAILED when the load or the disk
        # under it fails, and to UNOWNED once its release finished; it reads it on every append.
        self.states = PartitionStates(range(num_partitions))
        for p in self._open_loads:
            self.states.move(p, PartitionLifecycle.LOADING)
        self._scans = JournalScans(num_partitions)
        self._loads_running = 0
        self._writers = ThreadPoolExecutor(max_workers=max(2, min(writer_threads, num_partitions + 1)),
                                           thread_name_prefix="offsets-log-writer")
        self._cleaner_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="offsets-log-cleaner")
        self._sync_lanes = max(1, min(SYNC_LANES, writer_threads - 1, num_partitions))
        self._inflight: set[asyncio.Future] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due: list[Partition] = []
        self._flush_scheduled = False
        self._behind: dict[int, Partition] = {}  # partitions with unwritten batches, for the next catch-up
        self._catch_up_timer: asyncio.TimerHandle | None = None
        self._to_sync: list[Partition] = []  # partitions with unsynced writes, not in the round
        self._rounds: collections.deque[SyncRound] = collections.deque()  # in flight, oldest first (policy always)
        self._continuations: list = []  # settled appends whose continuations run next (CommitRounds)
        self._syncs_in_flight = 0  # also counts the fsyncs of rounds a failure abandoned
        self._queued = 0  # appends queued since the last write
        self._use_fsync_process = fsync_process
        self._fsyncs: list[FsyncProcess] = []  # where rounds fdatasync the journal (else on writer threads)
        self._journal: OpenJournal | None = None
        self._marks: dict[int, PartitionMark] = {}  # of the last checkpoint written (loaded partitions)
        self._checkpoint_due = False
        self._checkpoint: asyncio.Future | None = None  # the checkpoint in flight
        self._checkpoint_retry_at = 0.0
        self._tasks: list[asyncio.Task] = []
        self._opened = False
        self._closed = False

    # ------------------------------------------------------------------ state
    def partition_state(self, partition: int) -> PartitionLifecycle:
        return self.states[partition]

    def partition_error(self, partition: int) -> Exception | None:
        return self._parts[partition].error

    def next_offset(self, partition: int) -> int:
        """The offset the next appended record of `partition` will get."""
        return self._parts[partition].next_offset

    async def history(self, partition: int, key_prefixes: tuple[bytes, ...]) -> list[tuple[int, bytes, bytes | None]]:
        """(append time ms, key, value) of every record kept of the keys starting with `key_prefixes`,
        oldest first: all of them within `history_retention_ms`, then the latest per key."""
        self.catch_up(partition)  # the reader sees every batch journaled so far
        data_dir = self.data_dir
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: list(read_partition_history(data_dir, partition, key_prefixes)))

    def catch_up(self, partition: int | None = None) -> None:
        """(loop) Write the batches journaled so far to their segments now, for `partition` or all; they
        otherwise follow within CATCH_UP_S (see commit_rounds). A disk error is logged and retried later."""
        for p in self._parts if partition is None else [self._parts[partition]]:
            self._catch_up_or_later(p)

    def segments(self, partition: int) -> list[Path]:
        with self._parts[partition].lock:
            return list(self._parts[partition].segments)

    # ------------------------------------------------------------------ open
    async def open(self, on_partition_loaded: ReplayCallback | None = None) -> None:
        """Start this instance's journal, fsync helpers and cleaner, then load the partitions it was given.

        `on_partition_loaded(partition, records)` is called on the event loop once per partition,
        before the partition becomes LOADED, with the live records: the latest value of every key
        whose latest value is not a tombstone, each key once.  Raises LogLoadError after loading all
        the partitions it could, if some could not be loaded (they stay FAILED).  Built with
        `partitions=()`, it loads nothing: the owner of the instance then calls `load` per partition.
        """
        if self._opened:
            raise RuntimeError("OffsetsLog.open() called twice")
        self._opened = True
        loop = self._loop = asyncio.get_running_loop()
        make_private_dir(self.data_dir, tighten=True)
        found = list_partitions(self.data_dir)
        if found and found[-1] >= self.num_partitions:
            raise LogLoadError({found[-1]: ValueError(
                f"{self.data_dir} holds offsets partition {found[-1]} but num_partitions is "
                f"{self.num_partitions}: the partition count must never change after deployment")})
        if not self.flush_policy.sync_each_write:
            if self.flush_policy.interval_ms is None:
                log.warning("offsets log flush policy 'never': acknowledged commits can be lost on a crash "
                            "(for benchmarks only)")
            else:
                log.warning("offsets log flush policy %d ms: commits acknowledged in the last %d ms can be "
                            "lost on a crash", self.flush_policy.interval_ms, self.flush_policy.interval_ms)
        try:
            self._journal = await loop.run_in_executor(self._writers, self._create_journal, 1)
        except OSError as exc:
            for p in self._open_loads:
                self._parts[p].error = exc
                self.states.move(p, PartitionLifecycle.FAILED)
            log.error("offsets log cannot start its journal: %s", exc)
            raise LogLoadError({p: exc for p in self._open_loads}) from None
        if self.flush_policy.sync_each_write and self._use_fsync_process:
            self._fsyncs = [FsyncProcess(loop, self._writers) for _ in range(ROUNDS_IN_FLIGHT)]
            for helper in self._fsyncs:
                helper.start()
        self._tasks.append(loop.create_task(self._cleaner(), name="offsets-log-cleaner"))
        if self.flush_policy.interval_ms is not None:
            self._tasks.append(loop.create_task(self._interval_flusher(), name="offsets-log-flusher"))
        if self._open_loads:
            await self._load_all(self._open_loads, on_partition_loaded)

    async def _load_all(self, partitions: list[int], on_partition_loaded: ReplayCallback | None) -> None:
        """Load `partitions` one after another (one summary line); LogLoadError names the ones that failed."""
        errors: dict[int, Exception] = {}
        started = time.perf_counter()
        total_records = total_live = total_replayed = 0
        for index in partitions:
            try:
                records, live, replayed = await self._recover_partition(index)
                if on_partition_loaded is not None:
                    on_partition_loaded(index, live)
            except LogLoadError as exc:
                errors.update(exc.errors)
                continue
            except StorageError as exc:
                errors[index] = exc
                continue
            except Exception as exc:
                self._failed(self._parts[index], exc)
                errors[index] = exc
                continue
            if self.states[index] is not PartitionLifecycle.LOADING:  # its first mark failed meanwhile
                errors[index] = self._parts[index].error
                continue
            self.states.move(index, PartitionLifecycle.LOADED)
            total_records += records
            total_live += len(live)
            total_replayed += replayed
            del live
        marking = [p.marking for p in self._parts if p.marking is not None]
        if marking:  # written in the background while the next partitions loaded
            await asyncio.wait(marking)
        log.info("offsets log loaded: %d partitions, %d records, %d live keys in %.0f ms%s%s",
                 len(partitions) - len(errors), total_records, total_live, (time.perf_counter() - started) * 1000,
                 f", {total_replayed} batches replayed from the journal" if total_replayed else "",
                 f", {len(errors)} partitions failed" if errors else "")
        if errors:
            raise LogLoadError(errors)

    # ------------------------------------------------------------------ one partition (the Store)
    async def load(self, partition: int, epoch: int = 0) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """Take `partition` (its directory lock), recover it, and yield its live records in chunks.

        The partition is LOADED (appends accepted) once the last chunk has been taken: the caller
        replays each chunk before it asks for the next, so by then every record is replayed.  Raises
        `LogLoadError` on damage, or when its first mark failed meanwhile (the partition is FAILED),
        and `StorageError` (NOT_COORDINATOR) when another process owns it (FAILED too).
        """
        if not 0 <= partition < self.num_partitions:
            raise ValueError(f"no offsets partition {partition} (0..{self.num_partitions - 1})")
        _, live, _ = await self._recover_partition(partition)
        p = self._parts[partition]
        finished = False
        try:
            for start in range(0, len(live), LOAD_CHUNK_RECORDS):
                yield live[start:start + LOAD_CHUNK_RECORDS]
            finished = True
        finally:
            # Released meanwhile (RELEASING, UNOWNED, CLOSED) or failed: the tracker stays where it is.
            current = self._parts[partition] is p
            if not finished:  # given up (lost meanwhile, or the caller could not replay a chunk)
                if current and p.error is None:
                    p.error = RuntimeError("its load was given up")
                if current and self.states[partition] is PartitionLifecycle.LOADING:
                    self.states.move(partition, PartitionLifecycle.FAILED)
                    log.info("offsets partition %d: load given up", partition)
            elif current and self.states[partition] is PartitionLifecycle.LOADING:
                self.states.move(partition, PartitionLifecycle.LOADED)
        if current and self.states[partition] is PartitionLifecycle.FAILED:  # its first mark failed meanwhile
            raise LogLoadError({partition: p.error})

    async def _recover_partition(self, index: int) -> tuple[int, list[tuple[bytes, bytes]], int]:
        """(loop) Recover one partition on a writer thread and make it this instance's; it stays LOADING."""
        if self._closed or not self._opened:
            raise StorageError("the offsets log is not open", ErrorCode.NOT_COORDINATOR)
        old = self._parts[index]
        while old.releasing is not None and not old.releasing.done():
            await old.releasing  # its last mark and its lock go first
            old = self._parts[index]
        if old.owner_lock is not None and old.error is None:  # a load past its recovery, or a loaded partition
            raise RuntimeError(f"offsets partition {index} is already loaded")
        # From UNOWNED or FAILED when the log loads it on its own; the partition runtime moved it already.
        self.states.move(index, PartitionLifecycle.LOADING)
        if old.marking is not None:  # a load given up after recovery: its mark goes first
            await asyncio.wait([old.marking])
        if old.owner_lock is not None:  # FAILED earlier: try again from scratch
            with old.lock:
                for fd in [old.fd, *old.closed_fds]:
                    close_quietly(fd)
                old.fd, old.closed_fds = -1, []
            old.owner_lock.release()
        p = self._parts[index] = Partition(index, partition_dir(self.data_dir, index))
        self._loads_running += 1
        t0 = time.perf_counter()
        recovering = self._loop.run_in_executor(self._writers, self._recover_owned, p)
        try:
            recovered, mark, lock = await asyncio.shield(recovering)
        except asyncio.CancelledError:
            # The load was given up (the partition was lost meanwhile): the thread still finishes,
            # and the directory lock it took must not outlive it.
            recovering.add_done_callback(_release_recovered_lock)
            if self.states[index] is PartitionLifecycle.LOADING:  # (the runtime moved it on already)
                self.states.move(index, PartitionLifecycle.UNOWNED)
            raise
        except PartitionOwnedError as exc:  # (no error line: the partition runtime says why it failed)
            p.error = exc
            if self.states[index] is PartitionLifecycle.LOADING:
                self.states.move(index, PartitionLifecycle.FAILED)
            raise StorageError(str(exc), ErrorCode.NOT_COORDINATOR) from None
        except (CorruptLogError, CheckpointError, OSError, StorageError, ValueError) as exc:
            self._failed(p, exc)
            raise LogLoadError({index: exc}) from None
        finally:
            self._loads_running -= 1
            if self._loads_running == 0:
                self._loop.call_later(_SCANS_KEPT_S, self._drop_scans)
        if self.states[index] is not PartitionLifecycle.LOADING:  # released while it was recovered: not ours to keep
            lock.release()
            raise StorageError(f"offsets partition {index} was released while loading", ErrorCode.NOT_COORDINATOR)
        with p.lock:
            p.segments = recovered.segments
            p.fd = os.open(recovered.segments[-1], os.O_WRONLY)
            p.active_size = recovered.size
            p.next_offset = recovered.next_offset
            p.rolled_since_clean = len(recovered.segments) - 1
            p.active_first_ms = recovered.first_batch_ms
            p.owner_lock = lock
            p.mark = mark
            p.checkpoint_base = mark.segment
            self._set_roll_bytes(p, sum(file_size(s) for s in recovered.segments[:-1]))
        self._marks[index] = mark
        self._start_marking(p, mark)
        took_ms = (time.perf_counter() - t0) * 1000
        # One summary line at INFO per open; a partition gets its own only when it is worth a look.
        log.log(logging.INFO if took_ms >= _SLOW_PARTITION_LOAD_MS else logging.DEBUG,
                "offsets partition %d loaded: %d records, %d live keys in %.0f ms%s",
                index, recovered.records, len(recovered.live), took_ms,
                f" ({recovered.replayed} batches replayed from the journal)" if recovered.replayed else "")
        return recovered.records, recovered.live, recovered.replayed

    def _recover_owned(self, p: Partition):
        """(writer thread) Lock the partition directory and recover it; returns the mark continuing it in our journal."""
        lock = PartitionLock(p.path)
        lock.acquire()
        try:
            mark = effective_mark(self.data_dir, p.path, p.index)
            recovered = recover_partition(self.data_dir, p.index, p.path, self.segment_bytes, mark, self._scans)
        except BaseException:
            lock.release()
            raise
        # What recovery kept is fsynced: from here on the partition continues in this instance's journal.
        new_mark = PartitionMark(segment_base(recovered.segments[-1]), recovered.size, recovered.next_offset,
                                 self._journal.seq, self.owner)
        return recovered, new_mark, lock

    def _start_marking(self, p: Partition, mark: PartitionMark) -> None:
        """Write p's first mark of ours in the background: its appends are held until it is durable.

        Recovery does not wait for it, so loading 50 partitions costs no 50 fsync pairs in a row.
        """
        marking = self._loop.run_in_executor(self._writers, write_partition_mark, p.path, mark)
        p.marking = marking
        self._inflight.add(marking)

        def done(_: asyncio.Future) -> None:
            self._inflight.discard(marking)
            if p.marking is not marking:
                return
            p.marking = None
            error = None if marking.cancelled() else marking.exception()
            if error is not None:
                exc = self._storage_error(p, "writing its checkpoint mark", error) if isinstance(error, OSError) \
                    else StorageError(f"offsets partition {p.index}: {error!r}")
                p.error = exc  # (first: whoever watches the move asks why)
                if self._parts[p.index] is p and self.states[p.index] in (PartitionLifecycle.LOADING,
                                                                          PartitionLifecycle.LOADED):
                    self.states.move(p.index, PartitionLifecycle.FAILED)  # (not if released meanwhile)
                pending, p.pending = p.pending, []
                for _, fut in pending:
                    if not fut.done():
                        fut.set_exception(exc)
                        self._settled(fut)
                self._run_continuations()
                return
            self._unhold(p)
            if self._due and not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)

        marking.add_done_callback(done)

    def _drop_scans(self) -> None:
        if self._loads_running == 0:
            self._scans.clear()

    def _failed(self, p: Partition, exc: Exception) -> None:
        p.error = exc
        if self._parts[p.index] is p and self.states[p.index] is PartitionLifecycle.LOADING:  # (not if released)
            self.states.move(p.index, PartitionLifecycle.FAILED)
        log.error("offsets partition %d failed to load: %s", p.index, exc)

    async def release(self, partition: int) -> None:
        """Give `partition` up: its accepted appends finish, its files are made durable and marked, its
        directory lock goes (the next owner, in any process, replays nothing of ours); later appends
        raise NOT_COORDINATOR. A release already under way is waited for. The partition runtime moved
        the tracker to RELEASING (or CLOSED) before; called on its own, the log moves it there."""
        p = self._parts[partition]
        if p.releasing is not None and not p.releasing.done():
            await asyncio.shield(p.releasing)
            return
        if self.states[partition] in OWNED_STATES:
            self.states.move(partition, PartitionLifecycle.RELEASING)  # no new appends; the accepted ones finish
        try:
            if p.holds_anything():
                p.releasing = self._loop.create_future()
                try:
                    await self._release_now(p)
                finally:
                    p.releasing.set_result(None)
        finally:
            if self.states[partition] is PartitionLifecycle.RELEASING:  # (CLOSED stays)
                self.states.move(partition, PartitionLifecycle.UNOWNED)

    async def _release_now(self, p: Partition) -> None:
        while True:
            waiting = [fut for _, fut in p.pending] + [fut for w in [*p.unsynced, *p.in_round] for fut, _ in w.acks]
            waiting = [f for f in waiting if not f.done()]
            if not waiting:
                break
            self._flush()
            await asyncio.wait(waiting)
        # A checkpoint in flight may still fsync p's files, and the cleaner may be compacting them.
        while True:
            busy = [f for f in [self._checkpoint, p.compacting, p.marking, *(r.sync for r in self._rounds if r.plan)]
                    if f is not None and not f.done()]
            if not busy:
                break
            await asyncio.wait(busy)
        self._marks.pop(p.index, None)
        if p.fd >= 0 or p.owner_lock is not None:
            await self._loop.run_in_executor(self._writers, self._give_up, p)

    def _give_up(self, p: Partition) -> None:
        """(writer thread) fsync p's files, write a mark needing no journal, close them, unlock the directory."""
        try:
            with p.lock:
                fds = [fd for fd in [p.fd, *p.closed_fds] if fd >= 0]
                try:
                    if p.fd >= 0:
                        self._catch_up_segment(p)
                    catch_up_error = None
                except OSError as exc:
                    catch_up_error = exc
                errors, _ = self._sync_fds(fds)
                failed = catch_up_error or next((e for e in errors if e is not None), None)
                if failed is None and p.fd >= 0 and p.segments:
                    write_partition_mark(p.path, PartitionMark(segment_base(p.segments[-1]), p.active_size,
                                                               p.next_offset, -1, self.owner))
                elif failed is not None:
                    # The journal keeps what was acknowledged; the next owner replays it from there.
                    self._storage_error(p, "flushing on release", failed)
                for fd in fds:
                    close_quietly(fd)
                p.fd = -1
                p.closed_fds = []
        except OSError as exc:
            self._storage_error(p, "marking on release", exc)
        finally:
            if p.owner_lock is not None:
                p.owner_lock.release()
                p.owner_lock = None

    # ------------------------------------------------------------------ close
    async def close(self) -> None:
        """Finish the accepted appends, fsync every partition, checkpoint, release the files."""
        if self._closed:
            return
        self._closed = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down regardless
                pass
        # Finish the accepted appends: write what is queued, wait for the sync rounds and checkpoints.
        while True:
            self._flush()
            running = [*self._inflight, *(r.sync for r in self._rounds),
                       *([self._checkpoint] if self._checkpoint is not None else [])]
            if not running:
                break
            await asyncio.gather(*running, return_exceptions=True)
            # Python 3.12's gather answers at once when all are done: yield, so their done callbacks
            # (which forget them) run before we look again; else this loop spins forever.
            await asyncio.sleep(0)
        for helper in self._fsyncs:
            helper.close()
        if self._catch_up_timer is not None:
            self._catch_up_timer.cancel()  # (_close_files catches every segment up)
            self._catch_up_timer = None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writers, self._close_files)
        self._writers.shutdown(wait=True)
        self._cleaner_pool.shutdown(wait=True)

    def _close_files(self) -> None:
        """(writer thread) The last checkpoint: every partition file durable, so the journal can go."""
        journal = self._journal
        unwritten = False
        for p in self._parts:
            with p.lock:  # (a release in progress catches up and closes p under it too)
                if not p.unwritten or p.fd < 0:
                    continue
                try:
                    self._catch_up_segment(p)
                except OSError as exc:
                    unwritten = True  # the journal keeps its batches: no final checkpoint
                    self._storage_error(p, "the final write", exc)
        owned = [(p, p.fd) for p in self._parts if p.fd >= 0] + [
            (p, fd) for p in self._parts for fd in p.closed_fds]
        errors, _ = self._sync_fds([fd for _, fd in owned])
        for (p, _), err in zip(owned, errors):
            if err is not None:
                self._storage_error(p, "the final flush", err)
        if journal is not None and not any(errors) and not unwritten:
            marks = self._marks_now(-1)  # every partition stands on its own: no journal needed
            try:
                self._record_checkpoint(marks, keep_current=False)
                self._marks = marks
            except OSError as exc:
                log.error("offsets log: the final checkpoint failed (the journal keeps what was "
                          "acknowledged): %s", exc)
        for p in self._parts:
            with p.lock:
                for fd in [p.fd, *p.closed_fds]:
                    if fd >= 0:
                        close_quietly(fd)
                p.fd = -1
                p.closed_fds = []
            if p.owner_lock is not None:
                p.owner_lock.release()
                p.owner_lock = None
        if journal is not None and journal.fd >= 0:
            close_quietly(journal.fd)
            journal.fd = -1


def _release_recovered_lock(recovering: asyncio.Future) -> None:
    if not recovering.cancelled() and recovering.exception() is None:
        recovering.result()[2].release()
