"""Online migration between a classic group and a consumer group, engine side (manual clock)."""
from __future__ import annotations

import pytest

from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.groups.classic.engine import ClassicGroup
from cohort.coordinator.groups.classic.events import Heartbeat, JoinGroup, JoinRequest, MetadataLoaded, SyncGroup
from cohort.coordinator.groups.consumer.events import ConvertedFromClassic, ConvertedToClassic
from cohort.coordinator.groups.effects import LoadCompleted, Now
from cohort.coordinator.groups.consumer.migration import UpgradeRefused, check_upgrade, upgrade_records
from cohort.coordinator.records.types import GroupMemberRecord, GroupMetadataRecord, GroupMetadataTombstone
from cohort.protocol.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from cohort.protocol.errors import ErrorCode
from tests.coordinator.consumer_group_driver import Driver, tid, topic

IMAGE = dict([topic("orders", 4)])
ORDERS = tid("orders")


def subscription(owned: list[int] | None = None) -> bytes:
    owned_tp = [ConsumerProtocolSubscription.TopicPartition("orders", owned)] if owned else []
    return encode_subscription(ConsumerProtocolSubscription(topics=["orders"], owned_partitions=owned_tp), 1)


def assignment(partitions: list[int]) -> bytes:
    tps = [ConsumerProtocolAssignment.TopicPartition("orders", partitions)] if partitions else []
    return encode_assignment(ConsumerProtocolAssignment(assigned_partitions=tps))


def stable_classic_group() -> ClassicGroup:
    """A classic group at generation 7: c1 holds orders 0-1, c2 holds 2-3 (cooperative-sticky)."""
    group = ClassicGroup("g", config=CoordinatorConfig(), created_ms=0)
    record = GroupMetadataRecord(
        group="g", protocol_type="consumer", generation=7, protocol="cooperative-sticky", leader="c1",
        current_state_timestamp=0,
        members=[GroupMemberRecord(member_id=m, group_instance_id=None, client_id="kafka-python",
                                   client_host="/127.0.0.1", rebalance_timeout=30_000, session_timeout=10_000,
                                   subscription=subscription(ps), assignment=assignment(ps))
                 for m, ps in (("c1", [0, 1]), ("c2", [2, 3]))])
    group.handle(MetadataLoaded(record), Now(0, 0.0))
    group.handle(LoadCompleted(), Now(0, 0.0))
    return group


def upgraded() -> Driver:
    d = Driver(image=IMAGE)
    d.send(ConvertedFromClassic(upgrade_records(stable_classic_group(), IMAGE)))
    return d


def classic_join(d: Driver, member_id: str, owned: list[int]):
    d.next_request += 1
    req = JoinRequest(member_id=member_id, group_instance_id=None, client_id="kafka-python",
                      client_host="/127.0.0.1", session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
                      protocol_type="consumer", protocols=[("cooperative-sticky", subscription(owned))])
    (result,) = d.send(JoinGroup(d.next_request, req))
    return result


def classic_sync(d: Driver, member_id: str, generation: int) -> list[int]:
    d.next_request += 1
    (result,) = d.send(SyncGroup(d.next_request, member_id, None, generation, "consumer", "cooperative-sticky", {}))
    assert result.error == ErrorCode.NONE, result
    decoded = decode_assignment(result.assignment)
    return sorted(p for tp in decoded.assigned_partitions for p in tp.partitions)


def classic_heartbeat(d: Driver, member_id: str, generation: int) -> int:
    (code,) = d.send(Heartbeat(member_id, None, generation))
    return code


def no_partition_held_twice(d: Driver) -> None:
    seen = set()
    for member in d.group.members.values():
        for tp in member.owned():
            assert tp not in seen, f"{tp} held twice"
            seen.add(tp)


def test_upgrading_keeps_every_classic_member_its_partitions_at_the_classic_generation():
    d = upgraded()
    g = d.group
    assert (g.group_epoch, g.target_assignment_epoch, str(g.state)) == (7, 7, "Stable")
    assert {m: (x.member_epoch, x.assigned, x.uses_classic_protocol) for m, x in g.members.items()} == {
        "c1": (7, {ORDERS: frozenset({0, 1})}, True), "c2": (7, {ORDERS: frozenset({2, 3})}, True)}
    assert isinstance(d.log[0], GroupMetadataTombstone)
    # The classic members go on as before: same generation, nothing to do.
    assert classic_heartbeat(d, "c1", 7) == ErrorCode.NONE


def test_a_consumer_member_joins_an_upgraded_group_and_classic_members_follow_by_rejoining():
    d = upgraded()
    r = d.join("k1", topics=["orders"])
    assert r.error == 0 and r.member_epoch == 8 and not r.assignment  # everything is still held
    # What each client holds, as it would see it: the classic ones from SyncGroup, k1 from its heartbeats.
    held = {"c1": [0, 1], "c2": [2, 3], "k1": []}
    generation = {"c1": 7, "c2": 7}
    rejoined = set()

    def check_clients():
        flat = [p for ps in held.values() for p in ps]
        assert len(flat) == len(set(flat)), held

    for _ in range(4):
        for member in ("c1", "c2"):
            code = classic_heartbeat(d, member, generation[member])
            assert code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                rejoined.add(member)
                j = classic_join(d, member, owned=held[member])
                assert j.error == 0 and j.protocol_name == "cooperative-sticky"
                generation[member] = j.generation_id
                new = classic_sync(d, member, j.generation_id)
                # A cooperative client keeps only what it is given (and revokes the rest) at once.
                held[member] = [p for p in held[member] if p in new] + [p for p in new if p not in held[member]]
                check_clients()
        k1 = d.heartbeat("k1", d.group.members["k1"].member_epoch,
                         topic_partitions=[(ORDERS, held["k1"])] if held["k1"] else [])
        if k1.assignment is not None:
            held["k1"] = [p for _, ps in k1.assignment for p in ps]
        check_clients()
        no_partition_held_twice(d)
    assert rejoined == {"c1", "c2"}  # both were asked to rejoin for the new epoch
    assert sorted(p for ps in held.values() for p in ps) == [0, 1, 2, 3] and held["k1"]
    assert str(d.group.state) == "Stable" and set(generation.values()) == {8}


def test_classic_requests_with_a_wrong_generation_or_member_get_kafkas_errors():
    d = upgraded()
    assert classic_heartbeat(d, "c1", 6) == ErrorCode.ILLEGAL_GENERATION
    assert classic_heartbeat(d, "nobody", 7) == ErrorCode.UNKNOWN_MEMBER_ID
    d.join("k1", topics=["orders"])
    assert classic_heartbeat(d, "k1", 8) == ErrorCode.UNKNOWN_MEMBER_ID  # k1 speaks the consumer protocol
    d.next_request += 1
    req = JoinRequest(member_id="", group_instance_id=None, client_id="x", client_host="h", session_timeout_ms=10_000,
                      rebalance_timeout_ms=30_000, protocol_type="consumer",
                      protocols=[("cooperative-sticky", subscription())])
    (r,) = d.send(JoinGroup(d.next_request, req))
    assert r.error == ErrorCode.MEMBER_ID_REQUIRED and r.member_id
    d.next_request += 1
    req.member_id, req.protocols = r.member_id, [("range", subscription())]
    (r,) = d.send(JoinGroup(d.next_request, req))
    assert r.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # no protocol in common with c1 and c2


def test_when_the_last_consumer_member_leaves_the_group_becomes_classic_again():
    d = upgraded()
    d.join("k1", topics=["orders"])
    left = d.heartbeat("k1", -1)
    assert (left.error, left.member_epoch) == (0, -1)
    converted = [e for e in d.events if isinstance(e, ConvertedToClassic)]
    assert len(converted) == 1 and str(d.group.state) == "Dead"
    record = converted[0].record
    assert record.protocol_type == "consumer" and record.protocol == "cooperative-sticky"
    assert record.generation == 9 and {m.member_id for m in record.members} == {"c1", "c2"}  # epoch after the leave
    assert d.log[-1] == record
    # Their assignments are what they held (k1 never got anything); a classic group loads the record.
    held = {m.member_id: sorted(p for tp in decode_assignment(m.assignment).assigned_partitions for p in tp.partitions)
            for m in record.members}
    assert held == {"c1": [0, 1], "c2": [2, 3]}
    classic = ClassicGroup("g", config=CoordinatorConfig(), created_ms=0)
    classic.handle(MetadataLoaded(record), Now(0, 0.0))
    assert set(classic.members) == {"c1", "c2"} and classic.generation_id == record.generation


def test_the_policy_decides_which_way_a_group_may_convert():
    classic = stable_classic_group()
    check_upgrade(classic, "bidirectional", 100)
    with pytest.raises(UpgradeRefused, match="disabled"):
        check_upgrade(classic, "downgrade", 100)
    with pytest.raises(UpgradeRefused, match="group.consumer.max.size"):
        check_upgrade(classic, "upgrade", 1)
    d = Driver(image=IMAGE, migration_policy="upgrade")
    d.send(ConvertedFromClassic(upgrade_records(classic, IMAGE)))
    d.join("k1", topics=["orders"])
    d.heartbeat("k1", -1)
    assert not [e for e in d.events if isinstance(e, ConvertedToClassic)] and str(d.group.state) != "Dead"


def test_a_mixed_group_survives_a_restart_with_its_classic_members():
    d = upgraded()
    d.join("k1", topics=["orders"])
    fresh = d.replayed(image=IMAGE)
    assert fresh.group.members == d.group.members
    assert classic_heartbeat(fresh, "c1", 7) == ErrorCode.REBALANCE_IN_PROGRESS


def test_classic_members_commit_with_their_generation_and_get_illegal_generation_when_stale():
    d = upgraded()
    g = d.group
    assert g.validate_offset_commit("c1", None, 7, 7) == ErrorCode.NONE  # older OffsetCommit versions are fine
    assert g.validate_offset_commit("c1", None, 6, 7) == ErrorCode.ILLEGAL_GENERATION
    assert g.validate_offset_fetch("c1", 6) == ErrorCode.ILLEGAL_GENERATION


def test_a_classic_group_with_malformed_consumer_protocol_data_is_not_upgraded():
    classic = stable_classic_group()
    classic.members["c1"].assignment = b"\x00"  # no version prefix
    with pytest.raises(UpgradeRefused, match="c1's consumer protocol data is malformed"):
        upgrade_records(classic, IMAGE)


def test_an_eager_classic_member_that_gave_everything_up_gets_its_share_at_once():
    d = upgraded()
    d.join("k1", topics=["orders"])
    j = classic_join(d, "c1", owned=[])  # eager: revoked all before rejoining
    assert j.error == 0 and j.generation_id == 8
    assert len(classic_sync(d, "c1", 8)) >= 1
    no_partition_held_twice(d)
