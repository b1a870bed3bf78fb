"""recover_cpu.py DATA_DIR: CPU time of recovering every offsets partition of a (copied!) data dir, one thread.

Recovery may cut partitions back to their marks: run it on a copy. This checkout's recovery only
(`recover_partition`, the code `OffsetsLog` runs on its writer thread); `--profile` prints cProfile's top entries.
"""
import cProfile
import pstats
import sys
import time
from pathlib import Path

from cohort.coordinator.log.recovery import JournalScans, effective_mark, recover_partition


def recover_all(data_dir: Path, partitions: int = 50) -> None:
    scans = JournalScans(partitions)
    for i in range(partitions):
        pdir = data_dir / f"__consumer_offsets-{i}"
        recover_partition(data_dir, i, pdir, 100 * 1024 * 1024, effective_mark(data_dir, pdir, i), scans)


if __name__ == "__main__":
    data_dir = Path(sys.argv[1])
    if "--profile" in sys.argv:
        profile = cProfile.Profile()
        profile.runcall(recover_all, data_dir)
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
    else:
        started = time.process_time()
        recover_all(data_dir)
        print(f"recovery CPU: {(time.process_time() - started) * 1000:.0f} ms")
