"""The record batch: the unit that is written, checksummed and recovered.

A segment file is a sequence of batches.  One batch holds the records of one
group-commit round (many appends share one write and one fsync), so a batch
is also the unit of atomicity: after a crash it is either entirely there with
a valid CRC, or it is the torn tail and is cut off.

Layout (big-endian), declared once in `BATCH_HEADER`::

    base_offset        int64   log offset of the first record
    batch_length       int32   bytes after this field
    crc                uint32  CRC-32C of every byte after this field
    magic              int8    1
    attributes         int8    bit 0: has tombstones, bit 1: has offset deltas
    last_offset_delta  int32   last record's offset - base_offset
    timestamp          int64   append time (ms); tombstone retention counts from it
    record_count       int32
    key_lengths        int32[record_count]
    value_lengths      int32[record_count]        (-1 = tombstone)
    offset_deltas      int32[record_count]        (only with attribute bit 1)
    keys               the keys, concatenated
    values             the values, concatenated

Why keys and values are not interleaved with their lengths (as Kafka's
varint records are): with all lengths up front, one `struct.unpack_from` reads
every length of a batch, `itertools.accumulate` turns them into positions, and
`map(slice, ...)` cuts the keys and values out, all without a Python-level
loop per record.  That is what makes a 10 M-record replay take seconds on a
small machine.  Appended batches have contiguous offsets; only batches
rewritten by compaction carry offset deltas.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, filterfalse, repeat

import crc32c
from construct import Const, Int8sb, Int32sb, Int32ub, Int64sb, Struct

MAGIC = 1
ATTR_TOMBSTONES = 0x01
ATTR_OFFSET_DELTAS = 0x02

BATCH_HEADER = Struct(
    "base_offset" / Int64sb,
    "batch_length" / Int32sb,
    "crc" / Int32ub,
    "magic" / Const(MAGIC, Int8sb),
    "attributes" / Int8sb,
    "last_offset_delta" / Int32sb,
    "timestamp" / Int64sb,
    "record_count" / Int32sb,
)
HEADER_SIZE = BATCH_HEADER.sizeof()
CRC_START = 16  # the CRC covers everything from the magic byte on
LENGTH_FIELD_END = 12  # batch_length counts the bytes after this position

# The hot path reads the header with one precompiled struct.  It is derived from
# the declaration above, and the module refuses to load if the two disagree.
_HEADER = struct.Struct(">qiIbbiqi")
assert _HEADER.size == HEADER_SIZE
_SAMPLE = dict(base_offset=7, batch_length=9, crc=11, attributes=2, last_offset_delta=3, timestamp=5, record_count=4)
assert BATCH_HEADER.build(_SAMPLE) == _HEADER.pack(7, 9, 11, MAGIC, 2, 3, 5, 4)

_INT_ARRAYS: dict[int, struct.Struct] = {}
_NEXT = (1).__add__


def _ints(n: int) -> struct.Struct:
    s = _INT_ARRAYS.get(n)
    if s is None:
        s = struct.Struct(f">{n}i")
        if len(_INT_ARRAYS) < 4096:
            _INT_ARRAYS[n] = s
    return s


class BatchError(ValueError):
    """The bytes at a position are not a valid batch.

    `torn`: they run past the end of the data, as an unfinished write does.
    `zero_filled` and `bad_checksum` say which other failures can also be an
    unfinished write when they are at the very end (see `segments`).
    """

    def __init__(self, position: int, reason: str, *, torn: bool, zero_filled: bool = False,
                 bad_checksum: bool = False) -> None:
        super().__init__(f"position {position}: {reason}")
        self.position = position
        self.reason = reason
        self.torn = torn
        self.zero_filled = zero_filled
        self.bad_checksum = bad_checksum


def encode_batch(
    base_offset: int,
    timestamp_ms: int,
    keys: Sequence[bytes],
    values: Sequence[bytes | None],
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """One batch holding `keys[i] -> values[i]`, with offsets base_offset + i (or + offset_deltas[i])."""
    n = len(keys)
    if n == 0 or n != len(values):
        raise ValueError("a batch holds at least one record, with one value per key")
    # (map and filter, not comprehensions: a batch is encoded per partition per commit round, often of one record)
    if None in values:
        attributes = ATTR_TOMBSTONES
        vlens = [-1 if v is None else len(v) for v in values]
    else:
        attributes = 0
        vlens = map(len, values)
    ints = _ints(n)
    arrays = [ints.pack(*map(len, keys)), ints.pack(*vlens)]
    if offset_deltas is None:
        last_delta = n - 1
    else:
        attributes |= ATTR_OFFSET_DELTAS
        last_delta = offset_deltas[-1]
        arrays.append(ints.pack(*offset_deltas))
    body = b"".join(
        (
            struct.pack(">bbiqi", MAGIC, attributes, last_delta, timestamp_ms, n),
            *arrays,
            *keys,
            *filter(None, values),  # (tombstones have no bytes)
        )
    )
    crc = crc32c.crc32c(body)
    return struct.pack(">qiI", base_offset, len(body) + 4, crc) + body


class KeyRuns:
    """The key runs of the batches merged into one `latest` so far (`BatchView.merge_older_into`).

    A batch's key run is its key lengths and its keys, as they lie in the batch.
    Once a batch is merged, every key of it is in `latest`, so a later batch
    with the same run has nothing to add: replaying a consumer's commits of the
    same partitions, newest first, costs one lookup per batch instead of one
    per key.  Runs are kept up to `budget_bytes`, so a log of all-distinct keys
    holds no second copy of them.
    """

    __slots__ = ("_runs", "_room")

    def __init__(self, budget_bytes: int = 32 << 20) -> None:
        self._runs: set[tuple[bytes, bytes]] = set()
        self._room = budget_bytes

    def seen(self, key_lengths: bytes, keys: bytes) -> bool:
        """Whether this run was merged before; if not, it counts as merged from now on (the caller merges it)."""
        run = (key_lengths, keys)
        if run in self._runs:
            return True
        size = len(key_lengths) + len(keys)
        if size <= self._room:
            self._room -= size
            self._runs.add(run)
        return False


@dataclass(slots=True)
class BatchView:
    """A validated batch inside a buffer: positions only, nothing decoded yet."""

    position: int
    end: int
    base_offset: int
    last_offset: int
    attributes: int
    timestamp: int
    record_count: int

    def keys_values(self, buf: bytes) -> tuple[list[bytes], list[bytes | None]]:
        """The batch's keys and values (tombstones as None), cut out without a per-record loop."""
        n = self.record_count
        pos = self.position + HEADER_SIZE
        lens = _ints(2 * n).unpack_from(buf, pos)
        klens = lens[:n]
        vlens = lens[n:]
        pos += 8 * n
        if self.attributes & ATTR_OFFSET_DELTAS:
            pos += 4 * n
        kpos = list(accumulate(klens, initial=pos))
        keys = list(map(buf.__getitem__, map(slice, kpos, kpos[1:])))
        if self.attributes & ATTR_TOMBSTONES:
            vlens = [v if v > 0 else 0 for v in vlens]
        vpos = list(accumulate(vlens, initial=kpos[-1]))
        values: list = list(map(buf.__getitem__, map(slice, vpos, vpos[1:])))
        if self.attributes & ATTR_TOMBSTONES:
            for i, v in enumerate(lens[n:]):
                if v < 0:
                    values[i] = None
        return keys, values

    def merge_older_into(self, buf: bytes, latest: dict[bytes, bytes | None],
                         merged_key_runs: KeyRuns | None = None) -> None:
        """Add this batch's records to `latest` for the keys it doesn't hold yet (replay newest first).

        Replaying newest-first, a record only matters if no newer record has
        its key, so values are cut out only for those keys: on a log that
        rewrites the same keys over and over, most records never get past
        their key.  Within the batch the last record of a key wins.

        `merged_key_runs`, shared by the batches merged into one `latest`,
        passes over a batch whose keys repeat an earlier batch's (see `KeyRuns`).
        """
        n = self.record_count
        pos = self.position + HEADER_SIZE
        klens = _ints(n).unpack_from(buf, pos)
        keys_start = pos + 8 * n
        if self.attributes & ATTR_OFFSET_DELTAS:
            keys_start += 4 * n
        if merged_key_runs is not None and merged_key_runs.seen(buf[pos : pos + 4 * n],
                                                                buf[keys_start : keys_start + sum(klens)]):
            return
        kpos = list(accumulate(klens, initial=keys_start))
        keys = list(map(buf.__getitem__, map(slice, kpos, kpos[1:])))
        if latest and all(map(latest.__contains__, keys)):
            return  # the common case on a log that rewrites the same keys: nothing new here
        index = dict(zip(keys, range(n)))
        fresh = list(filterfalse(latest.__contains__, index)) if latest else list(index)
        if not fresh:
            return
        rows = list(map(index.__getitem__, fresh))
        if self.attributes & ATTR_TOMBSTONES:
            _, values = self.keys_values(buf)
            latest.update(zip(fresh, map(values.__getitem__, rows)))
            return
        vpos = list(accumulate(_ints(n).unpack_from(buf, pos + 4 * n), initial=kpos[-1]))
        starts = map(vpos.__getitem__, rows)
        ends = map(vpos.__getitem__, map(_NEXT, rows))
        latest.update(zip(fresh, map(buf.__getitem__, map(slice, starts, ends))))

    def offsets(self, buf: bytes) -> Sequence[int]:
        """The log offset of each record."""
        if self.attributes & ATTR_OFFSET_DELTAS:
            n = self.record_count
            deltas = _ints(n).unpack_from(buf, self.position + HEADER_SIZE + 8 * n)
            return list(map(int.__add__, repeat(self.base_offset, n), deltas))
        return range(self.base_offset, self.base_offset + self.record_count)


def read_batch(buf: bytes, pos: int, min_offset: int) -> BatchView:
    """Validate the batch at `pos` and return its view; BatchError if it is not a whole, valid batch.

    `min_offset` is the smallest base offset this batch may have (offsets
    only grow).  A batch that runs past the end of the buffer is `torn`; so is
    a header of zeros (what a filesystem leaves when it grew the file but the
    data never reached the disk).
    """
    size = len(buf)
    if pos + HEADER_SIZE > size:
        raise BatchError(pos, f"incomplete batch header ({size - pos} of {HEADER_SIZE} bytes)", torn=True)
    base, blen, crc, magic, attrs, last_delta, ts, n = _HEADER.unpack_from(buf, pos)
    end = pos + LENGTH_FIELD_END + blen
    if blen == 0 and base == 0 and crc == 0:
        raise BatchError(pos, "zero-filled bytes where a batch should start", torn=False, zero_filled=True)
    if blen < HEADER_SIZE - LENGTH_FIELD_END or n < 1 or n > blen // 8:
        raise BatchError(pos, f"impossible batch length {blen} / record count {n}", torn=end > size)
    if end > size:
        raise BatchError(pos, f"batch of {blen + LENGTH_FIELD_END} bytes runs past the end ({size - pos} left)",
                         torn=True)
    actual = crc32c.crc32c(buf[pos + CRC_START : end]) if type(buf) is bytes else crc32c.crc32c(
        memoryview(buf)[pos + CRC_START : end]
    )
    if actual != crc:
        raise BatchError(pos, f"checksum mismatch (stored {crc:#010x}, computed {actual:#010x})", torn=False,
                         bad_checksum=True)
    if magic != MAGIC:
        raise BatchError(pos, f"unknown batch magic {magic}", torn=False)
    if base < min_offset:
        raise BatchError(pos, f"offset {base} is not after the previous batch (expected >= {min_offset})",
                         torn=False)
    arrays = 12 * n if attrs & ATTR_OFFSET_DELTAS else 8 * n
    if HEADER_SIZE + arrays > end - pos:
        raise BatchError(pos, f"record count {n} does not fit the batch", torn=False)
    lens_at = pos + HEADER_SIZE
    lens = _ints(2 * n).unpack_from(buf, lens_at)
    data_size = end - pos - HEADER_SIZE - arrays
    if bytes(buf[lens_at : lens_at + 8 * n : 4]).isascii():  # no length has its sign bit set: no tombstones
        if sum(lens) != data_size:
            raise BatchError(pos, "record lengths do not add up to the batch length", torn=False)
    elif not attrs & ATTR_TOMBSTONES:
        raise BatchError(pos, "tombstone in a batch not marked as having tombstones", torn=False)
    elif min(lens[:n]) < 0 or min(lens[n:]) < -1 or sum(lens[:n]) + sum(v for v in lens[n:] if v > 0) != data_size:
        raise BatchError(pos, "record lengths do not add up to the batch length", torn=False)
    return BatchView(pos, end, base, base + last_delta, attrs, ts, n)


def iter_batches(buf: bytes, start_offset: int = 0) -> Iterator[BatchView]:
    """Every valid batch of a segment buffer in order; BatchError at the first invalid one."""
    pos = 0
    min_offset = start_offset
    size = len(buf)
    while pos < size:
        view = read_batch(buf, pos, min_offset)
        yield view
        pos = view.end
        min_offset = view.last_offset + 1
