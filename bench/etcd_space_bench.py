"""etcd database bytes per acknowledged commit: the store's transactions as they are, against the design before
(values in the earlier packed layout, every transaction rewriting each of its partitions' `w/<p>`).

    python -m bench.etcd_space_bench [--commits 8000] [--round 8] [--rounds 3] [--node] [--out DIR]

A local 3-member etcd (`bench.cluster`, no Cohort nodes, no compaction during the run). Each phase sends
transactions shaped like `EtcdStore`'s rounds (the guards of every partition in it, `--round` puts of
offset commits over 48 partitions, keys `o/<p>/bench-group-<g>/bench-topic/<i>`, increasing offsets, the
current time) until `--commits` are acknowledged, and reads the growth of etcd's database size (`dbSize`
of every member, after etcd's backend committed). The phases:

    log         values in the log's record format, owner guards only (the reference)
    earlier     values in the earlier packed layout (3-byte header, timestamps from 1970), owner guards only
    sequenced   the design before: the earlier layout, and each partition's w/<p> compared and rewritten
    fenced      the store now: values packed (`cluster/values.py`), w/<p> compared, never written

Phases alternate their order (A B C D, D C B A, ...); the report gives bytes per commit for each and the
medians.

`--node` measures the same through one `cohort serve --cluster` node instead (the code as it is, no
baseline): 16 kafka-python consumers, one group each, commit one partition of `space-topic` in turn
(synchronous commits), `--commits` a round.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import struct
import sys
import threading
import time
from pathlib import Path

from cohort.coordinator.cluster import keys, values
from cohort.coordinator.cluster.etcd import (
    EtcdClient,
    compare_create_revision,
    compare_mod_revision,
    op_put,
    op_put_bytes,
)
from cohort.coordinator.records.types import OffsetCommitRecord, encode_record

from bench.cluster import ClusterTarget
from bench.targets import REPO

PARTITIONS = 48
GROUPS = 400


def earlier_layout(key: bytes, value: bytes) -> bytes:
    """An offset commit value (version 3) as the earlier packed layout stored it: 0x80 | version, the bytes
    of offset and leader epoch, of commit and expire timestamp (a nibble each), then each integer plus one."""
    _, offset, epoch, length = struct.unpack_from(">hqih", value)
    (commit,) = struct.unpack_from(">q", value, 16 + length)
    o, e, c = offset + 1, epoch + 1, commit + 1
    lo, le, lc = ((n.bit_length() + 7) >> 3 for n in (o, e, c))
    return b"".join((bytes((0x83, lo << 4 | le, lc << 4)), o.to_bytes(lo, "big"), e.to_bytes(le, "big"),
                     c.to_bytes(lc, "big"), value[16:16 + length]))


ENCODINGS = {"log": lambda key, value: value, "earlier": earlier_layout, "sequenced": earlier_layout,
             "fenced": values.for_etcd}


async def db_sizes(client: EtcdClient) -> list[int]:
    return [m.db_size for m in await client.member_statuses(5.0)]


async def phase(client: EtcdClient, epochs: dict[int, int], fences: dict[int, int], encoding: str, commits: int,
                round_size: int, first_offset: int) -> dict:
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
            assert values.from_etcd(stored) == value
            value_bytes += len(stored)
            puts.append(op_put_bytes(key, stored))
            parts.add(p)
        guards = [compare_create_revision(keys.owner_key(p), epochs[p]) for p in sorted(parts)]
        if encoding in ("sequenced", "fenced"):
            guards += [compare_mod_revision(keys.write_fence_key(p), fences[p]) for p in sorted(parts)]
        if encoding == "sequenced":
            puts += [op_put_bytes(keys.write_fence_key(p), b"%d" % n) for p in sorted(parts)]
        held, revision, _ = await client.txn(guards, puts)
        assert held
        if encoding == "sequenced":
            fences.update((p, revision) for p in parts)
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
        epochs, fences = {}, {}
        for p in range(PARTITIONS):
            _, revision, _ = await client.txn([], [op_put(keys.owner_key(p), b"1", lease=lease)])
            epochs[p] = revision
            _, fences[p], _ = await client.txn([], [op_put(keys.write_fence_key(p), b"load")])
        # warm-up: every key exists, so both encodings only add history
        await phase(client, epochs, fences, "log", GROUPS * 8, round_size, 0)
        rows = []
        for r in range(rounds):
            order = tuple(ENCODINGS) if r % 2 == 0 else tuple(reversed(ENCODINGS))
            for encoding in order:
                row = await phase(client, epochs, fences, encoding, commits, round_size, (len(rows) + 1) * commits)
                row["round"] = r + 1
                rows.append(row)
                print(f"  round {r + 1} {encoding:>9}: {row['db_bytes_per_commit']:>6} etcd bytes/commit "
                      f"(value {row['value_bytes_per_commit']} bytes, {row['transactions']} transactions)", flush=True)
        return rows
    finally:
        await client.close()


def through_node(target: ClusterTarget, commits: int, rounds: int) -> list[dict]:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    async def sizes() -> list[int]:
        client = EtcdClient(target.etcd_endpoints, timeout_s=10)
        await client.connect()
        try:
            return await db_sizes(client)
        finally:
            await client.close()

    groups, partition = 16, TopicPartition("space-topic", 0)
    consumers = [KafkaConsumer(bootstrap_servers=f"127.0.0.1:{target.port}", group_id=f"space-group-{g}",
                               enable_auto_commit=False) for g in range(groups)]
    try:
        for consumer in consumers:  # warm-up: every key exists
            consumer.commit({partition: OffsetAndMetadata(0, "", -1)})
        rows = []
        for r in range(rounds):
            time.sleep(1.0)
            before = asyncio.run(sizes())
            each = commits // groups

            def commit(consumer, first: int = r * each) -> None:
                for n in range(first + 1, first + each + 1):
                    consumer.commit({partition: OffsetAndMetadata(n, "", -1)})

            threads = [threading.Thread(target=commit, args=(consumer,)) for consumer in consumers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            time.sleep(1.5)
            growth = [a - b for a, b in zip(asyncio.run(sizes()), before)]
            rows.append({"encoding": "node", "round": r + 1, "commits": each * groups, "db_growth_per_member": growth,
                         "db_bytes_per_commit": round(statistics.median(growth) / (each * groups), 1)})
            print(f"  round {r + 1} through a node: {rows[-1]['db_bytes_per_commit']:>6} etcd bytes/commit", flush=True)
        return rows
    finally:
        for consumer in consumers:
            consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.etcd_space_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=8000, help="commits per phase (default 8000)")
    parser.add_argument("--round", type=int, default=8, help="commits per transaction (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both phases (default 3)")
    parser.add_argument("--node", action="store_true", help="through a Cohort node (the code as it is)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    target = ClusterTarget(1 if args.node else 0, etcd_compaction=False)
    try:
        if args.node:
            rows = through_node(target, args.commits, args.rounds)
        else:
            rows = asyncio.run(run(target, args.commits, args.round, args.rounds))
        medians = {e: statistics.median(r["db_bytes_per_commit"] for r in rows if r["encoding"] == e)
                   for e in dict.fromkeys(r["encoding"] for r in rows)}
        result = {"rows": rows, "median_db_bytes_per_commit": medians, "target": target.describe()}
    finally:
        target.close()
    print("median etcd bytes per commit: " + ", ".join(
        f"{e} {m}" + (f" ({m / medians['log']:.2f}x the log format)" if "log" in medians else "")
        for e, m in medians.items()))
    out = args.out or REPO / "bench" / "results" / f"etcd-space-{int(time.time())}"
    out.mkdir(parents=True, exist_ok=True)
    name = "etcd_space_node.json" if args.node else "etcd_space.json"
    (out / name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
