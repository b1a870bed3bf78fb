"""kafka-python 3.0.12 against ``cohort serve``: consumer groups, commits and the admin client."""
from __future__ import annotations

import time
import uuid

import pytest

from clients_scenario import ClientAdapter, ConsumerThread, LogCapture, run_group_scenario, wait_for

import kafka  # the test command installs every real client: a missing one fails, never skips
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

pytestmark = pytest.mark.timeout(150)


def kafka_python_adapter(bootstrap: str, topic: str, client_id: str | None = None, **config) -> ClientAdapter:
    """`config` overrides KafkaConsumer settings; the client id defaults to kp-<group>."""
    def open_consumer(group_id: str) -> KafkaConsumer:
        settings = dict(
            bootstrap_servers=bootstrap, group_id=group_id, client_id=client_id or f"kp-{group_id}",
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=6000, heartbeat_interval_ms=300, fetch_max_wait_ms=100,
            request_timeout_ms=30000, retry_backoff_ms=50,
        )
        settings.update(config)
        consumer = KafkaConsumer(topic, **settings)
        # Know the topic's partitions before the first poll joins. Otherwise a leader may assign
        # from metadata without them, then rejoin only because they showed up (need_rejoin() is
        # True from its metadata snapshot alone). kafka-python 3.0.12 applies a join's result only
        # inside poll(): if that rejoin's SyncGroup answer lands just after a poll gave up waiting,
        # the snapshots now match, need_rejoin() reads False, and the consumer never applies the
        # assignment nor re-enables heartbeats. The coordinator rightly expires it after the
        # session timeout and the group carries on without it, while it waits forever with no
        # partitions (seen under CPU load: [set(), {0,1,2}, {3,4,5}]).
        deadline = time.monotonic() + 20  # inside ConsumerThread's 30 s start bound
        while len(consumer.partitions_for_topic(topic)) == 0:
            if time.monotonic() > deadline:
                consumer.close()
                raise AssertionError(f"kafka-python never saw partitions of {topic}")
            time.sleep(0.1)
        return consumer

    def commit(c: KafkaConsumer, offsets) -> None:
        c.commit({TopicPartition(t, p): OffsetAndMetadata(o, m, -1) for (t, p), (o, m) in offsets.items()})

    def committed(c: KafkaConsumer, partitions):
        result = {}
        for t, p in partitions:
            om = c.committed(TopicPartition(t, p), metadata=True)
            result[(t, p)] = None if om is None else (om.offset, om.metadata)
        return result

    return ClientAdapter(
        name="kafka-python",
        open=open_consumer,
        # Long enough for a whole join + sync inside one poll: kafka-python 3.0.12 can lose
        # a SyncGroup answer that arrives after a very short poll() gave up waiting for it.
        poll=lambda c: c.poll(timeout_ms=500),
        assignment=lambda c: {(tp.topic, tp.partition) for tp in c.assignment()},
        commit=commit,
        committed=committed,
        close=lambda c: c.close(),
    )


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kp-admin")
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
        assert name in admin.list_topics()
    finally:
        admin.close()


def test_kafka_python_group_rebalances_and_keeps_commits(cohort_serve):
    with LogCapture("kafka") as logs:
        create_topic(cohort_serve.bootstrap, "kp-topic", 6)
        run_group_scenario(kafka_python_adapter(cohort_serve.bootstrap, "kp-topic"), "kp-topic", "kp-group")
    logs.assert_no_repeated_errors()


def test_kafka_python_admin_lists_describes_alters_and_deletes(cohort_serve):
    bootstrap = cohort_serve.bootstrap
    topic, group = "kp-admin-topic", "kp-admin-group"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with LogCapture("kafka") as logs:
        create_topic(bootstrap, topic, 2)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kp-admin")
        member = ConsumerThread(kafka_python_adapter(bootstrap, topic), group)
        try:
            # Given a stable one-member group with commits on both partitions
            wait_for(lambda: len(member.assignment()) == 2, 45, "assignment")
            member.commit({(topic, 0): (7, "x"), (topic, 1): (8, "y")})

            # list groups
            listed = wait_for(lambda: [g for g in admin.list_groups() if g["group_id"] == group], 10, "group listed")
            assert listed[0]["protocol_type"] == "consumer"

            # describe the group: state, protocol, the member with its client id, host and assignment
            described = admin.describe_groups([group])
            description = described[group] if isinstance(described, dict) else described[0]
            assert description["group_state"] == "Stable"
            assert description["protocol_type"] == "consumer"
            assert description["protocol_data"] == "range"
            [m] = description["members"]
            assert m["client_id"] == f"kp-{group}"
            assert m["client_host"].lstrip("/") == "127.0.0.1"
            assigned = m["member_assignment"]["assigned_partitions"]
            assert {(a["topic"], p) for a in assigned for p in a["partitions"]} == {(topic, 0), (topic, 1)}

            # list committed offsets (OffsetFetch v8, all topics)
            offsets = admin.list_group_offsets({group: None})[group]
            assert {tp: (om.offset, om.metadata) for tp, om in offsets.items()} == {tp0: (7, "x"), tp1: (8, "y")}

            # When the member leaves, the group is Empty and its offsets can be altered.
            member.close()
            described = admin.describe_groups([group])
            description = described[group] if isinstance(described, dict) else described[0]
            assert description["group_state"] == "Empty"
            errors = admin.alter_group_offsets(group, {tp0: OffsetAndMetadata(3, "reset", -1)})
            assert all(e is kafka.errors.NoError for e in errors.values()), errors
            offsets = admin.list_group_offsets({group: None})[group]
            assert {tp: (om.offset, om.metadata) for tp, om in offsets.items()} == {tp0: (3, "reset"), tp1: (8, "y")}

            # delete one partition's offset (OffsetDelete)
            errors = admin.delete_group_offsets(group, [tp1])
            assert all(e is kafka.errors.NoError for e in errors.values()), errors
            offsets = admin.list_group_offsets({group: None})[group]
            assert {tp: om.offset for tp, om in offsets.items()} == {tp0: 3}

            # delete the group
            results = dict(admin.delete_groups([group]))
            assert results[group] == "OK", results
            assert group not in [g["group_id"] for g in admin.list_groups()]
            assert admin.list_group_offsets({group: None})[group] == {}
        finally:
            member.stop()
            admin.close()
    logs.assert_no_repeated_errors()


def test_kafka_python_admin_manages_topics(cohort_serve):
    with LogCapture("kafka") as logs:
        admin = KafkaAdminClient(bootstrap_servers=cohort_serve.bootstrap, client_id="kp-admin")
        try:
            admin.create_topics([NewTopic("kp-managed", 2, 1)], validate_only=True)
            assert "kp-managed" not in admin.list_topics()
            admin.create_topics([NewTopic("kp-managed", 2, 1)])
            with pytest.raises(kafka.errors.TopicAlreadyExistsError):
                admin.create_topics([NewTopic("kp-managed", 2, 1)])
            admin.create_partitions({"kp-managed": 5})
            [described] = admin.describe_topics(["kp-managed"])
            assert described["error_code"] == 0 and len(described["partitions"]) == 5
            assert all(p["leader_id"] == 0 and p["replica_nodes"] == [0] for p in described["partitions"])
            topic_id = uuid.UUID(str(described["topic_id"]))
            [by_id] = admin.describe_topics([topic_id])  # KIP-516: Metadata v12 by topic id
            assert (by_id["error_code"], by_id["name"]) == (0, "kp-managed")
            admin.delete_topics(["kp-managed"])
            assert "kp-managed" not in admin.list_topics()
        finally:
            admin.close()
    logs.assert_no_repeated_errors()
