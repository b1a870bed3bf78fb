"""The same Java client scenarios against Apache Kafka 4.4 (bench.kafka_broker, from Maven Central's jars)
and against Cohort: what Kafka's Java client raises must be the same exception with the same message.

Kafka's answers are asked of Kafka itself, in the same run, rather than copied into the test."""
from __future__ import annotations

import pytest
from java_groups import consumer_props, create_topics, partitions, settled

from bench.kafka_broker import KafkaBroker
from bounded_wait import wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def kafka():
    broker = KafkaBroker(topics={})
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module")
def servers(kafka, cohort):
    return {"kafka": kafka.address, "cohort": cohort.bootstrap}


def outcome(error: dict | Exception | None) -> tuple[str, str] | None:
    if error is None:
        return None
    if isinstance(error, dict):
        error = error.get("error")
        if error is None:
            return None
        return error["class"], error["message"]
    return error.java_class, error.message


def left_out_member_commits(java, bootstrap: str, server: str) -> dict:
    """A member that heartbeats rarely misses a rebalance (removed when the join phase times out), then
    commits: what does the Java client raise, what is stored, does the member get back in?"""
    group, topic = "left-out", "left-out-t"  # the same names on both servers: the same messages
    admin = java.admin(f"left-out-{server}", {"bootstrap.servers": bootstrap})
    create_topics(admin, **{topic: 2})
    slow = java.consumer(f"{server}-c1", consumer_props(bootstrap, group, "c1", session_timeout_ms=60000,
                                                        heartbeat_interval_ms=20000, max_poll_interval_ms=2000),
                         topics=[topic])
    settled([slow], partitions(topic, 2), timeout=60)
    newcomer = java.consumer(f"{server}-c2", consumer_props(bootstrap, group, "c2", max_poll_interval_ms=2000),
                             topics=[topic])
    wait_until(lambda: newcomer.assignment() == partitions(topic, 2), 60, f"{server}: c2 owns both partitions")
    try:
        slow.commit_sync({f"{topic}:0": 5})
        raised = None
    except Exception as exc:  # noqa: BLE001 - compared below
        raised = exc
    stored = admin.listConsumerGroupOffsets(group=group)
    settled([slow, newcomer], partitions(topic, 2), timeout=60, what=f"{server}: c1 rejoined")
    for consumer in (slow, newcomer):
        consumer.close()
    admin.close()
    return {"raised": outcome(raised), "stored": stored}


def test_a_member_left_out_of_a_rebalance_gets_the_same_commit_failed_exception_as_from_kafka(java, servers):
    results = {server: left_out_member_commits(java, bootstrap, server) for server, bootstrap in servers.items()}
    assert results["cohort"] == results["kafka"], results
    assert results["kafka"]["raised"][0] == "org.apache.kafka.clients.consumer.CommitFailedException"
    assert results["kafka"]["stored"] == {}


def admin_refusals(java, bootstrap: str, server: str) -> dict:
    """What Kafka refuses through the Admin client, and how: a group with a member, unknown groups."""
    group, topic = "refusals", "refusals-t"
    admin = java.admin(f"refusals-{server}", {"bootstrap.servers": bootstrap})
    create_topics(admin, **{topic: 1})
    member = java.consumer(f"{server}-m1", consumer_props(bootstrap, group, "m1"), topics=[topic])
    settled([member], partitions(topic, 1), timeout=60)
    member.commit_sync({f"{topic}:0": 3})
    answers = {
        "alter offsets of an active group": admin.alterConsumerGroupOffsets(group=group, offsets={f"{topic}:0": 1})["all"],
        "delete offsets the group consumes": admin.deleteConsumerGroupOffsets(group=group, partitions=[f"{topic}:0"])["all"],
        "delete an active group": admin.deleteConsumerGroups(groups=[group])[group],
        "describe an unknown group": admin.describeConsumerGroups(groups=["no-such-group"])["no-such-group"],
        "delete an unknown group": admin.deleteConsumerGroups(groups=["no-such-group"])["no-such-group"],
        "offsets of an unknown group": {"ok": admin.listConsumerGroupOffsets(group="no-such-group")},
    }
    member.close()
    admin.close()
    return {what: outcome(answer) for what, answer in answers.items()}


def test_the_admin_client_is_refused_as_by_kafka(java, servers):
    results = {server: admin_refusals(java, bootstrap, server) for server, bootstrap in servers.items()}
    assert results["cohort"] == results["kafka"], results
    assert results["kafka"]["describe an unknown group"][0] == "org.apache.kafka.common.errors.GroupIdNotFoundException"
