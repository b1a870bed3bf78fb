"""ClassicGroup unit tests: the transition table, rebalance eligibility, protocol selection."""
from __future__ import annotations

import asyncio

import pytest

from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.group import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupMember,
    GroupState,
    IllegalStateTransition,
    ManualScheduler,
)

S = GroupState


async def _never_store(group, assignment):
    raise AssertionError("no write expected")


def make_group(state: GroupState = S.EMPTY) -> ClassicGroup:
    group = ClassicGroup("g", config=CoordinatorConfig(), scheduler=ManualScheduler(), store=_never_store)
    group.state = state
    return group


def member(member_id: str, *protocols: str, instance: str | None = None) -> GroupMember:
    return GroupMember(member_id=member_id, group_instance_id=instance, client_id="c", client_host="/h",
                       rebalance_timeout_ms=1000, session_timeout_ms=1000, protocol_type="consumer",
                       protocols=[(p, p.encode()) for p in protocols])


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_transitions_follow_the_table_and_illegal_ones_raise(source, target):
    group = make_group(source)
    if source in VALID_PREVIOUS_STATES[target]:
        group.transition_to(target)
        assert (group.previous_state, group.state) == (source, target)
        assert group.state_timestamp_ms == group._scheduler.now_ms()
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target)
        assert group.state is source


def test_the_table_is_kafkas():
    assert VALID_PREVIOUS_STATES == {
        S.EMPTY: {S.PREPARING_REBALANCE},
        S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
        S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
        S.STABLE: {S.COMPLETING_REBALANCE},
        S.DEAD: set(S),
    }
    assert [s.value for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


@pytest.mark.parametrize("state,can", [(S.EMPTY, True), (S.STABLE, True), (S.COMPLETING_REBALANCE, True),
                                       (S.PREPARING_REBALANCE, False), (S.DEAD, False)])
def test_rebalance_may_start_only_from_stable_completing_or_empty(state, can):
    assert make_group(state).can_rebalance() is can


def test_select_protocol_raises_without_members():
    with pytest.raises(ValueError):
        make_group().select_protocol()


async def test_select_protocol_takes_the_most_voted_common_protocol():
    group = make_group()
    group.add(member("a", "roundrobin", "range", "sticky"))
    group.add(member("b", "range", "roundrobin"))
    group.add(member("c", "range", "sticky", "roundrobin"))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "range"
    assert group.protocol_type == "consumer" and group.leader_id == "a"


async def test_supports_protocols_in_empty_and_non_empty_groups():
    group = make_group()
    assert not group.supports_protocols("", [("range", b"")])
    assert not group.supports_protocols("consumer", [])
    assert group.supports_protocols("consumer", [("range", b"")])
    group.add(member("a", "range", "roundrobin"))
    group.state = S.STABLE
    assert group.supports_protocols("consumer", [("x", b""), ("roundrobin", b"")])
    assert not group.supports_protocols("consumer", [("x", b"")])
    assert not group.supports_protocols("connect", [("range", b"")])


async def test_removing_the_leader_elects_the_next_member_and_static_index_follows():
    group = make_group()
    group.add(member("a", "range", instance="i-a"))
    group.add(member("b", "range"))
    group.remove("a")
    assert group.leader_id == "b" and group.static_members == {}
    group.remove("b")
    assert group.leader_id is None


async def test_replace_static_member_moves_assignment_and_leadership_and_fences_the_old_id():
    group = make_group()
    old = member("old", "range", instance="i")
    old.assignment = b"asg"
    group.add(old)
    parked = asyncio.get_running_loop().create_future()
    old.sync_future = parked
    new = group.replace_static_member("i", "old", "new")
    assert parked.result().error == 82  # FENCED_INSTANCE_ID
    assert (new.assignment, group.leader_id, group.static_members) == (b"asg", "new", {"i": "new"})
    assert list(group.members) == ["new"]


async def test_cannot_add_a_static_member_twice():
    group = make_group()
    group.add(member("a", "range", instance="i"))
    with pytest.raises(RuntimeError):
        group.add(member("b", "range", instance="i"))


def test_manual_scheduler_fires_due_timers_in_order_and_skips_cancelled():
    clock = ManualScheduler(start_ms=0)
    fired = []
    clock.call_later(10, lambda: fired.append("b"))
    clock.call_later(5, lambda: fired.append("a"))
    clock.call_later(5, lambda: clock.call_later(1, lambda: fired.append("nested")))
    clock.call_later(7, lambda: fired.append("cancelled")).cancel()
    clock.advance(9)
    assert fired == ["a", "nested"] and clock.now_ms() == 9
    clock.advance(1)
    assert fired == ["a", "nested", "b"]


async def _ok_store(group, assignment):
    return 0


def stable_group_of(*members: GroupMember) -> ClassicGroup:
    group = ClassicGroup("g", config=CoordinatorConfig(), scheduler=ManualScheduler(), store=_ok_store)
    for m in members:
        group.add(m)
    group.state = S.STABLE
    group.generation_id = 1
    return group


def test_heartbeats_move_the_session_deadline_without_arming_timers():
    group = stable_group_of(member("a", "range"))  # session 1000 ms
    clock = group._scheduler
    armed = []
    call_later = clock.call_later
    clock.call_later = lambda delay, callback: armed.append(delay) or call_later(delay, callback)
    group.schedule_heartbeat("a")
    for _ in range(50):
        clock.advance(100)
        assert group.heartbeat("a", None, 1) == 0
    # 50 heartbeats in 5 s: the one timer fired early about once a session and re-armed each time
    assert len(armed) <= 6 and clock.pending() == 1
    assert group.session_deadline_ms("a") == clock.now_ms() + 1000


async def test_a_session_ends_exactly_one_timeout_after_the_last_heartbeat():
    group = stable_group_of(member("a", "range"), member("b", "range"))
    clock = group._scheduler
    group.schedule_heartbeat("a")
    group.schedule_heartbeat("b")
    clock.advance(700)
    group.heartbeat("a", None, 1)  # a's deadline moves to 1700; its timer still fires at 1000
    clock.advance(299)
    assert "b" in group.members
    clock.advance(1)  # b silent for exactly 1000 ms
    assert "b" not in group.members and "a" in group.members
    clock.advance(699)
    assert group.state is S.PREPARING_REBALANCE and "a" in group.members
    group._join_timer.cancel()  # (the rebalance timer is not under test)
    clock.advance(1)  # a silent for exactly 1000 ms
    assert "a" not in group.members and group.state is S.EMPTY
    await group.settle()


async def test_a_deadline_moved_earlier_than_the_armed_timer_rearms_it():
    """A new member's long join timeout is replaced by its (shorter) session timeout."""
    group = stable_group_of(member("a", "range"))
    clock = group._scheduler
    group.schedule_heartbeat("a", 300_000)
    group.schedule_heartbeat("a")  # 1000 ms
    assert clock.pending() == 1  # the 300 s timer was cancelled, not left to fire late
    clock.advance(999)
    assert "a" in group.members
    clock.advance(1)
    assert "a" not in group.members and group.session_deadline_ms("a") is None
    await group.settle()
