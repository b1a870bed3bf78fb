"""Restart time against commit history: does a restart read the live offsets, or everything ever committed?

    python bench/restart_history.py --commits 20000000 --keys 1000000 --runs 3

Hardening issue, item 18. A log of `--commits` offset commits over `--keys` distinct
(group, topic, partition) keys, spread over the 50 partitions by the FindCoordinator rule,
is written through the storage engine (flush policy `never`: the fill is not what is
measured) with the cleaner running as in production, then closed. Each restart is a fresh
process that opens the log (recovery + replay into live records) and reports the time.

Two variants in the same run, each on its own log:
* `size-roll`: the active segment rolls only at segment.bytes (100 MiB), as before the fix;
* `dirty-roll`: it also rolls once it holds twice what its partition's compacted segments held.
Reported per variant: bytes and records on disk at restart, and the median restart time of `--runs`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cohort.coordinator.log import OffsetsLog, list_segments  # noqa: E402
from cohort.coordinator.log import state as log_state  # noqa: E402
from cohort.coordinator.records.types import encode_offset_commit  # noqa: E402
from cohort.protocol.partitioning import partition_for  # noqa: E402

GROUPS = 1000
TOPIC = "orders"


def use_variant(variant: str) -> None:
    if variant == "size-roll":  # what the engine did before: no roll below segment.bytes
        log_state.ROLL_MIN_BYTES = 1 << 62


async def fill(data_dir: Path, commits: int, keys: int, seed: int) -> None:
    partitions_per_group = max(1, keys // GROUPS)
    log = OffsetsLog(data_dir, flush_policy="never", cleaner_backoff_ms=2000, fsync_process=False)
    await log.open()
    owner = [partition_for(f"group-{g}") for g in range(GROUPS)]
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    batch = 400
    done = 0
    while done < commits:
        by_partition: dict[int, list] = {}
        for i in range(min(batch * 50, commits - done)):
            g = rng.randrange(GROUPS)
            by_partition.setdefault(owner[g], []).append(encode_offset_commit(
                f"group-{g}", TOPIC, rng.randrange(partitions_per_group), done + i, -1, "", now, -1))
        await asyncio.gather(*(log.append(p, records) for p, records in by_partition.items()))
        done += sum(len(r) for r in by_partition.values())
    await log.close()


async def restart(data_dir: Path) -> dict:
    started = time.perf_counter()
    live = 0

    def loaded(_partition, records) -> None:
        nonlocal live
        live += len(records)

    log = OffsetsLog(data_dir, fsync_process=False)
    await log.open(loaded)
    took = time.perf_counter() - started
    await log.close()
    return {"restart_s": round(took, 3), "live": live}


def on_disk(data_dir: Path) -> dict:
    from cohort.coordinator.log.batch import iter_batches

    size = records = 0
    for _, path in list_segments(data_dir):
        data = path.read_bytes()
        size += len(data)
        records += sum(b.record_count for b in iter_batches(data))
    return {"bytes": size, "records": records}


def child(args) -> None:
    use_variant(args.variant)
    if args.action == "fill":
        asyncio.run(fill(Path(args.data_dir), args.commits, args.keys, args.seed))
        print(json.dumps(on_disk(Path(args.data_dir))))
    else:
        print(json.dumps(asyncio.run(restart(Path(args.data_dir)))))


def run_child(*argv: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", *argv], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=20_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--action", choices=("fill", "restart"), help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="dirty-roll", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    results = {}
    root = Path(tempfile.mkdtemp(prefix="cohort-restart-history-"))
    try:
        for variant in ("size-roll", "dirty-roll"):
            data_dir = root / variant
            t0 = time.perf_counter()
            disk = run_child("--action", "fill", "--variant", variant, "--data-dir", str(data_dir),
                             "--commits", str(args.commits), "--keys", str(args.keys), "--seed", str(args.seed))
            fill_s = time.perf_counter() - t0
            runs = [run_child("--action", "restart", "--variant", variant, "--data-dir", str(data_dir))
                    for _ in range(args.runs)]
            results[variant] = {**disk, "fill_s": round(fill_s, 1), "live": runs[0]["live"],
                                "restart_s": [r["restart_s"] for r in runs],
                                "restart_median_s": statistics.median(r["restart_s"] for r in runs)}
            print(variant, json.dumps(results[variant]), flush=True)
            shutil.rmtree(data_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratio = results["size-roll"]["restart_median_s"] / results["dirty-roll"]["restart_median_s"]
    results["restart_speedup"] = round(ratio, 2)
    print(f"restart: size-roll {results['size-roll']['restart_median_s']} s, dirty-roll "
          f"{results['dirty-roll']['restart_median_s']} s ({ratio:.2f}x faster)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
