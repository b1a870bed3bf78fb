"""Recovery of one offsets partition: checkpoint mark, journal scan, cut-back, replay.

Why: after a crash a partition's files hold whatever the page cache wrote back; only the prefix its
checkpoint mark vouches for (fsynced before the mark was written) and the batches journaled after it
(fsynced before they were acknowledged) are known good.  Recovery keeps exactly that: it cuts the
partition back to its mark, appends the journal's batches for it again, and hands over its live
records.  Damage is never taken for a torn tail: bytes the mark vouches for that are missing, or
journal entries that no longer check out with valid entries after them, refuse the partition
(`CorruptLogError`) unless the partition's own segments still hold every acknowledged batch.

The journals read are the ones the partition's mark names (its owner's, from the mark's sequence on:
`PartitionMark.needs`), whichever process wrote them; a partition with no mark of its own falls back
to the data-dir-wide checkpoint and journals of older versions.  A journal is scanned once and the
scan shared by the partitions loaded together (`JournalScans`).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path

from cohort.coordinator.log.batch import BatchError, KeyRuns, read_batch
from cohort.coordinator.log.journal import (
    LEGACY_OWNER,
    JournalBatch,
    JournalDamage,
    JournalFile,
    JournalScan,
    PartitionMark,
    list_owner_journals,
    read_legacy_checkpoint,
    read_partition_mark,
    scan_journal,
)
from cohort.coordinator.log.segments import (
    CorruptLogError,
    complete_pending_compaction,
    fsync_dir,
    list_partition_segments,
    recover_segment,
    segment_base,
    segment_name,
)
from cohort.coordinator.log.state import write_all
from cohort.coordinator.log.file_modes import FILE_MODE, make_private_dir

log = logging.getLogger("cohort.log")

_VALUE = itemgetter(1)


@dataclass(slots=True)
class RecoveredPartition:
    """A partition's files after recovery, and what it holds."""

    segments: list[Path]
    size: int  # of the active segment
    next_offset: int
    first_batch_ms: int | None  # append time of the active segment's first batch
    records: int  # read while replaying
    live: list[tuple[bytes, bytes]]  # latest value of every key that is not a tombstone, each key once
    replayed: int  # batches brought back from the journal


@dataclass(slots=True, frozen=True)
class _Target:
    index: int
    path: Path
    segment_bytes: int


class JournalScans:
    """Journal scans shared by the partitions loaded one after another (a journal is read once, not per partition).

    A scan is reused while the file keeps its size and modification time: a journal whose owner
    is gone never changes, a live owner's is read again.
    """

    def __init__(self, num_partitions: int) -> None:
        self.num_partitions = num_partitions
        self._scans: dict[Path, tuple[int, int, JournalScan]] = {}

    def get(self, journal: JournalFile) -> JournalScan:
        st = journal.path.stat()
        cached = self._scans.get(journal.path)
        if cached is not None and cached[0] == st.st_size and cached[1] == st.st_mtime_ns:
            return cached[2]
        scan = scan_journal(journal.path, self.num_partitions, journal.seq)
        for d in scan.damage:
            log.error("%s: acknowledged journal entries are damaged (valid entries follow them); the "
                      "partitions they may belong to are checked against their segments", d)
        if scan.unfinished_bytes:
            log.warning("%s: %d bytes after position %d are not a valid entry: an unfinished write, never "
                        "acknowledged; ignored", journal.path, scan.unfinished_bytes, scan.valid_end)
        self._scans[journal.path] = (st.st_size, st.st_mtime_ns, scan)
        return scan

    def clear(self) -> None:
        self._scans.clear()


def effective_mark(data_dir: Path, pdir: Path, partition: int) -> PartitionMark | None:
    """The partition's own mark, else the legacy data-dir-wide checkpoint's; raises CheckpointError."""
    mark = read_partition_mark(pdir)
    if mark is None:
        legacy = read_legacy_checkpoint(data_dir)
        if legacy is not None:
            mark = legacy.get(partition)
    return mark


def journaled_batches(data_dir: Path, partition: int, mark: PartitionMark | None, scans: JournalScans
                      ) -> tuple[list[JournalBatch], list[tuple[int, JournalDamage]]]:
    """The batches the partition must get back from the journals its mark names, and their damage."""
    journaled: list[JournalBatch] = []
    damage: list[tuple[int, JournalDamage]] = []
    for journal in list_owner_journals(data_dir):
        if mark is not None and not mark.needs(journal):
            continue
        if mark is None and journal.owner != LEGACY_OWNER:
            continue  # a partition is marked before any owner journals a batch of it
        try:
            scan = scans.get(journal)
        except FileNotFoundError:
            continue  # deleted by its owner since the listing: no mark names it any more
        journaled.extend(e for e in scan.entries if e.partition == partition)
        damage.extend((journal.seq, d) for d in scan.damage)
    return journaled, damage


def recover_partition(data_dir: Path, index: int, pdir: Path, segment_bytes: int, mark: PartitionMark | None,
                      scans: JournalScans) -> RecoveredPartition:
    """(writer thread) Bring one partition back to its checkpoint mark plus its journaled batches."""
    journaled, damage = journaled_batches(data_dir, index, mark, scans)
    return _recover(_Target(index, pdir, segment_bytes), mark, journaled, damage)


def _recover(p: _Target, mark: PartitionMark | None, journaled: list[JournalBatch],
             damage: Sequence[tuple[int, JournalDamage]] = ()) -> RecoveredPartition:
    """(writer thread) Repair, validate and replay one partition.

    Raises CorruptLogError, before changing any file, when the partition cannot be
    brought back without losing acknowledged writes.
    """
    make_private_dir(p.path)
    complete_pending_compaction(p.path)
    segs = list_partition_segments(p.path)
    # Journal damage that may hide this partition's acknowledged writes.
    damage = [(seq, d) for seq, d in damage
              if (mark is None or seq >= mark.journal) and d.partition in (None, p.index)]
    salvage: list[JournalBatch] = []
    if mark is not None and segs:
        _check_checkpointed_bytes(p, segs, mark)
        if damage:
            # What the segments hold past the mark (a crashed process's page cache reached
            # them) can stand in for damaged journal entries: read it before the cut.
            salvage = _segment_batches_after(p, segs, mark)
            _replay_plan(p, mark.next_offset, journaled, salvage, damage)  # raises if anything is lost
        segs = _cut_to_mark(p, segs, mark)
    if not segs:
        path = p.path / segment_name(0)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
        os.close(fd)
        fsync_dir(p.path)
        segs = [path]
    # Newest first: the replay keeps the first record it meets per key (see
    # BatchView.merge_older_into), and the last segment is where a torn tail is cut.
    latest: dict[bytes, bytes | None] = {}
    key_runs = KeyRuns()
    last = segs[-1]
    durable = mark.size if mark is not None and segment_base(last) == mark.segment else 0
    scan, buf, views = recover_segment(last, is_last=True, min_offset=segment_base(last), durable_size=durable)
    first_batch_ms = views[0].timestamp if views else None
    plan = _replay_plan(p, scan.next_offset, journaled, salvage, damage)
    replayed, segs, size, next_offset = _replay_journal(p, segs, scan.size, scan.next_offset, plan)
    for batch in reversed(replayed):
        batch.view.merge_older_into(batch.buf, latest, key_runs)
    records = sum(b.view.record_count for b in replayed) + scan.records
    for v in reversed(views):
        v.merge_older_into(buf, latest, key_runs)
    del buf, views
    following_base = segment_base(last)
    older = segs.index(last)
    for i in range(older - 1, -1, -1):
        path = segs[i]
        base = segment_base(path)
        scan, buf, views = recover_segment(path, is_last=False, min_offset=base)
        if scan.next_offset > following_base:
            raise CorruptLogError(path, scan.size, f"offsets run up to {scan.next_offset - 1}, past the "
                                  f"start of the next segment ({following_base})")
        following_base = base
        for v in reversed(views):
            v.merge_older_into(buf, latest, key_runs)
        records += scan.records
        del buf, views
    # Values are never empty (append refuses them), so "truthy" means "not a tombstone".
    live = list(filter(_VALUE, latest.items()))
    return RecoveredPartition(segs, size, next_offset, first_batch_ms, records, live, len(replayed))


def _check_checkpointed_bytes(p: _Target, segs: list[Path], mark: PartitionMark) -> None:
    """Bytes the last checkpoint vouches for must all be there: missing ones are damage, not a torn tail."""
    active = next((s for s in segs if segment_base(s) == mark.segment), None)
    if active is None:
        raise CorruptLogError(p.path / segment_name(mark.segment), 0,
                              "the segment the last checkpoint ends in is missing")
    size = active.stat().st_size
    if size < mark.size:
        raise CorruptLogError(active, size, f"{mark.size - size} bytes the last checkpoint covers are missing "
                              f"(it says the segment is {mark.size} bytes long): acknowledged commits would "
                              "be lost, so the partition is not loaded")


def _segment_batches_after(p: _Target, segs: list[Path], mark: PartitionMark) -> list[JournalBatch]:
    """The valid batches the segments hold past the checkpoint mark, in order, up to the first gap or damage."""
    found: list[JournalBatch] = []
    next_offset = mark.next_offset
    for path in (s for s in segs if segment_base(s) >= mark.segment):
        try:
            with open(path, "rb") as f:
                buf = f.read()
        except OSError:
            break
        pos = mark.size if segment_base(path) == mark.segment else 0
        while pos < len(buf):
            try:
                view = read_batch(buf, pos, next_offset)
            except BatchError:
                return found
            if view.base_offset != next_offset:
                return found
            found.append(JournalBatch(p.index, buf, view))
            pos, next_offset = view.end, view.last_offset + 1
    return found


def _replay_plan(p: _Target, next_offset: int, journaled: list[JournalBatch], salvage: list[JournalBatch],
                 damage: Sequence[tuple[int, JournalDamage]]) -> list[JournalBatch]:
    """The batches that continue the partition from `next_offset`: the journal's, gaps filled from `salvage`.

    Raises CorruptLogError when journal damage may have taken acknowledged writes of this
    partition that neither the journal nor the segments still hold: refusing the
    partition beats serving offsets older than ones a client was told are committed.
    """
    plan: list[JournalBatch] = []
    spare = {b.view.base_offset: b for b in salvage}

    def fill_from_segments(until: int | None = None) -> None:
        """Take segment batches that continue the partition, up to the journal's next batch."""
        nonlocal next_offset
        while next_offset != until and next_offset in spare:
            batch = spare.pop(next_offset)
            plan.append(batch)
            next_offset = batch.view.last_offset + 1

    for batch in journaled:
        view = batch.view
        if view.last_offset < next_offset:
            continue  # written before the checkpoint mark (or already taken from a segment)
        if view.base_offset > next_offset:
            fill_from_segments(until=view.base_offset)
            if view.last_offset < next_offset:
                continue
        if view.base_offset != next_offset:
            lost = f"offsets {next_offset} to {view.base_offset - 1}"
            why = "; ".join(str(d) for _, d in damage) or "the journal skips them"
            raise CorruptLogError(p.path, 0, f"{lost} are in neither the journal nor the segments ({why}): "
                                  "the partition is not loaded rather than serve older offsets")
        plan.append(batch)
        next_offset = view.last_offset + 1
    fill_from_segments()
    for seq, d in damage:
        if d.partition is not None:
            if d.base_offset is not None and d.base_offset >= next_offset:
                raise CorruptLogError(d.path, d.position, f"the batch of partition {p.index} starting at offset "
                                      f"{d.base_offset} is damaged and its segment does not hold it: "
                                      "acknowledged commits lost, the partition is not loaded")
            continue
        # Whose entry it was is unknown. Nothing of this partition is missing before a
        # batch of it that the journal holds after the damage (the replay is gapless).
        if not any((b.journal, b.view.position) > (seq, d.end) for b in plan if b.journal >= 0):
            raise CorruptLogError(d.path, d.position, f"{d.end - d.position} damaged journal bytes may have "
                                  f"held acknowledged commits of partition {p.index}, and nothing after them "
                                  "proves otherwise: the partition is not loaded rather than serve older "
                                  "offsets")
    return plan


def _cut_to_mark(p: _Target, segs: list[Path], mark: PartitionMark) -> list[Path]:
    """Trust a partition only up to its checkpoint mark: what lies beyond comes back from the journal."""
    keep = [s for s in segs if segment_base(s) <= mark.segment]
    for path in segs[len(keep):]:
        os.unlink(path)
        log.info("%s: started after the last checkpoint, removed (the journal holds its batches)", path)
    if len(keep) < len(segs):
        fsync_dir(p.path)
    if not keep or segment_base(keep[-1]) != mark.segment:
        raise CorruptLogError(p.path / segment_name(mark.segment), 0,
                              "the segment the last checkpoint ends in is missing")
    active = keep[-1]
    size = active.stat().st_size
    if size > mark.size:
        with open(active, "r+b") as f:
            f.truncate(mark.size)
            os.fsync(f.fileno())
        log.info("%s: cut %d bytes written after the last checkpoint (the journal holds what was "
                 "acknowledged)", active, size - mark.size)
    return keep


def _replay_journal(p: _Target, segs: list[Path], size: int, next_offset: int,
                    journaled: list[JournalBatch]) -> tuple[list[JournalBatch], list[Path], int, int]:
    """(writer thread) Append the journal's batches the partition lacks; returns them and the new end."""
    replayed: list[JournalBatch] = []
    if not journaled:
        return replayed, segs, size, next_offset
    fd = os.open(segs[-1], os.O_WRONLY)
    rolled = False
    try:
        for batch in journaled:
            view = batch.view
            if view.last_offset < next_offset:
                continue  # written before the checkpoint mark: the segment has it
            if view.base_offset != next_offset:  # _replay_plan made the batches gapless
                raise CorruptLogError(p.path, size, f"the journal's next batch starts at offset "
                                      f"{view.base_offset} but the partition ends at {next_offset}")
            if size >= p.segment_bytes:
                os.fdatasync(fd)
                os.close(fd)
                fd = -1
                path = p.path / segment_name(next_offset)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
                segs = [*segs, path]
                size = 0
                rolled = True
            data = batch.data
            write_all(fd, data, size)
            size += len(data)
            next_offset = view.last_offset + 1
            replayed.append(batch)
        os.ftruncate(fd, size)
        os.fdatasync(fd)
        if rolled:
            fsync_dir(p.path)
    finally:
        if fd >= 0:
            os.close(fd)
    return replayed, segs, size, next_offset
