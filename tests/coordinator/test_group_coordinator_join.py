"""JoinGroup scenarios (Kafka's GroupMetadataManagerTest join cases), through the request API."""
from __future__ import annotations

import pytest

from cohort.coordinator.groups.classic.engine import GroupState
from cohort.coordinator.records.types import GroupMetadataRecord, decode_record
from cohort.coordinator.log import read_segment, list_segments
from cohort.coordinator.contracts.requests import RequestContext
from group_harness import E, Harness, subscription


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path).start()
    yield harness
    await harness.close()


def group_records(h: Harness, group_id: str) -> list[GroupMetadataRecord]:
    out = []
    h.log.catch_up()  # (segments are written behind the journal)
    for _, path in list_segments(h.data_dir):
        for _, key, value in read_segment(path):
            rec = decode_record(key, value)
            if isinstance(rec, GroupMetadataRecord) and rec.group == group_id:
                out.append(rec)
    return out


# ------------------------------------------------------------------ validation
async def test_given_empty_group_id_when_joining_then_invalid_group_id(h):
    r = await h.join_now("")
    assert r.error_code == E.INVALID_GROUP_ID


@pytest.mark.parametrize("session_ms", [5999, 1800001])
async def test_given_session_timeout_out_of_bounds_when_joining_then_invalid_session_timeout(h, session_ms):
    r = await h.join_now("g", session_ms=session_ms)
    assert r.error_code == E.INVALID_SESSION_TIMEOUT
    assert h.group("g") is None


async def test_given_unknown_group_when_known_member_id_joins_then_unknown_member_id(h):
    r = await h.join_now("g", "someone")
    assert r.error_code == E.UNKNOWN_MEMBER_ID


async def test_given_new_group_when_v4_member_joins_without_id_then_member_id_required_and_empty_record(h):
    r = await h.join_now("g", version=4, ctx=RequestContext("cli", "/10.0.0.1"))
    assert r.error_code == E.MEMBER_ID_REQUIRED
    assert r.member_id.startswith("cli-")
    assert r.generation_id == -1
    group = h.group("g")
    assert group.state is GroupState.EMPTY and r.member_id in group.membership.pending_members
    (rec,) = group_records(h, "g")
    assert (rec.generation, rec.protocol_type, rec.protocol, rec.leader, rec.members) == (0, "", None, None, [])


async def test_given_v3_member_when_joining_without_id_then_added_at_once(h):
    task = h.join("g", version=3)
    await h.advance(0)
    r = task.result()
    assert r.error_code == E.NONE and r.member_id.startswith("client-")
    assert r.leader == r.member_id and r.generation_id == 1 and r.protocol_name == "range"
    assert [x.member_id for x in r.members] == [r.member_id]


async def test_given_empty_group_when_joining_without_protocol_type_or_protocols_then_inconsistent_protocol(h):
    assert (await h.join_now("g", protocol_type="")).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert (await h.join_now("g", protocols=())).error_code == E.INCONSISTENT_GROUP_PROTOCOL


async def test_given_consumer_group_when_other_protocol_type_joins_then_inconsistent_protocol(h):
    await h.stable_group("g", 1)
    r = await h.join_now("g", protocol_type="connect")
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert r.protocol_type is None and r.protocol_name is None


async def test_given_member_on_range_when_new_member_offers_only_roundrobin_then_inconsistent_protocol(h):
    await h.stable_group("g", 1)
    r = await h.join_now("g", protocols=(("roundrobin", b""),))
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL


async def test_given_errors_then_protocol_name_is_empty_before_v7_and_null_from_v7(h):
    for version, expected in ((6, ""), (7, None)):
        r = await h.join_now("g", "nobody", version=version)
        assert r.error_code == E.UNKNOWN_MEMBER_ID
        assert r.protocol_name == expected
        assert r.generation_id == -1 and r.leader == "" and r.members == []


async def test_given_empty_group_when_existing_member_id_joins_then_unknown_member_id(h):
    (leader,) = await h.stable_group("g", 1)
    await h.leave("g", [(leader, None)])
    await h.advance(0)  # the join phase of a group with nobody left ends at once
    assert h.group("g").state is GroupState.EMPTY
    r = await h.join_now("g", leader)
    assert r.error_code == E.UNKNOWN_MEMBER_ID


async def test_given_partition_loading_when_joining_then_coordinator_load_in_progress(tmp_path):
    h = Harness(tmp_path)
    await h.start_loading()
    try:
        r = await h.join_now("g")
        assert r.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    finally:
        await h.close()


async def test_given_storage_failure_when_new_group_is_created_then_mapped_error_and_no_group(h):
    h.log.fail_with = E.KAFKA_STORAGE_ERROR
    r = await h.join_now("g")
    assert r.error_code == E.NOT_COORDINATOR
    assert h.group("g") is None


# ------------------------------------------------------------------ generations, leader, protocol
async def test_given_joined_members_then_leader_alone_gets_member_list_and_generation_increments(h):
    ids = await h.stable_group("g", 3)
    group = h.group("g")
    assert group.generation_id == 1 and group.membership.leader_id == ids[0]
    # A follower rejoining with the same metadata in Stable gets the current generation, no rebalance.
    r = await h.join_now("g", ids[1])
    assert (r.error_code, r.generation_id, r.leader, r.members) == (E.NONE, 1, ids[0], [])
    assert group.state is GroupState.STABLE
    # The leader rejoining always triggers a rebalance.
    tasks = [h.join("g", mid) for mid in ids]
    await h.settle()
    results = [t.result() for t in tasks]
    assert {r.generation_id for r in results} == {2}
    leader_answer = next(r for r in results if r.member_id == ids[0])
    assert sorted(x.member_id for x in leader_answer.members) == sorted(ids)
    assert all(r.members == [] for r in results if r.member_id != ids[0])
    assert group.state is GroupState.COMPLETING_REBALANCE


async def test_given_follower_with_new_metadata_in_stable_when_rejoining_then_rebalance(h):
    ids = await h.stable_group("g", 2)
    t = h.join("g", ids[1], protocols=(("range", subscription("t", "u")),))
    await h.settle()
    assert not t.done() and h.group("g").state is GroupState.PREPARING_REBALANCE
    assert await h.heartbeat("g", ids[0], 1) == E.REBALANCE_IN_PROGRESS
    t0 = h.join("g", ids[0])
    await h.settle()
    assert t.result().generation_id == 2 and t0.result().generation_id == 2


async def test_given_completing_rebalance_when_member_rejoins_unchanged_then_same_generation_answer(h):
    ids = [await h.new_member("g") for _ in range(2)]
    tasks = [h.join("g", mid) for mid in ids]
    await h.advance(0)
    first = tasks[0].result()
    assert h.group("g").state is GroupState.COMPLETING_REBALANCE
    again = await h.join_now("g", first.member_id)
    assert (again.generation_id, again.leader) == (first.generation_id, first.leader)
    assert len(again.members) == (2 if first.member_id == first.leader else 0)


async def test_given_leader_not_rejoining_when_rebalance_times_out_then_removed_and_new_leader(h):
    ids = await h.stable_group("g", 2)
    t = h.join("g", ids[1], protocols=(("range", subscription("x")),))
    await h.settle()
    assert not t.done()
    await h.advance(10000)  # the group's rebalance timeout
    r = t.result()
    assert r.error_code == E.NONE and r.generation_id == 2 and r.leader == ids[1]
    assert list(h.group("g").members) == [ids[1]]


async def test_given_nobody_rejoins_then_group_goes_empty_with_new_generation_record(h):
    ids = await h.stable_group("g", 1)
    h.request_rebalance("g", "test")  # e.g. topic metadata changed
    await h.advance(10000)
    group = h.group("g")
    assert group.state is GroupState.EMPTY and group.generation_id == 2 and not group.members
    last = group_records(h, "g")[-1]
    assert (last.generation, last.protocol, last.members) == (2, None, [])
    assert last.protocol_type == "consumer"
    del ids


async def test_given_candidates_then_protocol_chosen_by_vote(h):
    prefs = [(("roundrobin", b""), ("range", b"")), (("range", b""), ("roundrobin", b"")),
             (("range", b""), ("roundrobin", b""), ("sticky", b""))]
    ids = [await h.new_member("g", protocols=p) for p in prefs]
    tasks = [h.join("g", mid, protocols=p) for mid, p in zip(ids, prefs)]
    await h.advance(0)
    assert {t.result().protocol_name for t in tasks} == {"range"}


async def test_given_rejoin_of_all_members_then_join_phase_completes_without_waiting(h):
    ids = await h.stable_group("g", 3)
    tasks = [h.join("g", mid) for mid in ids]
    await h.settle()  # no clock movement at all
    assert all(t.done() and t.result().error_code == E.NONE for t in tasks)


async def test_given_pending_member_id_when_others_rejoin_then_phase_waits_for_it(h):
    ids = await h.stable_group("g", 1)
    pending = await h.new_member("g")
    t_old = h.join("g", ids[0])
    await h.settle()
    assert not t_old.done()  # the MEMBER_ID_REQUIRED member is still expected
    t_new = h.join("g", pending)
    await h.settle()
    assert t_old.result().generation_id == 2 and t_new.result().generation_id == 2


async def test_given_pending_member_never_rejoins_when_its_session_ends_then_phase_completes(h):
    ids = await h.stable_group("g", 1)
    await h.new_member("g", session_ms=6000)
    t = h.join("g", ids[0])
    await h.settle()
    assert not t.done()
    await h.advance(6000)
    assert t.result().generation_id == 2 and not h.group("g").membership.pending_members


# ------------------------------------------------------------------ initial delay
async def test_given_initial_delay_when_members_keep_joining_then_delay_extends_up_to_rebalance_timeout(tmp_path):
    h = await Harness(tmp_path, group_initial_rebalance_delay_ms=3000).start()
    try:
        a = h.join("g", await h.new_member("g", rebalance_ms=8000), rebalance_ms=8000)
        await h.advance(2000)
        b = h.join("g", await h.new_member("g", rebalance_ms=8000), rebalance_ms=8000)
        await h.advance(1000)  # first window ends: a new member came, so wait min(3000, 5000) more
        assert not a.done()
        c = h.join("g", await h.new_member("g", rebalance_ms=8000), rebalance_ms=8000)
        await h.advance(3000)  # second window ends: extend by min(3000, remaining 2000)
        assert not a.done()
        await h.advance(1999)
        assert not a.done()
        await h.advance(1)
        assert {t.result().generation_id for t in (a, b, c)} == {1}
    finally:
        await h.close()


async def test_given_initial_delay_when_everyone_joined_then_it_still_waits_the_delay(tmp_path):
    h = await Harness(tmp_path, group_initial_rebalance_delay_ms=3000).start()
    try:
        t = h.join("g", await h.new_member("g"))
        await h.advance(2999)
        assert not t.done()
        await h.advance(1)
        assert t.result().error_code == E.NONE
    finally:
        await h.close()


# ------------------------------------------------------------------ group.max.size
async def test_given_max_size_when_extra_member_joins_then_group_max_size_reached(tmp_path):
    h = await Harness(tmp_path, group_max_size=2).start()
    try:
        await h.stable_group("g", 2)
        r = await h.join_now("g", version=3)
        assert (r.error_code, r.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
        assert len(h.group("g").members) == 2
    finally:
        await h.close()


async def test_given_max_size_when_members_rejoin_during_rebalance_then_they_are_accepted(tmp_path):
    h = await Harness(tmp_path, group_max_size=2).start()
    try:
        ids = await h.stable_group("g", 2)
        tasks = [h.join("g", mid) for mid in ids]
        await h.settle()
        assert all(t.result().error_code == E.NONE for t in tasks)
    finally:
        await h.close()


# ------------------------------------------------------------------ new member join timeout
async def test_given_new_member_parked_when_join_timeout_passes_then_it_is_removed(tmp_path):
    h = await Harness(tmp_path, group_new_member_join_timeout_ms=20000).start()
    try:
        ids = await h.stable_group("g", 1, rebalance_ms=60000, session_ms=30000)
        t_new = h.join("g", version=3, rebalance_ms=60000)  # a v3 member is added at once
        await h.settle()
        assert not t_new.done() and len(h.group("g").members) == 2
        await h.advance(20000)  # the old member never rejoined; the new one times out first
        assert t_new.result().error_code == E.UNKNOWN_MEMBER_ID
        assert list(h.group("g").members) == ids
    finally:
        await h.close()
