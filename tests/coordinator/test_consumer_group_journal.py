"""Consumer-group (KIP-848) rebalances in the operator journal: the engine, driven with a manual clock,
emits one `RebalanceJournaled` per rebalance, from its first group-epoch bump until the group is Stable
or Empty again, with the trigger, the members involved and the partitions whose target owner changed."""
from __future__ import annotations

from cohort.coordinator.groups.reports.journal import TRIGGERS, GroupJournal, PartitionMove, partition_moves
from cohort.coordinator.groups.consumer.engine import ConsumerGroupState
from cohort.coordinator.groups.consumer.events import TopicsChanged
from cohort.coordinator.groups.effects import RebalanceJournaled
from cohort.coordinator.groups.classic.events import LeaveGroup
from tests.coordinator.consumer_group_driver import Driver, tid, topic
from tests.coordinator.test_consumer_group_migration import upgraded

IMAGE = dict([topic("orders", 4), topic("payments", 2)])
ORDERS = tid("orders")


def journaled(d: Driver) -> list[RebalanceJournaled]:
    return [e for e in d.events if isinstance(e, RebalanceJournaled)]


def moves(entry: RebalanceJournaled) -> set[tuple]:
    found, total = partition_moves(entry.assignments_before, entry.assignments_after)
    assert total == len(found)
    return {(m.topic, m.partition, m.from_member, m.to_member) for m in found}


def roles(entry: RebalanceJournaled) -> dict[str, str]:
    return {m[0]: m[4] for m in entry.members}


def client(member: str) -> dict:
    return dict(client_id=f"client-{member}", client_host=f"/10.0.0.{ord(member[0])}")


def join(d: Driver, member: str, **fields):
    return d.join(member, topics=["orders"], **client(member), **fields)


def settle(d: Driver, *members: str) -> None:
    """Heartbeat every member with what it holds until the group is Stable (bounded)."""
    for _ in range(10):
        if d.group.state is ConsumerGroupState.STABLE:
            return
        for m in members:
            member = d.group.members[m]
            held = sorted((t, sorted(ps)) for t, ps in member.assigned.items() if ps)
            d.heartbeat(m, member.member_epoch, topic_partitions=held, **client(m))
    assert d.group.state is ConsumerGroupState.STABLE


def two_member_group() -> Driver:
    d = Driver(image=IMAGE, session_timeout_ms=45_000)
    join(d, "a")
    d.clock += 100
    join(d, "b")
    settle(d, "a", "b")
    d.events.clear()
    return d


def test_the_first_member_joining_is_one_entry_with_every_partition_moving_to_it():
    d = Driver(image=IMAGE)
    d.clock = 1_000
    join(d, "a")
    [entry] = journaled(d)
    assert (entry.group_type, entry.trigger, entry.epoch_before, entry.epoch_after, entry.state_after) == (
        "consumer", "member_joined", 1, 2, "Stable")
    assert entry.trigger in TRIGGERS
    assert entry.started_ms == entry.ended_ms == 1_000
    assert entry.members == (("a", None, "client-a", "/10.0.0.97", "joined"),)
    assert moves(entry) == {("orders", p, None, "a") for p in range(4)}


def test_a_member_joining_with_no_subscription_is_no_rebalance():
    d = Driver(image=IMAGE)
    d.join("idle", topics=[], **client("idle"))
    assert journaled(d) == [] and d.group.state is ConsumerGroupState.STABLE
    d = two_member_group()
    d.join("idle", topics=[], **client("idle"))
    assert journaled(d) == [] and d.group.state is ConsumerGroupState.STABLE


def test_a_join_is_journaled_once_the_group_is_stable_again_with_its_start_and_end():
    d = Driver(image=IMAGE)
    join(d, "a")
    d.events.clear()
    d.clock = 5_000
    join(d, "b")
    assert journaled(d) == []  # b waits for a to revoke: the rebalance is under way
    d.clock = 5_300
    settle(d, "a", "b")
    [entry] = journaled(d)
    assert (entry.trigger, entry.epoch_before, entry.epoch_after, entry.started_ms, entry.ended_ms) == (
        "member_joined", 2, 3, 5_000, 5_300)
    assert roles(entry) == {"b": "joined"}
    given = {p for _, p, _, to in moves(entry) if to == "b"}
    assert len(given) == 2 and moves(entry) == {("orders", p, "a", "b") for p in given}


def test_a_member_leaving_names_it_and_gives_its_partitions_back():
    d = two_member_group()
    held_by_b = {p for ps in d.group.members["b"].assigned.values() for p in ps}
    d.heartbeat("b", -1)
    assert journaled(d) == []
    settle(d, "a")
    [entry] = journaled(d)
    assert (entry.trigger, entry.epoch_before, entry.epoch_after) == ("member_left", 3, 4)
    assert entry.members == (("b", None, "client-b", "/10.0.0.98", "removed"),)
    assert moves(entry) == {("orders", p, "b", "a") for p in held_by_b}


def test_a_classic_member_leaving_with_a_reason_keeps_the_clients_reason():
    d = Driver(image=IMAGE)
    join(d, "a")
    d.events.clear()
    assert d.send(LeaveGroup([("a", None, "the consumer is closing")])) == [[0]]
    [entry] = journaled(d)  # nothing left to reconcile: the group is Empty at once
    assert (entry.trigger, entry.client_reason, entry.state_after) == ("member_left", "the consumer is closing",
                                                                       "Empty")
    assert moves(entry) == {("orders", p, "a", None) for p in range(4)}


def test_an_expired_session_is_journaled_with_the_expired_member():
    d = two_member_group()
    for _ in range(12):  # a heartbeats, b goes silent
        d.advance(4_000)
        d.heartbeat("a", d.group.members["a"].member_epoch, **client("a"))
    assert "b" not in d.group.members
    settle(d, "a")
    [entry] = journaled(d)
    assert (entry.trigger, entry.state_after) == ("session_expired", "Stable")
    assert roles(entry) == {"b": "expired"}
    assert {(f, t) for _, _, f, t in moves(entry)} == {("b", "a")}


def test_a_member_not_revoking_within_its_rebalance_timeout_is_fenced_and_journaled_so():
    d = Driver(image=IMAGE)
    join(d, "a", rebalance_timeout_ms=10_000)
    d.events.clear()
    join(d, "b")
    d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2, 3])], **client("a"))  # told to revoke two; never does
    d.advance(10_000)
    assert "a" not in d.group.members
    settle(d, "b")
    [entry] = journaled(d)  # one rebalance: b's join, then a fenced before the group settled
    assert entry.trigger == "member_joined" and "1 more epoch bump" in entry.detail
    assert roles(entry) == {"b": "joined", "a": "rebalance_timeout"}
    assert (entry.epoch_before, entry.epoch_after) == (2, 4)
    assert moves(entry) == {("orders", p, "a", "b") for p in range(4)}


def test_a_topic_getting_partitions_is_a_topic_change_moving_only_the_new_partitions():
    d = Driver(image=IMAGE)
    join(d, "a")
    d.events.clear()
    d.send(TopicsChanged({**IMAGE, **dict([topic("orders", 6)])}))
    settle(d, "a")
    [entry] = journaled(d)
    assert (entry.trigger, entry.epoch_before, entry.epoch_after, entry.members) == ("topic_change", 2, 3, ())
    assert moves(entry) == {("orders", 4, None, "a"), ("orders", 5, None, "a")}


def test_a_deleted_topic_is_a_topic_change_whose_partitions_go_to_nobody():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders", "payments"])
    d.events.clear()
    d.send(TopicsChanged(dict([topic("orders", 4)])))
    settle(d, "a")
    [entry] = journaled(d)
    assert entry.trigger == "topic_change"
    assert moves(entry) == {("payments", 0, "a", None), ("payments", 1, "a", None)}


def test_a_static_member_back_under_a_new_id_is_an_entry_without_a_new_epoch():
    d = Driver(image=IMAGE)
    join(d, "a1", instance_id="host-a")
    d.heartbeat("a1", -2, instance_id="host-a")
    d.events.clear()
    join(d, "a2", instance_id="host-a")
    [entry] = journaled(d)
    assert (entry.trigger, entry.epoch_before, entry.epoch_after) == ("static_member_replaced", 2, 2)
    assert roles(entry) == {"a1": "removed", "a2": "joined"}
    assert moves(entry) == set()


def test_replaying_the_log_journals_nothing_and_the_entries_become_journal_records():
    d = two_member_group()
    fresh = d.replayed(image=IMAGE)
    assert journaled(fresh) == []
    journal = GroupJournal(max_entries=10)
    d2 = Driver(image=IMAGE)
    join(d2, "a")
    for entry in journaled(d2):
        journal.apply(journal.rebalance_record(entry))
    [stored] = journal.entries("g")
    assert (stored.kind, stored.group_type, stored.trigger, stored.epoch_after) == (
        "rebalance", "consumer", "member_joined", 2)
    assert stored.moves == tuple(PartitionMove("orders", p, None, "a") for p in range(4))


def test_an_upgraded_group_going_back_to_classic_is_one_entry_ending_dead_with_what_the_classic_members_keep():
    d = upgraded()  # a classic group at generation 7 (c1: orders 0-1, c2: 2-3) converted online
    assert journaled(d) == []  # the conversion itself moves nothing
    d.clock = 2_000
    join(d, "k1")
    d.clock = 2_500
    d.heartbeat("k1", -1)  # the last consumer-protocol member leaves: a classic group again
    [entry] = journaled(d)
    assert (entry.trigger, entry.epoch_before, entry.epoch_after, entry.state_after) == ("member_joined", 7, 9, "Dead")
    assert (entry.started_ms, entry.ended_ms) == (2_000, 2_500)
    assert "converted from a classic group at generation 7" in entry.detail
    assert "converted to a classic group" in entry.detail.split("generation 7")[1]
    assert roles(entry) == {"k1": "joined"}
    assert moves(entry) == set()  # k1 never got anything; c1 and c2 keep what they held
