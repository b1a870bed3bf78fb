"""A rolling restart's hand-back: the node a group's partition prefers is stopped (SIGTERM) and started
again three times while a confluent-kafka (librdkafka) and a kafka-python consumer commit without a
pause; every commit is timed from its first send to its acknowledgement (retries included). A real
3-member etcd and three `cohort serve --cluster` nodes."""
from __future__ import annotations

import itertools
import threading
import time

import pytest
from cohort_process import CohortServer
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata

from cohort.coordinator.cluster.ownership import preferred_owner
from cohort.protocol.partitioning import partition_for

from test_cluster_e2e import create_topic, owned, status, wait_until

pytestmark = pytest.mark.timeout(400)
TTL_MS = 6000
CYCLES = 3
RESTARTED = 3  # the node id the groups' partitions prefer
WORST_AT_HANDBACK_S = 1.5


def group_preferring(node_id: int, prefix: str) -> str:
    """A group id whose offsets partition prefers `node_id` among nodes 1-3."""
    return next(g for g in (f"{prefix}-{i}" for i in itertools.count())
                if preferred_owner(partition_for(g, 50), (1, 2, 3)) == node_id)


class Committer(threading.Thread):
    """Commits offset 1, 2, 3, ... of its topic's partition 0 back to back; each commit's [start, end]."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.commits: list[tuple[float, float]] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.offset = 0

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.offset += 1
                started = time.monotonic()
                self.commit(self.offset)
                self.commits.append((started, time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def worst_between(self, start: float, end: float) -> float:
        """The longest commit that was under way at any moment of [start, end]."""
        return max((e - s for s, e in self.commits if s <= end and e >= start), default=0.0)


class ConfluentCommitter(Committer):
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__("confluent-committer")
        from confluent_kafka import Consumer
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "session.timeout.ms": 30000, "heartbeat.interval.ms": 500,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.topic = topic

    def join_group(self, timeout: float = 60) -> None:
        self.consumer.subscribe([self.topic])
        wait_until(lambda: self.consumer.poll(0.2) is None and self.consumer.assignment(), timeout, "confluent joined")

    def commit(self, offset: int) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as ConfluentPartition
        deadline = time.monotonic() + 60
        while True:
            try:
                self.consumer.commit(offsets=[ConfluentPartition(self.topic, tp.partition, offset)
                                              for tp in self.consumer.assignment()], asynchronous=False)
                return
            except KafkaException as exc:  # retriable while the coordinator moves: again
                assert exc.args[0].retriable() or "oordinator" in exc.args[0].str(), exc
                assert time.monotonic() < deadline, exc
                self.consumer.poll(0.01)

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonCommitter(Committer):
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__("kafka-python-committer")
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                      session_timeout_ms=30000, heartbeat_interval_ms=500,
                                      metadata_max_age_ms=1000, retry_backoff_ms=20)
        self.topic = topic

    def join_group(self, timeout: float = 60) -> None:
        self.consumer.subscribe([self.topic])
        wait_until(lambda: self.consumer.poll(200) == {} and self.consumer.assignment(), timeout,
                   "kafka-python joined")

    def commit(self, offset: int) -> None:
        self.consumer.commit({tp: OffsetAndMetadata(offset, "") for tp in self.consumer.assignment()})

    def close(self) -> None:
        self.consumer.close()


def start_node(tmp_path, etcd, node_id: int) -> CohortServer:
    return CohortServer(tmp_path / f"node{node_id}-data", "--cluster", etcd.url, "--node-id", str(node_id),
                        "--cluster.lease.ttl.ms", str(TTL_MS)).start()


def owner_of(etcd, group: str) -> int | None:
    return status(etcd)["partitions"][partition_for(group, 50)]["owner"]


def test_commits_wait_at_most_a_moment_when_a_restarted_node_takes_its_groups_back(etcd, tmp_path):
    nodes = {i: start_node(tmp_path, etcd, i) for i in (1, 2, 3)}
    committers: list[Committer] = []
    try:
        wait_until(lambda: sum(owned(n) for n in nodes.values()) == 50, 30, "all partitions owned")
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        groups = {kind: group_preferring(RESTARTED, f"handback-{kind}") for kind in ("confluent", "kafka-python")}
        topic = "handback-topic"
        create_topic(bootstrap, topic)
        committers = [ConfluentCommitter(bootstrap, groups["confluent"], topic),
                      KafkaPythonCommitter(bootstrap, groups["kafka-python"], topic)]
        for committer in committers:
            committer.join_group()
            committer.start()
        wait_until(lambda: all(len(c.commits) > 20 for c in committers), 30, "both commit")
        handbacks: list[tuple[float, float]] = []
        for _ in range(CYCLES):
            restarted = nodes[RESTARTED]
            assert restarted.stop() == 0
            wait_until(lambda: all(owner_of(etcd, g) not in (None, RESTARTED) for g in groups.values()), 30,
                       "the groups moved away")
            time.sleep(2)
            started = time.monotonic()
            restarted.start()
            wait_until(lambda: all(owner_of(etcd, g) == RESTARTED for g in groups.values()), 30,
                       "the groups moved back")
            time.sleep(3)  # commits keep going on the restarted node
            handbacks.append((started, time.monotonic()))
        for committer in committers:
            committer.stopping.set()
        for committer in committers:
            committer.join(90)
            assert committer.error is None, committer.error
        worst = {type(c).__name__: [round(c.worst_between(s, e), 3) for s, e in handbacks] for c in committers}
        print(f"worst commit latency per hand-back: {worst}")
        assert all(w <= WORST_AT_HANDBACK_S for ws in worst.values() for w in ws), worst
    finally:
        for committer in committers:
            committer.stopping.set()
            if committer.is_alive():
                committer.join(90)
            committer.close()
        for node in nodes.values():
            node.stop()
