"""Cluster mode under kill -9: how long an affected group waits, and that nothing acknowledged is lost.

    python -m bench.failover failover   [--kills 20] [--ttl-ms 2000] [--out DIR]
    python -m bench.failover durability [--kills 50] [--clients 16] [--ttl-ms 2000] [--out DIR]

`failover`: three committers, each on a group coordinated by a different node of a 3-node cluster
(`bench.cluster`), commit in a loop. Each round kills -9 one node and measures, for the committer
whose group it coordinated, the time from the kill to the first acknowledgement of a commit sent
after the kill; a watcher of etcd notes when the group's partition got its new owner and when that
owner published it loaded, which splits the wait into takeover, load and client. The node is then
restarted and takes its share back by handoff before the next round.

`durability`: `--clients` committers on as many groups, each committing ever larger offsets, while
nodes are killed -9 and restarted one after another. The checker then reads etcd's whole history
of the offset keys (compaction is off for this run): every acknowledged commit must be in it, and
OffsetFetch must return each group's last acknowledged offset or a later one it sent.

Committers behave like Kafka clients: on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, REQUEST_TIMED_OUT or a lost connection they back off `--backoff-ms`
(default 50, librdkafka's retry.backoff.ms is 100) and ask FindCoordinator again.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from cohort.coordinator.cluster.ownership import preferred_owner
from cohort.protocol.messages import FindCoordinatorRequest, OffsetCommitRequest, OffsetFetchRequest
from cohort.protocol.partitioning import partition_for

from bench.cluster import ClusterTarget
from bench.targets import REPO
from bench.wire import KafkaSession, code_name, error_codes
from bench.workloads.offsets import COMMIT_VERSION, FETCH_VERSION, fetch_request, simple_commit

NUM_PARTITIONS = 50


class _Retry(Exception):
    pass


@dataclass
class GroupCommitter:
    """One client committing to one group in a closed loop, rediscovering its coordinator on errors."""

    brokers: list[tuple[str, int]]
    group: str
    backoff_s: float = 0.05
    request_timeout_s: float = 5.0
    acks: list[tuple[float, float, int]] = field(default_factory=list)  # (sent, acknowledged, offset)
    errors: Counter = field(default_factory=Counter)
    last_sent: int = 0
    _session: KafkaSession | None = None

    async def run(self, stop: asyncio.Event) -> None:
        offset = 0
        while not stop.is_set():
            try:
                session = self._session or await self._coordinator()
                offset += 1
                self.last_sent = offset
                sent = time.monotonic()
                version = session.pick_version(OffsetCommitRequest.API_KEY, COMMIT_VERSION)
                response = await session.request(simple_commit(self.group, 1, offset), version,
                                                 self.request_timeout_s)
                codes = error_codes(response)
                if codes:
                    self.errors[code_name(codes[0])] += 1
                    raise _Retry
                self.acks.append((sent, time.monotonic(), offset))
            except (_Retry, ConnectionError, OSError, asyncio.TimeoutError, TimeoutError):
                await self._drop()
                await asyncio.sleep(self.backoff_s)
        await self._drop()

    async def _coordinator(self) -> KafkaSession:
        """Ask the brokers in turn (dead ones fail fast) which one coordinates the group; connect to it."""
        for host, port in random.sample(self.brokers, len(self.brokers)):
            try:
                bootstrap = await asyncio.wait_for(KafkaSession.open(host, port), 1.0)
            except (ConnectionError, OSError, asyncio.TimeoutError, TimeoutError):
                continue
            try:
                version = bootstrap.pick_version(FindCoordinatorRequest.API_KEY, 2)
                answer = await bootstrap.request(FindCoordinatorRequest(key=self.group, key_type=0), version, 2.0)
            except (ConnectionError, OSError, asyncio.TimeoutError, TimeoutError):
                await bootstrap.close()
                continue
            if answer.error_code:
                self.errors["find:" + code_name(answer.error_code)] += 1
                await bootstrap.close()
                raise _Retry
            if (answer.host, answer.port) == (host, port):
                self._session = bootstrap
            else:
                await bootstrap.close()
                self._session = await asyncio.wait_for(KafkaSession.open(answer.host, answer.port), 1.0)
            return self._session
        self.errors["no broker answered"] += 1
        raise _Retry

    async def _drop(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def committed(self) -> int:
        """The group's committed offset as OffsetFetch returns it (after rediscovery, bounded)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                session = self._session or await self._coordinator()
                version = session.pick_version(OffsetFetchRequest.API_KEY, FETCH_VERSION)
                answer = await session.request(fetch_request(self.group, 1), version, self.request_timeout_s)
                if not error_codes(answer):
                    return answer.topics[0].partitions[0].committed_offset
            except (_Retry, ConnectionError, OSError, asyncio.TimeoutError, TimeoutError):
                pass
            await self._drop()
            await asyncio.sleep(0.2)
        raise RuntimeError(f"OffsetFetch of {self.group} did not succeed within 60 s")

    def first_ack_after(self, instant: float) -> float | None:
        """When the first commit sent after `instant` was acknowledged."""
        return next((acked for sent, acked, _ in self.acks if sent > instant), None)

    def acked_before(self, instant: float) -> int:
        return max((offset for _, acked, offset in self.acks if acked <= instant), default=0)


class OwnerWatch:
    """Polls etcd (JSON gateway, every 20 ms, in a thread) for when a partition changed owner and loaded."""

    def __init__(self, target: ClusterTarget, partition: int) -> None:
        self.target = target
        self.partition = partition
        self.seen: list[tuple[float, int | None, bool]] = []  # (time, owner, loaded)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        key = b"owner/%d" % self.partition
        load = b"load/%d" % self.partition
        while not self._stop.is_set():
            try:
                owner = self.target.etcd_post("/v3/kv/range", {"key": base64.b64encode(key).decode()}, 1.0)
                state = self.target.etcd_post("/v3/kv/range", {"key": base64.b64encode(load).decode()}, 1.0)
                kvs, loads = owner.get("kvs", []), state.get("kvs", [])
                node = int(base64.b64decode(kvs[0]["value"])) if kvs else None
                loaded = bool(kvs and loads and base64.b64decode(loads[0]["value"]) == b"loaded"
                              and loads[0].get("lease") == kvs[0].get("lease"))
                if not self.seen or self.seen[-1][1:] != (node, loaded):
                    self.seen.append((time.monotonic(), node, loaded))
            except OSError:
                pass
            self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def first(self, after: float, predicate) -> float | None:
        return next((t for t, node, loaded in self.seen if t > after and predicate(node, loaded)), None)


def groups_owned_by(nodes: list[int], prefix: str) -> dict[int, str]:
    """For each node, a group whose partition that node is the preferred owner of."""
    found: dict[int, str] = {}
    for i in range(10_000):
        group = f"{prefix}-{i}"
        owner = preferred_owner(partition_for(group, NUM_PARTITIONS), nodes)
        found.setdefault(owner, group)
        if len(found) == len(nodes):
            return found
    raise RuntimeError("no group for some node")


async def wait_owned(target: ClusterTarget, timeout_s: float, nodes: set[int] | None = None) -> None:
    await asyncio.to_thread(target.wait_all_owned, timeout_s, nodes)


# --- failover -----------------------------------------------------------------------------------

async def failover(kills: int, ttl_ms: int, backoff_s: float) -> dict:
    target = await asyncio.to_thread(ClusterTarget, 3, lease_ttl_ms=ttl_ms)
    stop = asyncio.Event()
    try:
        ids = [n.node_id for n in target.nodes]
        group_of = groups_owned_by(ids, "failover")
        committers = {node: GroupCommitter(target.bootstrap, group, backoff_s) for node, group in group_of.items()}
        tasks = [asyncio.create_task(c.run(stop)) for c in committers.values()]
        rows = []
        for k in range(kills):
            victim = ids[k % len(ids)]
            committer = committers[victim]
            partition = partition_for(committer.group, NUM_PARTITIONS)
            await asyncio.sleep(1.0)  # commits flowing again everywhere
            watch = OwnerWatch(target, partition)
            await asyncio.sleep(0.1)
            killed_at = await asyncio.to_thread(target.kill, victim)
            deadline = time.monotonic() + 30
            while committer.first_ack_after(killed_at) is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            watch.stop()
            first_ack = committer.first_ack_after(killed_at)
            owned_at = watch.first(killed_at, lambda node, loaded: node not in (None, victim))
            loaded_at = watch.first(killed_at, lambda node, loaded: node not in (None, victim) and loaded)
            row = {"kill": k + 1, "victim": victim, "group": committer.group, "partition": partition,
                   "first_commit_s": None if first_ack is None else round(first_ack - killed_at, 3),
                   "new_owner_s": None if owned_at is None else round(owned_at - killed_at, 3),
                   "loaded_s": None if loaded_at is None else round(loaded_at - killed_at, 3)}
            rows.append(row)
            print(f"  kill {k + 1}/{kills}: node {victim} -> first commit {row['first_commit_s']} s "
                  f"(new owner {row['new_owner_s']} s, loaded {row['loaded_s']} s)", flush=True)
            await asyncio.to_thread(target.restart, victim)
            await wait_owned(target, 60, set(ids))  # the restarted node took its share back
        stop.set()
        await asyncio.gather(*tasks)
        waits = [r["first_commit_s"] for r in rows if r["first_commit_s"] is not None]
        return {"kills": kills, "lease_ttl_ms": ttl_ms, "client_backoff_ms": round(backoff_s * 1000),
                "rows": rows, "missing": kills - len(waits),
                "median_s": round(statistics.median(waits), 3) if waits else None,
                "max_s": max(waits) if waits else None, "min_s": min(waits) if waits else None,
                "median_new_owner_s": _median(r["new_owner_s"] for r in rows),
                "median_loaded_s": _median(r["loaded_s"] for r in rows),
                "client_errors": dict(sum((c.errors for c in committers.values()), Counter())),
                "target": target.describe()}
    finally:
        stop.set()
        await asyncio.to_thread(target.close)


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


# --- durability ---------------------------------------------------------------------------------

async def durability(kills: int, clients: int, ttl_ms: int, backoff_s: float, seed: int) -> dict:
    rng = random.Random(seed)
    target = await asyncio.to_thread(ClusterTarget, 3, lease_ttl_ms=ttl_ms, etcd_compaction=False)
    stop = asyncio.Event()
    try:
        ids = [n.node_id for n in target.nodes]
        committers = [GroupCommitter(target.bootstrap, f"durability-{i}", backoff_s) for i in range(clients)]
        tasks = [asyncio.create_task(c.run(stop)) for c in committers]
        started = time.monotonic()
        for k in range(kills):
            await asyncio.sleep(rng.uniform(0.2, 2.0))
            victim = rng.choice(ids)
            await asyncio.to_thread(target.kill, victim)
            # Its partitions are taken over once its lease lapsed; sometimes kill again before that.
            await asyncio.sleep(rng.uniform(0.0, 2.5 * ttl_ms / 1000))
            await asyncio.to_thread(target.restart, victim)
            print(f"  kill {k + 1}/{kills}: node {victim}; {sum(len(c.acks) for c in committers)} commits "
                  f"acknowledged so far", flush=True)
        await wait_owned(target, 60, set(ids))
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
        history = await asyncio.to_thread(offset_history, target, [c.group for c in committers])
        lost_from_history = acknowledged_but_unwritten(committers, history)
        behind = []
        for c in committers:
            committed = await c.committed()
            last_acked = max((o for _, _, o in c.acks), default=0)
            if not last_acked <= committed <= c.last_sent:
                behind.append({"group": c.group, "committed": committed, "last_acked": last_acked,
                               "last_sent": c.last_sent})
        return {"kills": kills, "clients": clients, "lease_ttl_ms": ttl_ms, "seed": seed,
                "duration_s": round(elapsed, 1),
                "acknowledged": sum(len(c.acks) for c in committers),
                "acknowledged_lost": len(lost_from_history), "lost_examples": lost_from_history[:10],
                "fetch_mismatches": behind,
                "client_errors": dict(sum((c.errors for c in committers), Counter())),
                "target": target.describe()}
    finally:
        stop.set()
        await asyncio.to_thread(target.close)


def acknowledged_but_unwritten(committers: list[GroupCommitter], history: dict[str, set[int]]) -> list:
    """(group, offset) of every acknowledged commit that etcd's history of the group's key lacks."""
    return [(c.group, offset) for c in committers for _, _, offset in c.acks
            if offset not in history.get(c.group, set())]


def offset_history(target: ClusterTarget, groups: list[str]) -> dict[str, set[int]]:
    """Every offset each group's key ever held in etcd: a watch from revision 1 replays its whole history
    (etcd ran without compaction)."""
    from cohort.coordinator.cluster import keys, values
    from cohort.coordinator.cluster.etcd import EtcdClient, prefix_end
    from cohort.coordinator.records.types import OffsetCommitRecord, decode_record

    wanted = set(groups)

    async def read() -> dict[str, set[int]]:
        client = EtcdClient(target.etcd_endpoints, timeout_s=10)
        await client.connect()
        found: dict[str, set[int]] = {group: set() for group in groups}
        try:
            current, _, _ = await client.range(b"o/", prefix_end(b"o/"))
            last = max((kv.mod_revision for kv in current), default=0)
            async for events in client.watch_prefix(b"o/", 1):
                for _, kv in events:
                    record = decode_record(keys.record_key(kv.key), values.from_etcd(kv.value)) if kv.value else None
                    if isinstance(record, OffsetCommitRecord) and record.group in wanted:
                        found[record.group].add(record.offset)
                if events[-1][1].mod_revision >= last:
                    return found
        finally:
            await client.close()
        return found

    return asyncio.run(asyncio.wait_for(read(), 300))


# --- command line ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, kills in (("failover", 20), ("durability", 50)):
        p = sub.add_parser(name)
        p.add_argument("--kills", type=int, default=kills)
        p.add_argument("--ttl-ms", type=int, default=2000)
        p.add_argument("--backoff-ms", type=int, default=50)
        p.add_argument("--out", type=Path)
        if name == "durability":
            p.add_argument("--clients", type=int, default=16)
            p.add_argument("--seed", type=int, default=17)
    args = parser.parse_args(argv)
    if args.command == "failover":
        result = asyncio.run(failover(args.kills, args.ttl_ms, args.backoff_ms / 1000))
        print(f"failover over {args.kills} kills at TTL {args.ttl_ms} ms: median {result['median_s']} s, "
              f"max {result['max_s']} s (new owner median {result['median_new_owner_s']} s, loaded "
              f"{result['median_loaded_s']} s), {result['missing']} without a commit in 30 s")
        ok = result["missing"] == 0 and result["median_s"] <= args.ttl_ms / 1000 + 1 \
            and result["max_s"] <= 2 * args.ttl_ms / 1000
    else:
        result = asyncio.run(durability(args.kills, args.clients, args.ttl_ms, args.backoff_ms / 1000, args.seed))
        print(f"durability: {args.kills} kills, {args.clients} clients, {result['acknowledged']} commits "
              f"acknowledged, {result['acknowledged_lost']} lost, {len(result['fetch_mismatches'])} OffsetFetch "
              f"mismatches")
        ok = result["acknowledged_lost"] == 0 and not result["fetch_mismatches"]
    result["passed"] = ok
    result["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out = args.out or REPO / "bench" / "results" / f"{args.command}-{int(time.time())}"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.command}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {out / f'{args.command}.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
