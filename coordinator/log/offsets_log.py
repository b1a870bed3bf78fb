"""`OffsetsLog`: the partitioned, durable, compacted log under the coordinator.

See the package docstring for the API contract; this module holds the
machinery.  Threading model (group commit across partitions):

* The event loop owns all bookkeeping and does the writes itself.  `append`
  queues its records on the partition and marks it due; one flush per loop
  turn (call_soon, never a timer) encodes each due partition's queue as one
  batch and pwrites it inline: a few hundred bytes into the page cache cost
  microseconds, far less than a thread handoff per append.
* Policy `never` / `<ms>`: the appends are acknowledged right after the write
  (the interval flusher fsyncs dirty partitions on a thread).  Policy
  `always`: the partitions written are handed, all at once, to ONE sync round
  on the writer pool, which fdatasyncs their files from up to 8 threads in
  parallel (concurrent fsyncs share ext4 journal commits: 64 files take ~2 ms
  from 8 threads, 35-70 ms from one), and all the round's appends are
  acknowledged together when it returns.  Writes made while a round runs wait
  for the next round, started as soon as this one returns: the busier the log,
  the more appends share an fsync (adaptive group commit).
* A failed fsync cuts the partition back to before its first unacknowledged
  write and fails exactly those appends; a partition whose file is in a sync
  round never rolls until the round is over (its writes wait), so a round
  never meets a closed or replaced file.
* Compaction runs on its own thread and touches only closed segments; it shares
  the partition lock with the roll, held only for the segment-list swap.
"""
from __future__ import annotations

import asyncio
import enum
import errno as errno_mod
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from pathlib import Path

from coordinator.log.batch import encode_batch
from coordinator.log.compaction import CompactionResult, compact_closed_segments
from coordinator.log.segments import (
    CorruptLogError,
    complete_pending_compaction,
    fsync_dir,
    list_partition_segments,
    list_partitions,
    partition_dir,
    recover_segment,
    segment_base,
    segment_name,
)
from protocol.errors import ErrorCode

log = logging.getLogger("cohort.log")

_VALUE = itemgetter(1)

ReplayCallback = Callable[[int, list[tuple[bytes, bytes]]], None]


class StorageError(Exception):
    """An append (or the log) failed; `error_code` is the Kafka error to map for the client.

    KAFKA_STORAGE_ERROR for disk failures (the coordinator maps it to
    NOT_COORDINATOR, reference §3.2), COORDINATOR_LOAD_IN_PROGRESS for a
    partition not loaded yet, NOT_COORDINATOR for a failed partition or a
    closed log.
    """

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.KAFKA_STORAGE_ERROR,
                 errno: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.errno = errno


class LogLoadError(Exception):
    """Some partitions could not be loaded (damage that is not a torn tail, or unreadable files)."""

    def __init__(self, errors: dict[int, Exception]) -> None:
        lines = [f"partition {p}: {e}" for p, e in sorted(errors.items())]
        super().__init__("offsets log failed to load: " + "; ".join(lines))
        self.errors = errors


class PartitionState(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"
    FAILED = "failed"


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


_SYNC_LANES = 8  # threads one sync round fans out to (measured: 8 beat 4 and 16 for 16-64 files)


@dataclass(slots=True, eq=False)
class _Write:
    """One batch written but not yet fsynced (policy always): where it starts, whose appends it acknowledges."""

    start: int  # position in the active segment
    base: int  # offset of its first record
    acks: list  # [(future, offset of the append's last record)]


@dataclass(slots=True, eq=False)
class _Partition:
    index: int
    path: Path
    state: PartitionState = PartitionState.LOADING
    error: Exception | None = None
    segments: list[Path] = field(default_factory=list)
    fd: int = -1
    active_size: int = 0
    next_offset: int = 0
    pending: list = field(default_factory=list)  # [(records, future)] waiting for the next flush
    due: bool = False  # queued for the next flush
    unsynced: list[_Write] = field(default_factory=list)  # written, waiting for the next sync round
    in_round: list[_Write] = field(default_factory=list)  # written, in the sync round in flight
    syncing: bool = False  # its fd is being fsynced by a thread: do not roll
    held: bool = False  # a write waits for the sync round to end (it must roll)
    dirty: bool = False  # written but not fsynced (interval/never policies)
    broken_tail: int | None = None  # a failed write could not be cut back: cut before the next write
    rolled_since_clean: int = 0
    tombstone_due_ms: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class OffsetsLog:
    """The offsets log: `num_partitions` compacted logs of (key, value) records under `data_dir`."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        num_partitions: int = 50,
        segment_bytes: int = 104857600,
        flush_policy: str = "always",
        delete_retention_ms: int = 86400000,
        cleaner_backoff_ms: int = 15000,
        clock: Callable[[], float] = time.time,
        writer_threads: int = 16,
        metrics=None,
    ) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be at least 1")
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        self.data_dir = Path(data_dir)
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.flush_policy = FlushPolicy(flush_policy)
        self.delete_retention_ms = delete_retention_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self._clock = clock
        self._metrics = metrics  # coordinator.metrics.CoordinatorMetrics: log_flushed / log_compacted
        self._parts = [_Partition(i, partition_dir(self.data_dir, i)) for i in range(num_partitions)]
        self._writers = ThreadPoolExecutor(max_workers=max(1, min(writer_threads, num_partitions)),
                                           thread_name_prefix="offsets-log-writer")
        self._cleaner_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="offsets-log-cleaner")
        self._sync_lanes = max(1, min(_SYNC_LANES, writer_threads, num_partitions))
        self._inflight: set[asyncio.Future] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due: list[_Partition] = []
        self._flush_scheduled = False
        self._to_sync: list[_Partition] = []  # partitions with unsynced writes, not in the round
        self._round: asyncio.Future | None = None  # the sync round in flight (policy always)
        self._tasks: list[asyncio.Task] = []
        self._opened = False
        self._closed = False

    # ------------------------------------------------------------------ state
    def partition_state(self, partition: int) -> PartitionState:
        return self._parts[partition].state

    def partition_error(self, partition: int) -> Exception | None:
        return self._parts[partition].error

    def next_offset(self, partition: int) -> int:
        """The offset the next appended record of `partition` will get."""
        return self._parts[partition].next_offset

    def segments(self, partition: int) -> list[Path]:
        with self._parts[partition].lock:
            return list(self._parts[partition].segments)

    # ------------------------------------------------------------------ open / load
    async def open(self, on_partition_loaded: ReplayCallback | None = None) -> None:
        """Recover and replay every partition, then start the background cleaner (and flusher).

        `on_partition_loaded(partition, records)` is called on the event loop
        once per partition, before the partition becomes LOADED, with the live
        records: the latest value of every key whose latest value is not a
        tombstone, each key once.  Raises LogLoadError after loading all the
        partitions it could, if some could not be loaded (they stay FAILED).
        """
        if self._opened:
            raise RuntimeError("OffsetsLog.open() called twice")
        self._opened = True
        loop = self._loop = asyncio.get_running_loop()
        self.data_dir.mkdir(parents=True, exist_ok=True)
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
        errors: dict[int, Exception] = {}
        total_records = 0
        started = time.perf_counter()
        for p in self._parts:
            t0 = time.perf_counter()
            try:
                records, live = await loop.run_in_executor(self._writers, self._recover, p)
                if on_partition_loaded is not None:
                    on_partition_loaded(p.index, live)
            except (CorruptLogError, OSError, StorageError, ValueError) as exc:
                p.state = PartitionState.FAILED
                p.error = exc
                errors[p.index] = exc
                log.error("offsets partition %d failed to load: %s", p.index, exc)
                continue
            p.state = PartitionState.LOADED
            total_records += records
            log.info("offsets partition %d loaded: %d records, %d live keys in %.0f ms",
                     p.index, records, len(live), (time.perf_counter() - t0) * 1000)
            del live
        log.info("offsets log loaded: %d partitions, %d records in %.0f ms%s", self.num_partitions - len(errors),
                 total_records, (time.perf_counter() - started) * 1000,
                 f", {len(errors)} partitions failed" if errors else "")
        self._tasks.append(loop.create_task(self._cleaner(), name="offsets-log-cleaner"))
        if self.flush_policy.interval_ms is not None:
            self._tasks.append(loop.create_task(self._interval_flusher(), name="offsets-log-flusher"))
        if errors:
            raise LogLoadError(errors)

    def _recover(self, p: _Partition) -> tuple[int, list[tuple[bytes, bytes]]]:
        """(writer thread) Repair, validate and replay one partition; open its active segment."""
        p.path.mkdir(parents=True, exist_ok=True)
        complete_pending_compaction(p.path)
        segs = list_partition_segments(p.path)
        # Newest segment first: the replay keeps the first record it meets per key (see
        # BatchView.merge_older_into), and the last segment is where a torn tail is cut.
        latest: dict[bytes, bytes | None] = {}
        records = 0
        next_offset = 0
        size = 0
        following_base: int | None = None
        for i in range(len(segs) - 1, -1, -1):
            path = segs[i]
            base = segment_base(path)
            scan, buf, views = recover_segment(path, is_last=i == len(segs) - 1, min_offset=base)
            if following_base is not None and scan.next_offset > following_base:
                raise CorruptLogError(path, scan.size, f"offsets run up to {scan.next_offset - 1}, past the "
                                      f"start of the next segment ({following_base})")
            if following_base is None:
                next_offset, size = scan.next_offset, scan.size
            following_base = base
            for v in reversed(views):
                v.merge_older_into(buf, latest)
            records += scan.records
            del buf, views
        if not segs:
            path = p.path / segment_name(0)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.close(fd)
            fsync_dir(p.path)
            segs = [path]
        with p.lock:
            p.segments = segs
            p.fd = os.open(segs[-1], os.O_WRONLY)
            p.active_size = size
            p.next_offset = next_offset
            p.rolled_since_clean = len(segs) - 1
        # Values are never empty (append refuses them), so "truthy" means "not a tombstone".
        live = list(filter(_VALUE, latest.items()))
        return records, live

    # ------------------------------------------------------------------ append
    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Append records to a partition; returns the offset of the last one once durable per the policy.

        The records of one append are written in one batch: after a crash they
        are either all there or none is.  Raises StorageError (with the Kafka
        error to map) if they could not be written; then none of them is.
        """
        if not 0 <= partition < self.num_partitions:
            raise ValueError(f"no offsets partition {partition} (0..{self.num_partitions - 1})")
        p = self._parts[partition]
        if self._closed:
            raise StorageError("the offsets log is closed", ErrorCode.NOT_COORDINATOR)
        if p.state is not PartitionState.LOADED:
            if p.state is PartitionState.LOADING:
                raise StorageError(f"offsets partition {partition} is loading", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            raise StorageError(f"offsets partition {partition} failed to load: {p.error}", ErrorCode.NOT_COORDINATOR)
        records = list(records)
        for item in records:
            if (len(item) != 2 or type(item[0]) is not bytes or not item[0]
                    or (item[1] is not None and (type(item[1]) is not bytes or not item[1]))):
                raise TypeError(f"a record is (key: non-empty bytes, value: non-empty bytes | None), "
                                f"not {item!r:.80}")
        if not records:
            return p.next_offset - 1
        fut = self._loop.create_future()
        p.pending.append((records, fut))
        if not p.due:
            p.due = True
            self._due.append(p)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        """(once per loop turn) Write every due partition's queue, then start a sync round if none runs."""
        self._flush_scheduled = False
        self._write_due()
        if self._round is None and self._to_sync:
            self._start_round()

    def _write_due(self) -> None:
        due, self._due = self._due, []
        if not due:
            return
        ts_ms = int(self._clock() * 1000)
        for p in due:
            p.due = False
            if p.pending:
                self._write_pending(p, ts_ms)

    def _write_pending(self, p: _Partition, ts_ms: int) -> None:
        """Write a partition's queued appends as one batch; acknowledge or queue them for the next sync round."""
        if p.syncing and p.active_size >= self.segment_bytes:
            p.held = True  # rolling would close the file a thread is fsyncing: write after the round
            return
        appends, p.pending = p.pending, []
        keys: list[bytes] = []
        values: list[bytes | None] = []
        for recs, _ in appends:
            for k, v in recs:
                keys.append(k)
                values.append(v)
        base = p.next_offset
        try:
            start = self._write(p, base, ts_ms, keys, values)
        except Exception as exc:  # noqa: BLE001 - a waiting append must always get an answer
            if not isinstance(exc, StorageError):
                log.exception("offsets partition %d: write failed", p.index)
                exc = StorageError(f"offsets partition {p.index}: write failed: {exc!r}")
            for _, fut in appends:
                if not fut.done():
                    fut.set_exception(exc)
            return
        offset = base
        acks = []
        for recs, fut in appends:
            offset += len(recs)
            acks.append((fut, offset - 1))
        p.next_offset = offset
        if self.flush_policy.sync_each_write:
            if not p.unsynced:
                self._to_sync.append(p)
            p.unsynced.append(_Write(start, base, acks))
        else:
            p.dirty = True
            for fut, last in acks:
                if not fut.done():
                    fut.set_result(last)

    def _write(self, p: _Partition, base: int, ts_ms: int, keys: list[bytes], values: list) -> int:
        """Write one batch at the end of the active segment (no fsync); returns where it starts."""
        data = encode_batch(base, ts_ms, keys, values)
        if p.fd < 0:
            raise StorageError("the offsets log is closed", ErrorCode.NOT_COORDINATOR)
        try:
            if p.broken_tail is not None:
                os.ftruncate(p.fd, p.broken_tail)
                os.fsync(p.fd)
                p.active_size, p.broken_tail = p.broken_tail, None
            if p.active_size >= self.segment_bytes:
                self._roll(p, base)
        except OSError as exc:
            raise self._storage_error(p, "preparing a write", exc) from None
        start = p.active_size
        try:
            view = memoryview(data)
            pos = 0
            while pos < len(data):
                written = os.pwrite(p.fd, view[pos:], start + pos)
                if written <= 0:
                    raise OSError(errno_mod.EIO, "the disk accepted no bytes")
                pos += written
        except OSError as exc:
            # Cut the partial batch off so nothing half-written stays readable.
            try:
                os.ftruncate(p.fd, start)
                os.fsync(p.fd)
            except OSError:
                p.broken_tail = start
            raise self._storage_error(p, "appending", exc) from None
        p.active_size = start + len(data)
        return start

    def _roll(self, p: _Partition, base: int) -> None:
        """Close the active segment (fsynced: its unacknowledged writes are now durable) and start one at `base`."""
        try:
            os.fdatasync(p.fd)
        except OSError as exc:
            # The unacknowledged writes of this segment may not be on disk: they fail with this write.
            self._fail_writes(p, p.unsynced, self._storage_error(p, "flushing a full segment", exc))
            p.unsynced = []
            raise
        self._ack_writes(p.unsynced)
        p.unsynced = []
        path = p.path / segment_name(base)
        # Under the lock from the file's creation on: the cleaner lists the directory under it.
        with p.lock:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                fsync_dir(p.path)
            except OSError:
                os.close(fd)
                os.unlink(path)
                raise
            os.close(p.fd)
            p.fd = fd
            p.segments.append(path)
            p.active_size = 0
            p.dirty = False
            p.rolled_since_clean += 1

    # ------------------------------------------------------------------ sync rounds (policy always)
    def _start_round(self) -> None:
        """Hand every partition written since the last round to one fsync job on the writer pool."""
        parts = [p for p in self._to_sync if p.unsynced]
        self._to_sync = []
        if not parts:
            return
        for p in parts:
            p.in_round, p.unsynced = p.unsynced, []
            p.syncing = True
        cf = self._loop.run_in_executor(self._writers, self._sync_fds, [p.fd for p in parts])
        self._round = cf
        cf.add_done_callback(partial(self._round_done, parts))

    def _round_done(self, parts: list[_Partition], cf: asyncio.Future) -> None:
        self._round = None
        if cf.cancelled():
            errors: list = [OSError(errno_mod.EIO, "fsync cancelled")] * len(parts)
        elif cf.exception() is not None:
            errors = [cf.exception()] * len(parts)
        else:
            errors, seconds = cf.result()
            if self._metrics is not None:
                records = sum(w.acks[-1][1] - w.base + 1 for p in parts for w in p.in_round)
                self._metrics.log_flushed(records, seconds)
        for p, err in zip(parts, errors):
            p.syncing = False
            writes, p.in_round = p.in_round, []
            if err is None:
                self._ack_writes(writes)
            else:
                if not isinstance(err, OSError):
                    err = OSError(errno_mod.EIO, repr(err))
                exc = self._storage_error(p, "flushing", err)
                # Later writes sit after the cut: they go too.
                self._fail_writes(p, writes + p.unsynced, exc)
                p.unsynced = []
            self._release(p)
        self._write_due()
        if self._to_sync:
            self._start_round()

    def _release(self, p: _Partition) -> None:
        """A sync of p's file ended: a write held back for it may go now."""
        if p.held:
            p.held = False
            if p.pending and not p.due:
                p.due = True
                self._due.append(p)

    @staticmethod
    def _ack_writes(writes: list[_Write]) -> None:
        for w in writes:
            for fut, last in w.acks:
                if not fut.done():
                    fut.set_result(last)

    def _fail_writes(self, p: _Partition, writes: list[_Write], exc: StorageError) -> None:
        """Cut the partition back to before the first of `writes` and fail their appends."""
        if not writes:
            return
        first = writes[0]
        try:
            os.ftruncate(p.fd, first.start)
            os.fsync(p.fd)
        except OSError:
            p.broken_tail = first.start
        p.active_size = first.start
        p.next_offset = first.base
        for w in writes:
            for fut, _ in w.acks:
                if not fut.done():
                    fut.set_exception(exc)

    def _sync_fds(self, fds: list[int]) -> tuple[list[OSError | None], float]:
        """(writer thread) fdatasync every fd, fanned out over up to `_sync_lanes` threads; each one's error, seconds."""
        started = time.perf_counter()
        errors: list[OSError | None] = [None] * len(fds)

        def sync(lane: range) -> None:
            for i in lane:
                try:
                    os.fdatasync(fds[i])
                except OSError as exc:
                    errors[i] = exc

        lanes = min(self._sync_lanes, len(fds))
        # At most one round runs at a time, so the pool has a thread for every other lane.
        others = [self._writers.submit(sync, range(j, len(fds), lanes)) for j in range(1, lanes)]
        sync(range(0, len(fds), lanes))
        for f in others:
            f.result()
        return errors, time.perf_counter() - started

    @staticmethod
    def _storage_error(p: _Partition, what: str, exc: OSError) -> StorageError:
        name = errno_mod.errorcode.get(exc.errno or 0, "error")
        log.error("offsets partition %d: %s failed: %s %s", p.index, what, name, exc.strerror or exc)
        return StorageError(f"offsets partition {p.index}: {what} failed: {name} {exc.strerror or exc}",
                            ErrorCode.KAFKA_STORAGE_ERROR, exc.errno)

    # ------------------------------------------------------------------ flushing (interval policy)
    async def _interval_flusher(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.flush_policy.interval_ms / 1000)
            parts = [p for p in self._parts if p.dirty and p.fd >= 0]
            if not parts:
                continue
            for p in parts:
                p.dirty = False  # a write from now on makes it dirty again
                p.syncing = True
            cf = loop.run_in_executor(self._writers, self._sync_fds, [p.fd for p in parts])
            self._inflight.add(cf)
            cf.add_done_callback(partial(self._interval_sync_done, parts))
            await asyncio.wait([cf])

    def _interval_sync_done(self, parts: list[_Partition], cf: asyncio.Future) -> None:
        self._inflight.discard(cf)
        errors = cf.result()[0] if not cf.cancelled() and cf.exception() is None else [None] * len(parts)
        for p, err in zip(parts, errors):
            p.syncing = False
            if err is not None:
                p.dirty = True
                self._storage_error(p, "flushing", err)
            self._release(p)
        if self._due and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    # ------------------------------------------------------------------ compaction
    async def compact(self, partition: int | None = None) -> list[CompactionResult]:
        """Compact the closed segments of one partition (or all loaded ones) now."""
        loop = asyncio.get_running_loop()
        parts = self._parts if partition is None else [self._parts[partition]]
        results = []
        for p in parts:
            if p.state is PartitionState.LOADED:
                results.append(self._compacted(await loop.run_in_executor(self._cleaner_pool, self._compact_timed, p)))
        return results

    def _compact_timed(self, p: _Partition) -> tuple[CompactionResult, int, float]:
        """(cleaner thread) `_compact`, with the bytes it reclaimed and how long it took."""
        started = time.perf_counter()
        with p.lock:
            closed = list(p.segments[:-1])
        before = sum(_size(s) for s in closed)
        result = self._compact(p)
        after = sum(_size(s) for s in result.written) if result.removed else before
        return result, before - after, time.perf_counter() - started

    def _compacted(self, timed: tuple[CompactionResult, int, float]) -> CompactionResult:
        result, reclaimed, seconds = timed
        if self._metrics is not None and result.removed:
            self._metrics.log_compacted(max(0, reclaimed), seconds)
        return result

    def _compact(self, p: _Partition) -> CompactionResult:
        with p.lock:
            closed = list(p.segments[:-1])
            end = segment_base(p.segments[-1])
            rolled = p.rolled_since_clean
        result = compact_closed_segments(
            p.path, closed, end, segment_bytes=self.segment_bytes,
            delete_retention_ms=self.delete_retention_ms, now_ms=int(self._clock() * 1000))
        with p.lock:
            p.segments = list_partition_segments(p.path)
            p.rolled_since_clean -= rolled
            p.tombstone_due_ms = result.next_tombstone_expiry_ms
        if result.removed:
            log.info("offsets partition %d compacted: %d -> %d segments, %d -> %d records, %d tombstones dropped",
                     p.index, result.segments_before, result.segments_after, result.records_before,
                     result.records_after, result.tombstones_dropped)
        return result

    def _needs_compaction(self, p: _Partition) -> bool:
        if p.state is not PartitionState.LOADED or len(p.segments) < 2:
            return False
        due = p.tombstone_due_ms
        return p.rolled_since_clean > 0 or (due is not None and self._clock() * 1000 >= due)

    async def _cleaner(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.cleaner_backoff_ms / 1000)
            for p in self._parts:
                if self._closed:
                    return
                if self._needs_compaction(p):
                    try:
                        self._compacted(await loop.run_in_executor(self._cleaner_pool, self._compact_timed, p))
                    except (OSError, CorruptLogError) as exc:
                        log.error("offsets partition %d: compaction failed: %s", p.index, exc)

    # ------------------------------------------------------------------ close
    async def close(self) -> None:
        """Finish the accepted appends, fsync every partition, release the files."""
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
        # Finish the accepted appends: write what is queued, wait for the sync rounds.
        while True:
            self._flush()
            running = list(self._inflight) + ([self._round] if self._round is not None else [])
            if not running:
                break
            await asyncio.gather(*running, return_exceptions=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writers, self._close_files)
        self._writers.shutdown(wait=True)
        self._cleaner_pool.shutdown(wait=True)

    def _close_files(self) -> None:
        for p in self._parts:
            with p.lock:
                if p.fd >= 0:
                    try:
                        os.fdatasync(p.fd)
                    except OSError as exc:
                        self._storage_error(p, "the final flush", exc)
                    os.close(p.fd)
                    p.fd = -1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
