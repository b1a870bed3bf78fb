"""OffsetCommit / OffsetFetch / OffsetDelete / DescribeGroups / ListGroups / DeleteGroups scenarios."""
from __future__ import annotations

import asyncio

import pytest

from cohort.coordinator.groups.classic.engine import GroupState
from cohort.coordinator.groups.group_manager import GROUP_AUTHORIZED_OPERATIONS, INT32_MIN
from cohort.coordinator.groups.responses import java_string_length
from group_harness import CTX, E, Harness, answered, subscription
from cohort.protocol import messages as m


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path).start()
    yield harness
    await harness.close()


# ------------------------------------------------------------------ OffsetCommit
async def test_given_no_group_when_simple_commit_then_simple_group_created_and_offsets_read_back(h):
    assert await h.commit("s", {("t", 0): (42, "m"), ("t", 1): (7, None)}) == {("t", 0): 0, ("t", 1): 0}
    group = h.group("s")
    assert group.state is GroupState.EMPTY and group.protocol_type is None
    error, got = await h.fetch("s", {"t": [0, 1, 2]})
    assert error == 0
    assert got == {("t", 0): (42, "m", 0), ("t", 1): (7, "", 0), ("t", 2): (-1, "", 0)}


@pytest.mark.parametrize("version,expected", [(8, E.ILLEGAL_GENERATION), (9, E.GROUP_ID_NOT_FOUND)])
async def test_given_no_group_when_member_commit_then_error_by_version(h, version, expected):
    assert await h.commit("g", {("t", 0): 1}, member_id="m", generation=3, version=version) == {("t", 0): expected}
    assert h.group("g") is None


async def test_given_stable_group_then_commit_is_fenced_by_member_and_generation(h):
    ids = await h.stable_group("g", 2)
    assert await h.commit("g", {("t", 0): 1}, member_id="stranger", generation=1) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert await h.commit("g", {("t", 0): 1}, member_id=ids[0], generation=0) == {("t", 0): E.ILLEGAL_GENERATION}
    assert await h.commit("g", {("t", 0): 1}) == {("t", 0): E.UNKNOWN_MEMBER_ID}  # no identity, not Empty
    assert await h.commit("g", {("t", 0): 1}, member_id=ids[0], generation=1) == {("t", 0): E.NONE}


async def test_given_completing_rebalance_when_member_commits_then_rebalance_in_progress(h):
    ids = [await h.new_member("g") for _ in range(2)]
    tasks = [h.join("g", mid) for mid in ids]
    await h.advance(0)
    gen = tasks[0].result().generation_id
    assert await h.commit("g", {("t", 0): 5}, member_id=ids[0], generation=gen) == {("t", 0): E.REBALANCE_IN_PROGRESS}


async def test_given_preparing_rebalance_when_member_commits_with_current_generation_then_accepted(h):
    ids = await h.stable_group("g", 2)
    h.join("g", ids[0])
    await h.settle()
    assert await h.commit("g", {("t", 0): 5}, member_id=ids[1], generation=1) == {("t", 0): E.NONE}


async def test_given_commits_then_they_keep_the_member_session_alive(h):
    ids = await h.stable_group("g", 1)
    for _ in range(4):
        await h.advance(8000)
        assert await h.commit("g", {("t", 0): 1}, member_id=ids[0], generation=1) == {("t", 0): 0}
    assert ids[0] in h.group("g").members


async def test_given_empty_group_when_admin_commits_with_generation_minus_one_then_accepted(h):
    (leader,) = await h.stable_group("g", 1)
    await h.leave("g", [(leader, None)])
    await h.advance(0)
    assert h.group("g").state is GroupState.EMPTY
    assert await h.commit("g", {("t", 0): -2}, version=9) == {("t", 0): 0}  # sentinels are stored as given
    assert (await h.fetch("g", {"t": [0]}))[1][("t", 0)][0] == -2


async def test_given_metadata_too_large_then_only_that_partition_fails(h):
    big = "é" * 4096  # 4096 UTF-16 units: allowed
    too_big = "😀" * 2049  # 4098 UTF-16 units: refused
    result = await h.commit("s", {("t", 0): (1, big), ("t", 1): (2, too_big), ("t", 2): (3, "")})
    assert result == {("t", 0): 0, ("t", 1): E.OFFSET_METADATA_TOO_LARGE, ("t", 2): 0}
    got = (await h.fetch("s", {"t": [0, 1, 2]}))[1]
    assert got[("t", 0)][:2] == (1, big) and got[("t", 1)][0] == -1 and got[("t", 2)][0] == 3
    assert java_string_length("a😀") == 3


async def test_given_metadata_with_nul_then_returned_byte_for_byte(h):
    await h.commit("s", {("t", 0): (42, "m\x00")})
    assert (await h.fetch("s", {"t": [0]}))[1][("t", 0)] == (42, "m\x00", 0)


async def test_given_storage_failure_when_committing_then_mapped_error_and_nothing_applied(h):
    h.log.fail_with = E.KAFKA_STORAGE_ERROR
    assert await h.commit("s", {("t", 0): 1}) == {("t", 0): E.NOT_COORDINATOR}
    h.log.fail_with = E.REQUEST_TIMED_OUT
    assert await h.commit("s", {("t", 0): 1}) == {("t", 0): E.COORDINATOR_NOT_AVAILABLE}
    h.log.fail_with = None
    assert h.group("s") is None
    assert (await h.fetch("s", {"t": [0]}))[1][("t", 0)][0] == -1
    assert h.coordinator.high_watermark("t", 0) == 0


async def test_given_commits_from_groups_then_high_watermark_is_highest_non_negative(h):
    await h.commit("a", {("t", 0): 10, ("t", 1): -1})
    await h.commit("b", {("t", 0): 30})
    await h.commit("a", {("t", 0): 20})
    assert [h.coordinator.high_watermark("t", p) for p in (0, 1, 2)] == [30, 0, 0]
    assert h.coordinator.high_watermark("other", 0) == 0


async def test_given_v1_commit_timestamp_and_v2_retention_then_stored(h):
    req = m.OffsetCommitRequest(group_id="s", generation_id_or_member_epoch=-1, member_id="", topics=[
        m.OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
            m.OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=5, commit_timestamp=1234, committed_metadata=None)])])
    await h.coordinator.offset_commit(req, 1, CTX)
    assert h.coordinator.offsets.get("s", "t", 0).commit_timestamp == 1234
    await h.commit("s", {("t", 1): 6}, version=2, retention_ms=60000)
    stored = h.coordinator.offsets.get("s", "t", 1)
    assert stored.expire_timestamp == stored.commit_timestamp + 60000 == h.clock.now_ms() + 60000


# ------------------------------------------------------------------ OffsetFetch forms
async def test_given_offsets_then_all_topics_forms_return_them(h):
    await h.commit("s", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    expected = {("t", 0): (1, "", 0), ("t", 1): (2, "", 0), ("u", 0): (3, "", 0)}
    for version in (2, 3, 7, 8, 9):
        assert await h.fetch("s", None, version=version) == (0, expected)


async def test_given_unknown_group_then_fetch_returns_minus_one_or_nothing(h):
    assert await h.fetch("nope", None) == (0, {})
    assert await h.fetch("nope", {"t": [0]}, version=1) == (0, {("t", 0): (-1, "", 0)})


async def test_given_loading_partition_then_error_placement_depends_on_version(tmp_path):
    h = Harness(tmp_path)
    loading = await h.start_loading()
    try:
        assert await h.fetch("g", {"t": [0, 1]}, version=1) == (
            0, {("t", 0): (-1, "", E.COORDINATOR_LOAD_IN_PROGRESS), ("t", 1): (-1, "", E.COORDINATOR_LOAD_IN_PROGRESS)})
        assert await h.fetch("g", {"t": [0]}, version=5) == (E.COORDINATOR_LOAD_IN_PROGRESS, {})
        assert await h.fetch("g", {"t": [0]}, version=8) == (E.COORDINATOR_LOAD_IN_PROGRESS, {})
        h.log.loads_held.set()
        await asyncio.wait_for(loading, 10)
        assert await h.fetch("g", {"t": [0]}, version=8) == (0, {("t", 0): (-1, "", 0)})
    finally:
        await h.close()


async def test_given_v8_request_with_several_groups_then_each_answered(h):
    await h.commit("a", {("t", 0): 1})
    await h.commit("b", {("t", 0): 2})
    req = m.OffsetFetchRequest(require_stable=True, groups=[
        m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="a", topics=None),
        m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="b", topics=[
            m.OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 9])]),
    ])
    r = await answered(h.coordinator.offset_fetch(req, 9, CTX))
    got = {g.group_id: [(t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions]
           for g in r.groups}
    assert got == {"a": [("t", 0, 1)], "b": [("t", 0, 2), ("t", 9, -1)]}


# ------------------------------------------------------------------ Describe / List
async def test_given_stable_group_then_describe_has_full_member_data(h):
    ids = await h.stable_group("g", 2)
    req = m.DescribeGroupsRequest(groups=["g", "nope"], include_authorized_operations=False)
    r = await h.coordinator.describe_groups(req, 5, CTX)
    g, nope = r.groups
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (0, "Stable", "consumer", "range")
    assert g.authorized_operations == INT32_MIN
    assert [(x.member_id, x.client_id, x.client_host) for x in g.members] == [(i, "client", "/127.0.0.1") for i in ids]
    assert all(x.member_metadata == subscription("t") for x in g.members)
    assert {x.member_id: x.member_assignment for x in g.members} == {i: f"assign-{i}".encode() for i in ids}
    assert (nope.error_code, nope.group_state, nope.members) == (0, "Dead", [])
    r = await h.coordinator.describe_groups(m.DescribeGroupsRequest(groups=["g"], include_authorized_operations=True),
                                            5, CTX)
    assert r.groups[0].authorized_operations == GROUP_AUTHORIZED_OPERATIONS


async def test_describe_groups_v6_says_an_unknown_group_is_not_found(h):
    """KIP-1043: from v6 an unknown group is GROUP_ID_NOT_FOUND with a message (Kafka 4's Admin then raises
    GroupIdNotFoundException); v5 and below still describe it as Dead."""
    await h.stable_group("g", 1)
    r = await h.coordinator.describe_groups(m.DescribeGroupsRequest(groups=["g", "nope"]), 6, CTX)
    g, nope = r.groups
    assert (g.error_code, g.error_message, g.group_state) == (0, None, "Stable")
    assert (nope.error_code, nope.error_message, nope.group_state) == (
        E.GROUP_ID_NOT_FOUND, "Group nope not found.", "Dead")
    encoded = r.encode(6)
    assert m.DescribeGroupsResponse.decode(encoded, 6).groups[1].error_message == "Group nope not found."


async def test_given_rebalancing_group_then_describe_has_no_protocol_or_metadata(h):
    ids = await h.stable_group("g", 2)
    h.join("g", ids[0])
    await h.settle()
    g = (await h.coordinator.describe_groups(m.DescribeGroupsRequest(groups=["g"]), 5, CTX)).groups[0]
    assert (g.group_state, g.protocol_data) == ("PreparingRebalance", "")
    assert all(x.member_metadata == b"" for x in g.members)


async def test_given_groups_in_states_then_list_groups_filters_case_insensitively(h):
    await h.stable_group("g", 1)
    await h.commit("s", {("t", 0): 1})
    r = await h.coordinator.list_groups(m.ListGroupsRequest(), 4, CTX)
    assert sorted((x.group_id, x.protocol_type, x.group_state) for x in r.groups) == [
        ("g", "consumer", "Stable"), ("s", "", "Empty")]
    r = await h.coordinator.list_groups(m.ListGroupsRequest(states_filter=["stable"]), 4, CTX)
    assert [x.group_id for x in r.groups] == ["g"]
    r = await h.coordinator.list_groups(m.ListGroupsRequest(types_filter=["consumer"]), 5, CTX)
    assert r.groups == []
    r = await h.coordinator.list_groups(m.ListGroupsRequest(types_filter=["Classic"]), 5, CTX)
    assert {x.group_type for x in r.groups} == {"classic"}


# ------------------------------------------------------------------ DeleteGroups / OffsetDelete
async def test_given_groups_when_deleting_then_non_empty_and_not_found_refused_empty_deleted(h):
    await h.stable_group("busy", 1)
    await h.commit("idle", {("t", 0): 1})
    r = await answered(h.coordinator.delete_groups(m.DeleteGroupsRequest(groups_names=["busy", "idle", "idle", "nope"]), 2, CTX))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("busy", E.NON_EMPTY_GROUP), ("idle", E.NONE), ("nope", E.GROUP_ID_NOT_FOUND)]
    assert h.group("idle") is None
    assert await h.fetch("idle", None) == (0, {})


async def test_given_consumer_group_when_deleting_offsets_then_subscribed_topics_refused(h):
    ids = await h.stable_group("g", 1, protocols=(("range", subscription("t")),))
    await h.commit("g", {("t", 0): 1, ("u", 0): 2, ("u", 1): 3}, member_id=ids[0], generation=1)
    req = m.OffsetDeleteRequest(group_id="g", topics=[
        m.OffsetDeleteRequest.OffsetDeleteRequestTopic(name=n, partitions=[
            m.OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)])
        for n in ("t", "u")])
    r = await answered(h.coordinator.offset_delete(req, 0, CTX))
    assert r.error_code == 0
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
        ("t", [(0, E.GROUP_SUBSCRIBED_TO_TOPIC)]), ("u", [(0, E.NONE)])]
    got = (await h.fetch("g", None))[1]
    assert set(got) == {("t", 0), ("u", 1)}


async def test_given_non_consumer_group_with_members_then_offset_delete_refused(h):
    await h.stable_group("c", 1, protocol_type="connect", protocols=(("range", b""),))
    req = m.OffsetDeleteRequest(group_id="c", topics=[])
    assert (await answered(h.coordinator.offset_delete(req, 0, CTX))).error_code == E.NON_EMPTY_GROUP
    req = m.OffsetDeleteRequest(group_id="nope", topics=[])
    assert (await answered(h.coordinator.offset_delete(req, 0, CTX))).error_code == E.GROUP_ID_NOT_FOUND


async def test_given_unparseable_subscriptions_then_every_topic_counts_as_subscribed(h):
    ids = await h.stable_group("g", 1, protocols=(("range", b"\x00"),))
    await h.commit("g", {("u", 0): 2}, member_id=ids[0], generation=1)
    req = m.OffsetDeleteRequest(group_id="g", topics=[m.OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name="u", partitions=[m.OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
            partition_index=0)])])
    r = await answered(h.coordinator.offset_delete(req, 0, CTX))
    assert r.topics[0].partitions[0].error_code == E.GROUP_SUBSCRIBED_TO_TOPIC


async def test_given_commit_in_flight_when_fetching_with_require_stable_then_it_waits_for_it(h):
    import asyncio
    commit = asyncio.ensure_future(h.commit("s", {("t", 0): 7}))
    await asyncio.sleep(0)  # the commit is now appending
    assert h.coordinator.partitions.writes_in_flight() == 1
    req = m.OffsetFetchRequest(group_id="s", require_stable=True, topics=[
        m.OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])])
    r = await answered(h.coordinator.offset_fetch(req, 7, CTX))
    assert r.topics[0].partitions[0].committed_offset == 7
    assert (await commit) == {("t", 0): 0}


async def test_given_loading_partition_then_describe_and_list_report_load_in_progress(tmp_path):
    h = Harness(tmp_path)
    await h.start_loading()
    try:
        g = (await h.coordinator.describe_groups(m.DescribeGroupsRequest(groups=["g"]), 5, CTX)).groups[0]
        assert (g.group_id, g.error_code) == ("g", E.COORDINATOR_LOAD_IN_PROGRESS)
        r = await h.coordinator.list_groups(m.ListGroupsRequest(), 4, CTX)
        assert (r.error_code, r.groups) == (E.COORDINATOR_LOAD_IN_PROGRESS, [])
        r = await answered(h.coordinator.delete_groups(m.DeleteGroupsRequest(groups_names=["g"]), 2, CTX))
        assert r.results[0].error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    finally:
        await h.close()
