"""ListOffsets and graceful shutdown of `cohort serve --cluster` nodes, with unmodified Kafka clients.

Every cluster node keeps the topic registry, so every node answers ListOffsets itself: from its own
groups and what the other nodes last reported, never by asking a node that would ask on.
"""
from __future__ import annotations

import signal
import statistics
import threading
import time

import pytest
from cohort_process import metric_value
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from cohort.protocol.partitioning import partition_for

from test_cluster_e2e import create_topic, nodes, owned, status, wait_until  # noqa: F401

pytestmark = pytest.mark.timeout(300)


def node_id(node) -> int:
    return int(node.args[node.args.index("--node-id") + 1])


def test_list_offsets_latest_answers_at_once_with_what_other_nodes_committed(nodes, etcd):
    wait_until(lambda: sum(owned(n) for n in nodes) == 50, 30, "all partitions owned")
    group, topic = "list-offsets", "lo-topic"
    create_topic(nodes[0].bootstrap, topic)
    owner = status(etcd)["partitions"][partition_for(group, 50)]["owner"]
    committer = KafkaConsumer(bootstrap_servers=",".join(n.bootstrap for n in nodes), group_id=group,
                              enable_auto_commit=False, request_timeout_ms=15000)
    try:
        committer.commit({TopicPartition(topic, 1): OffsetAndMetadata(42, "", -1)})
    finally:
        committer.close()
    elsewhere = next(n for n in nodes if node_id(n) != owner)
    # A consumer bootstrapped on a node that does not coordinate the group: its ListOffsets go there only.
    consumer = KafkaConsumer(bootstrap_servers=elsewhere.bootstrap, request_timeout_ms=30000)
    try:
        wait_until(lambda: consumer.partitions_for_topic(topic), 30, "the consumer sees the topic")
        tp = TopicPartition(topic, 1)
        latencies, answers = [], []
        for _ in range(5):
            started = time.monotonic()
            answers.append(consumer.end_offsets([tp])[tp])
            latencies.append(time.monotonic() - started)
        print(f"ListOffsets(latest) seconds: {[round(x, 4) for x in latencies]}, "
              f"median {statistics.median(latencies):.4f}")
        # Asked along a chain of peers, every call waited for the 5 s peer timeout.
        assert max(latencies) < 2.0, latencies
        # The other node's commit is in the answer once its report arrived (refreshed within a second).
        wait_until(lambda: consumer.end_offsets([tp])[tp] == 42, 10, "the owner's commit in ListOffsets")
    finally:
        consumer.close()

    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as ConfluentPartition
    librdkafka = Consumer({"bootstrap.servers": elsewhere.bootstrap, "group.id": "list-offsets-probe",
                           "enable.auto.commit": False})
    try:
        # Every node names itself the topics' leader, so librdkafka may ask a node that has not been asked
        # for this partition yet: it answers at once with what it knows, and has the others' within a second.
        deadline = time.monotonic() + 5
        while True:
            started = time.monotonic()
            _, high = librdkafka.get_watermark_offsets(ConfluentPartition(topic, 1), timeout=30, cached=False)
            assert time.monotonic() - started < 2.0
            if high == 42:
                break
            assert time.monotonic() < deadline, f"ListOffsets(latest) still {high}, not the owner's commit 42"
            time.sleep(0.1)
    finally:
        librdkafka.close()


def test_sigterm_hands_partitions_over_at_once_in_a_rolling_restart_with_a_live_group(nodes, etcd):
    """Each node of a live group's cluster restarted in turn: SIGTERM -> its partitions owned elsewhere."""
    wait_until(lambda: sum(owned(n) for n in nodes) == 50, 30, "all partitions owned")
    group, topic = "rolling", "rolling-topic"
    bootstrap = ",".join(n.bootstrap for n in nodes)
    create_topic(bootstrap, topic)
    stop = threading.Event()
    failures: list[BaseException] = []
    committed = [0]

    def live_group() -> None:
        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                 session_timeout_ms=30000, heartbeat_interval_ms=500, request_timeout_ms=15000,
                                 retry_backoff_ms=100, auto_offset_reset="latest")
        try:
            # Know the topic before joining (kafka-python 3.0.12 may never finish the rebalance a topic
            # appearing under a joined consumer causes; see test_cluster_e2e.py).
            deadline = time.monotonic() + 30
            while not consumer.partitions_for_topic(topic) and time.monotonic() < deadline:
                time.sleep(0.1)
            n = 0
            while not stop.is_set():
                consumer.poll(timeout_ms=100)
                if consumer.assignment():
                    n += 1
                    consumer.commit({tp: OffsetAndMetadata(n, "", -1) for tp in consumer.assignment()})
                    committed[0] = n
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            consumer.close()

    def asking_list_offsets(node) -> None:
        probe = KafkaConsumer(bootstrap_servers=node.bootstrap, request_timeout_ms=30000)
        try:
            while not stop.is_set() and node.process.poll() is None:
                probe.end_offsets([TopicPartition(topic, p) for p in range(3)])
        except Exception:  # noqa: BLE001 - the node went away under it, as intended
            pass
        finally:
            probe.close()

    worker = threading.Thread(target=live_group, daemon=True)
    worker.start()
    handovers = []
    try:
        wait_until(lambda: committed[0] >= 3, 60, "the group commits")
        for i in range(len(nodes)):
            leaving = nodes[i]
            probes = [threading.Thread(target=asking_list_offsets, args=(leaving,), daemon=True) for _ in range(3)]
            for probe in probes:
                probe.start()
            time.sleep(0.5)  # the probes' requests are in flight
            others = [n for n in nodes if n is not leaving]
            started = time.monotonic()
            leaving.signal(signal.SIGTERM)
            wait_until(lambda: sum(owned(n) for n in others) == 50, 30, "the leaving node's partitions moved")
            handovers.append(time.monotonic() - started)
            assert leaving.wait(30) == 0
            for probe in probes:
                probe.join(30)
            leaving.start()  # the same node id and address, as a rolling restart does
            wait_until(lambda: sum(owned(n) for n in nodes) == 50 and owned(leaving) > 0, 30, "rejoined")
            before = committed[0]
            wait_until(lambda: committed[0] > before + 2 or failures, 60, "the group commits again")
            assert not failures, failures
    finally:
        stop.set()
        worker.join(60)
    assert not failures, failures
    print(f"SIGTERM hand-over seconds: {[round(h, 3) for h in handovers]}, "
          f"median {statistics.median(handovers):.3f}")
    # Waiting for the ListOffsets in flight (5 s each, along the chain of peers) delayed every hand-over.
    assert max(handovers) < 2.5, handovers
    assert sum(metric_value(n.scrape(), "cohort_cluster_owned_partitions") for n in nodes) == 50
