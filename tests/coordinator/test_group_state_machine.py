"""The classic group engine driven by hand: events in, effects out, a manual clock, no event loop.

`Driver` plays the runtime's part in a few lines (timers as due times, parked requests as answer
slots, appends held until the test says they are durable), so each test reads as a scenario.
"""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.groups.classic.engine import TRANSITIONS, ClassicGroup, GroupState, IllegalStateTransition, Step
from cohort.coordinator.groups.classic.events import (
    Heartbeat,
    JoinAnswered,
    JoinGroup,
    JoinRequest,
    JoinResult,
    LeaveGroup,
    MetadataLoaded,
    SyncGroup,
    SyncResult,
)
from cohort.coordinator.groups.classic.rebalance import RebalanceCause
from cohort.coordinator.groups.classic.timers import GroupTimer
from cohort.coordinator.groups.effects import Deleted, LoadCompleted
from cohort.coordinator.groups.effects import (
    Answer,
    AnswerAll,
    AppendRecords,
    CancelAllTimers,
    CancelTimer,
    MemberExpired,
    Now,
    RebalanceCompleted,
    RebalanceJournaled,
    RecordsAppended,
    Reply,
    SetTimer,
    StateChanged,
    TimerFired,
)
from cohort.coordinator.groups.runtime.scheduler import ManualScheduler
from cohort.coordinator.records.types import GroupMemberRecord, GroupMetadataRecord
from cohort.protocol.errors import ErrorCode

S = GroupState
E = ErrorCode


class Driver:
    """The runtime's part, by hand: executes effects into plain dicts and lists."""

    def __init__(self, **overrides) -> None:
        settings_ = dict(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=10)
        settings_.update(overrides)
        self.config = CoordinatorConfig(**settings_)
        self.now_ms = 1_000_000
        self.group = ClassicGroup("g", config=self.config, created_ms=self.now_ms)
        self.timers: dict[object, float] = {}  # key -> when it fires
        self.answers: dict[int, object] = {}
        self.appends: list[AppendRecords] = []
        self.transitions: list[StateChanged] = []
        self.journal: list[object] = []  # RebalanceCompleted, MemberExpired
        self.rebalances: list[RebalanceJournaled] = []  # the operator journal's entries
        self.timer_effects = 0
        self._ids = itertools.count(1)

    def send(self, event):
        effects = self.group.handle(event, Now(self.now_ms, self.now_ms))
        reply = None
        for effect in effects:
            kind = type(effect)
            if kind is Reply:
                reply = effect.result
            elif kind is Answer:
                self.answers[effect.request_id] = effect.result
            elif kind is AnswerAll:
                for request_id, result in effect.answers:
                    if effect.restart_sessions_of is not None:
                        self.send(JoinAnswered(result.member_id, effect.restart_sessions_of))
                    if request_id is not None:
                        self.answers[request_id] = result
            elif kind is SetTimer:
                self.timer_effects += 1
                self.timers[effect.key] = self.now_ms + effect.delay_ms
            elif kind is CancelTimer:
                self.timer_effects += 1
                self.timers.pop(effect.key, None)
            elif kind is CancelAllTimers:
                self.timers.clear()
            elif kind is AppendRecords:
                self.appends.append(effect)
            elif kind is StateChanged:
                self.transitions.append(effect)
            elif kind in (RebalanceCompleted, MemberExpired):
                self.journal.append(effect)
            elif kind is RebalanceJournaled:
                self.rebalances.append(effect)
            else:
                raise AssertionError(f"unexpected effect {effect!r}")
        return reply

    # -- requests
    def join(self, member_id: str = "", *, instance: str | None = None, protocols=(("range", b"sub"),),
             session_ms: int = 1000, rebalance_ms: int = 1000, reason: str | None = None) -> int:
        request_id = next(self._ids)
        self.send(JoinGroup(request_id, JoinRequest(
            member_id=member_id, group_instance_id=instance, client_id="c", client_host="/h",
            session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms, protocol_type="consumer",
            protocols=list(protocols), reason=reason)))
        return request_id

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             instance: str | None = None) -> int:
        request_id = next(self._ids)
        self.send(SyncGroup(request_id, member_id, instance, generation, "consumer", None, assignments or {}))
        return request_id

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> int:
        return self.send(Heartbeat(member_id, instance, generation))

    def leave(self, *members: tuple[str, str | None, str | None]) -> list[int]:
        return self.send(LeaveGroup(list(members)))

    # -- time and storage
    def advance(self, ms: int) -> None:
        target = self.now_ms + ms
        while self.timers:
            key, when = min(self.timers.items(), key=lambda kv: kv[1])
            if when > target:
                break
            self.now_ms = max(self.now_ms, when)
            del self.timers[key]
            self.send(TimerFired(key))
        self.now_ms = target

    def finish_appends(self, error: int = E.NONE) -> None:
        appends, self.appends = self.appends, []
        for append in appends:
            self.send(RecordsAppended(append.purpose, error))

    # -- composite
    def new_member(self, **kwargs) -> str:
        request_id = self.join(**kwargs)
        result = self.answers.pop(request_id)
        assert result.error == E.MEMBER_ID_REQUIRED, result
        return result.member_id

    def stable(self, n: int) -> list[str]:
        """n dynamic members joined and synced; returns their ids, leader first."""
        ids = [self.new_member() for _ in range(n)]
        joins = [self.join(member_id) for member_id in ids]
        self.advance(0)  # the initial delay (0 here) ends the first join phase
        results = [self.answers.pop(r) for r in joins]
        assert all(r.error == E.NONE for r in results), results
        leader, generation = results[0].leader, results[0].generation_id
        syncs = [self.sync(m, generation, {x: x.encode() for x in ids} if m == leader else None) for m in ids]
        self.finish_appends()
        assert all(self.answers.pop(s).error == E.NONE for s in syncs)
        assert self.group.state is S.STABLE
        return [leader] + [x for x in ids if x != leader]


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------
KAFKA_VALID_PREVIOUS_STATES = {  # Kafka's ClassicGroupState: target <- states it may be entered from
    S.EMPTY: {S.PREPARING_REBALANCE},
    S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.DEAD: set(S),
}


def test_the_table_is_kafkas_plus_loading():
    previous: dict[GroupState, set[GroupState]] = {s: set() for s in S}
    for (source, step), targets in TRANSITIONS.items():
        if step is not Step.LOADED:
            for target in targets:
                previous[target].add(source)
    assert previous == KAFKA_VALID_PREVIOUS_STATES
    assert [s.value for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("step", list(Step))
@pytest.mark.parametrize("target", list(S))
def test_a_transition_outside_the_table_raises_and_changes_nothing(source, step, target):
    group = ClassicGroup("g", config=CoordinatorConfig(), created_ms=0)
    group.state = source
    group._out = []
    if target in TRANSITIONS.get((source, step), ()):
        group._transition(step, target)
        assert group.state is target and group._out == [StateChanged("g", source, step, target)]
    else:
        with pytest.raises(IllegalStateTransition):
            group._transition(step, target)
        assert group.state is source and group._out == []


GROUPS_PACKAGE = Path(__file__).resolve().parents[2] / "coordinator" / "groups"


@pytest.mark.parametrize("module", ["effects.py", *sorted(f"classic/{p.name}" for p in (GROUPS_PACKAGE / "classic").glob("*.py"))])
def test_the_engine_imports_no_event_loop_clock_or_io(module):
    """Every module of the classic engine's package, and the effects every engine shares, are sans-IO."""
    tree = ast.parse((GROUPS_PACKAGE / module).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"asyncio", "time", "socket", "threading", "selectors", "os"}, imported


# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------
def test_a_first_rebalance_goes_empty_preparing_completing_stable_and_is_counted_as_initial():
    d = Driver()
    member_id = d.new_member()
    assert d.timers == {member_id: d.now_ms + 1000}  # a pending id has a session too
    join = d.join(member_id, reason="starting")
    assert d.group.state is S.PREPARING_REBALANCE and GroupTimer.JOIN_PHASE in d.timers
    d.advance(0)
    result = d.answers.pop(join)
    assert (result.error, result.generation_id, result.leader) == (E.NONE, 1, member_id)
    assert result.members == [(member_id, None, b"sub")]
    sync = d.sync(member_id, 1, {member_id: b"mine"})
    assert sync not in d.answers and len(d.appends) == 1  # parked until the record is durable
    (record,) = d.appends[0].records
    assert record.members[0].assignment == b"mine"
    d.finish_appends()
    assert d.answers.pop(sync) == SyncResult(E.NONE, "consumer", "range", b"mine")
    assert d.transitions[0].reason.cause is RebalanceCause.MEMBER_JOINED
    assert [(t.source, t.step, t.target) for t in d.transitions] == [
        (S.EMPTY, Step.PREPARE_REBALANCE, S.PREPARING_REBALANCE),
        (S.PREPARING_REBALANCE, Step.JOIN_PHASE_COMPLETED, S.COMPLETING_REBALANCE),
        (S.COMPLETING_REBALANCE, Step.ASSIGNMENT_STORED, S.STABLE)]
    (done,) = d.journal
    assert done.initial and done.reason.cause is RebalanceCause.MEMBER_JOINED
    assert done.reason.client_reason == "starting"


def test_a_heartbeat_on_a_stable_group_returns_a_constant_answer_and_arms_no_timer():
    d = Driver()
    (leader,) = d.stable(1)
    d.timer_effects = 0
    group = d.group
    first = group.handle(Heartbeat(leader, None, 1), Now(d.now_ms, d.now_ms))
    second = group.handle(Heartbeat(leader, None, 1), Now(d.now_ms + 10, d.now_ms + 10))
    assert first is second and first == (Reply(E.NONE),)
    assert d.heartbeat(leader, 0) == E.ILLEGAL_GENERATION
    assert d.heartbeat("nobody", 1) == E.UNKNOWN_MEMBER_ID
    assert d.timer_effects == 0


def test_a_session_ends_exactly_one_timeout_after_the_last_heartbeat():
    d = Driver()
    a, b = d.stable(2)  # sessions of 1000 ms, restarted as the sync answers went out
    d.advance(700)
    d.heartbeat(a, 1)  # a's deadline moves to 1700; its timer still fires at 1000 and re-arms
    d.advance(299)
    assert b in d.group.members
    d.advance(1)  # b silent for exactly 1000 ms
    assert b not in d.group.members and a in d.group.members
    assert d.journal[-1] == MemberExpired("g", b)
    assert d.group.state is S.PREPARING_REBALANCE
    assert d.group.session_deadline_ms(a) == d.now_ms + 700


def test_heartbeats_move_the_deadline_without_timer_effects():
    d = Driver()
    (a,) = d.stable(1)
    d.timer_effects = 0
    for _ in range(50):
        d.advance(100)
        assert d.heartbeat(a, 1) == E.NONE
    # 50 heartbeats in 5 s: the one timer fired early about once a session and re-armed each time
    assert d.timer_effects <= 6 and list(d.timers) == [a]
    assert d.group.session_deadline_ms(a) == d.now_ms + 1000


def test_a_deadline_moved_earlier_than_the_armed_timer_rearms_it():
    """A new member's long join timeout is replaced by its (shorter) session timeout."""
    d = Driver(group_new_member_join_timeout_ms=300_000)
    join = d.join(instance="pod")  # a static member joins at once, watched by the join timeout
    (member_id,) = d.group.members
    assert d.timers[member_id] == d.now_ms + 300_000
    d.advance(0)
    assert d.answers[join].error == E.NONE
    assert d.timers[member_id] == d.now_ms + 1000  # restarted as its answer went out, not left at 300 s


def test_an_expired_session_is_the_reason_of_the_next_rebalance():
    d = Driver()
    a, b = d.stable(2)
    d.journal.clear()
    for _ in range(3):
        d.advance(400)
        d.heartbeat(a, 1, None)
    rejoin = d.join(a)
    d.advance(0)
    assert d.answers.pop(rejoin).generation_id == 2
    sync = d.sync(a, 2, {a: b"all"})
    d.finish_appends()
    assert d.answers.pop(sync).assignment == b"all"
    expired, done = d.journal
    assert expired == MemberExpired("g", b)
    assert not done.initial and done.reason.cause is RebalanceCause.SESSION_EXPIRED
    assert done.reason.members == (b,) and done.reason.cause.metric_label == "member_expired"


def test_leaving_members_are_a_structured_reason_and_the_leader_moves_on():
    d = Driver()
    a, b, c = d.stable(3)
    assert d.leave((a, None, "shutting down"), ("ghost", None, None)) == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert d.group.membership.leader_id == b and d.group.state is S.PREPARING_REBALANCE
    assert d.group._journal.reason.cause is RebalanceCause.MEMBER_LEFT
    assert d.group._journal.reason.members == (a,)
    assert d.group._journal.reason.client_reason == "shutting down"


def test_a_failed_assignment_write_answers_the_syncs_and_rebalances():
    d = Driver()
    member_id = d.new_member()
    join = d.join(member_id)
    d.advance(0)
    assert d.answers.pop(join).error == E.NONE
    sync = d.sync(member_id, 1, {member_id: b"x"})
    d.finish_appends(E.NOT_COORDINATOR)
    assert d.answers.pop(sync).error == E.NOT_COORDINATOR
    assert d.group.state is S.PREPARING_REBALANCE
    assert d.group._journal.reason.cause is RebalanceCause.MEMBER_JOINED  # the first cause is kept


def test_loading_goes_through_the_table_and_sessions_start_when_the_load_completes():
    d = Driver()
    record = GroupMetadataRecord(
        group="g", protocol_type="consumer", generation=7, protocol="range", leader="m-1",
        current_state_timestamp=123, members=[
            GroupMemberRecord("m-1", None, "c", "/h", 5000, 1000, b"sub", b"a1"),
            GroupMemberRecord("m-2", "pod-2", "c", "/h", -1, 2000, b"sub", b"a2")])
    d.send(MetadataLoaded(record))
    assert d.transitions == [StateChanged("g", S.EMPTY, Step.LOADED, S.STABLE)]
    assert d.timers == {}  # replay arms nothing
    g = d.group
    assert (g.generation_id, g.membership.leader_id, g.state_timestamp_ms, g.membership.static_members) == (7, "m-1", 123, {"pod-2": "m-2"})
    assert g.members["m-2"].rebalance_timeout_ms == 2000  # v0 records: the session timeout stands in
    d.send(LoadCompleted())
    assert d.timers == {"m-1": d.now_ms + 1000, "m-2": d.now_ms + 2000}
    assert d.heartbeat("m-2", 7, "pod-2") == E.NONE


def test_a_loaded_group_over_the_max_size_rebalances():
    d = Driver(group_max_size=1)
    record = GroupMetadataRecord("g", "consumer", 3, "range", "m-1", 0, [
        GroupMemberRecord(f"m-{i}", None, "c", "/h", 1000, 1000, b"sub", b"") for i in (1, 2)])
    d.send(MetadataLoaded(record))
    d.send(LoadCompleted())
    assert d.group.state is S.PREPARING_REBALANCE
    assert d.group._journal.reason.cause is RebalanceCause.OVER_MAX_SIZE


def test_a_deleted_group_is_dead_its_timers_stop_and_parked_requests_are_answered():
    d = Driver()
    member_id = d.new_member()
    join = d.join(member_id)
    d.send(Deleted())
    assert d.group.state is S.DEAD and d.timers == {}
    assert d.answers[join] == JoinResult(error=E.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
    assert d.heartbeat(member_id, 0) == E.COORDINATOR_NOT_AVAILABLE


def test_a_static_member_rejoining_stable_keeps_its_assignment_and_fences_the_old_id():
    d = Driver()
    static = d.join(instance="pod")
    d.advance(0)
    old_id = d.answers.pop(static).member_id
    parked = d.sync(old_id, 1, {old_id: b"asg"})
    d.finish_appends()
    assert d.answers.pop(parked).assignment == b"asg"
    rejoin = d.join(instance="pod")
    (append,) = d.appends
    new_id = append.purpose.member.member_id
    assert d.group.membership.static_members == {"pod": new_id} and d.group.membership.leader_id == new_id
    assert rejoin not in d.answers  # answered once the new id is durable
    d.finish_appends()
    answer = d.answers.pop(rejoin)
    assert (answer.error, answer.member_id, answer.generation_id) == (E.NONE, new_id, 1)
    assert d.heartbeat(old_id, 1, "pod") == E.FENCED_INSTANCE_ID
    assert d.group.state is S.STABLE and d.group.members[new_id].assignment == b"asg"


def test_the_last_member_leaving_a_stable_group_makes_it_empty_at_once():
    """Kafka's prepareRebalance ends with maybeCompleteJoinElseSchedule: nobody left to wait for."""
    d = Driver()
    (a,) = d.stable(1)
    d.appends.clear()
    assert d.leave((a, None, "bye")) == [E.NONE]
    assert d.group.state is S.EMPTY and d.group.generation_id == 2
    assert [(t.source, t.target) for t in d.transitions[-2:]] == [
        (S.STABLE, S.PREPARING_REBALANCE), (S.PREPARING_REBALANCE, S.EMPTY)]
    assert GroupTimer.JOIN_PHASE not in d.timers
    (append,) = d.appends  # the empty generation is written, as when a join timer ends the phase
    assert append.records[0].generation == 2 and append.records[0].members == []


def test_a_group_that_emptied_counts_its_next_rebalance_as_initial():
    """A rebalance that ended Empty never became stable: the next one is timed and labelled afresh."""
    d = Driver()
    (a,) = d.stable(1)
    d.journal.clear()
    d.advance(5000)  # a expires: its rebalance ends with the group Empty
    assert d.group.state is S.EMPTY and d.journal == [MemberExpired("g", a)]
    d.advance(60_000)
    b = d.new_member()
    join = d.join(b, reason="back")
    d.advance(0)
    sync = d.sync(b, 3, {b: b"x"})
    assert d.answers.pop(join).generation_id == 3
    d.finish_appends()
    assert d.answers.pop(sync).error == E.NONE
    done = d.journal[-1]
    assert done.initial and done.reason.cause is RebalanceCause.MEMBER_JOINED and done.duration_ms == 0


def test_a_non_initial_rebalance_with_everyone_already_joined_completes_as_it_starts():
    """The leader rejoining a Stable group of one starts a rebalance that has nothing to wait for."""
    d = Driver()
    (a,) = d.stable(1)
    rejoin = d.join(a)
    assert d.group.state is S.COMPLETING_REBALANCE
    assert d.answers.pop(rejoin).generation_id == 2
    assert GroupTimer.JOIN_PHASE not in d.timers


def test_a_session_expiry_ends_even_the_initial_join_phase_once_the_rest_have_joined():
    """Kafka's removeMemberAndUpdateClassicGroup completes the join with no initial-rebalance check."""
    d = Driver(group_initial_rebalance_delay_ms=3000, group_new_member_join_timeout_ms=500)
    a, b = d.new_member(), d.new_member()
    join_a = d.join(a, session_ms=1000, rebalance_ms=10_000)
    d.advance(200)
    join_b = d.join(b, session_ms=1000, rebalance_ms=10_000)  # b's join timeout ends at 700, a's at 500
    d.leave((b, None, None))  # only a leave: the initial phase still waits for its delay
    assert d.answers.pop(join_b).error == E.UNKNOWN_MEMBER_ID
    assert d.group.state is S.PREPARING_REBALANCE and d.group.previous_state is S.EMPTY
    c = d.new_member()  # a MEMBER_ID_REQUIRED id the phase must wait for
    d.join(c, session_ms=1000, rebalance_ms=10_000)
    assert d.group.state is S.PREPARING_REBALANCE
    d.advance(299)  # 499: nobody expired yet
    assert d.group.state is S.PREPARING_REBALANCE
    d.advance(1)  # a, new and silent for the join timeout, expires: c alone is left, and has joined
    assert a not in d.group.members and d.journal[-1] == MemberExpired("g", a)
    assert d.answers.pop(join_a).error == E.UNKNOWN_MEMBER_ID
    assert d.group.state is S.COMPLETING_REBALANCE and d.group.generation_id == 1
    assert d.group.membership.leader_id == c and GroupTimer.JOIN_PHASE not in d.timers


def test_a_pending_member_id_expiring_ends_even_the_initial_join_phase():
    """Kafka's removePendingMemberAndUpdateClassicGroup: the last one not joined was a pending id."""
    d = Driver(group_initial_rebalance_delay_ms=3000)
    a = d.new_member()
    join_a = d.join(a, session_ms=5000, rebalance_ms=10_000)
    d.new_member()  # never rejoins; its pending id lives one session (1000 ms)
    d.advance(999)
    assert d.group.state is S.PREPARING_REBALANCE and join_a not in d.answers
    d.advance(1)
    assert not d.group.membership.pending_members
    assert d.group.state is S.COMPLETING_REBALANCE
    answer = d.answers.pop(join_a)
    assert (answer.error, answer.generation_id, answer.leader) == (E.NONE, 1, a)


def test_a_leave_does_not_end_the_initial_join_phase_early():
    """maybeCompleteJoinPhase (joins, leaves) keeps the initial delay; only expiries skip it."""
    d = Driver(group_initial_rebalance_delay_ms=3000)
    a, b = d.new_member(), d.new_member()
    join_a = d.join(a, session_ms=5000, rebalance_ms=10_000)
    d.leave((b, None, None))  # the pending id leaves: everyone left has joined
    assert d.group.state is S.PREPARING_REBALANCE and join_a not in d.answers
    d.advance(3000)
    assert d.answers.pop(join_a).generation_id == 1


def test_protocol_selection_takes_the_most_voted_common_protocol():
    d = Driver()
    ids = [d.new_member() for _ in range(3)]
    prefs = [("roundrobin", "range", "sticky"), ("range", "roundrobin"), ("range", "sticky", "roundrobin")]
    joins = [d.join(m, protocols=[(p, b"") for p in ps]) for m, ps in zip(ids, prefs)]
    d.advance(0)
    assert d.group.membership.protocols.candidates() == {"range", "roundrobin"}
    assert {d.answers[j].protocol_name for j in joins} == {"range"}
    assert not d.group.supports_protocols("consumer", [("sticky", b"")])
    assert d.group.supports_protocols("consumer", [("x", b""), ("roundrobin", b"")])
    assert not d.group.supports_protocols("connect", [("range", b"")])


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


# ---------------------------------------------------------------------------------------------
# Any sequence of requests, timeouts and write outcomes stays inside the table
# ---------------------------------------------------------------------------------------------
ACTIONS = st.lists(st.tuples(
    st.sampled_from(["join_new", "join_static", "rejoin", "rejoin_changed", "sync", "heartbeat", "leave",
                     "leave_static", "advance", "appended", "append_failed"]),
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=0, max_value=1500)), max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_every_transition_the_engine_makes_is_in_the_table(actions):
    d = Driver(group_initial_rebalance_delay_ms=50, group_max_size=4)
    known: list[str] = []
    for action, pick, ms in actions:
        member_id = known[pick % len(known)] if known else ""
        generation = d.group.generation_id
        if action == "join_new":
            result = d.answers.get(d.join())
            if result is not None and result.member_id:
                known.append(result.member_id)
        elif action == "join_static":
            d.join(instance=f"pod-{pick % 2}")
        elif action == "rejoin":
            d.join(member_id)
        elif action == "rejoin_changed":
            d.join(member_id, protocols=(("range", bytes([ms % 7])),))
        elif action == "sync":
            d.sync(member_id, generation, {m: b"x" for m in d.group.members})
        elif action == "heartbeat":
            d.heartbeat(member_id, generation)
        elif action == "leave":
            d.leave((member_id, None, "bye"))
        elif action == "leave_static":
            d.leave(("", f"pod-{pick % 2}", None))
        elif action == "advance":
            d.advance(ms)
        elif action == "appended":
            d.finish_appends()
        else:
            d.finish_appends(E.NOT_COORDINATOR)
        for t in d.transitions:
            assert t.target in TRANSITIONS[(t.source, t.step)], t
        g = d.group
        assert g.membership.awaiting_join_count() == sum(1 for m in g.members.values() if m.join_request is not None)
        assert set(g.membership.static_members.values()) <= set(g.members)
        assert g.membership.leader_id is None or g.membership.leader_id in g.members
        # every member and pending id has a session timer, and nothing else does
        sessions = {k for k in d.timers if type(k) is str}
        assert sessions == set(g.members) | g.membership.pending_members
