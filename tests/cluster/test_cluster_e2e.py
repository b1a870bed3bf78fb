"""Three `cohort serve --cluster` nodes on a real 3-member etcd, driven by unmodified kafka-python."""
from __future__ import annotations

import json
import signal
import threading
import time

import pytest
from cohort_process import CohortServer, metric_value, run_cohort
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from cohort.coordinator.cluster.ownership import preferred_owner
from cohort.protocol.partitioning import partition_for

pytestmark = pytest.mark.timeout(240)
TTL_MS = 2000


def start_node(tmp_path, etcd, node_id: int) -> CohortServer:
    node = CohortServer(tmp_path / f"node{node_id}-data", "--cluster", etcd.url, "--node-id", str(node_id),
                        "--cluster.lease.ttl.ms", str(TTL_MS))
    return node.start()


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def create_topic(bootstrap: str, topic: str) -> None:
    """Create the topic first: any node of a cluster takes CreateTopics (the registry is in etcd)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        admin.close()


def owned(node: CohortServer) -> float:
    try:
        return metric_value(node.scrape(), "cohort_cluster_owned_partitions")
    except (OSError, AssertionError):
        return 0


def status(etcd) -> dict:
    result = run_cohort("cluster", "status", "--cluster", etcd.url, "--output", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def nodes(etcd, tmp_path):
    started = [start_node(tmp_path, etcd, i) for i in (1, 2, 3)]
    yield started
    for node in started:
        if node.process.poll() is None:
            node.stop()


def test_three_nodes_share_the_partitions_without_a_data_dir(nodes, etcd):
    wait_until(lambda: sum(owned(n) for n in nodes) == 50 and all(owned(n) > 0 for n in nodes), 30,
               "the 50 partitions spread over the three nodes")
    report = status(etcd)
    assert sorted(n["node_id"] for n in report["nodes"]) == [1, 2, 3]
    assert all(row["owner"] in (1, 2, 3) for row in report["partitions"])
    assert not any(n.data_dir.exists() for n in nodes)


def test_a_kafka_python_group_commits_through_a_kill_9_of_its_coordinator(nodes, etcd):
    wait_until(lambda: sum(owned(n) for n in nodes) == 50, 30, "all partitions owned")
    group, topic = "e2e-failover", "e2e-topic"
    bootstrap = ",".join(n.bootstrap for n in nodes)
    create_topic(bootstrap, topic)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             session_timeout_ms=30000, heartbeat_interval_ms=500, request_timeout_ms=15000,
                             retry_backoff_ms=100, auto_offset_reset="earliest")
    acknowledged: dict[int, int] = {}
    try:
        # Know the topic before joining (kafka-python 3.0.12 may never finish the rebalance a topic
        # appearing under a joined consumer causes; tests/coordinator/test_clients_kafka_python.py).
        wait_until(lambda: consumer.partitions_for_topic(topic), 30, "the consumer sees the topic")
        wait_until(lambda: consumer.poll(timeout_ms=200) is not None and consumer.assignment(), 60,
                   "the consumer joined and got partitions")
        partitions = sorted(tp.partition for tp in consumer.assignment())

        def commit_round(n: int) -> None:
            offsets = {TopicPartition(topic, p): OffsetAndMetadata(n, f"round {n}", -1) for p in partitions}
            consumer.commit(offsets)  # kafka-python retries retriable errors itself; returns once acknowledged
            for p in partitions:
                acknowledged[p] = n

        for n in range(1, 21):
            commit_round(n)
        owner_id = status(etcd)["partitions"][partition_for(group, 50)]["owner"]
        victim = next(node for node in nodes if f"--node-id {owner_id} " in " ".join(node.args) + " ")
        survivors = [node for node in nodes if node is not victim]
        rebalances_before = sum(metric_value(node.scrape(), "cohort_rebalances_total") for node in survivors)
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(10)
        killed_at = time.monotonic()

        done = threading.Event()
        failure: list[BaseException] = []

        def keep_committing() -> None:
            try:
                for n in range(21, 41):
                    commit_round(n)
                    consumer.poll(timeout_ms=50)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failure.append(exc)
            finally:
                done.set()
        worker = threading.Thread(target=keep_committing, daemon=True)
        worker.start()
        assert done.wait(90), "commits did not resume after the coordinator was killed"
        assert not failure, failure
        assert time.monotonic() - killed_at < 60
        new_owner = status(etcd)["partitions"][partition_for(group, 50)]["owner"]
        assert new_owner != owner_id
        # The new coordinator loaded the group with its generation and members: no rebalance was needed.
        assert sum(metric_value(node.scrape(), "cohort_rebalances_total") for node in survivors) == rebalances_before
    finally:
        consumer.close()

    reader = KafkaConsumer(bootstrap_servers=",".join(n.bootstrap for n in nodes if n.process.poll() is None),
                           group_id=group, enable_auto_commit=False)
    try:
        for p, n in acknowledged.items():
            assert reader.committed(TopicPartition(topic, p)) == n == 40
    finally:
        reader.close()


def test_nodes_added_and_removed_move_partitions_by_handoff_and_groups_keep_their_generation(etcd, tmp_path):
    nodes = [start_node(tmp_path, etcd, i) for i in (1, 2)]
    # A group that moves to node 3 when it joins, and back when it leaves.
    group = next(g for g in (f"e2e-membership-{i}" for i in range(1000))
                 if preferred_owner(partition_for(g, 50), {1, 2, 3}) == 3)
    topic = "membership-topic"
    consumer = None
    try:
        wait_until(lambda: sum(owned(n) for n in nodes) == 50, 30, "two nodes own everything")
        create_topic(",".join(n.bootstrap for n in nodes), topic)
        consumer = KafkaConsumer(topic, bootstrap_servers=",".join(n.bootstrap for n in nodes), group_id=group,
                                 enable_auto_commit=False, session_timeout_ms=30000, heartbeat_interval_ms=500,
                                 request_timeout_ms=15000, retry_backoff_ms=100, auto_offset_reset="earliest")
        wait_until(lambda: consumer.partitions_for_topic(topic), 30, "the consumer sees the topic")
        wait_until(lambda: consumer.poll(timeout_ms=200) is not None and consumer.assignment(), 60, "joined")
        partitions = sorted(tp.partition for tp in consumer.assignment())
        round_no = 0

        def commit_rounds(count: int) -> None:
            nonlocal round_no
            for _ in range(count):
                round_no += 1
                consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(round_no, "", -1) for p in partitions})
                consumer.poll(timeout_ms=20)

        def rebalances() -> dict[int, float]:
            return {n.port: metric_value(n.scrape(), "cohort_rebalances_total")
                    for n in nodes if n.process.poll() is None}

        commit_rounds(5)
        before = rebalances()  # a node started later starts at 0

        third = start_node(tmp_path, etcd, 3)
        nodes.append(third)
        wait_until(lambda: owned(third) > 0 and sum(owned(n) for n in nodes) == 50, 30, "node 3 got its share")
        assert status(etcd)["partitions"][partition_for(group, 50)]["owner"] == 3
        commit_rounds(10)
        leaving = third
        assert leaving.stop() == 0  # SIGTERM: hands its partitions over
        wait_until(lambda: sum(owned(n) for n in nodes if n is not leaving) == 50, 30, "node 3's share moved")
        assert status(etcd)["partitions"][partition_for(group, 50)]["owner"] in (1, 2)
        commit_rounds(10)
        # The group was handed over with its generation and members: no node completed a rebalance since.
        assert all(count == before.get(port, 0) for port, count in rebalances().items())
        report = status(etcd)
        assert sorted(n["node_id"] for n in report["nodes"]) == [1, 2]
    finally:
        if consumer is not None:
            consumer.close()
        for node in nodes:
            if node.process.poll() is None:
                node.stop()
    assert round_no == 25


def test_a_confluent_kafka_group_commits_through_a_kill_9_of_its_coordinator(nodes, etcd):
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as ConfluentPartition

    wait_until(lambda: sum(owned(n) for n in nodes) == 50, 30, "all partitions owned")
    group, topic = "e2e-confluent", "e2e-confluent-topic"
    bootstrap = ",".join(n.bootstrap for n in nodes)
    create_topic(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         # librdkafka also times the session out on its own side: leave room for a
                         # failover on a busy machine (lease TTL, claim, load, rediscovery).
                         "session.timeout.ms": 30000, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest",
                         "topic.metadata.refresh.interval.ms": 1000})
    acknowledged: dict[int, int] = {}
    try:
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(0.2) is None and consumer.assignment(), 60, "joined with partitions")
        partitions = sorted(tp.partition for tp in consumer.assignment())

        def commit_round(n: int, timeout: float = 90) -> None:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    consumer.commit(offsets=[ConfluentPartition(topic, p, n) for p in partitions], asynchronous=False)
                    break
                except KafkaException as exc:  # retriable while the coordinator moves: try again
                    error = exc.args[0]
                    # A generation error means the client itself rejoined (its own session clock ran
                    # out): the commit was not acknowledged; poll to rejoin and commit again.
                    assert error.retriable() or "coordinator" in error.str().lower() or error.code() in (
                        KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                        KafkaError.REBALANCE_IN_PROGRESS), error
                    assert time.monotonic() < deadline, f"commit {n} not accepted: {error}"
                    consumer.poll(0.2)
            for p in partitions:
                acknowledged[p] = n

        for n in range(1, 11):
            commit_round(n)
        owner_id = status(etcd)["partitions"][partition_for(group, 50)]["owner"]
        victim = next(node for node in nodes if node.args[node.args.index("--node-id") + 1] == str(owner_id))
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(10)
        for n in range(11, 31):
            commit_round(n)
            consumer.poll(0.05)
        assert status(etcd)["partitions"][partition_for(group, 50)]["owner"] != owner_id
        committed = consumer.committed([ConfluentPartition(topic, p) for p in partitions], timeout=30)
        assert {tp.partition: tp.offset for tp in committed} == acknowledged == {p: 30 for p in partitions}
    finally:
        consumer.close()


def test_a_consumer_protocol_group_survives_a_kill_9_of_its_coordinator_without_a_rebalance(nodes, etcd):
    """KIP-848 records go through the etcd Store like any other: the new owner replays the group, and the
    member's heartbeats with its old epoch are accepted there (no epoch bump, same partitions)."""
    from confluent_kafka import Consumer

    wait_until(lambda: sum(owned(n) for n in nodes) == 50, 30, "all partitions owned")
    group, topic = "e2e-kip848", "e2e-kip848-topic"
    bootstrap = ",".join(n.bootstrap for n in nodes)
    create_topic(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "topic.metadata.refresh.interval.ms": 1000})
    try:
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(0.2) is None and len(consumer.assignment()) == 3, 60, "owns the 3 partitions")
        before = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        owner_id = status(etcd)["partitions"][partition_for(group, 50)]["owner"]
        victim = next(node for node in nodes if node.args[node.args.index("--node-id") + 1] == str(owner_id))
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(10)
        wait_until(lambda: status(etcd)["partitions"][partition_for(group, 50)]["owner"] not in (None, owner_id),
                   60, "another node owns the group's partition")
        new_owner_id = status(etcd)["partitions"][partition_for(group, 50)]["owner"]
        new_owner = next(node for node in nodes if node.args[node.args.index("--node-id") + 1] == str(new_owner_id))

        def heartbeats_on_new_owner():
            consumer.poll(0.1)
            return metric_value(new_owner.scrape(), "cohort_group_heartbeats_total", type="consumer") >= 3
        wait_until(heartbeats_on_new_owner, 60, "the member heartbeats to the new owner")
        assert metric_value(new_owner.scrape(), "cohort_group_epoch_bumps_total", type="consumer") == 0
        assert {(tp.topic, tp.partition) for tp in consumer.assignment()} == before
    finally:
        consumer.close()
