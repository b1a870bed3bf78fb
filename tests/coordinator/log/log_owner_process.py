"""A process owning some partitions of a shared data dir, appending until killed (for the kill -9 tests).

    python log_owner_process.py DATA_DIR NUM_PARTITIONS P,P,...

Each owned partition gets its own appender: group ``g<p>`` commits offset n of ``t-0`` (n going on
from the offset the partition was loaded with).  Every
acknowledged append is printed as ``<partition> <counter>`` (flushed at once), after "ready".
"""
from __future__ import annotations

import asyncio
import sys

from cohort.coordinator.log import OffsetsLog
from cohort.coordinator.records.types import OffsetCommitRecord, decode_record, encode_record


def commit(p: int, n: int) -> tuple[bytes, bytes]:
    return encode_record(OffsetCommitRecord(f"g{p}", "t", 0, n, -1, "", 1))


def committed(p: int, live: dict[bytes, bytes]) -> int:
    """The offset partition p's live records hold for its group (0 if none)."""
    key = commit(p, 0)[0]
    return decode_record(key, live[key]).offset if key in live else 0


async def main(data_dir: str, num_partitions: int, owned: list[int]) -> None:
    log = OffsetsLog(data_dir, num_partitions=num_partitions, partitions=owned, segment_bytes=4096,
                     journal_checkpoint_bytes=16384)
    start: dict[int, int] = {}

    def loaded(p: int, live: list[tuple[bytes, bytes]]) -> None:
        start[p] = committed(p, dict(live))

    await log.open(loaded)
    print("ready", flush=True)

    async def appender(p: int) -> None:
        n = start[p]
        while True:
            n += 1
            await log.append(p, [commit(p, n)])
            sys.stdout.write(f"{p} {n}\n")
            sys.stdout.flush()

    await asyncio.gather(*(appender(p) for p in owned))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3].split(",")]))
