"""One group id moving between the classic protocol (kafka-python) and KIP-848 (confluent-kafka,
`group.protocol=consumer`) against ``cohort serve``: an empty group converts to the protocol of the
member that arrives, keeping its committed offsets, in both directions; and a group with members
moves online (Kafka's migration): classic members keep working inside a consumer group, and the group
turns classic again when its last consumer-protocol member leaves."""
from __future__ import annotations

import logging
import time

import pytest

from clients_scenario import _NotYet as NotYet
from cohort_process import CohortServer

from confluent_kafka import Consumer, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, OffsetAndMetadata  # the test command installs every real client
from kafka import TopicPartition as KpTopicPartition

from cohort.protocol.messages import ConsumerGroupDescribeRequest, ListGroupsRequest

pytestmark = pytest.mark.timeout(180)

LOGGER = "tests.mixed_protocols"


@pytest.fixture
def server(tmp_path):
    server = CohortServer(tmp_path / "data", "--group.consumer.heartbeat.interval.ms", "300",
                          "--group.consumer.min.heartbeat.interval.ms", "100").start()
    yield server
    assert server.stop() == 0, server.stderr()


def poll_until(poll, condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        poll()
        outcome = condition()
        if outcome:
            return outcome
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}; last: {outcome!r}")


def classic_member(server: CohortServer, group: str, topic: str) -> KafkaConsumer:
    return KafkaConsumer(topic, group_id=group, bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                         session_timeout_ms=6000, heartbeat_interval_ms=300, auto_offset_reset="earliest",
                         client_id="classic")


def consumer_member(server: CohortServer, group: str, topic: str) -> Consumer:
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "group.protocol": "consumer",
                  "client.id": "new-protocol", "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "logger": logging.getLogger(LOGGER)})
    c.subscribe([topic])
    return c


def group_types(raw_client, server: CohortServer) -> dict[str, tuple[str, str]]:
    listed = raw_client(server.port).request(ListGroupsRequest(), 5)
    return {g.group_id: (g.group_type, g.group_state) for g in listed.groups}


def test_an_empty_group_moves_between_protocols_both_ways_keeping_its_offsets(server, raw_client):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("mixed-t", num_partitions=2, replication_factor=1)])["mixed-t"].result(20)
    everything = {("mixed-t", 0), ("mixed-t", 1)}

    # 1. classic members (kafka-python) commit, then leave: an Empty classic group with offsets.
    classic = classic_member(server, "mixed-g", "mixed-t")
    poll_until(lambda: classic.poll(timeout_ms=100),
               lambda: {(tp.topic, tp.partition) for tp in classic.assignment()} == everything
               or NotYet(classic.assignment()), 30, "the classic member owns both partitions")
    classic.commit({KpTopicPartition("mixed-t", 0): OffsetAndMetadata(5, "classic", -1)})
    classic.close()
    assert group_types(raw_client, server)["mixed-g"] == ("classic", "Empty")

    # 2. a consumer-protocol member converts it; the classic commit is still there.
    new = consumer_member(server, "mixed-g", "mixed-t")
    classic = None
    try:
        poll_until(lambda: new.poll(0.1), lambda: owned(new) == everything or NotYet(owned(new)), 30,
                   "the consumer-protocol member owns both partitions")
        [committed] = new.committed([TopicPartition("mixed-t", 0)], timeout=10)
        assert (committed.offset, committed.metadata) == (5, "classic")
        assert group_types(raw_client, server)["mixed-g"][0] == "consumer"

        # 3. a classic member joins the consumer group (Kafka's migration path): they share the partitions.
        classic = classic_member(server, "mixed-g", "mixed-t")

        def both_polled():
            new.poll(0.05)
            classic.poll(timeout_ms=50)
        poll_until(both_polled, lambda: (len(owned(new)) == 1 and owned(new) | kp_owned(classic) == everything)
                   or NotYet((owned(new), kp_owned(classic))), 60, "one partition each in the mixed group")
        described = admin.describe_consumer_groups(["mixed-g"])["mixed-g"].result(10)
        assert described.type is ConsumerGroupType.CONSUMER and len(described.members) == 2
        [raw] = raw_client(server.port).request(ConsumerGroupDescribeRequest(group_ids=["mixed-g"]), 1).groups
        assert sorted((m.client_id, m.member_type) for m in raw.members) == [("classic", 0), ("new-protocol", 1)]
        new.commit(offsets=[TopicPartition("mixed-t", 1, 9, metadata="consumer")], asynchronous=False)
    finally:
        new.close()

    # 4. the last consumer-protocol member left: the group is classic again, and the classic member takes all.
    poll_until(lambda: classic.poll(timeout_ms=100),
               lambda: (group_types(raw_client, server)["mixed-g"][0] == "classic" and kp_owned(classic) == everything)
               or NotYet((group_types(raw_client, server).get("mixed-g"), kp_owned(classic))), 60,
               "downgraded to a classic group, the classic member owns both partitions")
    assert classic.committed(KpTopicPartition("mixed-t", 0)) == 5
    assert classic.committed(KpTopicPartition("mixed-t", 1)) == 9

    # 5. and up again, online: a consumer-protocol member joins the classic group that has a member.
    upgrader = consumer_member(server, "mixed-g", "mixed-t")
    try:
        def both_polled_again():
            upgrader.poll(0.05)
            classic.poll(timeout_ms=50)
        poll_until(both_polled_again, lambda: (len(owned(upgrader)) == 1
                                               and owned(upgrader) | kp_owned(classic) == everything)
                   or NotYet((owned(upgrader), kp_owned(classic))), 60, "upgraded online, one partition each")
        assert group_types(raw_client, server)["mixed-g"][0] == "consumer"
    finally:
        upgrader.close()
        classic.close()


def owned(c: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def kp_owned(c: KafkaConsumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}
