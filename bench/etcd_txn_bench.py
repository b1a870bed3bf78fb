"""What an etcd transaction costs by its size: the numbers behind cluster mode's commit rounds.

    python -m bench.etcd_txn_bench [--sizes 1,4,16,64,128] [--concurrency 1,3,6] [--seconds 3] [--out DIR]

A local 3-member etcd (`bench.cluster`, no Cohort nodes). `--concurrency` writers (a node has one
transaction in flight, so 3 writers stand for 3 nodes) each send, back to back, transactions shaped
like `EtcdStore`'s rounds: one owner-epoch guard per partition in the round and one put of an
offset-commit record per commit. Per (size, writers): transactions/s, commits/s, latency p50/p99, and
the CPU seconds the etcd members spent per transaction and per commit.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from cohort.coordinator.cluster import keys
from cohort.coordinator.cluster.etcd import EtcdClient, compare_create_revision, op_put
from cohort.coordinator.records.types import OffsetCommitRecord, encode_record

from bench.cluster import ClusterTarget
from bench.stats import read_cpu_seconds
from bench.targets import REPO

PARTITIONS = 48  # partitions a round spreads over (a node owns about 17 of 50 in a 3-node cluster)


async def measure(target: ClusterTarget, size: int, writers: int, seconds: float) -> dict:
    client = EtcdClient(target.etcd_endpoints, timeout_s=10)
    await client.connect()
    try:
        epochs = {}
        lease, _ = await client.grant(600)
        for p in range(PARTITIONS):
            key = keys.owner_key(p)
            _, revision, _ = await client.txn([], [op_put(key, b"1", lease=lease)])
            kvs, _, _ = await client.range(key)
            epochs[p] = kvs[0].create_revision
        latencies: list[float] = []
        commits = 0

        async def writer(w: int) -> None:
            nonlocal commits
            n = 0
            while time.perf_counter() < stop_at:
                parts = [(w * 997 + n * size + i) % PARTITIONS for i in range(size)]
                guards = [compare_create_revision(keys.owner_key(p), epochs[p]) for p in sorted(set(parts))]
                puts = []
                for i, p in enumerate(parts):
                    record_key, value = encode_record(OffsetCommitRecord(f"g{w}-{i}", "events", 0, n))
                    puts.append(op_put(keys.etcd_key(p, record_key), value))
                started = time.perf_counter()
                held, _, _ = await client.txn(guards, puts)
                assert held
                latencies.append(time.perf_counter() - started)
                commits += size
                n += 1

        pids = [m.process.pid for m in target.etcd]
        cpu_before = sum(read_cpu_seconds(pid) for pid in pids)
        stop_at = time.perf_counter() + seconds
        began = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        wall = time.perf_counter() - began
        cpu = sum(read_cpu_seconds(pid) for pid in pids) - cpu_before
        latencies.sort()
        txns = len(latencies)
        return {"ops_per_txn": size, "writers": writers, "txns": txns, "txn_per_s": round(txns / wall, 1),
                "commits_per_s": round(commits / wall, 1),
                "p50_ms": round(statistics.median(latencies) * 1000, 2),
                "p99_ms": round(latencies[min(txns - 1, int(txns * 0.99))] * 1000, 2),
                "etcd_cpu_ms_per_txn": round(cpu / txns * 1000, 3),
                "etcd_cpu_us_per_commit": round(cpu / commits * 1e6, 1)}
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.etcd_txn_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,16,64,128")
    parser.add_argument("--concurrency", default="1,3,6")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    target = ClusterTarget(0)
    rows = []
    try:
        for writers in map(int, args.concurrency.split(",")):
            for size in map(int, args.sizes.split(",")):
                row = asyncio.run(measure(target, size, writers, args.seconds))
                rows.append(row)
                print(f"  {size:>3} ops/txn × {writers} writers: {row['txn_per_s']:>7} txn/s "
                      f"{row['commits_per_s']:>8} commits/s  p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  "
                      f"etcd CPU {row['etcd_cpu_ms_per_txn']} ms/txn, {row['etcd_cpu_us_per_commit']} µs/commit",
                      flush=True)
        result = {"rows": rows, "target": target.describe()}
    finally:
        target.close()
    out = args.out or REPO / "bench" / "results" / f"etcd-txn-{int(time.time())}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "etcd_txn.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {out / 'etcd_txn.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
