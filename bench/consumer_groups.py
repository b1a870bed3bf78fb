"""KIP-848 consumer groups against the classic protocol, in one run on one fresh server.

    python bench/consumer_groups.py [--members 1000] [--heartbeat-members 5000] [--seconds 5]

* **classic storm**: `--members` members join one classic group at once (JoinGroup with the
  MEMBER_ID_REQUIRED round trip, SyncGroup, the leader assigns): seconds until all hold an assignment.
* **consumer convergence**: `--members` members send their first ConsumerGroupHeartbeat at once to one
  consumer group over a topic of as many partitions; each takes what the coordinator hands it, acknowledges
  at once and otherwise heartbeats at the interval it is told: seconds until ConsumerGroupDescribe says
  Stable with every member at the target epoch.
* **consumer heartbeats/s**: `--heartbeat-members` members in one consumer group, settled, then each
  heartbeats closed loop (nothing changed: the usual heartbeat) for `--seconds`.
Members share `--connections` pipelined connections. The machine may be shared: compare the ratios.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.members import BenchMember, ProtocolVersions  # noqa: E402
from bench.targets import CohortServer, wait_until_serving  # noqa: E402
from bench.wire import KafkaSession  # noqa: E402
from cohort.protocol.messages import (  # noqa: E402
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
)

HEARTBEAT_INTERVAL_MS = 500


def member_id() -> str:
    return base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


class ConsumerMember:
    """One KIP-848 member speaking for itself on a shared connection."""

    def __init__(self, session: KafkaSession, group: str, topic: str) -> None:
        self.session, self.group, self.topic = session, group, topic
        self.member_id = member_id()
        self.epoch = 0
        self.owned: list = []
        self.interval_s = HEARTBEAT_INTERVAL_MS / 1000
        self.errors = 0

    async def heartbeat(self, full: bool) -> bool:
        """One heartbeat; True when the answer carried a new assignment (to acknowledge at once)."""
        Owned = ConsumerGroupHeartbeatRequest.HeartbeatOwnedTopicPartitions
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
            rebalance_timeout_ms=30000 if full else -1, subscribed_topic_names=[self.topic] if full else None,
            topic_partitions=[Owned(topic_id=t, partitions=p) for t, p in self.owned] if full else None)
        response = await self.session.request(request, 1)
        if response.error_code:
            self.errors += 1
            return False
        self.epoch = response.member_epoch
        self.interval_s = response.heartbeat_interval_ms / 1000 or self.interval_s
        if response.assignment is None:
            return False
        self.owned = [(tp.topic_id, list(tp.partitions)) for tp in response.assignment.topic_partitions]
        return True

    async def run_until(self, done: asyncio.Event) -> None:
        """Join, then heartbeat as a client does: owned partitions sent only to acknowledge a new assignment."""
        changed = await self.heartbeat(full=True)
        while not done.is_set():
            if not changed:
                try:
                    await asyncio.wait_for(done.wait(), self.interval_s)
                    return
                except asyncio.TimeoutError:
                    pass
            changed = await self.heartbeat(full=changed)


async def stable(control: KafkaSession, group: str, members: int) -> bool:
    [g] = (await control.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1)).groups
    return (g.error_code == 0 and g.group_state == "Stable" and len(g.members) == members
            and all(m.member_epoch == g.assignment_epoch for m in g.members))


async def converge(host: str, port: int, control: KafkaSession, sessions: list[KafkaSession], size: int,
                   tag: str) -> tuple[float, list[ConsumerMember], asyncio.Event, list[asyncio.Task]]:
    topic, group = f"bench-cg-{tag}", f"bench-cg-{tag}-group"
    T = CreateTopicsRequest.CreatableTopic
    await control.request(CreateTopicsRequest(topics=[T(name=topic, num_partitions=size, replication_factor=1)]), 4)
    members = [ConsumerMember(sessions[i % len(sessions)], group, topic) for i in range(size)]
    done = asyncio.Event()
    t0 = time.perf_counter()
    tasks = [asyncio.ensure_future(m.run_until(done)) for m in members]
    deadline = time.monotonic() + 300
    while not await stable(control, group, size):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{size} consumer-group members did not converge in 300 s")
        await asyncio.sleep(0.02)
    return time.perf_counter() - t0, members, done, tasks


async def classic_storm(host: str, port: int, size: int) -> float:
    control = await KafkaSession.open(host, port)
    versions = ProtocolVersions.negotiate(control)
    members = []
    for start in range(0, size, 250):
        members += await asyncio.gather(*(BenchMember.open(host, port, "bench-classic-storm", versions,
                                                           session_timeout_ms=30000, rebalance_timeout_ms=60000)
                                          for _ in range(start, min(size, start + 250))))
    t0 = time.perf_counter()
    await asyncio.gather(*(m.join_and_sync(time.monotonic() + 300) for m in members))
    elapsed = max(m.assigned_at for m in members) - t0
    await asyncio.gather(*(m.leave() for m in members), return_exceptions=True)
    await asyncio.gather(*(m.close() for m in members), return_exceptions=True)
    await control.close()
    return elapsed


async def heartbeat_rate(members: list[ConsumerMember], seconds: float) -> float:
    count = 0
    stop = time.monotonic() + seconds

    async def loop(m: ConsumerMember) -> None:
        nonlocal count
        while time.monotonic() < stop:
            await m.heartbeat(full=False)
            count += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop(m) for m in members))
    return count / (time.perf_counter() - t0)


async def main(args) -> dict:
    server = await asyncio.to_thread(CohortServer, settings={
        "group.consumer.heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS, "group.consumer.min.heartbeat.interval.ms": 100,
        "group.initial.rebalance.delay.ms": 0})
    try:
        await wait_until_serving(server)
        host, port = server.host, server.port
        control = await KafkaSession.open(host, port)
        sessions = [await KafkaSession.open(host, port) for _ in range(args.connections)]
        result: dict = {"members": args.members, "heartbeat_members": args.heartbeat_members,
                        "connections": args.connections}
        result["classic_join_storm_s"] = round(await classic_storm(host, port, args.members), 3)
        print(json.dumps(result), file=sys.stderr, flush=True)
        consumer_s, members, done, tasks = await converge(host, port, control, sessions, args.members, "converge")
        done.set()
        await asyncio.gather(*tasks)
        result["consumer_convergence_s"] = round(consumer_s, 3)
        result["consumer_vs_classic"] = round(consumer_s / result["classic_join_storm_s"], 3)
        print(json.dumps(result), file=sys.stderr, flush=True)
        big_s, big, big_done, big_tasks = await converge(host, port, control, sessions, args.heartbeat_members,
                                                         "heartbeats")
        big_done.set()
        await asyncio.gather(*big_tasks)
        result["heartbeat_members_convergence_s"] = round(big_s, 3)
        result["consumer_heartbeats_per_s"] = round(await heartbeat_rate(big, args.seconds), 1)
        result["heartbeat_errors"] = sum(m.errors for m in members + big)
        for s in sessions + [control]:
            await s.close()
        return result
    finally:
        await asyncio.to_thread(server.close)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--heartbeat-members", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=50)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
