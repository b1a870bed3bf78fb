"""Restart and replay: what the offsets log brings back, with a durable ("always") real log."""
from __future__ import annotations

import pytest

from cohort.coordinator.groups.classic.engine import GroupState
from cohort.coordinator.records.types import GroupMemberRecord, GroupMetadataRecord, GroupMetadataTombstone, OffsetCommitRecord
from group_harness import E, Harness, answered


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path, flush_policy="always").start()
    yield harness
    await harness.close()


async def test_given_stable_group_and_offsets_when_restarted_then_group_and_offsets_come_back(h):
    ids = await h.stable_group("g", 2, session_ms=30000)
    await h.commit("g", {("t", 0): (42, "m"), ("t", 1): (43, "n\x00")}, member_id=ids[1], generation=1)
    await h.commit("s", {("u", 3): -2})
    before = h.group("g")
    snapshot = (before.generation_id, before.membership.leader_id, before.protocol_type, before.protocol_name,
                {k: v.assignment for k, v in before.members.items()})
    await h.restart()
    group = h.group("g")
    assert group.state is GroupState.STABLE
    assert (group.generation_id, group.membership.leader_id, group.protocol_type, group.protocol_name,
            {k: v.assignment for k, v in group.members.items()}) == snapshot
    assert (await h.fetch("g", None))[1] == {("t", 0): (42, "m", 0), ("t", 1): (43, "n\x00", 0)}
    assert (await h.fetch("s", None))[1] == {("u", 3): (-2, "", 0)}
    assert h.group("s").protocol_type is None
    assert h.coordinator.high_watermark("t", 1) == 43
    # Members that keep heartbeating carry on without a rebalance...
    await h.advance(20000)
    assert await h.heartbeat("g", ids[0], 1) == E.NONE
    await h.advance(10000)
    # ...the silent one expires after its session.
    assert list(group.members) == [ids[0]]
    assert group.state is GroupState.PREPARING_REBALANCE


async def test_given_empty_and_deleted_groups_when_restarted_then_states_are_kept(h):
    (member,) = await h.stable_group("e", 1)
    await h.leave("e", [(member, None)])
    await h.advance(0)
    emptied_at = h.group("e").state_timestamp_ms
    await h.commit("d", {("t", 0): 1})
    from cohort.protocol import messages as m
    from group_harness import CTX
    await answered(h.coordinator.delete_groups(m.DeleteGroupsRequest(groups_names=["d"]), 2, CTX))
    await h.restart()
    group = h.group("e")
    assert group.state is GroupState.EMPTY and group.generation_id == 2 and group.protocol_type == "consumer"
    assert group.state_timestamp_ms == emptied_at
    assert h.group("d") is None and (await h.fetch("d", None))[1] == {}


async def test_given_replayed_records_then_state_is_rebuilt_without_writes(h):
    c = h.coordinator
    c.replay(OffsetCommitRecord("x", "t", 0, 9, metadata="a", commit_timestamp=1))
    c.replay(GroupMetadataRecord("x", "consumer", 4, "range", "m1", 5, [
        GroupMemberRecord("m1", None, "cid", "/1.2.3.4", -1, 10000, b"sub", b"asg")]))
    group = h.group("x")
    assert group.state is GroupState.STABLE and group.generation_id == 4
    member = group.members["m1"]
    assert (member.rebalance_timeout_ms, member.metadata("range"), member.assignment) == (10000, b"sub", b"asg")
    c.replay(GroupMetadataTombstone("x"))
    assert h.group("x") is None
    assert c.offsets.get("x", "t", 0).offset == 9


async def test_given_loaded_group_over_max_size_then_it_rebalances_and_extra_members_are_refused(tmp_path):
    from cohort.coordinator.records.types import encode_record
    from group_harness import subscription
    h = await Harness(tmp_path, group_max_size=2).start()
    try:
        members = [GroupMemberRecord(f"m{i}", None, "cid", "/h", 10000, 30000, subscription("t"), b"")
                   for i in range(3)]
        record = GroupMetadataRecord("big", "consumer", 3, "range", "m0", 1, members)
        h.coordinator.partitions.load_records(h.coordinator.partition_for("big"), [encode_record(record)])
        group = h.group("big")
        assert group.state is GroupState.PREPARING_REBALANCE
        first = [h.join("big", f"m{i}", protocols=(("range", subscription("t")),)) for i in range(2)]
        await h.settle()
        third = await h.join_now("big", "m2", protocols=(("range", subscription("t")),))
        assert third.error_code == E.GROUP_MAX_SIZE_REACHED
        assert [t.result().generation_id for t in first] == [4, 4]
        assert sorted(group.members) == ["m0", "m1"]
    finally:
        await h.close()
