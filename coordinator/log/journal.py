"""The commit journal and the checkpoint: one fsync makes a round durable, however many partitions it wrote.

Why: a group-commit round typically writes a batch to dozens of the 50
partitions.  Fsyncing each of their files costs one filesystem journal commit
each (about 1 ms for 32 files even when fanned out over threads); appending
the same batches to one file and fsyncing that once costs under 0.1 ms.  So
every batch is written twice: as a journal entry into the current journal
file, which alone is fsynced before the round is acknowledged, and, behind it,
into its partition's active segment (page cache only; see
`cohort.coordinator.log.commit_rounds`).

A checkpoint makes the partition files durable on their own, so the journal
can start over: fsync every partition file, then record where each partition
ended (active segment, size, next offset) and which journal holds the writes
that came after, in ``checkpoint.json`` (write temporary file, fsync, rename,
fsync directory).  Recovery trusts a partition only up to its checkpoint mark:
it cuts the active segment back to the mark, removes segments started after
it, and appends the journal's batches for that partition again.  Whatever the
page cache did or did not write back before a crash, the result is the
checkpointed prefix plus exactly the journaled batches.

Several processes may share one data directory, each owning some partitions
(`cohort serve --workers N`); no file is written by two of them.  Each
`OffsetsLog` instance writes its own journals, ``journal-<owner>-<seq, 20
digits>.wal`` (owner: a token new at every open), and each partition's mark
lives in its own directory (``__consumer_offsets-<p>/checkpoint.json``),
written only by the process holding that directory's lock.  A mark names the
owner and sequence of the first journal holding what the partition wrote after
it, so whoever owns the partition next replays it from whichever process wrote
it, and a journal is deleted only when no partition's mark still names it.
Data dirs written before this (one ``checkpoint.json`` in the data directory,
``journal-<seq>.wal``, owner "") are read the same way until every partition
has a mark of its own.

A journal file is a sequence of entries (big-endian), declared once in `ENTRY_HEADER`::

    partition  int32
    length     int32   bytes of the batch that follows
    crc        uint32  CRC-32C of the 8 bytes above and the batch's first 16
                       bytes (base offset, length, batch CRC); the batch's own
                       CRC covers the rest
    batch      the partition's batch, byte for byte as in its segment

The journal is written strictly in order and zero-filled ahead of its writes
(preallocation), so a crash can only leave an unfinished entry followed by
zeros: that tail was written after the last fsync that returned and was never
acknowledged.  An entry that does not check out but is followed by valid
entries is something else: damage to bytes that were durable and acknowledged
(`JournalDamage`).  Recovery never treats it as a tail: it refills what it can
from the partitions' own segments and refuses a partition whose acknowledged
writes it cannot account for (`offsets_log`).
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c
from construct import Int32sb, Int32ub, Struct

from cohort.coordinator.log.batch import BatchError, BatchView, read_batch
from cohort.coordinator.log.segments import fsync_dir, list_partitions, partition_dir
from cohort.coordinator.log.file_modes import private_opener

log = logging.getLogger("cohort.log")

ENTRY_HEADER = Struct(
    "partition" / Int32sb,
    "length" / Int32sb,
    "crc" / Int32ub,
)
ENTRY_HEADER_SIZE = ENTRY_HEADER.sizeof()
_COVERED_BATCH_BYTES = 16  # base offset, batch length, batch CRC

_HEADER = struct.Struct(">iiI")
assert _HEADER.size == ENTRY_HEADER_SIZE
assert ENTRY_HEADER.build(dict(partition=3, length=5, crc=7)) == _HEADER.pack(3, 5, 7)
_PREFIX = struct.Struct(">ii")

CHECKPOINT_NAME = "checkpoint.json"  # the legacy data-dir-wide one, and each partition's own mark
_JOURNAL_RE = re.compile(r"^journal-(?:([0-9a-f]+)-)?(\d{20})\.wal$")
CHECKPOINT_FORMAT = 1
MARK_FORMAT = 2
LEGACY_OWNER = ""  # journals and marks written before journals were per owner


def journal_name(seq: int, owner: str = LEGACY_OWNER) -> str:
    return f"journal-{owner}-{seq:020d}.wal" if owner else f"journal-{seq:020d}.wal"


def encode_entry(partition: int, batch: bytes) -> bytes:
    prefix = _PREFIX.pack(partition, len(batch))
    crc = crc32c.crc32c(batch[:_COVERED_BATCH_BYTES], crc32c.crc32c(prefix))
    return b"".join((prefix, struct.pack(">I", crc), batch))


@dataclass(slots=True)
class JournalBatch:
    """One batch found in a journal (or, in recovery, a partition's segment): its bytes and where the batch lies."""

    partition: int
    buf: bytes
    view: BatchView
    journal: int = -1  # the journal's sequence number (-1: the batch came from a segment)

    @property
    def data(self) -> bytes:
        return self.buf[self.view.position:self.view.end]


@dataclass(slots=True, frozen=True)
class JournalDamage:
    """Bytes of a journal that were written and acknowledged but no longer check out.

    `partition` and `base_offset` are known when the entry's own header (which
    its checksum covers) is intact and only the batch inside it is damaged.
    """

    path: Path
    position: int  # where the damaged bytes start
    end: int  # where the next valid entry starts
    partition: int | None = None
    base_offset: int | None = None

    def __str__(self) -> str:
        whose = (f" (the batch of partition {self.partition} starting at offset {self.base_offset})"
                 if self.partition is not None else "")
        return f"{self.path}: position {self.position}: {self.end - self.position} damaged bytes{whose}"


@dataclass(slots=True)
class JournalScan:
    """What one journal file holds: its valid entries, damage between them, and how its end looks."""

    entries: list[JournalBatch]
    damage: list[JournalDamage]
    valid_end: int  # one past the last valid entry
    written_end: int  # one past the last non-zero byte (beyond it: preallocated zeros)

    @property
    def unfinished_bytes(self) -> int:
        """Non-zero bytes after the last valid entry: an entry whose write never finished."""
        return max(0, self.written_end - self.valid_end)


def _entry_at(buf: bytes, pos: int, num_partitions: int) -> tuple[int, int, bool]:
    """(partition, end, batch_ok) of the entry at `pos` if its header checks out, else (-1, -1, False)."""
    size = len(buf)
    if pos + ENTRY_HEADER_SIZE > size:
        return -1, -1, False
    partition, length, crc = _HEADER.unpack_from(buf, pos)
    start = pos + ENTRY_HEADER_SIZE
    end = start + length
    if (length < _COVERED_BATCH_BYTES or end > size or not 0 <= partition < num_partitions
            or crc32c.crc32c(buf[start:start + _COVERED_BATCH_BYTES], crc32c.crc32c(buf[pos:pos + 8])) != crc):
        return -1, -1, False
    try:
        view = read_batch(buf, start, 0)
    except BatchError:
        return partition, end, False
    return partition, end, view.end == end


def _next_valid_entry(buf: bytes, pos: int, stop: int, num_partitions: int) -> int:
    """The first position in (pos, stop) where a whole valid entry starts, or -1.

    Only called on damage (never on the normal path), so a plain scan is fine.
    """
    candidate = pos
    last = stop - ENTRY_HEADER_SIZE
    while True:
        # An entry starts with its partition number, an int32 below 65536: two zero bytes.
        candidate = buf.find(b"\0\0", candidate + 1, last + 2)
        if candidate < 0 or candidate > last:
            return -1
        if _entry_at(buf, candidate, num_partitions)[2]:
            return candidate


def scan_journal(path: Path, num_partitions: int, seq: int = -1) -> JournalScan:
    """Every valid entry of a journal file, in order, and every damaged stretch between them."""
    with open(path, "rb") as f:
        buf = f.read()
    written_end = len(buf.rstrip(b"\0"))
    entries: list[JournalBatch] = []
    damage: list[JournalDamage] = []
    pos = 0
    valid_end = 0
    while pos < written_end:
        partition, end, ok = _entry_at(buf, pos, num_partitions)
        if ok:
            entries.append(JournalBatch(partition, buf, read_batch(buf, pos + ENTRY_HEADER_SIZE, 0), seq))
            pos = valid_end = end
            continue
        if partition >= 0 and end < written_end and _entry_at(buf, end, num_partitions)[2]:
            following = end  # the header (checksummed) says where the damaged entry ends
        else:
            following = _next_valid_entry(buf, pos, written_end, num_partitions)
        if following < 0:
            break  # an unfinished last write: nothing valid follows it
        base = None
        if partition >= 0:  # the header checked out; its covered first bytes name the batch's base offset
            base = struct.unpack_from(">q", buf, pos + ENTRY_HEADER_SIZE)[0]
        damage.append(JournalDamage(path, pos, following, partition if partition >= 0 else None, base))
        pos = following
    return JournalScan(entries, damage, valid_end, written_end)


def read_journal(path: Path, num_partitions: int) -> tuple[list[JournalBatch], int]:
    """The valid entries of a journal file, in order, and the end of the last one."""
    scan = scan_journal(path, num_partitions)
    return scan.entries, scan.valid_end


@dataclass(slots=True, frozen=True)
class JournalFile:
    """A journal file on disk: whose it is and its place in that owner's sequence."""

    owner: str
    seq: int
    path: Path


def list_owner_journals(data_dir: Path) -> list[JournalFile]:
    """Every journal file of every owner, by owner, oldest first."""
    try:
        names = os.listdir(data_dir)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        m = _JOURNAL_RE.match(name)
        if m:
            found.append(JournalFile(m.group(1) or LEGACY_OWNER, int(m.group(2)), Path(data_dir) / name))
    return sorted(found, key=lambda j: (j.owner, j.seq))


def lock_journal(fd: int) -> None:
    """Mark a journal as its owner's, held while the owner runs (released by the kernel on exit, even kill -9)."""
    fcntl.flock(fd, fcntl.LOCK_EX)


def journal_in_use(path: Path) -> bool:
    """Whether a live process still has `path` open as its journal (then only it may delete it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's lock
    return False


def list_journals(data_dir: Path) -> list[tuple[int, Path]]:
    """(seq, path) of every journal file (all owners), oldest first per owner."""
    return [(j.seq, j.path) for j in list_owner_journals(data_dir)]


@dataclass(slots=True, frozen=True)
class PartitionMark:
    """Where a partition's durable prefix ends, and the first journal holding what it wrote after."""

    segment: int  # base offset of the active segment at the checkpoint
    size: int  # bytes of that segment covered
    next_offset: int
    journal: int  # -1: nothing of the partition was journaled after this mark (a clean close or release)
    owner: str = LEGACY_OWNER  # whose journals continue the partition

    def needs(self, journal: JournalFile) -> bool:
        """Whether `journal` may hold writes of the partition made after this mark."""
        return self.journal >= 0 and journal.owner == self.owner and journal.seq >= self.journal


class CheckpointError(Exception):
    """A checkpoint file is unreadable: recovery cannot tell the durable prefix from the journaled rest."""


def _parse_mark(doc: dict, owner: str = LEGACY_OWNER) -> PartitionMark:
    return PartitionMark(int(doc["segment"]), int(doc["size"]), int(doc["next_offset"]), int(doc["journal"]),
                         str(doc.get("owner", owner)))


def _read_json_doc(path: Path, expected_format, what: str) -> dict | None:
    """The JSON document at `path` in format `expected_format`, or None if the file does not exist."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
        if doc.get("format") != expected_format:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        return doc
    except (ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path}: not a valid {what}: {exc}") from None


def read_legacy_checkpoint(data_dir: Path) -> dict[int, PartitionMark] | None:
    """The marks of the data-dir-wide checkpoint.json of older versions, or None if there is none."""
    path = Path(data_dir) / CHECKPOINT_NAME
    doc = _read_json_doc(path, CHECKPOINT_FORMAT, "checkpoint")
    if doc is None:
        return None
    try:
        return {int(p): _parse_mark(m) for p, m in doc["partitions"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{path}: not a valid checkpoint: {exc}") from None


def read_partition_mark(pdir: Path) -> PartitionMark | None:
    """The mark in a partition directory, or None if it has none (yet)."""
    path = Path(pdir) / CHECKPOINT_NAME
    doc = _read_json_doc(path, MARK_FORMAT, "checkpoint mark")
    if doc is None:
        return None
    try:
        return _parse_mark(doc)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{path}: not a valid checkpoint mark: {exc}") from None


def write_partition_mark(pdir: Path, mark: PartitionMark) -> None:
    """Replace the partition's mark atomically (temporary file, fsync, rename, fsync directory)."""
    pdir = Path(pdir)
    doc = {"format": MARK_FORMAT, "segment": mark.segment, "size": mark.size, "next_offset": mark.next_offset,
           "journal": mark.journal, "owner": mark.owner}
    tmp = pdir / (CHECKPOINT_NAME + ".tmp")
    with open(tmp, "w", opener=private_opener) as f:
        json.dump(doc, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, pdir / CHECKPOINT_NAME)
    fsync_dir(pdir)


def read_checkpoint(data_dir: Path) -> dict[int, PartitionMark] | None:
    """Every partition's mark (its own, else the legacy checkpoint's), or None if the data dir has none."""
    legacy = read_legacy_checkpoint(data_dir)
    marks = dict(legacy or {})
    found = legacy is not None
    for p in list_partitions(data_dir):
        mark = read_partition_mark(partition_dir(data_dir, p))
        if mark is not None:
            marks[p] = mark
            found = True
    return marks if found else None
