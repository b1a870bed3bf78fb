"""Static membership (KIP-345) and LeaveGroup scenarios."""
from __future__ import annotations

import pytest

from cohort.coordinator.groups.classic.engine import GroupState
from group_harness import E, Harness, subscription


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path).start()
    yield harness
    await harness.close()


async def static_group(h: Harness, instances=("i1", "i2"), version: int = 7, **kw) -> dict[str, str]:
    """A Stable group of static members; returns {instance_id: member_id}."""
    tasks = [h.join("g", instance_id=i, version=version, **kw) for i in instances]
    await h.advance(0)
    results = {i: t.result() for i, t in zip(instances, tasks)}
    assert all(r.error_code == E.NONE for r in results.values()), results
    leader = next(iter(results.values())).leader
    gen = next(iter(results.values())).generation_id
    for r in results.values():
        h.sync("g", r.member_id, gen, {x.member_id: b"A-" + x.member_id.encode() for x in results.values()}
               if r.member_id == leader else None)
    await h.settle()
    assert h.group("g").state is GroupState.STABLE
    return {i: r.member_id for i, r in results.items()}


async def test_given_static_member_when_first_joining_then_added_without_member_id_required(h):
    t = h.join("g", instance_id="i1", version=5)
    await h.advance(0)
    assert t.result().error_code == E.NONE
    assert h.group("g").membership.static_members["i1"].startswith("i1-")


async def test_given_stable_group_when_static_member_rejoins_unchanged_with_new_id_then_no_rebalance(h):
    ids = await static_group(h)
    old = ids["i2"]
    r = await h.join_now("g", instance_id="i2")  # v7: pre-v9, names the old leader
    group = h.group("g")
    assert r.error_code == E.NONE and r.member_id != old
    assert group.state is GroupState.STABLE and group.generation_id == 1
    assert r.leader == ids["i1"] and r.members == []
    assert group.members[r.member_id].assignment == b"A-" + old.encode()  # the assignment moved over
    assert await h.heartbeat("g", old, 1, instance_id="i2") == E.FENCED_INSTANCE_ID
    assert await h.heartbeat("g", r.member_id, 1, instance_id="i2") == E.NONE
    assert (await h.sync_now("g", r.member_id, 1, instance_id="i2")).assignment == b"A-" + old.encode()


async def test_given_v9_static_leader_replaced_then_skip_assignment_with_members(h):
    ids = await static_group(h, version=9)
    r = await h.join_now("g", instance_id="i1", version=9)
    assert r.error_code == E.NONE and r.skip_assignment is True
    assert r.leader == r.member_id != ids["i1"]
    assert sorted(x.group_instance_id for x in r.members) == ["i1", "i2"]


async def test_given_static_replacement_when_persist_fails_then_old_member_restored(h):
    ids = await static_group(h)
    h.log.fail_with = E.KAFKA_STORAGE_ERROR
    r = await h.join_now("g", instance_id="i2")
    h.log.fail_with = None
    assert r.error_code == E.NOT_COORDINATOR
    group = h.group("g")
    assert group.membership.static_members["i2"] == ids["i2"] and ids["i2"] in group.members
    assert await h.heartbeat("g", ids["i2"], 1, instance_id="i2") == E.NONE


async def test_given_static_member_rejoins_with_changed_protocol_then_rebalance(h):
    ids = await static_group(h, protocols=(("range", subscription("t")),))
    h.join("g", instance_id="i2", protocols=(("roundrobin", b""), ("range", subscription("t"))))
    await h.settle()
    assert h.group("g").state is GroupState.STABLE  # the vote still picks range: no rebalance
    assert (await h.join_now("g", instance_id="i1", protocols=(("roundrobin", b""),))).error_code == \
        E.INCONSISTENT_GROUP_PROTOCOL  # i2 supports roundrobin, but the old i1 does not
    t = h.join("g", instance_id="i1", protocols=(("roundrobin", b""), ("range", subscription("t"))))
    await h.settle()
    assert h.group("g").state is GroupState.PREPARING_REBALANCE
    del ids, t


async def test_given_completing_rebalance_when_static_member_replaced_then_rebalance(h):
    t1 = h.join("g", instance_id="i1")
    t2 = h.join("g", instance_id="i2")
    await h.advance(0)
    old = t2.result().member_id
    parked = h.sync("g", old, 1, instance_id="i2")
    await h.settle()
    h.join("g", instance_id="i2")
    await h.settle()
    assert parked.result().error_code == E.FENCED_INSTANCE_ID
    assert h.group("g").state is GroupState.PREPARING_REBALANCE
    del t1


async def test_given_static_member_with_mismatched_member_id_then_fenced_everywhere(h):
    ids = await static_group(h)
    assert (await h.join_now("g", ids["i1"], instance_id="i2")).error_code == E.FENCED_INSTANCE_ID
    assert (await h.sync_now("g", ids["i1"], 1, instance_id="i2")).error_code == E.FENCED_INSTANCE_ID
    assert await h.heartbeat("g", ids["i1"], 1, instance_id="i2") == E.FENCED_INSTANCE_ID
    commit = await h.commit("g", {("t", 0): 1}, member_id=ids["i1"], generation=1, instance_id="i2")
    assert commit == {("t", 0): E.FENCED_INSTANCE_ID}


async def test_given_unknown_instance_id_with_known_member_id_then_unknown_member_id(h):
    ids = await static_group(h)
    assert (await h.join_now("g", ids["i1"], instance_id="nope")).error_code == E.UNKNOWN_MEMBER_ID


async def test_given_static_member_not_rejoining_then_kept_after_rebalance_timeout(h):
    ids = await static_group(h, session_ms=60000)
    dyn = await h.new_member("g", session_ms=60000)
    t_dyn = h.join("g", dyn, session_ms=60000)
    t_i1 = h.join("g", ids["i1"], instance_id="i1", session_ms=60000)
    await h.settle()
    await h.advance(10000)  # i2 never rejoins
    assert t_dyn.result().generation_id == 2 and t_i1.result().generation_id == 2
    assert ids["i2"] in h.group("g").members


async def test_given_only_static_members_that_do_not_rejoin_then_phase_extends_until_sessions_end(h):
    ids = await static_group(h, session_ms=25000)
    h.request_rebalance("g", "test: metadata change")
    await h.advance(10000)
    assert h.group("g").state is GroupState.PREPARING_REBALANCE  # nobody rejoined: re-armed
    await h.advance(15000)  # sessions end
    assert h.group("g").state in (GroupState.PREPARING_REBALANCE, GroupState.EMPTY)
    assert not h.group("g").members
    await h.advance(10000)
    assert h.group("g").state is GroupState.EMPTY
    del ids


# ------------------------------------------------------------------ LeaveGroup
async def test_given_unknown_group_when_leaving_then_member_errors_and_v0_top_level_error(h):
    r = await h.leave("nope", [("m", None)])
    assert r.error_code == E.NONE and [x.error_code for x in r.members] == [E.UNKNOWN_MEMBER_ID]
    assert (await h.leave("nope", "m", version=1)).error_code == E.UNKNOWN_MEMBER_ID
    assert (await h.leave("", "m", version=0)).error_code == E.INVALID_GROUP_ID


async def test_given_member_leaves_then_rebalance_and_others_complete(h):
    ids = await h.stable_group("g", 3)
    r = await h.leave("g", ids[2], version=1)
    assert r.error_code == E.NONE
    tasks = [h.join("g", mid) for mid in ids[:2]]
    await h.settle()
    assert [t.result().generation_id for t in tasks] == [2, 2]


async def test_given_batch_leave_then_each_entry_gets_its_own_error(h):
    ids = await static_group(h, instances=("i1", "i2", "i3"))
    r = await h.leave("g", [("", "i1"), (ids["i2"], "i2"), ("wrong", "i3"), ("", "nope"), ("", None)])
    assert [x.error_code for x in r.members] == [E.NONE, E.NONE, E.FENCED_INSTANCE_ID, E.UNKNOWN_MEMBER_ID,
                                                 E.UNKNOWN_MEMBER_ID]
    assert list(h.group("g").members) == [ids["i3"]]


async def test_given_pending_member_when_leaving_then_removed(h):
    await h.stable_group("g", 1)
    pending = await h.new_member("g")
    r = await h.leave("g", [(pending, None)])
    assert r.members[0].error_code == E.NONE and not h.group("g").membership.pending_members


async def test_given_parked_join_when_member_leaves_then_join_answered_unknown_member(h):
    ids = await h.stable_group("g", 2)
    t = h.join("g", ids[0])  # the leader rejoining starts a rebalance: its join parks
    await h.settle()
    assert not t.done()
    await h.leave("g", [(ids[0], None)])
    assert t.result().error_code == E.UNKNOWN_MEMBER_ID


async def test_given_last_members_leave_during_join_phase_then_group_completes_or_empties(h):
    ids = await h.stable_group("g", 2)
    t = h.join("g", ids[0])
    await h.settle()
    await h.leave("g", [(ids[1], None)])  # everyone left is waiting: complete now
    assert t.result().generation_id == 2


async def test_given_rebalance_when_new_instance_replaces_a_parked_static_member_then_old_join_is_fenced(h):
    ids = await static_group(h, session_ms=60000)
    leader_join = h.join("g", ids["i1"], instance_id="i1", session_ms=60000)
    h.join("g", ids["i2"], instance_id="i2", session_ms=60000)
    await h.settle()
    assert leader_join.done()  # both rejoined: the phase completed at once
    gen2 = leader_join.result().generation_id
    h.request_rebalance("g", "test: metadata changed")
    old_join = h.join("g", ids["i2"], instance_id="i2", session_ms=60000)
    await h.settle()
    assert not old_join.done()
    new_join = h.join("g", "", instance_id="i2", session_ms=60000)
    await h.settle()
    assert old_join.result().error_code == E.FENCED_INSTANCE_ID
    rejoin_leader = h.join("g", ids["i1"], instance_id="i1", session_ms=60000)
    await h.settle()
    new = new_join.result()
    assert new.error_code == E.NONE and new.member_id != ids["i2"] and new.generation_id == gen2 + 1
    assert rejoin_leader.result().generation_id == gen2 + 1
