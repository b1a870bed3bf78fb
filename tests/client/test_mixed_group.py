"""A group mixing our members with kafka-python and confluent-kafka members converges to one valid assignment."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from bounded_wait import wait_until_async
from cohort.client.admin import Admin, NewTopic
from cohort.client.membership import GroupMember, MemberState
from cohort.client.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 12


class ForeignConsumer:
    """A kafka-python or confluent-kafka consumer polling in its own thread; `.assignment` is what it believes it owns."""

    def __init__(self, library: str, bootstrap: str, group: str, topic: str, strategy: str) -> None:
        self.library = library
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._args = (bootstrap, group, topic, strategy)
        self._thread = threading.Thread(target=self._run, name=f"{library}-consumer", daemon=True)

    def start(self) -> "ForeignConsumer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        try:
            (self._run_kafka_python if self.library == "kafka-python" else self._run_confluent)(*self._args)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))

    def _run_kafka_python(self, bootstrap, group, topic, strategy) -> None:
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        assignor = {"range": RangePartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}[strategy]
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id="kafka-python-member",
            partition_assignment_strategy=[assignor], session_timeout_ms=6000, heartbeat_interval_ms=300,
            enable_auto_commit=False,
        )
        # The topic's metadata before the first join: kafka-python 3.0.12, leading without it, assigns
        # nothing, rejoins when its metadata arrives, and can drop that SyncGroup answer if poll() times out
        # at that moment (then it stops heartbeating and is rightly expired): a client bug, not ours.
        deadline = time.monotonic() + 30
        while not consumer.partitions_for_topic(topic):
            assert time.monotonic() < deadline, f"kafka-python never saw {topic}"
            time.sleep(0.05)
        consumer.subscribe([topic])
        try:
            while not self._stop.is_set():
                consumer.poll(timeout_ms=100)
                self.assignment = frozenset(TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment())
        finally:
            consumer.close()

    def _run_confluent(self, bootstrap, group, topic, strategy) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": "confluent-member",
            "partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300, "enable.auto.commit": False, "log_level": 3,
        })
        consumer.subscribe([topic])
        try:
            while not self._stop.is_set():
                consumer.poll(0.1)
                self.assignment = frozenset(TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment())
        finally:
            consumer.close()


async def converged(bootstrap, group, ours, foreign, timeout: float) -> list:
    """Wait until DescribeGroups and every member agree on one complete, disjoint assignment."""
    deadline = time.monotonic() + timeout
    expected = {TopicPartition("mixed-" + group, p) for p in range(PARTITIONS)}
    last = None
    async with Admin(bootstrap) as admin:
        while time.monotonic() < deadline:
            description = await admin.describe_group(group)
            last = description
            described = [set(m.assignment) for m in description.members]
            views = [set(m.assignment) for m in ours] + [set(c.assignment) for c in foreign]
            if (
                description.state == "Stable"
                and len(description.members) == len(ours) + len(foreign)
                and all(m.state is MemberState.STABLE for m in ours)
                and sorted(map(sorted, described)) == sorted(map(sorted, views))
                and sum(len(a) for a in described) == PARTITIONS
                and set().union(*described) == expected
            ):
                return description
            for c in foreign:
                assert not c.errors, c.errors
            await asyncio.sleep(0.2)
    raise AssertionError(f"group {group} did not converge: {last}")


@pytest.mark.parametrize(
    ("strategy", "first"),
    [
        ("range", "ours"),
        ("range", "kafka-python"),
        ("range", "confluent-kafka"),
        ("cooperative-sticky", "ours"),
        ("cooperative-sticky", "kafka-python"),
        ("cooperative-sticky", "confluent-kafka"),
    ],
)
async def test_mixed_group_converges(shared_cohort_server, strategy, first):
    bootstrap = shared_cohort_server.bootstrap
    group = f"mixed-{strategy}-{first}"
    topic = "mixed-" + group
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, PARTITIONS)])
    ours = [
        GroupMember(bootstrap, group, [topic], assignors=[strategy], session_timeout_ms=6000,
                    heartbeat_interval_ms=300, rebalance_timeout_ms=10000)
        for _ in range(2)
    ]
    foreign = [
        ForeignConsumer("kafka-python", bootstrap, group, topic, strategy),
        ForeignConsumer("confluent-kafka", bootstrap, group, topic, strategy),
    ]
    try:
        if first == "ours":
            await ours[0].start(timeout=20)
        else:
            starter = next(c for c in foreign if c.library == first)
            starter.start()
            async with Admin(bootstrap) as admin:  # it leads: the group is its own before anyone else joins

                async def starter_alone_and_stable() -> bool:
                    description = await admin.describe_group(group)
                    return description.state == "Stable" and len(description.members) == 1

                await wait_until_async(starter_alone_and_stable, 30, f"{first} to form the group alone",
                                       interval=0.1)
        for m in ours:
            await m.start(wait=False)
        for c in foreign:
            if not c._thread.is_alive():
                c.start()
        description = await converged(bootstrap, group, ours, foreign, timeout=60)
        assert description.protocol == strategy
        clients = sorted(m.client_id for m in description.members)
        assert clients == ["cohort-client", "cohort-client", "confluent-member", "kafka-python-member"]
        # The first member to join leads: either our assignor or the other library's computed this.
        ours_lead = any(m.is_leader for m in ours)
        assert ours_lead == (first == "ours")
        if strategy == "range":
            assert sorted(len(m.assignment) for m in description.members) == [3, 3, 3, 3]
    finally:
        await asyncio.gather(*(m.close() for m in ours))
        await asyncio.gather(*(asyncio.to_thread(c.stop) for c in foreign))
