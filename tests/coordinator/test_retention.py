"""Offset retention (KIP-211) with a hand-driven clock."""
from __future__ import annotations

import pytest

from cohort.coordinator.groups.classic.engine import GroupState
from group_harness import E, Harness, subscription

RETENTION_MS = 60_000


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path, offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000).start()
    yield harness
    await harness.close()


async def offsets_of(h: Harness, group_id: str) -> dict:
    return {k: v[0] for k, v in (await h.fetch(group_id, None))[1].items()}


async def test_given_simple_group_then_offsets_expire_from_commit_time_and_group_goes(h):
    await h.commit("s", {("t", 0): 1})
    await h.advance(30_000)
    await h.commit("s", {("t", 1): 2})
    await h.advance(RETENTION_MS - 30_000 - 1)
    assert await h.expire_offsets() == 0
    await h.advance(1)
    assert await h.expire_offsets() == 1
    assert await offsets_of(h, "s") == {("t", 1): 2}
    await h.advance(30_000)
    assert await h.expire_offsets() == 2  # the last offset and the group tombstone
    assert h.group("s") is None and await offsets_of(h, "s") == {}


async def test_given_consumer_group_that_became_empty_then_retention_counts_from_emptiness(h):
    (member,) = await h.stable_group("g", 1, session_ms=600_000)
    await h.commit("g", {("t", 0): 5}, member_id=member, generation=1)
    await h.advance(RETENTION_MS * 2)
    assert await h.expire_offsets() == 0  # Stable and subscribed to t: never expires
    await h.leave("g", [(member, None)])
    await h.advance(0)
    assert h.group("g").state is GroupState.EMPTY
    await h.advance(RETENTION_MS - 1)
    assert await h.expire_offsets() == 0
    await h.advance(1)
    assert await h.expire_offsets() == 2
    assert h.group("g") is None


async def test_given_stable_consumer_group_then_unsubscribed_topics_expire_from_commit_time(h):
    (member,) = await h.stable_group("g", 1, session_ms=600_000, protocols=(("range", subscription("t")),))
    await h.commit("g", {("t", 0): 5, ("old", 0): 3}, member_id=member, generation=1)
    await h.advance(RETENTION_MS)
    assert await h.expire_offsets() == 1
    assert await offsets_of(h, "g") == {("t", 0): 5}
    assert h.group("g").state is GroupState.STABLE


async def test_given_rebalancing_group_then_nothing_expires(h):
    ids = await h.stable_group("g", 2, session_ms=600_000, rebalance_ms=600_000)
    await h.commit("g", {("old", 0): 3}, member_id=ids[0], generation=1)
    h.join("g", ids[0], session_ms=600_000, rebalance_ms=600_000)
    await h.settle()
    await h.advance(RETENTION_MS * 2)
    assert await h.expire_offsets() == 0


async def test_given_explicit_retention_time_then_offset_expires_at_its_expire_timestamp(h):
    await h.commit("s", {("t", 0): 1}, version=2, retention_ms=5_000)
    await h.commit("s", {("t", 1): 1})
    await h.advance(5_000)
    assert await h.expire_offsets() == 1
    assert await offsets_of(h, "s") == {("t", 1): 1}


async def test_given_empty_group_without_offsets_then_removed_by_the_next_pass(h):
    (member,) = await h.stable_group("g", 1)
    await h.leave("g", [(member, None)])
    await h.advance(0)
    assert await h.expire_offsets() == 1
    assert h.group("g") is None


async def test_given_retention_task_started_then_it_runs_every_check_interval(h):
    await h.commit("s", {("t", 0): 1})
    h.coordinator.start_retention()
    await h.advance(RETENTION_MS - 1000)
    assert await offsets_of(h, "s") == {("t", 0): 1}
    await h.advance(1000)
    await h.advance(1000)
    assert await offsets_of(h, "s") == {}


async def test_given_expired_offsets_when_restarted_then_they_stay_gone(h):
    await h.commit("s", {("t", 0): 1})
    await h.commit("keep", {("t", 0): 2})
    await h.advance(RETENTION_MS // 2)
    await h.commit("keep", {("t", 0): 3})
    await h.advance(RETENTION_MS // 2)
    assert await h.expire_offsets() == 2
    await h.restart()
    assert await offsets_of(h, "s") == {} and h.group("s") is None
    assert await offsets_of(h, "keep") == {("t", 0): 3}


async def test_given_append_failure_then_expiry_applies_nothing(h):
    await h.commit("s", {("t", 0): 1})
    await h.advance(RETENTION_MS)
    h.log.fail_with = E.KAFKA_STORAGE_ERROR
    assert await h.expire_offsets() == 2  # an offset and the simple group: handed to the write gate, never durable
    h.log.fail_with = None
    assert await offsets_of(h, "s") == {("t", 0): 1}


async def test_given_retention_started_twice_then_only_one_timer_runs(h):
    h.coordinator.start_retention()
    armed = h.clock.pending()
    h.coordinator.start_retention()
    assert h.clock.pending() == armed


async def test_given_an_expired_group_then_its_journal_goes_once_its_last_entry_is_as_old(h):
    (member,) = await h.stable_group("j", 1, session_ms=600_000)
    await h.commit("j", {("t", 0): 5}, member_id=member, generation=1)
    await h.leave("j", [(member, None)])
    await h.advance(0)
    await h.coordinator.partitions.wait_for_writes()
    assert [e.trigger for e in h.coordinator.reports.rebalance_journal("j")] == ["member_joined", "member_left"]
    await h.advance(RETENTION_MS)
    assert await h.expire_offsets() == 2  # the offset and the group; the journal stays a pass longer
    assert h.group("j") is None and len(h.coordinator.reports.journal.entries("j")) == 2
    assert await h.expire_offsets() == 2  # one tombstone per journal slot used
    assert h.coordinator.reports.journal.entries("j") == [] and h.coordinator.reports.journal.groups() == []


async def test_given_a_bad_reset_then_the_read_api_plans_and_executes_the_undo_and_journals_it(h):
    from cohort.coordinator.contracts.requests import RequestContext

    (member,) = await h.stable_group("u", 1, session_ms=600_000)
    await h.commit("u", {("t", 0): 5, ("t", 1): 7}, member_id=member, generation=1)
    await h.leave("u", [(member, None)])
    await h.advance(1000)
    good = h.coordinator.scheduler.now_ms()
    await h.advance(1000)
    admin = RequestContext(client_id="console", client_host="/10.0.0.9", principal="User:alice")
    assert await h.coordinator.reset_offsets("u", {("t", 0): 0, ("t", 1): 0}, admin) == {("t", 0): 0, ("t", 1): 0}
    plan = await h.coordinator.reports.reset_plan_to_commit_at("u", good)
    assert plan == {("t", 0): 5, ("t", 1): 7}
    assert await h.coordinator.reset_offsets("u", plan, admin) == {("t", 0): 0, ("t", 1): 0}
    assert await offsets_of(h, "u") == {("t", 0): 5, ("t", 1): 7}
    undo = h.coordinator.reports.rebalance_journal("u")[-1]
    assert (undo.kind, undo.trigger, undo.principal, undo.members[0].client_host) == (
        "admin", "reset_offsets", "User:alice", "/10.0.0.9")
    assert undo.detail == "t:0 0->5, t:1 0->7"
