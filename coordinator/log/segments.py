"""Segment files on disk: naming, recovery of a partition directory, reading.

A partition is a directory ``<data_dir>/__consumer_offsets-<p>/`` holding
``<base offset, 20 digits>.log`` segment files; the last one is the active
segment, all others are closed and never written again (only replaced by
compaction).  Compaction leaves two kinds of temporary files, which recovery
resolves before anything is read:

* ``*.cleaned``: a rewrite that was not finished: deleted.
* ``<base>-<end>.swap``: a finished, fsynced rewrite of the segments whose base
  offsets lie in [base, end): those segments are deleted (if still there) and the
  swap file takes the name ``<base>.log``.
"""
from __future__ import annotations

import logging
import os
import re
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cohort.coordinator.log.batch import BatchError, BatchView, iter_batches, read_batch

log = logging.getLogger("cohort.log")

PARTITION_DIR_PREFIX = "__consumer_offsets-"
_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_SWAP_RE = re.compile(r"^(\d{20})-(\d{20})\.swap$")


class CorruptLogError(Exception):
    """Damage that is not a torn tail: a bad checksum or broken batch before the end of the log."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"{path}: position {position}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


def partition_dir(data_dir: Path, partition: int) -> Path:
    return Path(data_dir) / f"{PARTITION_DIR_PREFIX}{partition}"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def swap_name(base_offset: int, end_offset: int) -> str:
    return f"{base_offset:020d}-{end_offset:020d}.swap"


def segment_base(path: Path) -> int:
    m = _SEGMENT_RE.match(path.name)
    if m is None:
        raise ValueError(f"not a segment file name: {path.name}")
    return int(m.group(1))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_partition_segments(pdir: Path) -> list[Path]:
    """The segment files of one partition directory, oldest first."""
    try:
        names = os.listdir(pdir)
    except FileNotFoundError:
        return []
    segs = sorted(n for n in names if _SEGMENT_RE.match(n))
    return [pdir / n for n in segs]


def list_segments(data_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Every (partition, segment path) under a data dir, by partition then offset.  Read-only."""
    out: list[tuple[int, Path]] = []
    root = Path(data_dir)
    try:
        entries = os.listdir(root)
    except FileNotFoundError:
        return out
    parts = []
    for name in entries:
        if name.startswith(PARTITION_DIR_PREFIX) and name[len(PARTITION_DIR_PREFIX):].isdigit():
            parts.append(int(name[len(PARTITION_DIR_PREFIX):]))
    for p in sorted(parts):
        out.extend((p, seg) for seg in list_partition_segments(partition_dir(root, p)))
    return out


def list_partitions(data_dir: str | os.PathLike) -> list[int]:
    return sorted({p for p, _ in list_segments(data_dir)})


def read_segment(path: str | os.PathLike) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(log offset, key, value) of every record in a segment file; value None is a tombstone.

    Safe while the server runs: it reads a snapshot of the file and stops
    quietly at an unfinished batch at the end (a write in progress, or a torn
    tail).  Damage before the end raises CorruptLogError.  A segment replaced
    by compaction in the meantime raises FileNotFoundError: list again, or use
    `read_partition`, which handles that.
    """
    path = Path(path)
    with open(path, "rb") as f:
        buf = f.read()
    base = segment_base(path)
    try:
        for view in iter_batches(buf, base):
            keys, values = view.keys_values(buf)
            yield from zip(view.offsets(buf), keys, values)
    except BatchError as exc:
        if not _is_tail(buf, exc):
            raise CorruptLogError(path, exc.position, exc.reason) from None


def read_partition(data_dir: str | os.PathLike, partition: int, *, timeout: float = 10.0
                   ) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(log offset, key, value) of every record of one partition, oldest first.  Read-only.

    Unlike reading `list_segments` one by one, this sees a consistent set of
    segments while the server compacts: it opens every segment before reading
    any (an open file survives its replacement), and lists again if a segment
    vanished or a compaction was half-way through its swap.
    """
    for _, view, buf in _partition_batches(data_dir, partition, timeout):
        keys, values = view.keys_values(buf)
        yield from zip(view.offsets(buf), keys, values)


def read_partition_history(data_dir: str | os.PathLike, partition: int, key_prefixes: tuple[bytes, ...], *,
                           timeout: float = 10.0) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(append time in ms, key, value) of the records whose key starts with one of `key_prefixes`,
    oldest first: what compaction has kept of those keys' history.  Read-only, as `read_partition`."""
    for _, view, buf in _partition_batches(data_dir, partition, timeout):
        keys, values = view.keys_values(buf)
        timestamp = view.timestamp
        for key, value in zip(keys, values):
            if key.startswith(key_prefixes):
                yield timestamp, bytes(key), value


def _partition_batches(data_dir: str | os.PathLike, partition: int, timeout: float):
    """(segment path, batch view, segment bytes) of every batch of one partition, oldest first."""
    pdir = partition_dir(Path(data_dir), partition)
    deadline = time.monotonic() + timeout
    while True:
        files = []
        try:
            if any(n.endswith(".swap") for n in os.listdir(pdir)):
                raise FileNotFoundError("compaction swap in progress")
            for path in list_partition_segments(pdir):
                files.append((path, open(path, "rb")))
            break
        except FileNotFoundError:
            for _, f in files:
                f.close()
            if not pdir.exists():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{pdir}: segments kept changing for {timeout} s") from None
            time.sleep(0.005)
    try:
        for path, f in files:
            buf = f.read()
            try:
                for view in iter_batches(buf, segment_base(path)):
                    yield path, view, buf
            except BatchError as exc:
                if not (path == files[-1][0] and _is_tail(buf, exc)):
                    raise CorruptLogError(path, exc.position, exc.reason) from None
    finally:
        for _, f in files:
            f.close()


def _is_tail(buf: bytes, exc: BatchError) -> bool:
    """Whether the invalid batch at exc.position can be an unfinished last write."""
    pos = exc.position
    if exc.zero_filled:
        # The file grew but its data never reached the disk: zeros up to the end.
        return buf.count(0, pos) == len(buf) - pos
    if exc.torn:
        return True
    if exc.bad_checksum:
        # A complete-looking last batch whose checksum fails: its pages reached the
        # disk only partly.  The same failure followed by more data is damage.
        (blen,) = struct.unpack_from(">i", buf, pos + 8)
        return pos + 12 + blen == len(buf)
    return False


@dataclass(slots=True)
class SegmentScan:
    """What recovery learnt about one segment."""

    path: Path
    base_offset: int
    size: int
    next_offset: int  # one past the last record, or base_offset if empty
    batches: int
    records: int


def complete_pending_compaction(pdir: Path) -> None:
    """Resolve what a crash in the middle of a compaction left behind (see module docstring)."""
    try:
        names = os.listdir(pdir)
    except FileNotFoundError:
        return
    changed = False
    for name in names:
        if name.endswith(".cleaned"):
            os.unlink(pdir / name)
            changed = True
    for name in sorted(names):
        m = _SWAP_RE.match(name)
        if not m:
            continue
        base, end = int(m.group(1)), int(m.group(2))
        for seg in list_partition_segments(pdir):
            if base <= segment_base(seg) < end:
                os.unlink(seg)
        os.replace(pdir / name, pdir / segment_name(base))
        changed = True
        log.warning("completed an interrupted compaction in %s (segments %d..%d)", pdir, base, end)
    if changed:
        fsync_dir(pdir)


def recover_segment(path: Path, *, is_last: bool, min_offset: int, truncate: bool = True,
                    buf: bytes | None = None, durable_size: int = 0) -> tuple[SegmentScan, bytes, list[BatchView]]:
    """Validate every batch of a segment; cut a torn tail of the last segment.

    Returns the scan, the (possibly shortened) content and its batch views.
    Damage elsewhere raises CorruptLogError naming the file and position; so
    does a "tail" that starts inside the first `durable_size` bytes, which a
    checkpoint made durable (no unfinished write can be there).
    """
    if buf is None:
        with open(path, "rb") as f:
            buf = f.read()
    base = segment_base(path)
    views: list[BatchView] = []
    pos = 0
    lower = max(base, min_offset)
    size = len(buf)
    while pos < size:
        try:
            view = read_batch(buf, pos, lower)
        except BatchError as exc:
            if exc.position < durable_size:
                raise CorruptLogError(path, exc.position, f"{exc.reason}, inside what the last checkpoint made "
                                      "durable") from None
            if is_last and _is_tail(buf, exc):
                log.warning("%s: torn tail at position %d (%s): truncating %d bytes to the last valid batch",
                            path, exc.position, exc.reason, size - exc.position)
                if truncate:
                    with open(path, "r+b") as f:
                        f.truncate(exc.position)
                        os.fsync(f.fileno())
                buf = buf[: exc.position]
                break
            raise CorruptLogError(path, exc.position, exc.reason) from None
        views.append(view)
        pos = view.end
        lower = view.last_offset + 1
    next_offset = views[-1].last_offset + 1 if views else base
    scan = SegmentScan(path, base, len(buf), max(next_offset, base), len(views),
                       sum(v.record_count for v in views))
    return scan, buf, views
