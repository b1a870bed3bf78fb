"""Apache Kafka's Java consumer with `group.protocol=consumer` (KIP-848) against Cohort: server-side
assignors, regex subscriptions (the client's java.util.regex.Pattern and the coordinator's RE2
SubscriptionPattern), and the online migration of a classic group with members, one restart at a time."""
from __future__ import annotations

import pytest
from cohort_process import CohortServer
from java_groups import consumer_props, create_topics, partitions, rebalance_events, settled

from bounded_wait import wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    """Heartbeats every 300 ms, so a member hears of a new target assignment within a fraction of a second
    (Kafka's defaults: 5 s, with a 5 s floor; the rules are the same)."""
    data = tmp_path_factory.mktemp("cohort") / "data"
    data.mkdir()
    server = CohortServer(data, "--group.consumer.heartbeat.interval.ms", "300",
                          "--group.consumer.min.heartbeat.interval.ms", "100",
                          "--group.consumer.assignment.interval.ms", "0").start()
    try:
        yield server
    finally:
        server.stop()


def kip848_props(bootstrap: str, group: str, client_id: str, **extra) -> dict:
    props = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
             "group.protocol": "consumer", "enable.auto.commit": "false", "auto.offset.reset": "earliest",
             "retry.backoff.ms": 50, "reconnect.backoff.ms": 50}
    props.update({key.replace("_", "."): value for key, value in extra.items()})
    return props


def describe(admin, group: str) -> dict:
    answer = admin.describeConsumerGroups(groups=[group])[group]
    assert "ok" in answer, answer
    return answer["ok"]


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_three_consumer_protocol_members_share_partitions_by_the_server_side_assignor(
        java, java_admin, cohort, names, assignor):
    a, b = f"{names}-a", f"{names}-b"
    create_topics(java_admin, **{a: 3, b: 3})
    every = partitions(a, 3) + partitions(b, 3)
    consumers = []
    for client in ("c1", "c2", "c3"):
        props = kip848_props(cohort.bootstrap, names, client, group_remote_assignor=assignor)
        consumers.append(java.consumer(client, props, topics=[a, b]))
        settled(consumers, every, what=f"{client} joined")
    # Both assignors give each of 3 members 2 of 6 partitions; range keeps a member's partitions of the
    # two topics co-partitioned (the same partition numbers), uniform need not.
    states = {c.name: c.state() for c in consumers}
    assert sorted(len(s["assignment"]) for s in states.values()) == [2, 2, 2]
    if assignor == "range":
        for state in states.values():
            numbers = [sorted(int(p.rsplit(":", 1)[1]) for p in state["assignment"] if p.startswith(f"{t}:"))
                       for t in (a, b)]
            assert numbers[0] == numbers[1], state["assignment"]
    group = describe(java_admin, names)
    assert (group["type"], group["state"], group["partitionAssignor"]) == ("Consumer", "Stable", assignor)
    assert group["groupEpoch"] == group["targetAssignmentEpoch"]
    assert {m["clientId"]: m["assignment"] for m in group["members"]} == {n: s["assignment"] for n, s in states.items()}
    assert all(m["memberEpoch"] == group["groupEpoch"] and m["targetAssignment"] == m["assignment"]
               for m in group["members"])
    # The generation a KIP-848 member reports is its member epoch.
    assert {s["generation"] for s in states.values()} == {group["groupEpoch"]}

    # c3 leaves: c1 and c2 take its partitions and give up none of their own (incremental by design).
    marks = {c.name: len(states[c.name]["events"]) for c in consumers[:2]}
    consumers[2].close()
    after = settled(consumers[:2], every, what="c3 left")
    for name, state in after.items():
        assert set(states[name]["assignment"]) <= set(state["assignment"])
        assert [e for e in rebalance_events(state, marks[name]) if e[0] in ("revoked", "lost") and e[1]] == []
    consumers[0].commit_sync({f"{a}:0": 7})
    assert java_admin.listConsumerGroupOffsets(group=names)[f"{a}:0"]["offset"] == 7
    for consumer in consumers[:2]:
        consumer.close()


def test_regex_subscriptions_follow_topics_created_later(java, java_admin, cohort, names):
    """subscribe(Pattern) resolves the regex in the client from metadata; subscribe(SubscriptionPattern)
    sends an RE2 regex that the coordinator resolves against its topics (KIP-848)."""
    create_topics(java_admin, **{f"{names}-orders-1": 2, f"{names}-other": 1})
    client_side = java.consumer("client-regex", kip848_props(cohort.bootstrap, f"{names}-java-regex", "client-regex",
                                                              metadata_max_age_ms=500),
                                pattern=f"{names}-orders-.*")
    server_side = java.consumer("server-regex", kip848_props(cohort.bootstrap, f"{names}-re2", "server-regex"),
                                subscription_pattern=f"{names}-orders-.*")
    settled([client_side], partitions(f"{names}-orders-1", 2), what="the client-side regex matched")
    settled([server_side], partitions(f"{names}-orders-1", 2), what="the server-side regex matched")

    create_topics(java_admin, **{f"{names}-orders-2": 1})
    every = partitions(f"{names}-orders-1", 2) + partitions(f"{names}-orders-2", 1)
    settled([client_side], every, what="the client-side regex picked up the new topic")
    settled([server_side], every, what="the server-side regex picked up the new topic")
    group = describe(java_admin, f"{names}-re2")
    assert group["members"][0]["assignment"] == sorted(every)
    client_side.close()
    server_side.close()


def test_a_classic_group_with_members_migrates_online_to_the_consumer_protocol(java, java_admin, cohort, names):
    topic = f"{names}-t"
    create_topics(java_admin, **{topic: 4})
    every = partitions(topic, 4)
    classic = [java.consumer(c, consumer_props(cohort.bootstrap, names, c, session_timeout_ms=10000,
                                               partition_assignment_strategy="org.apache.kafka.clients.consumer."
                                                                             "CooperativeStickyAssignor"),
                             topics=[topic]) for c in ("c1", "c2")]
    settled(classic, every)
    classic[0].commit_sync({f"{topic}:0": 11, f"{topic}:3": 33})
    assert describe(java_admin, names)["type"] == "Classic"

    # Rolling upgrade, step 1: c1 restarts with group.protocol=consumer. The group becomes a consumer
    # group at once; c2, still classic, keeps working inside it.
    classic[0].close()
    upgraded = java.consumer("c1-kip848", kip848_props(cohort.bootstrap, names, "c1-kip848"), topics=[topic])
    settled([upgraded, classic[1]], every, what="c1 back on the consumer protocol")
    group = describe(java_admin, names)
    assert group["type"] == "Consumer"
    members = {m["clientId"]: m for m in group["members"]}
    assert set(members) == {"c1-kip848", "c2"}
    assert members["c2"]["upgraded"] is False and members["c1-kip848"]["upgraded"] is True
    classic[1].commit_sync({f"{topic}:1": 12})  # a classic member of a consumer group commits as before

    # Step 2: c2 restarts on the consumer protocol too. Nothing committed was lost on the way.
    classic[1].close()
    second = java.consumer("c2-kip848", kip848_props(cohort.bootstrap, names, "c2-kip848"), topics=[topic])
    settled([upgraded, second], every, what="c2 back on the consumer protocol")
    group = describe(java_admin, names)
    assert group["type"] == "Consumer" and all(m["upgraded"] for m in group["members"])
    offsets = java_admin.listConsumerGroupOffsets(group=names)
    assert {p: o["offset"] for p, o in offsets.items()} == {f"{topic}:0": 11, f"{topic}:1": 12, f"{topic}:3": 33}
    wait_until(lambda: second.committed([f"{topic}:0"])[f"{topic}:0"]["offset"] == 11, 10, "c2 reads the commit")
    upgraded.close()
    second.close()
