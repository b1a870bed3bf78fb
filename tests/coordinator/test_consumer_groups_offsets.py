"""A consumer group's committed offsets through the coordinator (manual clock, real offsets log):
retention keeps what the group subscribes to, a reload keeps the group and its offsets together, and
deleting an empty consumer group removes both."""
from __future__ import annotations

import pytest

from group_harness import CTX, E, Harness, answered
from cohort.protocol import messages as m

RETENTION_MS = 60_000


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path, offsets_retention_minutes=1).start()
    yield harness
    await harness.close()


async def heartbeat(h: Harness, request) -> m.ConsumerGroupHeartbeatResponse:
    answer = h.coordinator.consumer_group_heartbeat(request, 1, CTX)
    return answer if isinstance(answer, m.ConsumerGroupHeartbeatResponse) else await answer


async def join(h: Harness, group: str, member: str, topics: list[str]) -> int:
    response = await heartbeat(h, m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=topics, topic_partitions=[]))
    assert response.error_code == E.NONE, response
    return response.member_epoch


async def test_retention_keeps_subscribed_topics_of_a_consumer_group_and_no_classic_group_appears(h):
    epoch = await join(h, "cg", "member-1", ["t"])
    assert epoch == 2  # the group was created at epoch 1; this join bumped it
    assert await h.commit("cg", {("t", 0): 5, ("u", 0): 7}, member_id="member-1", generation=epoch,
                          version=9) == {("t", 0): E.NONE, ("u", 0): E.NONE}
    assert await h.commit("cg", {("t", 0): 6}, member_id="member-1", generation=epoch + 1, version=9) == {
        ("t", 0): E.STALE_MEMBER_EPOCH}
    for _ in range(2):  # the member stays (its session is 45 s), the offsets age
        await h.advance(RETENTION_MS // 2)
        assert (await heartbeat(h, m.ConsumerGroupHeartbeatRequest(
            group_id="cg", member_id="member-1", member_epoch=epoch))).error_code == E.NONE
    assert await h.expire_offsets() == 1  # "u": not subscribed; "t" is kept
    assert h.group("cg") is None and h.coordinator.consumer_group("cg") is not None
    _, offsets = await h.fetch("cg")
    assert {k: v[0] for k, v in offsets.items()} == {("t", 0): 5}


async def test_a_reload_keeps_the_consumer_group_with_its_offsets_and_delete_removes_both(h):
    epoch = await join(h, "cg2", "member-1", ["t"])
    await h.commit("cg2", {("t", 0): 3}, member_id="member-1", generation=epoch, version=9)
    await h.settle()
    await h.restart()
    group = h.coordinator.consumer_group("cg2")
    assert group is not None and h.group("cg2") is None  # the offsets' replay made no simple classic group
    assert group.members["member-1"].member_epoch == epoch
    deleted = await answered(h.coordinator.delete_groups(m.DeleteGroupsRequest(groups_names=["cg2"]), 2, CTX))
    assert deleted.results[0].error_code == E.NON_EMPTY_GROUP
    left = await heartbeat(h, m.ConsumerGroupHeartbeatRequest(group_id="cg2", member_id="member-1", member_epoch=-1))
    assert left.error_code == E.NONE
    deleted = await answered(h.coordinator.delete_groups(m.DeleteGroupsRequest(groups_names=["cg2"]), 2, CTX))
    assert deleted.results[0].error_code == E.NONE
    await h.settle()
    await h.restart()
    assert h.coordinator.consumer_group("cg2") is None and h.group("cg2") is None
    assert (await h.fetch("cg2"))[1] == {}
