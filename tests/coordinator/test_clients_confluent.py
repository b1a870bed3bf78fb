"""confluent-kafka 2.x (librdkafka) against ``cohort serve``: consumer groups, commits and the admin client."""
from __future__ import annotations

import logging

import pytest

from clients_scenario import ClientAdapter, ConsumerThread, LogCapture, run_group_scenario, wait_for

import confluent_kafka  # the test command installs every real client: a missing one fails, never skips
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(150)

CLIENT_LOGGER = "tests.confluent_kafka"
OFFSET_INVALID = -1001  # librdkafka's "no committed offset"


def consumer_config(bootstrap: str, group_id: str, **extra) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "client.id": f"ck-{group_id}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "fetch.wait.max.ms": 100,
        "logger": logging.getLogger(CLIENT_LOGGER),
        "error_cb": lambda err: logging.getLogger(CLIENT_LOGGER).error("error_cb: %s", err),
        **extra,
    }


def confluent_adapter(bootstrap: str, topic: str, **extra) -> ClientAdapter:
    def open_consumer(group_id: str) -> Consumer:
        consumer = Consumer(consumer_config(bootstrap, group_id, **extra))
        consumer.subscribe([topic])
        return consumer

    def commit(c: Consumer, offsets) -> None:
        c.commit(offsets=[TopicPartition(t, p, o, metadata=m) for (t, p), (o, m) in offsets.items()],
                 asynchronous=False)

    def committed(c: Consumer, partitions):
        result = {}
        for tp in c.committed([TopicPartition(t, p) for t, p in partitions], timeout=10):
            assert tp.error is None, tp.error
            result[(tp.topic, tp.partition)] = None if tp.offset == OFFSET_INVALID else (tp.offset, tp.metadata)
        return result

    return ClientAdapter(
        name="confluent-kafka",
        open=open_consumer,
        poll=lambda c: c.poll(0.1),
        assignment=lambda c: {(tp.topic, tp.partition) for tp in c.assignment()},
        commit=commit,
        committed=committed,
        close=lambda c: c.close(),
    )


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "logger": logging.getLogger(CLIENT_LOGGER)})


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(20)
    assert name in admin.list_topics(timeout=10).topics


def test_confluent_group_rebalances_and_keeps_commits(cohort_serve):
    with LogCapture(CLIENT_LOGGER) as logs:
        create_topic(admin_client(cohort_serve.bootstrap), "ck-topic", 6)
        run_group_scenario(confluent_adapter(cohort_serve.bootstrap, "ck-topic"), "ck-topic", "ck-group")
    logs.assert_no_repeated_errors()


def test_confluent_admin_lists_describes_alters_and_deletes(cohort_serve):
    bootstrap = cohort_serve.bootstrap
    topic, group = "ck-admin-topic", "ck-admin-group"
    with LogCapture(CLIENT_LOGGER) as logs:
        admin = admin_client(bootstrap)
        create_topic(admin, topic, 2)
        member = ConsumerThread(confluent_adapter(bootstrap, topic), group)
        try:
            wait_for(lambda: len(member.assignment()) == 2, 45, "assignment")
            member.commit({(topic, 0): (7, "x"), (topic, 1): (8, "y")})

            # list groups
            listed = admin.list_consumer_groups().result(20)
            [listing] = [g for g in listed.valid if g.group_id == group]
            assert not listing.is_simple_consumer_group

            # describe: state, assignor, the member's client id, host and assignment
            description = admin.describe_consumer_groups([group])[group].result(20)
            assert description.state == confluent_kafka.ConsumerGroupState.STABLE
            assert description.partition_assignor == "range"
            [m] = description.members
            assert m.client_id == f"ck-{group}"
            assert m.host.lstrip("/") == "127.0.0.1"
            assert {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions} == {(topic, 0), (topic, 1)}

            # list committed offsets (all topics)
            offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
            assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions} == {(0, 7), (1, 8)}

            # alter offsets once the group is empty
            member.close()
            description = admin.describe_consumer_groups([group])[group].result(20)
            assert description.state == confluent_kafka.ConsumerGroupState.EMPTY
            altered = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 3)])])[group].result(20)
            assert [(tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions] == [(0, 3, None)]
            offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
            assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions} == {(0, 3), (1, 8)}

            # delete the group
            admin.delete_consumer_groups([group])[group].result(20)
            listed = admin.list_consumer_groups().result(20)
            assert group not in [g.group_id for g in listed.valid]
        finally:
            member.stop()
    logs.assert_no_repeated_errors()


def test_confluent_admin_manages_topics(cohort_serve):
    from confluent_kafka.admin import NewPartitions

    with LogCapture(CLIENT_LOGGER) as logs:
        admin = admin_client(cohort_serve.bootstrap)
        admin.create_topics([NewTopic("ck-managed", num_partitions=2, replication_factor=1)],
                            validate_only=True)["ck-managed"].result(20)
        assert "ck-managed" not in admin.list_topics(timeout=10).topics
        create_topic(admin, "ck-managed", 2)
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            admin.create_topics([NewTopic("ck-managed", num_partitions=2, replication_factor=1)])[
                "ck-managed"].result(20)
        assert refused.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS
        admin.create_partitions([NewPartitions("ck-managed", 4)])["ck-managed"].result(20)
        topic = admin.list_topics("ck-managed", timeout=10).topics["ck-managed"]
        assert sorted(topic.partitions) == [0, 1, 2, 3]
        assert all(p.leader == 0 and p.replicas == [0] and p.isrs == [0] for p in topic.partitions.values())
        admin.delete_topics(["ck-managed"])["ck-managed"].result(20)
        assert "ck-managed" not in admin.list_topics(timeout=10).topics
    logs.assert_no_repeated_errors()
