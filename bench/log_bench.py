"""Offsets-log benchmarks: replay speed, memory per committed offset, durable commit throughput.

    python bench/log_bench.py --records 10000000 --keys 1000000 --runs 3
    python bench/log_bench.py --skip-load --commit-seconds 5

* **load**: a log of `--records` offset-commit records over `--keys` distinct
  (group, topic, partition) keys, spread over 50 partitions by the
  FindCoordinator rule, is replayed by a fresh process, (a) into raw live
  records only ("log"), and (b) all the way into typed records in an
  `OffsetsTable` ("full", what the coordinator does).  Reported: records/s
  over all records in the log, and RSS growth per live offset after the full
  load (the process holds exactly the table then).
* **commit**: 64 concurrent committers (in `--groups` groups, default one
  each), each appending one offset-commit record at a time and waiting for
  it, for `--commit-seconds`, with flush policy `always` and `never` in the
  same run.  Committers of one group share its offsets partition, hence its
  batches and fsyncs; one group each is the case with the least sharing.

Every number is the median of `--runs` runs; each load run is its own process.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cohort.coordinator.log import OffsetsLog  # noqa: E402
from cohort.coordinator.log.batch import encode_batch  # noqa: E402
from cohort.coordinator.log.segments import partition_dir, segment_name  # noqa: E402
from cohort.coordinator.groups.offsets.table import OffsetAndMetadata, OffsetsTable  # noqa: E402
from cohort.coordinator.records.types import OffsetCommitRecord, OffsetCommitRun, decode_for_load, encode_record  # noqa: E402
from cohort.protocol.partitioning import partition_for  # noqa: E402

PARTITIONS = 50
BATCH = 500
TOPICS = 10
PARTITIONS_PER_TOPIC = 10


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def key_space(keys: int) -> list[tuple[str, str, int]]:
    """`keys` (group, topic, partition)s: groups of 10 topics x 10 partitions."""
    per_group = TOPICS * PARTITIONS_PER_TOPIC
    out = []
    for g in range((keys + per_group - 1) // per_group):
        for t in range(TOPICS):
            for p in range(PARTITIONS_PER_TOPIC):
                out.append((f"consumer-group-{g}", f"topic-{t}", p))
    return out[:keys]


def build_log(data_dir: Path, records: int, keys: int) -> None:
    """Write `records` commits round-robin over the key space (each round overwrites every key).

    The segment files are written with the log's own batch encoder in batches
    of `BATCH` records (what group commit produces under load), straight to
    disk: building 10 M records through `append` would take longer than the
    measurement itself.
    """
    space = key_space(keys)
    by_partition: dict[int, list[bytes]] = {}
    for group, topic, p in space:
        k, _ = encode_record(OffsetCommitRecord(group, topic, p, 0))
        by_partition.setdefault(partition_for(group, PARTITIONS), []).append(k)
    files = {}
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    for part in range(PARTITIONS):
        pdir = partition_dir(data_dir, part)
        pdir.mkdir(parents=True, exist_ok=True)
        files[part] = open(pdir / segment_name(0), "wb")
    written = 0
    rnd = 0
    while written < records:
        value = struct.pack(">hqihq", 3, 1_000_000 + rnd, 7, 0, 1_700_000_000_000 + rnd)
        for part, ks in by_partition.items():
            for i in range(0, len(ks), BATCH):
                chunk = ks[i : i + BATCH][: records - written]
                if not chunk:
                    break
                files[part].write(encode_batch(next_offset[part], 0, chunk, [value] * len(chunk)))
                next_offset[part] += len(chunk)
                written += len(chunk)
        rnd += 1
    for f in files.values():
        f.close()


async def load_once(data_dir: Path, mode: str) -> dict:
    """One replay: "log" = live records only; "full" = into an OffsetsTable, as the coordinator does."""
    gc.collect()
    base_rss = rss_bytes()
    table = OffsetsTable()
    live_count = 0

    def on_loaded(partition: int, live: list[tuple[bytes, bytes]]) -> None:
        nonlocal live_count
        live_count += len(live)
        if mode == "full":
            for item in decode_for_load(live):
                if type(item) is OffsetCommitRun:
                    table.put_run(item)
                elif type(item) is OffsetCommitRecord:
                    table.put(item.group, item.topic, item.partition, OffsetAndMetadata(
                        item.offset, item.leader_epoch, item.metadata, item.commit_timestamp, item.expire_timestamp))

    log = OffsetsLog(data_dir, num_partitions=PARTITIONS, cleaner_backoff_ms=3_600_000)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await log.open(on_loaded)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    await log.close()
    gc.collect()
    return {"mode": mode, "seconds": elapsed, "cpu_seconds": cpu, "live": live_count, "table": len(table),
            "rss_growth": rss_bytes() - base_rss}


def count_records(data_dir: Path) -> int:
    from cohort.coordinator.log import list_segments
    from cohort.coordinator.log.batch import iter_batches

    total = 0
    for _, path in list_segments(data_dir):
        total += sum(v.record_count for v in iter_batches(path.read_bytes()))
    return total


async def commit_throughput(policy: str, seconds: float, committers: int = 64, writer_threads: int = 16,
                            groups: int = 64) -> float:
    data_dir = Path(tempfile.mkdtemp(prefix="cohort-commit-bench-"))
    try:
        log = OffsetsLog(data_dir, num_partitions=PARTITIONS, flush_policy=policy, writer_threads=writer_threads)
        await log.open()
        stop = time.perf_counter() + seconds
        counts = [0] * committers

        async def committer(i: int) -> None:
            group = f"bench-group-{i % groups}"
            part = partition_for(group, PARTITIONS)
            n = 0
            while time.perf_counter() < stop:
                await log.append(part, [encode_record(OffsetCommitRecord(group, "topic", i, n, -1, "", 0))])
                n += 1
            counts[i] = n

        t0 = time.perf_counter()
        await asyncio.gather(*[committer(i) for i in range(committers)])
        elapsed = time.perf_counter() - t0
        await log.close()
        return sum(counts) / elapsed
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=None, help="distinct keys (default: min(records, 1M))")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--commit-seconds", type=float, default=5.0)
    ap.add_argument("--groups", type=int, default=64,
                    help="the 64 committers belong to this many groups (default 64: one each, the least batching)")
    ap.add_argument("--writer-threads", type=int, default=16, help="OffsetsLog writer threads (default 16)")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--skip-commit", action="store_true")
    ap.add_argument("--data-dir", type=Path, help="keep the generated log here (default: a temp dir)")
    ap.add_argument("--_load-once", dest="load_once", choices=["log", "full"], help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.load_once:
        print(json.dumps(asyncio.run(load_once(args.data_dir, args.load_once))))
        return 0

    if not args.skip_load:
        keys = args.keys or min(args.records, 1_000_000)
        data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="cohort-load-bench-"))
        try:
            if not any(data_dir.glob("__consumer_offsets-*")):
                t0 = time.perf_counter()
                build_log(data_dir, args.records, keys)
                print(f"built a log of {args.records} records / {keys} keys in {time.perf_counter() - t0:.1f} s",
                      flush=True)
            total = count_records(data_dir)
            for mode in ("log", "full"):
                runs = []
                for _ in range(args.runs):
                    out = subprocess.run([sys.executable, __file__, "--_load-once", mode, "--data-dir", str(data_dir)],
                                         capture_output=True, text=True, check=True)
                    runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                secs = statistics.median(r["seconds"] for r in runs)
                cpu = statistics.median(r["cpu_seconds"] for r in runs)
                line = (f"load[{mode}]: {total} records, {runs[0]['live']} live keys: median {secs:.2f} s wall "
                        f"= {total / secs / 1e6:.2f} M records/s ({cpu:.2f} s CPU = {total / cpu / 1e6:.2f} M/s "
                        f"per CPU-second; wall runs: " + ", ".join(f"{r['seconds']:.2f}" for r in runs) + ")")
                if mode == "full":
                    per = statistics.median(r["rss_growth"] / max(1, r["table"]) for r in runs)
                    line += f"; RSS growth {per:.0f} B per committed offset held"
                print(line, flush=True)
        finally:
            if args.data_dir is None:
                shutil.rmtree(data_dir, ignore_errors=True)

    if not args.skip_commit:
        results: dict[str, list[float]] = {"always": [], "never": []}
        for _ in range(args.runs):
            for policy in ("always", "never"):
                results[policy].append(asyncio.run(commit_throughput(
                    policy, args.commit_seconds, writer_threads=args.writer_threads, groups=args.groups)))
        a = statistics.median(results["always"])
        n = statistics.median(results["never"])
        # Each always run is paired with the never run right after it: the machine's drift hits both.
        pairs = [x / y for x, y in zip(results["always"], results["never"])]
        print(f"commit throughput, 64 concurrent committers in {args.groups} groups: always {a:.0f}/s, never {n:.0f}/s "
              f"(always = {a / n * 100:.0f} % of never; per run pair "
              + ", ".join(f"{r:.2f}" for r in pairs) + f", median {statistics.median(pairs):.2f}); runs always="
              + ", ".join(f"{x:.0f}" for x in results["always"]) + " never="
              + ", ".join(f"{x:.0f}" for x in results["never"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
