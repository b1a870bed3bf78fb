"""KIP-848 regex subscriptions under ACLs, with confluent-kafka (`group.protocol=consumer`) over SASL.

A regex resolves only over the topics the member's principal may DESCRIBE, and again once the ACLs
change; ConsumerGroupDescribe answers TOPIC_AUTHORIZATION_FAILED (no members, no topic names) to a
principal that may describe the group but not every topic in its assignments (Kafka: KAFKA-18813).
"""
from __future__ import annotations

import logging
import time

import pytest

from cohort_process import add_scram_users

import confluent_kafka  # the test command installs every real client: a missing one fails, never skips
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic
from confluent_kafka.admin import ResourcePatternType, ResourceType

pytestmark = pytest.mark.timeout(180)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
GROUP = "regex-group"


@pytest.fixture
def node(server_factory, tmp_path):
    data = tmp_path / "data"
    add_scram_users(data, USERS)
    return server_factory(data, listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="SCRAM-SHA-512",
                          authorizer_class_name="acl", super_users="User:admin",
                          group_consumer_session_timeout_ms=6000, group_consumer_min_session_timeout_ms=1000,
                          group_consumer_heartbeat_interval_ms=300, group_consumer_min_heartbeat_interval_ms=100)


def settings(node, user: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{node.server.ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": USERS[user], "logger": logging.getLogger("tests.confluent_kafka")}


def allow(client: AdminClient, user: str, rtype, name: str, *operations) -> None:
    bindings = [AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                           AclPermissionType.ALLOW) for op in operations]
    for future in client.create_acls(bindings).values():
        future.result(10)


def assignment(c) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def poll_until(c, condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}; assigned {assignment(c)}"
        c.poll(0.1)


def described_topics(client: AdminClient) -> set[str]:
    group = client.describe_consumer_groups([GROUP])[GROUP].result(10)
    return {tp.topic for m in group.members for tp in m.assignment.topic_partitions}


def test_a_regex_matches_only_topics_the_principal_may_describe_and_follows_acl_changes(node):
    admin = AdminClient(settings(node, "admin"))
    for future in admin.create_topics([NewTopic("open-a", 2, 1), NewTopic("secret-b", 1, 1)]).values():
        future.result(20)
    allow(admin, "alice", ResourceType.GROUP, GROUP, AclOperation.READ)
    allow(admin, "alice", ResourceType.TOPIC, "open-a", AclOperation.READ)  # READ implies DESCRIBE
    allow(admin, "bob", ResourceType.GROUP, GROUP, AclOperation.DESCRIBE)
    allow(admin, "bob", ResourceType.TOPIC, "open-a", AclOperation.DESCRIBE)

    consumer = confluent_kafka.Consumer({**settings(node, "alice"), "group.id": GROUP, "group.protocol": "consumer",
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    bob = AdminClient(settings(node, "bob"))
    try:
        consumer.subscribe(["^.*-.*"])
        poll_until(consumer, lambda: assignment(consumer) == {("open-a", 0), ("open-a", 1)}, 30,
                   "the regex resolved to the topic alice may describe")
        for _ in range(10):  # and it stays so: secret-b is never assigned to her
            consumer.poll(0.1)
        assert assignment(consumer) == {("open-a", 0), ("open-a", 1)}
        assert described_topics(admin) == {"open-a"}
        assert described_topics(bob) == {"open-a"}  # bob may describe every topic in the assignments

        allow(admin, "alice", ResourceType.TOPIC, "secret-b", AclOperation.READ)
        poll_until(consumer, lambda: ("secret-b", 0) in assignment(consumer), 30,
                   "the regex is resolved again once the ACLs let alice describe secret-b")
        assert described_topics(admin) == {"open-a", "secret-b"}
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            described_topics(bob)  # secret-b is in the assignment now, and bob may not describe it
        assert refused.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert "secret-b" not in str(refused.value)
    finally:
        consumer.close()
