"""Joining and expiring members costs O(1) per member, not a scan of the group (hardening, item 4).

Counted, not timed: how often a member is asked whether it awaits its JoinGroup while a group of n
members forms, and while n sessions expire. A scan per event makes that grow with n^2 (2.5 k / 5 k / 10 k
members stalled everyone for 0.9 / 3.7 / 14.7 s); a count kept as members park and leave grows with n.
"""
from __future__ import annotations

import pytest

from cohort.coordinator.groups.classic.member import GroupMember
from group_harness import Harness

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def asks(monkeypatch):
    """Counts reads of GroupMember.is_awaiting_join (the per-member question a scan asks)."""
    counter = {"n": 0}
    original = GroupMember.is_awaiting_join

    def counted(self):
        counter["n"] += 1
        return original.fget(self)

    monkeypatch.setattr(GroupMember, "is_awaiting_join", property(counted))
    return counter


async def form(tmp_path, n: int, asks, name: str) -> tuple[Harness, list[str], int]:
    h = await Harness(tmp_path / name, group_min_session_timeout_ms=1000).start()
    asks["n"] = 0
    ids = await h.stable_group("g", n, session_ms=1000)
    return h, ids, asks["n"]


async def test_a_group_forms_with_work_linear_in_its_members(tmp_path, asks):
    small, _, formed_small = await form(tmp_path, 100, asks, "small")
    await small.close()
    large, _, formed_large = await form(tmp_path, 800, asks, "large")
    await large.close()
    # 8x the members: 8x the work (plus a constant), not 64x.
    assert formed_large <= 8 * formed_small + 800, (formed_small, formed_large)


async def test_many_sessions_expiring_together_cost_linear_work(tmp_path, asks):
    costs = {}
    for n in (100, 800):
        h, ids, _ = await form(tmp_path, n, asks, f"expire-{n}")
        asks["n"] = 0
        await h.advance(1500)  # nobody heartbeats: every session lapses in the same instant
        assert not h.group("g").members
        costs[n] = asks["n"]
        await h.close()
    assert costs[800] <= 8 * costs[100] + 800, costs
