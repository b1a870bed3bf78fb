"""Small shared pieces for the offsets-log tests: a controllable clock, open/replay helpers, a crash copy."""
from __future__ import annotations

import shutil
from pathlib import Path

from bounded_wait import wait_until_async

from cohort.coordinator.log import OffsetsLog, list_segments
from cohort.coordinator.log.journal import read_checkpoint
from cohort.coordinator.log.segments import partition_dir, segment_base, segment_name
from cohort.coordinator.records.types import OffsetCommitRecord, encode_record


class FakeClock:
    """time.time() under the test's control."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def commit(group: str, topic: str, partition: int, offset: int, metadata: str = "") -> tuple[bytes, bytes]:
    return encode_record(OffsetCommitRecord(group, topic, partition, offset, -1, metadata, 1))


async def open_log(data_dir: Path, **kwargs) -> tuple[OffsetsLog, dict[bytes, bytes]]:
    """Open a log and return it with its replayed live records of every partition."""
    live: dict[bytes, bytes] = {}
    kwargs.setdefault("num_partitions", 1)
    log = OffsetsLog(data_dir, **kwargs)
    await log.open(lambda p, records: live.update(records))
    return log, live


async def reopen(data_dir: Path, **kwargs) -> dict[bytes, bytes]:
    """Open a log, close it again (its partition directories are locked while it is open), return what it replayed."""
    log, live = await open_log(data_dir, **kwargs)
    await log.close()
    return live


async def wait_for(predicate, timeout: float = 10.0) -> None:
    """Wait until `predicate()` is true; fail the test after `timeout` seconds."""
    await wait_until_async(predicate, timeout, getattr(predicate, "__qualname__", "the condition"), interval=0.001)


def crash_copy(live_dir, crash_dir) -> None:
    """The files as a crash would find them right now (the log keeps running on the original)."""
    shutil.copytree(live_dir, crash_dir, ignore=shutil.ignore_patterns(".lock", "*.tmp"))  # a mark being written


def garble_past_marks(data_dir) -> int:
    """What a power cut can leave past the checkpoint: garbage instead of the unsynced tail, and segments
    started after it gone.  Returns how many bytes were garbled."""
    marks = read_checkpoint(data_dir)
    garbled = 0
    for p, mark in marks.items():
        for _, seg in [(q, s) for q, s in list_segments(data_dir) if q == p]:
            if segment_base(seg) > mark.segment:
                seg.unlink()
        active = partition_dir(data_dir, p) / segment_name(mark.segment)
        size = active.stat().st_size
        if size > mark.size:
            with open(active, "r+b") as f:
                f.seek(mark.size)
                f.write(bytes([0xA5]) * (size - mark.size))
            garbled += size - mark.size
    return garbled
