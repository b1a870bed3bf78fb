"""The commit journal and the checkpoint: one fsync makes a round durable, however many partitions it wrote.

Why: a group-commit round typically writes a batch to dozens of the 50
partitions.  Fsyncing each of their files costs one filesystem journal commit
each (about 1 ms for 32 files even when fanned out over threads); appending
the same batches to one file and fsyncing that once costs under 0.1 ms.  So
every batch is written twice: into its partition's active segment (page cache
only) and, as a journal entry, into the current journal file, and only the
journal is fsynced before the round is acknowledged.

A checkpoint makes the partition files durable on their own, so the journal
can start over: fsync every partition file, then record where each partition
ended (active segment, size, next offset) and which journal holds the writes
that came after, in ``checkpoint.json`` (write temporary file, fsync, rename,
fsync directory).  Recovery trusts a partition only up to its checkpoint mark:
it cuts the active segment back to the mark, removes segments started after
it, and appends the journal's batches for that partition again.  Whatever the
page cache did or did not write back before a crash, the result is the
checkpointed prefix plus exactly the journaled batches.

Journal file ``journal-<seq, 20 digits>.wal`` in the data directory, a
sequence of entries (big-endian), declared once in `ENTRY_HEADER`::

    partition  int32
    length     int32   bytes of the batch that follows
    crc        uint32  CRC-32C of the 8 bytes above and the batch's first 16
                       bytes (base offset, length, batch CRC); the batch's own
                       CRC covers the rest
    batch      the partition's batch, byte for byte as in its segment

An entry that does not check out ends the journal: it and everything after it
were written after the last fsync that returned, so none of it was
acknowledged.
"""
from __future__ import annotations

import json
import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c
from construct import Int32sb, Int32ub, Struct

from coordinator.log.batch import BatchError, BatchView, read_batch
from coordinator.log.segments import fsync_dir

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

CHECKPOINT_NAME = "checkpoint.json"
_JOURNAL_RE = re.compile(r"^journal-(\d{20})\.wal$")
CHECKPOINT_FORMAT = 1


def journal_name(seq: int) -> str:
    return f"journal-{seq:020d}.wal"


def encode_entry(partition: int, batch: bytes) -> bytes:
    prefix = _PREFIX.pack(partition, len(batch))
    crc = crc32c.crc32c(batch[:_COVERED_BATCH_BYTES], crc32c.crc32c(prefix))
    return b"".join((prefix, struct.pack(">I", crc), batch))


@dataclass(slots=True)
class JournalBatch:
    """One batch found in a journal: its partition, the journal's bytes and where the batch lies in them."""

    partition: int
    buf: bytes
    view: BatchView

    @property
    def data(self) -> bytes:
        return self.buf[self.view.position:self.view.end]


def read_journal(path: Path, num_partitions: int) -> tuple[list[JournalBatch], int]:
    """The valid entries of a journal file, in order, and the size of the valid prefix."""
    with open(path, "rb") as f:
        buf = f.read()
    entries: list[JournalBatch] = []
    pos = 0
    size = len(buf)
    while pos + ENTRY_HEADER_SIZE <= size:
        partition, length, crc = _HEADER.unpack_from(buf, pos)
        start = pos + ENTRY_HEADER_SIZE
        end = start + length
        if (length < _COVERED_BATCH_BYTES or end > size or not 0 <= partition < num_partitions
                or crc32c.crc32c(buf[start:start + _COVERED_BATCH_BYTES], crc32c.crc32c(buf[pos:pos + 8])) != crc):
            break
        try:
            view = read_batch(buf, start, 0)
        except BatchError:
            break
        if view.end != end:
            break
        entries.append(JournalBatch(partition, buf, view))
        pos = end
    if pos < size and buf.count(0, pos) != size - pos:
        log.warning("%s: %d bytes after position %d are not a valid entry: an unfinished write, never "
                    "acknowledged; ignored", path, size - pos, pos)
    return entries, pos


def list_journals(data_dir: Path) -> list[tuple[int, Path]]:
    """(seq, path) of every journal file, oldest first."""
    try:
        names = os.listdir(data_dir)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        m = _JOURNAL_RE.match(name)
        if m:
            found.append((int(m.group(1)), data_dir / name))
    return sorted(found)


@dataclass(slots=True, frozen=True)
class PartitionMark:
    """Where a partition's durable prefix ends, and the first journal holding what it wrote after."""

    segment: int  # base offset of the active segment at the checkpoint
    size: int  # bytes of that segment covered
    next_offset: int
    journal: int


class CheckpointError(Exception):
    """checkpoint.json is unreadable: recovery cannot tell the durable prefix from the journaled rest."""


def read_checkpoint(data_dir: Path) -> dict[int, PartitionMark] | None:
    """The marks of the last checkpoint, or None if the data dir never had one."""
    path = Path(data_dir) / CHECKPOINT_NAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
        if doc.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        return {int(p): PartitionMark(int(m["segment"]), int(m["size"]), int(m["next_offset"]), int(m["journal"]))
                for p, m in doc["partitions"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{path}: not a valid checkpoint: {exc}") from None


def write_checkpoint(data_dir: Path, marks: dict[int, PartitionMark]) -> None:
    """Replace checkpoint.json atomically (temporary file, fsync, rename, fsync directory)."""
    data_dir = Path(data_dir)
    doc = {"format": CHECKPOINT_FORMAT,
           "partitions": {str(p): {"segment": m.segment, "size": m.size, "next_offset": m.next_offset,
                                   "journal": m.journal} for p, m in sorted(marks.items())}}
    tmp = data_dir / (CHECKPOINT_NAME + ".tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, data_dir / CHECKPOINT_NAME)
    fsync_dir(data_dir)
