"""etcd database bytes per acknowledged commit: offset commit values as the log has them, packed, and packed
with the store's per-partition write sequence (`w/<p>`, one more put per partition of a transaction).

    python -m bench.etcd_space_bench [--commits 20000] [--round 8] [--rounds 3] [--out DIR]

A local 3-member etcd (`bench.cluster`, no Cohort nodes, no compaction during the run). Each phase sends
transactions shaped like `EtcdStore`'s rounds (an owner-epoch guard per partition, `--round` puts of
offset commits over 48 partitions, keys `o/<p>/bench-group-<g>/bench-topic/<i>`, increasing offsets,
the current time; `sequenced` adds the `w/<p>` put of every partition in the transaction, as the store
does) until `--commits` are acknowledged, and reads the growth of etcd's database size
(`dbSize` of every member, after etcd's backend committed). Phases alternate which encoding goes first
(A B, B A, ...); the report gives bytes per commit for each and the medians.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from cohort.coordinator.cluster import keys, values
from cohort.coordinator.cluster.etcd import EtcdClient, compare_create_revision, op_put, op_put_bytes
from cohort.coordinator.records.types import OffsetCommitRecord, encode_record

from bench.cluster import ClusterTarget
from bench.targets import REPO

PARTITIONS = 48
GROUPS = 400
ENCODINGS = {"log": lambda key, value: value, "packed": values.for_etcd, "sequenced": values.for_etcd}


async def db_sizes(client: EtcdClient) -> list[int]:
    return [m.db_size for m in await client.member_statuses(5.0)]


async def phase(client: EtcdClient, epochs: dict[int, int], encoding: str, commits: int, round_size: int,
                first_offset: int) -> dict:
    encode = ENCODINGS[encoding]
    await asyncio.sleep(0.3)  # etcd's backend commits every 100 ms: start from a settled size
    before = await db_sizes(client)
    _, start_revision, _ = await client.txn([], [])
    done, n, value_bytes = 0, 0, 0
    while done < commits:
        puts, parts = [], set()
        for i in range(round_size):
            g = (n * round_size + i) % GROUPS
            p = g % PARTITIONS
            record_key, value = encode_record(OffsetCommitRecord(f"bench-group-{g}", "bench-topic", i % 8,
                                                                 first_offset + n, commit_timestamp=int(time.time() * 1000)))
            key = keys.etcd_key(p, record_key)
            stored = encode(key, value)
            value_bytes += len(stored)
            puts.append(op_put_bytes(key, stored))
            parts.add(p)
        if encoding == "sequenced":
            puts += [op_put_bytes(keys.write_sequence_key(p), b"%d" % n) for p in sorted(parts)]
        held, _, _ = await client.txn([compare_create_revision(keys.owner_key(p), epochs[p]) for p in sorted(parts)],
                                      puts)
        assert held
        done += round_size
        n += 1
    await asyncio.sleep(1.0)
    after = await db_sizes(client)
    _, end_revision, _ = await client.txn([], [])
    growth = [a - b for a, b in zip(after, before)]
    return {"encoding": encoding, "commits": done, "transactions": n,
            "revisions": end_revision - start_revision - 1,
            "value_bytes_per_commit": round(value_bytes / done, 1),
            "db_bytes_per_commit": round(statistics.median(growth) / done, 1), "db_growth_per_member": growth}


async def run(target: ClusterTarget, commits: int, round_size: int, rounds: int) -> list[dict]:
    client = EtcdClient(target.etcd_endpoints, timeout_s=10)
    await client.connect()
    try:
        lease, _ = await client.grant(3600)
        epochs = {}
        for p in range(PARTITIONS):
            _, revision, _ = await client.txn([], [op_put(keys.owner_key(p), b"1", lease=lease)])
            epochs[p] = revision
        # warm-up: every key exists, so both encodings only add history
        await phase(client, epochs, "log", GROUPS * 8, round_size, 0)
        rows = []
        for r in range(rounds):
            order = tuple(ENCODINGS) if r % 2 == 0 else tuple(reversed(ENCODINGS))
            for encoding in order:
                row = await phase(client, epochs, encoding, commits, round_size, (len(rows) + 1) * commits)
                row["round"] = r + 1
                rows.append(row)
                print(f"  round {r + 1} {encoding:>6}: {row['db_bytes_per_commit']:>6} etcd bytes/commit "
                      f"(value {row['value_bytes_per_commit']} bytes, {row['transactions']} transactions)", flush=True)
        return rows
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.etcd_space_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=20000, help="commits per phase (default 20000)")
    parser.add_argument("--round", type=int, default=8, help="commits per transaction (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both phases (default 3)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    target = ClusterTarget(0, etcd_compaction=False)
    try:
        rows = asyncio.run(run(target, args.commits, args.round, args.rounds))
        medians = {e: statistics.median(r["db_bytes_per_commit"] for r in rows if r["encoding"] == e)
                   for e in ENCODINGS}
        result = {"rows": rows, "median_db_bytes_per_commit": medians, "target": target.describe()}
    finally:
        target.close()
    print(f"median etcd bytes per commit: log format {medians['log']}, packed {medians['packed']} "
          f"({medians['packed'] / medians['log']:.2f}x), packed with the write sequence {medians['sequenced']} "
          f"({medians['sequenced'] / medians['log']:.2f}x)")
    out = args.out or REPO / "bench" / "results" / f"etcd-space-{int(time.time())}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "etcd_space.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {out / 'etcd_space.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
