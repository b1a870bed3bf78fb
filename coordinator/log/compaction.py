"""Compaction of closed segments: keep the latest record per key, drop old tombstones.

Kafka's log cleaner idea, for one partition directory:

1. Read every closed segment and note, per key, the offset of its latest record.
2. Rewrite the segments oldest first, keeping a record only if it is the latest
   for its key, or if its key starts with one of ``history_key_prefixes`` and
   it was appended less than ``history_retention_ms`` ago (the offset history:
   the caller names which keys keep one, e.g. offset commits); a latest record that is a tombstone is kept until
   ``delete_retention_ms`` after the time it was appended, then dropped too.
   Adjacent segments are merged while the result stays under ``segment_bytes``.
3. Each rewrite is crash-safe: write ``.cleaned`` → fsync → rename to ``.swap``
   → fsync dir → delete the old segments → rename to ``.log`` → fsync dir.
   Recovery finishes or discards a half-done rewrite (see `segments`).

Why oldest first: a record is only dropped when a newer record for its key
exists, or when it is an expired tombstone whose older values were dropped
in an earlier (older) rewrite.  So at every crash point the directory holds a
log whose replay gives the same state.

The active segment is never touched, so appends run undisturbed; the only
shared step is the segment list, swapped under the partition lock.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cohort.coordinator.log.batch import encode_batch
from cohort.coordinator.log.segments import (
    fsync_dir,
    recover_segment,
    segment_base,
    segment_name,
    swap_name,
)
from cohort.coordinator.log.file_modes import private_opener

_MAX_BATCH_RECORDS = 4096
_MAX_BATCH_BYTES = 1 << 20


@dataclass(slots=True)
class CompactionResult:
    segments_before: int = 0
    segments_after: int = 0
    records_before: int = 0
    records_after: int = 0
    tombstones_dropped: int = 0
    tombstones_kept: int = 0
    next_tombstone_expiry_ms: int | None = None  # when a kept tombstone becomes droppable
    removed: list[Path] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)


@dataclass(slots=True)
class _Rewritten:
    source: Path
    batches: list[bytes]
    size: int
    changed: bool


def compact_closed_segments(
    pdir: Path,
    closed: list[Path],
    end_offset: int,
    *,
    segment_bytes: int,
    delete_retention_ms: int,
    now_ms: int,
    history_retention_ms: int = 0,
    history_key_prefixes: tuple[bytes, ...] = (),
) -> CompactionResult:
    """Compact `closed` (oldest first); `end_offset` is the base offset of the segment after them."""
    result = CompactionResult(segments_before=len(closed))
    if not closed:
        return result
    # Pass 1: the offset of the latest record of every key.  Segments are read one at a
    # time (and again in pass 2) so memory holds one segment plus the key map.
    latest: dict[bytes, int] = {}
    min_offset = 0
    for path in closed:
        scan, buf, views = recover_segment(path, is_last=False, min_offset=min_offset)
        min_offset = scan.next_offset
        for v in views:
            keys, _ = v.keys_values(buf)
            latest.update(zip(keys, v.offsets(buf)))
        result.records_before += scan.records
        del buf, views

    rewritten: list[_Rewritten] = []
    min_offset = 0
    for path in closed:
        scan, buf, views = recover_segment(path, is_last=False, min_offset=min_offset)
        min_offset = scan.next_offset
        batches: list[bytes] = []
        chunk_k: list[bytes] = []
        chunk_v: list[bytes | None] = []
        chunk_o: list[int] = []
        chunk_bytes = 0
        chunk_ts = 0
        dropped = 0

        def flush_chunk() -> None:
            nonlocal chunk_k, chunk_v, chunk_o, chunk_bytes, chunk_ts
            if chunk_k:
                base = chunk_o[0]
                batches.append(encode_batch(base, chunk_ts, chunk_k, chunk_v, [o - base for o in chunk_o]))
            chunk_k, chunk_v, chunk_o, chunk_bytes, chunk_ts = [], [], [], 0, 0

        for v in views:
            keys, values = v.keys_values(buf)
            expired = now_ms - v.timestamp >= delete_retention_ms
            in_history = now_ms - v.timestamp < history_retention_ms and bool(history_key_prefixes)
            if in_history and chunk_k and chunk_ts != v.timestamp:
                flush_chunk()  # the history reads each record's append time: batches keep their own
            for key, value, offset in zip(keys, values, v.offsets(buf)):
                is_latest = latest[key] == offset
                if not is_latest and not (in_history and key.startswith(history_key_prefixes)):
                    dropped += 1
                    continue
                if is_latest and value is None:
                    if expired:
                        dropped += 1
                        result.tombstones_dropped += 1
                        continue
                    result.tombstones_kept += 1
                    due = v.timestamp + delete_retention_ms
                    if result.next_tombstone_expiry_ms is None or due < result.next_tombstone_expiry_ms:
                        result.next_tombstone_expiry_ms = due
                chunk_k.append(key)
                chunk_v.append(value)
                chunk_o.append(offset)
                chunk_ts = max(chunk_ts, v.timestamp)
                chunk_bytes += len(key) + (len(value) if value else 0) + 12
                if len(chunk_k) >= _MAX_BATCH_RECORDS or chunk_bytes >= _MAX_BATCH_BYTES:
                    flush_chunk()
        flush_chunk()
        rewritten.append(_Rewritten(path, batches, sum(map(len, batches)), dropped > 0))
        result.records_after += sum(v.record_count for v in views) - dropped

    # Group adjacent segments into runs that fit one segment, then replace each run.
    runs: list[list[_Rewritten]] = []
    size = 0
    for r in rewritten:
        if runs and size + r.size <= segment_bytes:
            runs[-1].append(r)
            size += r.size
        else:
            runs.append([r])
            size = r.size
    bases = [segment_base(p) for p in closed] + [end_offset]
    index = {p: i for i, p in enumerate(closed)}
    for run in runs:
        if len(run) == 1 and not run[0].changed:
            result.segments_after += 1
            continue
        first = segment_base(run[0].source)
        end = bases[index[run[-1].source] + 1]
        batches = [b for r in run for b in r.batches]
        sources = [r.source for r in run]
        if not batches:
            for src in sources:
                os.unlink(src)
            fsync_dir(pdir)
            result.removed.extend(sources)
            continue
        swap = pdir / swap_name(first, end)
        cleaned = pdir / (swap.name + ".cleaned")
        with open(cleaned, "wb", opener=private_opener) as f:
            for b in batches:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        os.replace(cleaned, swap)
        fsync_dir(pdir)
        for src in sources:
            os.unlink(src)
        target = pdir / segment_name(first)
        os.replace(swap, target)
        fsync_dir(pdir)
        result.removed.extend(sources)
        result.written.append(target)
        result.segments_after += 1
    return result
