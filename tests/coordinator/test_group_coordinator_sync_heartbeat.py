"""SyncGroup, Heartbeat and session scenarios (Kafka's sync/heartbeat/session tests)."""
from __future__ import annotations

import pytest

from cohort.coordinator.groups.classic.engine import GroupState
from group_harness import E, Harness


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path).start()
    yield harness
    await harness.close()


async def completing_group(h: Harness, n: int = 2, **kwargs) -> tuple[list[str], int]:
    """n members past the join phase, nobody synced yet; returns (ids leader first, generation)."""
    ids = [await h.new_member("g", **kwargs) for _ in range(n)]
    tasks = [h.join("g", mid, **kwargs) for mid in ids]
    await h.advance(0)
    r = tasks[0].result()
    assert h.group("g").state is GroupState.COMPLETING_REBALANCE
    return [r.leader] + [x for x in ids if x != r.leader], r.generation_id


# ------------------------------------------------------------------ SyncGroup
async def test_given_unknown_group_when_syncing_then_unknown_member_id(h):
    assert (await h.sync_now("nope", "m", 1)).error_code == E.UNKNOWN_MEMBER_ID


async def test_given_unknown_member_when_syncing_then_unknown_member_id(h):
    await completing_group(h)
    assert (await h.sync_now("g", "stranger", 1)).error_code == E.UNKNOWN_MEMBER_ID


async def test_given_wrong_generation_when_syncing_then_illegal_generation(h):
    ids, gen = await completing_group(h)
    assert (await h.sync_now("g", ids[1], gen + 1)).error_code == E.ILLEGAL_GENERATION


async def test_given_other_protocol_type_or_name_when_syncing_then_inconsistent_protocol(h):
    ids, gen = await completing_group(h)
    assert (await h.sync_now("g", ids[1], gen, protocol_type="connect")).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert (await h.sync_now("g", ids[1], gen, protocol_name="roundrobin")).error_code == \
        E.INCONSISTENT_GROUP_PROTOCOL


async def test_given_v5_sync_without_protocol_fields_then_inconsistent_protocol_but_v4_is_fine(h):
    ids, gen = await completing_group(h, 1)
    assert (await h.sync_now("g", ids[0], gen, protocol_type=None)).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    r = await h.sync_now("g", ids[0], gen, {ids[0]: b"a"}, version=4, protocol_type=None, protocol_name=None)
    assert r.error_code == E.NONE and r.assignment == b"a"


async def test_given_follower_syncs_first_then_it_waits_for_the_leader(h):
    ids, gen = await completing_group(h, 3)
    follower = h.sync("g", ids[1], gen)
    await h.settle()
    assert not follower.done()
    leader = h.sync("g", ids[0], gen, {ids[0]: b"L", ids[1]: b"F"})  # ids[2] missing: gets b""
    await h.settle()
    assert (leader.result().assignment, follower.result().assignment) == (b"L", b"F")
    assert follower.result().protocol_name == "range" and follower.result().protocol_type == "consumer"
    late = await h.sync_now("g", ids[2], gen)
    assert (late.error_code, late.assignment) == (E.NONE, b"")
    assert h.group("g").state is GroupState.STABLE


async def test_given_stable_group_when_member_syncs_again_then_current_assignment(h):
    ids, gen = await completing_group(h, 2)
    await h.sync_now("g", ids[0], gen, {ids[0]: b"L", ids[1]: b"F"})
    assert (await h.sync_now("g", ids[1], gen)).assignment == b"F"


async def test_given_preparing_rebalance_when_syncing_then_rebalance_in_progress(h):
    ids = await h.stable_group("g", 2)
    h.join("g", ids[0])
    await h.settle()
    assert (await h.sync_now("g", ids[1], 1)).error_code == E.REBALANCE_IN_PROGRESS


async def test_given_leader_sync_append_fails_then_waiters_get_mapped_error_and_rebalance_starts(h):
    ids, gen = await completing_group(h, 2)
    follower = h.sync("g", ids[1], gen)
    await h.settle()
    h.log.fail_with = E.KAFKA_STORAGE_ERROR
    leader = await h.sync_now("g", ids[0], gen, {ids[0]: b"L", ids[1]: b"F"})
    h.log.fail_with = None
    assert leader.error_code == E.NOT_COORDINATOR and follower.result().error_code == E.NOT_COORDINATOR
    assert h.group("g").state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in h.group("g").members.values())


async def test_given_completing_rebalance_when_someone_rejoins_then_parked_syncs_get_rebalance_in_progress(h):
    ids, gen = await completing_group(h, 2)
    follower = h.sync("g", ids[1], gen)
    await h.settle()
    h.join("g", ids[0], protocols=(("range", b"changed"),))
    await h.settle()
    assert follower.result().error_code == E.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("who_syncs", ["leader", "followers", "nobody"])
async def test_given_members_that_never_sync_when_pending_sync_times_out_then_they_are_removed(h, who_syncs):
    ids, gen = await completing_group(h, 3, session_ms=30000)  # sessions outlast the sync timeout
    synced = {"leader": ids[:1], "followers": ids[1:], "nobody": []}[who_syncs]
    for mid in synced:
        h.sync("g", mid, gen, {x: b"a" for x in ids} if mid == ids[0] else None)
    await h.settle()
    await h.advance(10000)  # one rebalance timeout
    group = h.group("g")
    assert set(group.members) == set(synced)
    assert group.state in (GroupState.PREPARING_REBALANCE, GroupState.EMPTY)


async def test_given_everyone_synced_then_pending_sync_timer_does_nothing(h):
    ids = await h.stable_group("g", 2)
    for mid in ids:
        assert await h.heartbeat("g", mid, 1) == E.NONE
    await h.advance(9000)
    for mid in ids:
        assert await h.heartbeat("g", mid, 1) == E.NONE
    await h.advance(9000)
    assert h.group("g").state is GroupState.STABLE and set(h.group("g").members) == set(ids)


# ------------------------------------------------------------------ Heartbeat
async def test_given_heartbeat_errors_in_kafka_order(h):
    assert await h.heartbeat("", "m", 1) == E.INVALID_GROUP_ID
    assert await h.heartbeat("nope", "m", 1) == E.UNKNOWN_MEMBER_ID
    ids = await h.stable_group("g", 2)
    assert await h.heartbeat("g", "stranger", 1) == E.UNKNOWN_MEMBER_ID
    assert await h.heartbeat("g", ids[1], 7) == E.ILLEGAL_GENERATION
    assert await h.heartbeat("g", ids[1], 1) == E.NONE


async def test_given_completing_rebalance_when_heartbeating_then_none(h):
    ids, gen = await completing_group(h, 2)
    assert await h.heartbeat("g", ids[1], gen) == E.NONE


async def test_given_loading_partition_when_heartbeating_then_none(tmp_path):
    h = Harness(tmp_path)
    await h.start_loading()
    try:
        assert await h.heartbeat("g", "m", 1) == E.NONE
    finally:
        await h.close()


async def test_given_heartbeats_then_session_is_kept_and_without_them_member_expires(h):
    ids = await h.stable_group("g", 2)
    for _ in range(5):
        await h.advance(6000)
        assert await h.heartbeat("g", ids[0], 1) == E.NONE
        assert await h.heartbeat("g", ids[1], 1) == E.NONE
    await h.advance(6000)
    assert await h.heartbeat("g", ids[0], 1) == E.NONE
    await h.advance(4000)  # ids[1] silent for 10 s = its session
    group = h.group("g")
    assert list(group.members) == [ids[0]]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert await h.heartbeat("g", ids[0], 1) == E.REBALANCE_IN_PROGRESS
    assert await h.heartbeat("g", ids[1], 1) == E.UNKNOWN_MEMBER_ID


async def test_given_member_waiting_in_join_then_session_timer_does_not_remove_it(h):
    ids = await h.stable_group("g", 2, rebalance_ms=60000)
    t = h.join("g", ids[0], rebalance_ms=60000)
    await h.settle()
    await h.advance(10000)  # ids[1] (not rejoined, no heartbeats) expires; ids[0] waits in join
    r = t.result()
    assert r.error_code == E.NONE and r.generation_id == 2
    assert list(h.group("g").members) == [ids[0]]


async def test_given_preparing_rebalance_when_heartbeating_then_rebalance_in_progress_and_session_kept(h):
    ids = await h.stable_group("g", 2, rebalance_ms=30000)
    h.join("g", ids[0], rebalance_ms=30000)
    await h.settle()
    for _ in range(3):
        await h.advance(6000)
        assert await h.heartbeat("g", ids[1], 1) == E.REBALANCE_IN_PROGRESS
    assert ids[1] in h.group("g").members
