"""The KIP-848 consumer group engine driven with a manual clock (no loop, no sockets)."""
from __future__ import annotations

from pathlib import Path

import pytest

from cohort.coordinator.groups.consumer.engine import ConsumerGroupState
from cohort.coordinator.groups.consumer.events import ConsumerGroupHeartbeat, TopicsChanged
from cohort.coordinator.groups.consumer.heartbeat import HeartbeatError, validate_heartbeat
from cohort.coordinator.groups.consumer.member import MemberState
from cohort.coordinator.records.types import ConsumerGroupMemberMetadataTombstone, decode_record, encode_record
from cohort.protocol.errors import ErrorCode
from tests.coordinator.consumer_group_driver import Driver, owned, tid, topic

IMAGE = dict([topic("orders", 4), topic("payments", 2)])
ORDERS = tid("orders")


def partitions_of(result) -> set[int]:
    return {p for t, ps in owned(result) for p in ps}


def owners(driver: Driver) -> dict:
    """Partition -> members holding it (assigned or not yet revoked), from the engine's members."""
    held: dict = {}
    for member in driver.group.members.values():
        for tp in member.owned():
            held.setdefault(tp, []).append(member.member_id)
    return held


def test_first_member_gets_every_partition_at_epoch_two_and_the_group_is_stable():
    d = Driver(image=IMAGE)
    r = d.join("a", topics=["orders"])
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "a", 2, 5000)
    assert owned(r) == [(ORDERS, [0, 1, 2, 3])]
    assert d.group.state is ConsumerGroupState.STABLE
    assert {type(rec).__name__ for rec in d.log} == {
        "ConsumerGroupMemberMetadataRecord", "ConsumerGroupMetadataRecord", "ConsumerGroupTargetAssignmentMemberRecord",
        "ConsumerGroupTargetAssignmentMetadataRecord", "ConsumerGroupCurrentMemberAssignmentRecord"}
    for rec in d.log:  # every record survives the offsets log's codec
        assert decode_record(*encode_record(rec)) == rec


def test_a_group_is_created_at_epoch_one_and_a_member_subscribing_to_nothing_bumps_no_epoch():
    """Kafka's rule: a new group is at group epoch 1 with a target assignment of epoch 1; a member joining
    with no topic names and no regex changes no subscription, so nothing is bumped until one subscribes."""
    d = Driver(image=IMAGE)
    assert (d.group.group_epoch, d.group.target_assignment_epoch) == (1, 1)
    a = d.join("a", topics=[])
    assert (a.error, a.member_epoch, owned(a)) == (0, 1, [])
    assert (d.group.group_epoch, d.group.target_assignment_epoch) == (1, 1)
    assert d.group.state is ConsumerGroupState.STABLE
    assert not [rec for rec in d.log if type(rec).__name__ == "ConsumerGroupMetadataRecord"]
    b = d.join("b", topics=[])
    assert (b.error, b.member_epoch, d.group.group_epoch) == (0, 1, 1)
    a = d.heartbeat("a", 1, subscribed_topic_names=["orders"], topic_partitions=[])  # a subscription bumps
    assert (a.member_epoch, d.group.group_epoch, partitions_of(a)) == (2, 2, {0, 1, 2, 3})
    c = d.join("c", topics=[])  # and a third member subscribing to nothing still bumps nothing
    assert (c.member_epoch, d.group.group_epoch, owned(c)) == (2, 2, [])
    assert d.join("p", topics=["payments"]).member_epoch == 3 and d.group.group_epoch == 3
    fresh = d.replayed(image=IMAGE)
    assert (fresh.group.group_epoch, fresh.group.target_assignment_epoch) == (3, 3)
    assert fresh.group.members == d.group.members


@pytest.mark.parametrize("interval_ms", [0, 1_000])
def test_a_member_subscribing_to_nothing_joins_a_group_its_last_member_left_at_the_group_epoch(interval_ms):
    d = Driver(image=IMAGE, assignment_interval_ms=interval_ms)
    d.join("a", topics=["orders"])
    d.heartbeat("a", -1)
    assert (d.group.group_epoch, d.group.state) == (3, ConsumerGroupState.EMPTY)
    b = d.join("b", topics=[])
    assert b.error == 0 and d.group.group_epoch == 3
    d.advance(interval_ms)  # the target for epoch 3 (computed at once without an interval)
    b = d.heartbeat("b", b.member_epoch, topic_partitions=[])
    assert (b.member_epoch, d.group.target_assignment_epoch, d.group.state) == (3, 3, ConsumerGroupState.STABLE)


def test_a_group_deleted_and_created_again_replays_as_the_new_group_at_epoch_one():
    """Records after a group's tombstones are a new group's: it starts at epoch 1 again, as a new group does,
    even when its only member subscribes to nothing (so no epoch record follows the tombstones)."""
    first = Driver(image=IMAGE)
    first.join("a", topics=["orders"])
    first.heartbeat("a", -1)
    again = Driver(image=IMAGE)
    b = again.join("b", topics=[])
    again.log = first.log + list(first.group.tombstones()) + again.log
    fresh = again.replayed(image=IMAGE)
    g = fresh.group
    assert (g.group_epoch, g.target_assignment_epoch, g.state) == (1, 1, ConsumerGroupState.STABLE)
    assert fresh.heartbeat("b", b.member_epoch, topic_partitions=[]).member_epoch == b.member_epoch == 1


def test_a_new_member_gets_partitions_only_after_their_owner_revoked_them():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders"])
    b = d.join("b", topics=["orders"])
    assert b.member_epoch == 3 and partitions_of(b) == set()
    assert d.group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert d.group.state is ConsumerGroupState.RECONCILING
    a = d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2, 3])])
    assert a.member_epoch == 2 and len(partitions_of(a)) == 2  # told what it keeps; still epoch 2
    assert d.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert all(len(holders) == 1 for holders in owners(d).values())
    b = d.heartbeat("b", 3, topic_partitions=[])
    assert partitions_of(b) == set()  # a has not released them yet
    kept = partitions_of(a)
    a = d.heartbeat("a", 2, topic_partitions=[(ORDERS, sorted(kept))])
    assert a.member_epoch == 3
    b = d.heartbeat("b", 3, topic_partitions=[])
    assert partitions_of(b) == {0, 1, 2, 3} - kept
    assert d.group.state is ConsumerGroupState.STABLE


def test_epoch_checks_fence_a_member_ahead_or_behind_but_accept_the_previous_epoch_with_a_subset():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders"])
    d.join("b", topics=["orders"])
    d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2, 3])])
    a = d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1])])
    assert a.member_epoch == 3
    # The answer with epoch 3 was lost: epoch 2 and a subset of the assignment is accepted.
    assert d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1])]).error == ErrorCode.NONE
    assert d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2])]).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert d.heartbeat("a", 4, topic_partitions=[]).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert d.heartbeat("nobody", 3, topic_partitions=[]).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_fenced_member_rejoining_with_epoch_zero_starts_over_without_its_partitions():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders"])
    r = d.join("a", topics=["orders"])
    assert r.member_epoch == 2 and partitions_of(r) == {0, 1, 2, 3}
    assert len(d.group.members) == 1


@pytest.mark.parametrize("fields, error, message", [
    (dict(member_id="", member_epoch=1), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
    (dict(member_id="", member_epoch=0, api_version=1), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
    (dict(member_id="m", member_epoch=0, instance_id=""), ErrorCode.INVALID_REQUEST, "InstanceId can't be empty."),
    (dict(member_id="m", member_epoch=0, rack_id=""), ErrorCode.INVALID_REQUEST, "RackId can't be empty."),
    (dict(member_id="m", member_epoch=0, topic_partitions=[], subscribed_topic_names=[]), ErrorCode.INVALID_REQUEST,
     "RebalanceTimeoutMs must be provided in first request."),
    (dict(member_id="m", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_names=[]), ErrorCode.INVALID_REQUEST,
     "TopicPartitions must be empty when (re-)joining."),
    (dict(member_id="m", member_epoch=0, rebalance_timeout_ms=1, topic_partitions=[]), ErrorCode.INVALID_REQUEST,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    (dict(member_id="m", member_epoch=-2), ErrorCode.INVALID_REQUEST, "InstanceId can't be null."),
    (dict(member_id="m", member_epoch=-3), ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid."),
    (dict(member_id="m", member_epoch=0, rebalance_timeout_ms=1, topic_partitions=[], subscribed_topic_names=[],
          server_assignor="sticky"), ErrorCode.UNSUPPORTED_ASSIGNOR,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
    (dict(member_id="m", member_epoch=0, rebalance_timeout_ms=1, topic_partitions=[], subscribed_topic_regex="(a"),
     ErrorCode.INVALID_REGULAR_EXPRESSION, "SubscribedTopicRegex `(a` is not a valid regular expression"),
])
def test_malformed_heartbeats_get_kafkas_error_and_message(fields, error, message):
    d = Driver(image=IMAGE)
    r = d.heartbeat(**fields)
    assert r.error == error and r.error_message.startswith(message)
    assert d.log == [] and d.group.is_empty


def test_an_empty_group_id_is_invalid_before_any_group_exists():
    with pytest.raises(HeartbeatError, match="GroupId can't be empty."):
        validate_heartbeat("", ConsumerGroupHeartbeat(1, "m", 0, rebalance_timeout_ms=1, topic_partitions=[],
                                                       subscribed_topic_names=[]))


def test_v0_join_with_an_empty_member_id_gets_one_made_by_the_coordinator():
    d = Driver(image=IMAGE)
    r = d.join("", topics=["orders"], api_version=0)
    assert r.error == 0 and len(r.member_id) == 22 and r.member_id in d.group.members


def test_leaving_bumps_the_group_epoch_and_the_partitions_go_to_the_others():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders"])
    d.join("b", topics=["orders"])
    d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2, 3])])
    a = d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1])])
    b = d.heartbeat("b", 3, topic_partitions=[])
    left = d.heartbeat("b", -1)
    assert (left.error, left.member_epoch) == (0, -1)
    assert d.group.group_epoch == 4 and d.group.state is ConsumerGroupState.ASSIGNING
    a = d.heartbeat("a", 3, topic_partitions=[(ORDERS, [0, 1])])
    assert a.member_epoch == 4 and partitions_of(a) == {0, 1, 2, 3}
    assert ConsumerGroupMemberMetadataTombstone("g", "b") in d.log


def test_a_member_that_stops_heartbeating_is_fenced_when_its_session_expires():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders"])
    d.join("b", topics=["orders"])
    for _ in range(12):  # b keeps heartbeating every 5 s, a never does
        d.advance(5_000)
        d.heartbeat("b", d.group.members["b"].member_epoch, topic_partitions=[])
    assert "a" not in d.group.members and "b" in d.group.members
    d.heartbeat("b", d.group.members["b"].member_epoch, topic_partitions=[])
    assert d.group.members["b"].assigned == {ORDERS: frozenset({0, 1, 2, 3})}
    assert d.heartbeat("a", 2, topic_partitions=[]).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert d.group.validate_offset_commit("a", None, 2, 9) == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced():
    d = Driver(image=IMAGE, session_timeout_ms=45_000)
    d.join("a", topics=["orders"], rebalance_timeout_ms=10_000)
    d.join("b", topics=["orders"])
    d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2, 3])])  # told to revoke two
    for _ in range(3):
        d.advance(4_000)
        d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2, 3])])  # alive, but never releases
        d.heartbeat("b", 3, topic_partitions=[])
    assert "a" not in d.group.members
    d.heartbeat("b", d.group.members["b"].member_epoch, topic_partitions=[])
    assert d.group.members["b"].assigned == {ORDERS: frozenset({0, 1, 2, 3})}


def test_a_static_member_leaving_for_now_keeps_its_partitions_for_its_replacement():
    d = Driver(image=IMAGE)
    d.join("a1", topics=["orders"], instance_id="host-a")
    d.join("b", topics=["orders"])
    d.heartbeat("a1", 2, instance_id="host-a", topic_partitions=[(ORDERS, [0, 1, 2, 3])])
    a = d.heartbeat("a1", 2, instance_id="host-a", topic_partitions=[(ORDERS, [0, 1])])
    d.heartbeat("b", 3, topic_partitions=[])
    epoch = d.group.group_epoch
    held = set(d.group.members["a1"].assigned[ORDERS])
    assert len(held) == 2
    # Still active: another process with the same instance id is turned away.
    assert d.join("a2", topics=["orders"], instance_id="host-a").error == ErrorCode.UNRELEASED_INSTANCE_ID
    assert d.heartbeat("a2", 3, instance_id="host-a").error == ErrorCode.FENCED_INSTANCE_ID
    gone = d.heartbeat("a1", -2, instance_id="host-a")
    assert gone.member_epoch == -2 and d.group.group_epoch == epoch
    b = d.heartbeat("b", 3, topic_partitions=[])
    assert not partitions_of(b) & held or b.assignment is None  # nobody took a1's partitions
    back = d.join("a2", topics=["orders"], instance_id="host-a")
    assert back.error == 0 and partitions_of(back) == held and back.member_epoch == epoch
    assert d.group.group_epoch == epoch and "a1" not in d.group.members


def test_a_static_member_that_left_for_now_is_removed_when_its_session_expires():
    d = Driver(image=IMAGE)
    d.join("a1", topics=["orders"], instance_id="host-a")
    d.heartbeat("a1", -2, instance_id="host-a")
    d.advance(45_000)
    assert d.group.is_empty and d.group.state is ConsumerGroupState.EMPTY


def test_a_full_group_turns_new_members_away():
    d = Driver(image=IMAGE, max_size=2)
    d.join("a", topics=["orders"])
    d.join("b", topics=["orders"])
    r = d.join("c", topics=["orders"])
    assert r.error == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert r.error_message == "The consumer group has reached its maximum capacity of 2 members."


def test_a_regex_subscription_picks_up_a_topic_created_later():
    d = Driver(image=IMAGE)
    r = d.join("a", regex="pay.*")
    assert owned(r) == [(tid("payments"), [0, 1])]
    epoch = d.group.group_epoch
    d.send(TopicsChanged({**IMAGE, **dict([topic("payouts", 3), topic("unrelated", 5)])}))
    assert d.group.group_epoch == epoch + 1 and d.group.state is ConsumerGroupState.ASSIGNING
    r = d.heartbeat("a", 2, topic_partitions=[(tid("payments"), [0, 1])])
    assert dict(owned(r)) == {tid("payments"): [0, 1], tid("payouts"): [0, 1, 2]}
    assert r.member_epoch == epoch + 1


def test_with_topic_access_checked_a_regex_matches_what_the_member_may_describe_and_a_reload_moves_nothing():
    image = {**IMAGE, **dict([topic("payouts", 3)])}
    d = Driver(image=image, topic_access_checked=True)
    r = d.join("a", regex="pay.*", describable_topics=frozenset({"payments", "orders"}))
    assert owned(r) == [(tid("payments"), [0, 1])]
    epoch = d.group.group_epoch
    d.send(TopicsChanged({**image, **dict([topic("paychecks", 1)])}))  # not describable: nothing moves
    assert d.group.group_epoch == epoch
    # The ACLs now let it describe payouts: its next heartbeat says so, and the regex takes it.
    r = d.heartbeat("a", epoch, topic_partitions=[(tid("payments"), [0, 1])],
                    describable_topics=frozenset({"payments", "payouts"}))
    assert d.group.group_epoch == epoch + 1 and dict(owned(r)) == {tid("payments"): [0, 1], tid("payouts"): [0, 1, 2]}
    fresh = d.replayed(image={**image, **dict([topic("paychecks", 1)])}, topic_access_checked=True)
    assert fresh.group.subscribed_topic_names() == {"payments", "payouts"}
    a = fresh.heartbeat("a", r.member_epoch, topic_partitions=owned(r))
    assert a.error == 0 and fresh.group.group_epoch == epoch + 1


def test_adding_partitions_to_a_subscribed_topic_bumps_the_epoch_but_unrelated_topics_do_not():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders"])
    d.send(TopicsChanged({**IMAGE, **dict([topic("other", 3)])}))
    assert d.group.group_epoch == 2
    d.send(TopicsChanged({**IMAGE, **dict([topic("orders", 6)])}))
    assert d.group.group_epoch == 3
    r = d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2, 3])])
    assert partitions_of(r) == set(range(6))


def test_replaying_the_records_rebuilds_the_group_and_it_goes_on_without_a_rebalance():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders", "payments"])
    d.join("b", topics=["orders"], instance_id="host-b", server_assignor="range")
    d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2, 3]), (tid("payments"), [0, 1])])
    fresh = d.replayed(image=IMAGE)
    g, h = d.group, fresh.group
    assert (h.group_epoch, h.target_assignment_epoch, h.state) == (g.group_epoch, g.target_assignment_epoch, g.state)
    assert h.members == g.members and h.target_assignment == g.target_assignment
    assert h.static_members == {"host-b": "b"}
    a = fresh.heartbeat("a", g.members["a"].member_epoch, topic_partitions=owned_now(g, "a"))
    assert a.error == 0 and h.group_epoch == g.group_epoch


def owned_now(group, member_id):
    member = group.members[member_id]
    return [(t, sorted(ps)) for t, ps in member.assigned.items()]


def test_the_most_requested_server_assignor_computes_the_target():
    d = Driver(image=dict([topic("t1", 2), topic("t2", 2)]))
    d.join("a", topics=["t1", "t2"], server_assignor="range")
    d.join("b", topics=["t1", "t2"], server_assignor="range")
    assert d.group.preferred_assignor() == "range"
    target = d.group.target_assignment
    # Range co-partitions: each member gets the same partition numbers of both topics.
    for member_id in ("a", "b"):
        assert target[member_id][tid("t1")] == target[member_id][tid("t2")]


def test_offset_commit_and_fetch_checks_follow_kafkas_rules():
    d = Driver(image=IMAGE)
    assert d.group.validate_offset_commit("", None, -1, 9) == ErrorCode.NONE  # admin commit to an empty group
    d.join("a", topics=["orders"])
    g = d.group
    assert g.validate_offset_commit("", None, -1, 9) == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit("a", None, 2, 9) == ErrorCode.NONE
    assert g.validate_offset_commit("a", None, 1, 9) == ErrorCode.STALE_MEMBER_EPOCH
    assert g.validate_offset_commit("a", None, 2, 8) == ErrorCode.UNSUPPORTED_VERSION
    assert g.validate_offset_commit("x", None, 2, 9) == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.validate_offset_fetch(None, -1) == ErrorCode.NONE
    assert g.validate_offset_fetch("a", 2) == ErrorCode.NONE
    assert g.validate_offset_fetch("a", 3) == ErrorCode.STALE_MEMBER_EPOCH
    assert g.validate_offset_fetch("x", 2) == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_heartbeat_whose_records_are_not_stored_gets_the_storage_error():
    d = Driver(image=IMAGE)
    d.append_error = ErrorCode.NOT_COORDINATOR
    assert d.join("a", topics=["orders"]).error == ErrorCode.NOT_COORDINATOR


def test_an_unchanged_heartbeat_writes_nothing_and_answers_at_once():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders"])
    before = len(d.log)
    r = d.heartbeat("a", 2, topic_partitions=[(ORDERS, [0, 1, 2, 3])])
    assert r.error == 0 and r.assignment is None and len(d.log) == before


def test_with_an_assignment_interval_a_join_storm_runs_the_assignor_once_per_interval():
    d = Driver(image=IMAGE, assignment_interval_ms=1_000)
    d.join("a", topics=["orders"])
    runs = len([r for r in d.log if type(r).__name__ == "ConsumerGroupTargetAssignmentMetadataRecord"])
    for name in "bcd":
        r = d.join(name, topics=["orders"])
        assert r.error == 0 and partitions_of(r) == set()  # the target is not recomputed yet
    assert d.group.state is ConsumerGroupState.ASSIGNING and d.group.group_epoch == 5
    d.advance(1_000)  # the interval passes: one run for the three joins
    after = [r for r in d.log if type(r).__name__ == "ConsumerGroupTargetAssignmentMetadataRecord"]
    assert len(after) == runs + 1 and after[-1].assignment_epoch == 5
    assert {m: len(t.get(ORDERS, ())) for m, t in d.group.target_assignment.items()} == dict.fromkeys("abcd", 1)


def test_unsubscribing_from_a_topic_revokes_its_partitions_before_they_go_elsewhere():
    d = Driver(image=IMAGE)
    d.join("a", topics=["orders", "payments"])
    d.join("b", topics=["payments"])
    d.heartbeat("a", 2, topic_partitions=owned_now(d.group, "a"))
    d.heartbeat("a", d.group.members["a"].member_epoch, topic_partitions=owned_now(d.group, "a"))
    d.heartbeat("b", d.group.members["b"].member_epoch, topic_partitions=[])
    assert d.group.state is ConsumerGroupState.STABLE
    a = d.heartbeat("a", d.group.members["a"].member_epoch, subscribed_topic_names=["orders"],
                    topic_partitions=[(ORDERS, [0, 1, 2, 3])] + [(tid("payments"), sorted(ps)) for t, ps in
                                                                 d.group.members["a"].assigned.items()
                                                                 if t == tid("payments")])
    assert d.group.members["a"].pending_revocation or tid("payments") not in d.group.members["a"].assigned
    assert all(len(holders) == 1 for holders in owners(d).values())
    assert dict(owned(a)).get(tid("payments")) is None


CONSUMER_PACKAGE = Path(__file__).resolve().parents[2] / "coordinator" / "groups" / "consumer"


@pytest.mark.parametrize("module", sorted(str(p.relative_to(CONSUMER_PACKAGE)) for p in CONSUMER_PACKAGE.rglob("*.py")))
def test_the_consumer_engine_imports_no_event_loop_clock_or_io(module):
    """Every module of the consumer engine's package (assignors included) is sans-IO."""
    import ast

    tree = ast.parse((CONSUMER_PACKAGE / module).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"asyncio", "time", "socket", "threading", "selectors", "os", "random"}, imported


def test_the_transition_table_only_allows_what_a_derived_state_can_reach():
    from cohort.coordinator.groups.consumer.engine import TRANSITIONS, Step
    assert TRANSITIONS[(ConsumerGroupState.ASSIGNING, Step.TARGET_COMPUTED)] == {
        ConsumerGroupState.RECONCILING, ConsumerGroupState.STABLE}
    assert all(targets == {ConsumerGroupState.ASSIGNING} for (source, step), targets in TRANSITIONS.items()
               if step is Step.EPOCH_BUMPED)
    assert not any(source is ConsumerGroupState.DEAD for source, _ in TRANSITIONS)


def test_the_derived_state_matches_a_scan_of_the_members_after_every_step():
    """The group keeps who is not reconciled incrementally; a full scan must always agree."""
    d = Driver(image=IMAGE)

    def scan():
        g = d.group
        if not g.members:
            return ConsumerGroupState.EMPTY
        if g.group_epoch > g.target_assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if all(m.state is MemberState.STABLE and m.member_epoch == g.target_assignment_epoch
               for m in g.members.values()):
            return ConsumerGroupState.STABLE
        return ConsumerGroupState.RECONCILING

    steps = [lambda: d.join("a", topics=["orders"]), lambda: d.join("b", topics=["orders"]),
             lambda: d.heartbeat("a", 2, topic_partitions=owned_now(d.group, "a")),
             lambda: d.heartbeat("a", d.group.members["a"].member_epoch, topic_partitions=owned_now(d.group, "a")),
             lambda: d.heartbeat("b", 3, topic_partitions=[]), lambda: d.join("c", topics=["payments"]),
             lambda: d.heartbeat("b", -1), lambda: d.advance(50_000)]
    for step in steps:
        step()
        assert d.group.state is scan()
        assert d.replayed(image=IMAGE).group.state is scan()
