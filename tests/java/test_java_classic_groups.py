"""Apache Kafka's Java consumer (kafka-clients 4.4, classic protocol) in groups coordinated by Cohort.

Each consumer runs a poll loop of its own in the module's JVM, as applications run it; the assignors are
Kafka's own (the group leader computes the assignment), so what is checked is that Cohort carries the
rebalances through exactly as Kafka's coordinator does: who gets what, in which generation, which
callbacks fire. What a fenced member's commit raises is compared with Kafka's own answer in
test_java_against_kafka.py.
"""
from __future__ import annotations

import time

import pytest
from java_groups import consumer_props, create_topics, partitions, rebalance_events, settled
from java_peer import JavaPeer

pytestmark = pytest.mark.timeout(180)

RANGE = "org.apache.kafka.clients.consumer.RangeAssignor"
ROUND_ROBIN = "org.apache.kafka.clients.consumer.RoundRobinAssignor"
COOPERATIVE_STICKY = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


# Two topics of 2 and 4 partitions tell Range (per topic) from RoundRobin (over all, sorted). Members are
# ordered by member id, which starts with the client id: c1 < c2 < c3.
EAGER_CASES = {
    "range": (RANGE,
              {"c1": ["a:0", "b:0", "b:1"], "c2": ["a:1", "b:2"], "c3": ["b:3"]},
              {"c1": ["a:0", "b:0", "b:1"], "c3": ["a:1", "b:2", "b:3"]}),
    "roundrobin": (ROUND_ROBIN,
                   {"c1": ["a:0", "b:1"], "c2": ["a:1", "b:2"], "c3": ["b:0", "b:3"]},
                   {"c1": ["a:0", "b:0", "b:2"], "c3": ["a:1", "b:1", "b:3"]}),
}


@pytest.mark.parametrize("case", sorted(EAGER_CASES))
def test_eager_assignors_rebalance_three_members_joining_and_leaving(java, java_admin, cohort, names, case):
    assignor, three, two = EAGER_CASES[case]
    a, b = f"{names}-a", f"{names}-b"
    create_topics(java_admin, **{a: 2, b: 4})
    every = partitions(a, 2) + partitions(b, 4)

    def named(assignment: dict) -> dict:
        return {c: sorted(p.replace("a:", f"{a}:").replace("b:", f"{b}:") for p in ps) for c, ps in assignment.items()}

    consumers = []
    generations = []
    for client in ("c1", "c2", "c3"):
        props = consumer_props(cohort.bootstrap, names, client, partition_assignment_strategy=assignor)
        consumers.append(java.consumer(client, props, topics=[a, b]))
        states = settled(consumers, every, what=f"{client} joined")
        generations.append(states["c1"]["generation"])
    assert {n: s["assignment"] for n, s in states.items()} == named(three)

    # c2 leaves (close sends LeaveGroup): the others rebalance at once, without waiting for a timeout.
    left_at = time.monotonic()
    consumers[1].close()
    states = settled([consumers[0], consumers[2]], every, what="c2 left")
    assert time.monotonic() - left_at < 8, "a LeaveGroup must rebalance before c2's session timeout (10 s)"
    generations.append(states["c1"]["generation"])
    assert {n: s["assignment"] for n, s in states.items()} == named(two)
    assert generations == sorted(set(generations)), f"each rebalance is a new generation: {generations}"

    # Eager: before every rejoin a member gives up everything it owned, then takes its new assignment.
    for name, state in states.items():
        owned: list[str] = []
        for kind, parts in rebalance_events(state):
            if kind == "revoked":
                assert parts == owned, f"{name} revoked {parts}, owned {owned}"
                owned = []
            elif kind == "assigned":
                assert owned == [], f"{name} assigned {parts} while still owning {owned}"
                owned = parts
        assert owned == state["assignment"]
    for consumer in (consumers[0], consumers[2]):
        consumer.close()


def test_cooperative_sticky_moves_only_the_partitions_that_change_owner(java, java_admin, cohort, names):
    topic = f"{names}-t"
    create_topics(java_admin, **{topic: 6})
    every = partitions(topic, 6)
    consumers = []
    history: list[dict] = []
    for client in ("c1", "c2", "c3"):
        props = consumer_props(cohort.bootstrap, names, client, partition_assignment_strategy=COOPERATIVE_STICKY)
        consumers.append(java.consumer(client, props, topics=[topic]))
        history.append(settled(consumers, every, what=f"{client} joined"))
    assert sorted(len(s["assignment"]) for s in history[-1].values()) == [2, 2, 2]

    # c3 leaves: its two partitions go to c1 and c2, who give up nothing.
    consumers[2].close()
    history.append(settled(consumers[:2], every, what="c3 left"))
    assert sorted(len(s["assignment"]) for s in history[-1].values()) == [3, 3]

    # Sticky: from one step to the next a member keeps what it had unless it had more than its share.
    for before, after in zip(history, history[1:]):
        for name in after:
            if name in before:
                kept = set(before[name]["assignment"]) & set(after[name]["assignment"])
                share = -(-len(every) // len(after))
                assert len(kept) >= min(len(before[name]["assignment"]), share - 1), (name, before[name], after[name])
    # Cooperative: a member revokes only partitions it then no longer owns, never everything; the
    # last step (a member leaving) revokes nothing from anybody.
    for name, state in history[-1].items():
        owned: set[str] = set()
        for kind, parts in rebalance_events(state):
            if kind == "revoked":
                assert set(parts) <= owned and set(parts) != owned or not parts, f"{name} revoked {parts} of {owned}"
                owned -= set(parts)
            elif kind == "assigned":
                assert not owned & set(parts), f"{name} re-assigned {parts} it owned"
                owned |= set(parts)
        assert sorted(owned) == state["assignment"]
        before_leave = len(history[-2][name]["events"])
        assert all(kind != "revoked" or not parts for kind, parts in rebalance_events(state, before_leave)), \
            f"{name} revoked partitions when c3 left: {state['events'][before_leave:]}"
    for consumer in consumers[:2]:
        consumer.close()


def test_commit_sync_commit_async_committed_and_seek(java, java_admin, cohort, names):
    topic = f"{names}-t"
    create_topics(java_admin, **{topic: 3})
    consumer = java.consumer("c1", consumer_props(cohort.bootstrap, names, "c1"), topics=[topic])
    settled([consumer], partitions(topic, 3))

    consumer.commit_sync({f"{topic}:0": 10, f"{topic}:1": {"offset": 20, "metadata": "batch-7", "leaderEpoch": 0}})
    seen = consumer.commit_async({f"{topic}:2": 30})
    assert seen == {f"{topic}:2": {"offset": 30, "metadata": "", "leaderEpoch": None}}
    committed = consumer.committed(partitions(topic, 3))
    assert {p: (c["offset"], c["metadata"]) for p, c in committed.items()} == {
        f"{topic}:0": (10, ""), f"{topic}:1": (20, "batch-7"), f"{topic}:2": (30, "")}
    assert committed[f"{topic}:1"]["leaderEpoch"] == 0

    # The positions were set when the partitions were assigned: nothing was committed then, so
    # auto.offset.reset=earliest asked ListOffsets (0). seek moves one; commitSync() with no offsets
    # commits every position.
    assert [consumer.call("position", partition=p) for p in partitions(topic, 3)] == [0, 0, 0]
    consumer.call("seek", partition=f"{topic}:0", offset=4)
    assert consumer.call("position", partition=f"{topic}:0") == 4
    consumer.call("commitSync")
    assert {p: c["offset"] for p, c in consumer.committed(partitions(topic, 3)).items()} == {
        f"{topic}:0": 4, f"{topic}:1": 0, f"{topic}:2": 0}
    # commitAsync() with the positions too; Kafka's Admin reads the same offsets.
    consumer.call("seek", partition=f"{topic}:2", offset=31)
    consumer.commit_async()
    offsets = java_admin.listConsumerGroupOffsets(group=names)
    assert {p: o["offset"] for p, o in offsets.items()} == {f"{topic}:0": 4, f"{topic}:1": 0, f"{topic}:2": 31}
    consumer.close()

    # A new member of the group starts from the committed offsets.
    again = java.consumer("c2", consumer_props(cohort.bootstrap, names, "c2"), topics=[topic])
    settled([again], partitions(topic, 3))
    assert [again.call("position", partition=p) for p in partitions(topic, 3)] == [4, 0, 31]
    again.close()


def test_static_member_survives_a_restart_without_rebalance_then_expires_after_its_session(
        java, java_admin, cohort, names, tmp_path):
    topic = f"{names}-t"
    create_topics(java_admin, **{topic: 4})
    every = partitions(topic, 4)

    def static_props(client: str) -> dict:
        return consumer_props(cohort.bootstrap, names, client, group_instance_id=f"{client}-instance",
                              session_timeout_ms=15000)  # room for a new JVM to start on a busy machine

    stays = java.consumer("s1", static_props("s1"), topics=[topic])
    victim = JavaPeer(tmp_path, name="victim")
    try:
        restarted = victim.consumer("s2", static_props("s2"), topics=[topic])
        before = settled([stays, restarted], every)
        events_before = len(before["s1"]["events"])

        # kill -9 and start again with the same group.instance.id, within the session timeout: s2 gets its
        # partitions back in the same generation and s1 never sees a rebalance.
        victim.kill()
        victim = JavaPeer(tmp_path, name="victim-restarted")
        restarted = victim.consumer("s2", static_props("s2"), topics=[topic])
        after = settled([stays, restarted], every, what="s2 restarted")
        assert after["s2"]["assignment"] == before["s2"]["assignment"]
        assert after["s1"]["generation"] == before["s1"]["generation"] == after["s2"]["generation"]
        assert after["s2"]["member_id"] != before["s2"]["member_id"], "a restarted static member gets a new member id"
        assert rebalance_events(stays.state(), events_before) == []

        # Now s2 dies for good: nothing happens until its session times out (15 s), then s1 takes all.
        victim.kill()
        killed_at = time.monotonic()
        settled([stays], every, timeout=40, what="s2's session expired")
        waited = time.monotonic() - killed_at
        assert waited > 13, f"s2 was removed after {waited:.1f}s, before its 15 s session timeout"
        assert stays.state()["generation"] == before["s1"]["generation"] + 1
    finally:
        victim.kill()
    stays.close()
