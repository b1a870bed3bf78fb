"""Three `cohort serve --cluster` nodes on a real 3-member etcd, driven by unmodified kafka-python."""
from __future__ import annotations

import json
import signal
import threading
import time

import pytest
from cohort_process import CohortServer, metric_value, run_cohort
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

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
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             session_timeout_ms=10000, heartbeat_interval_ms=500, request_timeout_ms=15000,
                             retry_backoff_ms=100, auto_offset_reset="earliest")
    acknowledged: dict[int, int] = {}
    try:
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
