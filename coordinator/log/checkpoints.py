"""Checkpoints, segment rolls and background compaction of the offsets log.

Why: the commit journal makes every round durable with one fsync, but it cannot grow forever and a
restart must not replay all of it.  A checkpoint makes the partition files durable on their own so the
journal can start over: when the journal passes `journal_checkpoint_bytes` or a segment rolls, the
journal is switched to a new file (at the start of a round, so the old file ends at a round boundary)
and a writer thread fsyncs every partition file written since the last checkpoint and writes each
partition's mark (`cohort.coordinator.log.journal`).  A journal is deleted once no partition's mark,
whichever process wrote it, names it.  Rolls start a new active segment (by size, by age, or when the
new history outgrows the compacted rest); compaction runs on its own thread, touches only segments
closed before the last checkpoint, and shares the partition lock with the roll, held only for the
segment-list swap.

`Checkpoints` is a part of `OffsetsLog` (it works on the log's partitions and journal).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from functools import partial
from pathlib import Path

from cohort.coordinator.log import state
from cohort.coordinator.log.compaction import CompactionResult, compact_closed_segments
from cohort.coordinator.log.journal import (
    LEGACY_OWNER,
    CHECKPOINT_NAME,
    CheckpointError,
    PartitionMark,
    journal_in_use,
    journal_name,
    list_owner_journals,
    lock_journal,
    read_legacy_checkpoint,
    read_partition_mark,
    write_partition_mark,
)
from cohort.coordinator.log.segments import (
    CorruptLogError,
    fsync_dir,
    list_partition_segments,
    list_partitions,
    partition_dir,
    segment_base,
    segment_name,
)
from cohort.coordinator.log.state import (
    CHECKPOINT_RETRY_S,
    ROLL_DIRTY_RATIO,
    CheckpointPlan,
    OpenJournal,
    Partition,
    StorageError,
    close_quietly,
    file_size,
)
from cohort.coordinator.log.file_modes import FILE_MODE

log = logging.getLogger("cohort.log")


def delete_unneeded_journals(data_dir: Path, owner: str, current_seq: int | None) -> None:
    """(writer thread) Delete every journal no partition's mark needs any more, whoever wrote it.

    Another owner's journal goes only when that owner no longer has it open (`journal_in_use`):
    a live owner's newest journal is not named by any mark until its partitions' next checkpoint.
    The legacy journals (no owner) also serve partitions that have no mark at all.
    """
    try:
        legacy = read_legacy_checkpoint(data_dir)
        present = list_partitions(data_dir)
        own = {p: read_partition_mark(partition_dir(data_dir, p)) for p in present}
    except (CheckpointError, OSError) as exc:
        log.warning("offsets log: journals kept, the marks cannot all be read: %s", exc)
        return
    marks = [m for m in own.values() if m is not None]
    unmarked = [p for p, m in own.items() if m is None]
    if legacy is not None:
        marks.extend(legacy[p] for p in unmarked if p in legacy)
    legacy_needed = any(legacy is None or p not in legacy for p in unmarked)
    for journal in list_owner_journals(data_dir):
        if journal.owner == owner and current_seq is not None and journal.seq >= current_seq:
            continue
        if any(m.needs(journal) for m in marks):
            continue
        if journal.owner == LEGACY_OWNER and legacy_needed:
            continue
        if journal.owner not in (owner, LEGACY_OWNER) and journal_in_use(journal.path):
            continue
        try:
            os.unlink(journal.path)
        except FileNotFoundError:
            pass
    if legacy is not None and all(own.get(p) is not None for p in legacy):
        try:
            os.unlink(Path(data_dir) / CHECKPOINT_NAME)
            fsync_dir(Path(data_dir))
        except FileNotFoundError:
            pass


class Checkpoints:
    """Journal switches, checkpoints, segment rolls and compaction (a part of `OffsetsLog`)."""

    __slots__ = ()  # (`OffsetsLog` declares the attributes)

    def _create_journal(self, seq: int) -> OpenJournal:
        """A new journal of this owner, locked as in use until the process closes it (or dies)."""
        path = self.data_dir / journal_name(seq, self.owner)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            lock_journal(fd)
            fsync_dir(self.data_dir)
        except OSError:
            os.close(fd)
            raise
        return OpenJournal(self.owner, seq, path, fd)

    def _record_checkpoint(self, marks: dict[int, PartitionMark], keep_current: bool = True) -> None:
        """(writer thread) Write each partition's mark into its directory, then delete the journals none needs."""
        parts = sorted(marks.items())
        errors: list[OSError | None] = [None] * len(parts)

        def write(lane: range) -> None:
            for i in lane:
                p, mark = parts[i]
                try:
                    write_partition_mark(partition_dir(self.data_dir, p), mark)
                except OSError as exc:
                    errors[i] = exc

        lanes = max(1, min(self._sync_lanes, len(parts)))
        others = [self._writers.submit(write, range(j, len(parts), lanes)) for j in range(1, lanes)]
        write(range(0, len(parts), lanes))
        for f in others:
            f.result()
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise failed
        current = self._journal.seq if self._journal is not None and keep_current else None
        delete_unneeded_journals(self.data_dir, self.owner, current)

    def _marks_now(self, journal_seq: int) -> dict[int, PartitionMark]:
        """Where every loaded partition ends now (journal -1: nothing of it is journaled after this)."""
        marks = {}
        loaded = self.states.loaded
        for p in self._parts:
            if p.index in loaded and p.fd >= 0 and p.marking is None:
                marks[p.index] = PartitionMark(segment_base(p.segments[-1]), p.active_size, p.next_offset,
                                               journal_seq, self.owner)
        return marks

    def _roll_due(self, p: Partition, now_ms: int) -> bool:
        """Whether the next write starts a new segment: by size, or by the age of the active one."""
        if p.active_size >= p.roll_bytes:
            return True
        return (self.segment_ms is not None and p.active_first_ms is not None
                and now_ms - p.active_first_ms >= self.segment_ms)

    def _set_roll_bytes(self, p: Partition, closed_bytes: int) -> None:
        """Roll once the active segment holds ROLL_DIRTY_RATIO times what the compacted segments held.

        Compaction only touches closed segments, so an active segment that never rolls keeps
        the whole history and a restart reads all of it.  Rolling whenever the new history
        outgrows the compacted rest (about the live records) keeps what a restart reads to
        the live records, the active segment and what the cleaner has not reached yet,
        whatever the history (never below state.ROLL_MIN_BYTES, never above segment.bytes).
        """
        p.closed_bytes = closed_bytes
        p.roll_bytes = min(self.segment_bytes, max(state.ROLL_MIN_BYTES, ROLL_DIRTY_RATIO * closed_bytes))

    def _roll(self, p: Partition, base: int) -> None:
        """Start a new active segment at `base`; the closed one is fsynced by the next checkpoint."""
        self._catch_up_segment(p)  # the closed segment holds all its batches (raises OSError if it cannot)
        path = p.path / segment_name(base)
        # Under the lock from the file's creation on: the cleaner lists the directory under it.
        with p.lock:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            try:
                fsync_dir(p.path)
            except OSError:
                os.close(fd)
                os.unlink(path)
                raise
            p.closed_fds.append(p.fd)
            p.fd = fd
            p.segments.append(path)
            p.active_size = 0
            p.active_first_ms = None
            p.rolled_since_clean += 1
        self._checkpoint_due = True

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_ready(self) -> bool:
        return (self._checkpoint_due and self._checkpoint is None and not self._closed
                and time.monotonic() >= self._checkpoint_retry_at
                and not any(r.plan is not None for r in self._rounds))

    def _maybe_checkpoint(self) -> None:
        """Start a due checkpoint now if no round is about to switch journals for it."""
        if not self._checkpoint_ready():
            return
        if self.flush_policy.sync_each_write and (self._rounds or self._to_sync):
            return  # the next round starts it, at its own boundary
        plan = self._switch_journal()
        if plan is not None:
            self._run_checkpoint(plan)

    def _switch_journal(self) -> CheckpointPlan | None:
        """(loop) Start the next journal; every write so far is then before the marks taken now."""
        old = self._journal
        try:
            for p in self._parts:  # the marks taken below vouch for every batch: all in the files first
                if p.unwritten and self._loop_may_write(p):
                    self._catch_up_segment(p)
        except OSError as exc:
            self._storage_error(p, "writing the segment, checkpoint postponed", exc)
            self._checkpoint_retry_at = time.monotonic() + CHECKPOINT_RETRY_S
            return None
        try:
            new = self._create_journal(old.seq + 1)
        except OSError as exc:
            log.error("offsets log: cannot start journal %d, checkpoint postponed: %s", old.seq + 1, exc)
            self._checkpoint_retry_at = time.monotonic() + CHECKPOINT_RETRY_S
            return None
        self._journal = new
        self._checkpoint_due = False
        marks = self._marks_now(new.seq)
        active, closed = [], []
        for p in self._parts:
            if p.index not in self.states.loaded or p.fd < 0:
                continue
            if p.written_since_checkpoint:
                p.written_since_checkpoint = False
                active.append((p, p.fd))
            closed.extend((p, fd) for fd in p.closed_fds)
            p.closed_fds = []
        return CheckpointPlan(marks, active, closed, old)

    def _run_checkpoint(self, plan: CheckpointPlan) -> None:
        cf = self._loop.run_in_executor(self._writers, self._write_checkpoint, plan)
        self._checkpoint = cf
        cf.add_done_callback(partial(self._checkpoint_done, plan))

    def _write_checkpoint(self, plan: CheckpointPlan) -> None:
        """(writer thread) fsync the files written before the marks, record the marks, drop old journals."""
        fds = [fd for _, fd in plan.active] + [fd for _, fd in plan.closed]
        errors, _ = self._sync_fds(fds)
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise failed
        self._record_checkpoint(plan.marks)

    def _checkpoint_done(self, plan: CheckpointPlan, cf: asyncio.Future) -> None:
        self._checkpoint = None
        close_quietly(plan.retired.fd)
        plan.retired.fd = -1
        error = None if cf.cancelled() else cf.exception()
        if cf.cancelled() or error is not None:
            log.error("offsets log: checkpoint failed, retried in %.0f s: %s", CHECKPOINT_RETRY_S,
                      error or "cancelled")
            self._abandon_checkpoint(plan)
            return
        for _, fd in plan.closed:
            close_quietly(fd)
        self._marks = plan.marks
        for p in self._parts:
            mark = plan.marks.get(p.index)
            if mark is not None and p.index in self.states.loaded:
                p.checkpoint_base = mark.segment
                p.mark = mark
        if self._checkpoint_due:
            self._maybe_checkpoint()

    def _abandon_checkpoint(self, plan: CheckpointPlan) -> None:
        """A checkpoint could not be made: its files stay to be fsynced by the next one, tried later."""
        for p, _ in plan.active:
            p.written_since_checkpoint = True
        by_part: dict[int, list[int]] = {}
        parts: dict[int, Partition] = {}
        for p, fd in plan.closed:
            by_part.setdefault(p.index, []).append(fd)
            parts[p.index] = p
        for index, fds in by_part.items():
            p = parts[index]
            p.closed_fds = fds + p.closed_fds
        self._checkpoint_due = True
        self._checkpoint_retry_at = time.monotonic() + CHECKPOINT_RETRY_S

    async def checkpoint(self) -> None:
        """Make a checkpoint now (and wait for it): compaction can then reach every closed segment."""
        self._checkpoint_due = True  # a checkpoint in flight took its marks earlier: one more after it
        self._checkpoint_retry_at = 0.0
        deadline = time.monotonic() + 30
        while (self._checkpoint_due or self._checkpoint is not None) and not self._closed:
            if time.monotonic() > deadline:
                raise StorageError("offsets log: a checkpoint could not be made")
            if self._checkpoint is None and not self._rounds:
                self._flush()  # starts the checkpoint, or the round that will
            running = self._checkpoint or (self._rounds[-1].sync if self._rounds else None)
            if running is not None:
                await asyncio.wait([running])
            else:
                await asyncio.sleep(0.01)  # postponed after a failure: retried

    def _sync_fds(self, fds: list[int]) -> tuple[list[OSError | None], float]:
        """(writer thread) fdatasync every fd, fanned out over up to `_sync_lanes` threads; each one's error, seconds."""
        started = time.perf_counter()
        errors: list[OSError | None] = [None] * len(fds)
        if not fds:
            return errors, 0.0

        def sync(lane: range) -> None:
            for i in lane:
                try:
                    os.fdatasync(fds[i])
                except OSError as exc:
                    errors[i] = exc

        lanes = min(self._sync_lanes, len(fds))
        others = [self._writers.submit(sync, range(j, len(fds), lanes)) for j in range(1, lanes)]
        sync(range(0, len(fds), lanes))
        for f in others:
            f.result()
        return errors, time.perf_counter() - started

    # ------------------------------------------------------------------ compaction
    async def compact(self, partition: int | None = None) -> list[CompactionResult]:
        """Compact the closed segments of one partition (or all loaded ones) now."""
        loop = asyncio.get_running_loop()
        await self.checkpoint()  # segments closed since the last checkpoint become compactable
        parts = self._parts if partition is None else [self._parts[partition]]
        results = []
        for p in parts:
            if p.index in self.states.loaded:
                results.append(self._compacted(await self._compact_on_cleaner(p)))
        return results

    def _compact_on_cleaner(self, p: Partition) -> asyncio.Future:
        """Compact `p` on the cleaner thread; `release` waits for it (the files are the owner's alone)."""
        cf = asyncio.get_running_loop().run_in_executor(self._cleaner_pool, self._compact_timed, p)
        p.compacting = cf

        def done(_: asyncio.Future) -> None:
            if p.compacting is cf:
                p.compacting = None

        cf.add_done_callback(done)
        return cf

    def _compact_timed(self, p: Partition) -> tuple[CompactionResult, int, float]:
        """(cleaner thread) `_compact`, with the bytes it reclaimed and how long it took."""
        started = time.perf_counter()
        with p.lock:
            closed = self._compactable(p)
        before = sum(file_size(s) for s in closed)
        result = self._compact(p)
        after = sum(file_size(s) for s in result.written) if result.removed else before
        return result, before - after, time.perf_counter() - started

    def _compacted(self, timed: tuple[CompactionResult, int, float]) -> CompactionResult:
        result, reclaimed, seconds = timed
        if self._metrics is not None and result.removed:
            self._metrics.log_compacted(max(0, reclaimed), seconds)
        return result

    def _compact(self, p: Partition) -> CompactionResult:
        with p.lock:
            closed = self._compactable(p)
            end = p.checkpoint_base
            rolled = p.rolled_since_clean
        result = compact_closed_segments(
            p.path, closed, end, segment_bytes=self.segment_bytes,
            delete_retention_ms=self.delete_retention_ms, now_ms=int(self._clock() * 1000),
            history_retention_ms=self.history_retention_ms, history_key_prefixes=self.history_key_prefixes)
        with p.lock:
            p.segments = list_partition_segments(p.path)
            p.rolled_since_clean -= rolled
            p.tombstone_due_ms = result.next_tombstone_expiry_ms
            self._set_roll_bytes(p, sum(file_size(s) for s in p.segments[:-1]))
        if result.removed:
            log.info("offsets partition %d compacted: %d -> %d segments, %d -> %d records, %d tombstones dropped",
                     p.index, result.segments_before, result.segments_after, result.records_before,
                     result.records_after, result.tombstones_dropped)
        return result

    @staticmethod
    def _compactable(p: Partition) -> list[Path]:
        """Closed segments before the last checkpoint's active one: the only ones recovery never cuts."""
        return [s for s in p.segments[:-1] if segment_base(s) < p.checkpoint_base]

    def _needs_compaction(self, p: Partition) -> bool:
        if p.index not in self.states.loaded or len(p.segments) < 2:
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
                        self._compacted(await self._compact_on_cleaner(p))
                    except (OSError, CorruptLogError) as exc:
                        log.error("offsets partition %d: compaction failed: %s", p.index, exc)
