"""Small shared pieces for the offsets-log tests: a controllable clock and open/replay helpers."""
from __future__ import annotations

from pathlib import Path

from coordinator.log import OffsetsLog
from coordinator.records import OffsetCommitRecord, encode_record


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
