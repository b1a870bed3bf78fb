"""The classic consumer group: Kafka's `ClassicGroup` state machine, its members and its timers.

Theory of operation
-------------------
A group starts **Empty**. The first JoinGroup moves it to **PreparingRebalance**, the join
phase: every member must (re)send JoinGroup, and each request is parked on its member until
the phase ends. The phase ends at once when every member has rejoined and nobody holds a
MEMBER_ID_REQUIRED id, or when the rebalance timer fires (the largest member rebalance timeout;
the first rebalance of an Empty group instead waits `group.initial.rebalance.delay.ms`, extended
while new members keep arriving, unless a session expiry leaves only members that have rejoined).
Ending the phase drops dynamic members that did not rejoin, bumps the generation, picks a
protocol by vote and moves to **CompletingRebalance**: everyone
gets its JoinGroup answer and the leader also gets the member list. Followers' SyncGroups park
until the leader's SyncGroup brings the assignment; once the GroupMetadata record holding it is
durable the group is **Stable** and every parked SyncGroup is answered. Any membership change
(a join with new metadata, a leave, an expired session, a missing SyncGroup) starts the next
rebalance. A join phase that ends with nobody left makes the group Empty again. **Dead** is
terminal: the group was deleted (or its partition unloaded) and must not be touched.

Every timer of a group lives here and goes through a `Scheduler`, so tests drive time by hand:
member session (heartbeat) expiry, the new-member join timeout, the join phase timer (initial
delay or rebalance timeout) and the pending-sync timer. A session is a deadline watched by one
timer that re-arms itself when heartbeats moved the deadline (`SessionTimer`). Parked requests
are asyncio futures held by their member; every code path that removes a member or ends a phase
answers them, so no request is ever left hanging.

The group never touches storage itself: the coordinator hands it a `store` coroutine that
writes a GroupMetadata record and returns a Kafka error code (0 when durable).
"""
from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Awaitable, Callable, Protocol

from cohort.protocol.consumer_protocol import decode_subscription
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.group")

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    """Kafka's state names, exactly: admin tools compare these strings."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


_S = GroupState
# target state <- states it may be entered from (Kafka's ClassicGroupState).
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}
REBALANCE_ALLOWED_FROM = frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY})


class IllegalStateTransition(RuntimeError):
    """A transition outside VALID_PREVIOUS_STATES: a coordinator bug, never a client error."""


# ---------------------------------------------------------------------------------------------
# Time
# ---------------------------------------------------------------------------------------------
class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Where a group gets its clocks and its timers."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds, for timestamps clients and records see."""
        ...

    def monotonic_ms(self) -> float:
        """The clock `call_later` counts on, for deadlines a clock step must not move."""
        ...

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle: ...


class LoopScheduler:
    """The production scheduler: wall-clock milliseconds and the running loop's clock and timers."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic_ms(self) -> float:
        return asyncio.get_running_loop().time() * 1000.0

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, callback)


class _ManualTimer:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: int, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """A clock that moves only when told to: `advance(ms)` fires due timers in time order.

    For tests and simulations; timers with equal deadlines fire in the order they were set.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._heap: list[tuple[int, int, _ManualTimer]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> _ManualTimer:
        timer = _ManualTimer(self._now + max(delay_ms, 0), callback)
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
        return timer

    def advance(self, ms: int) -> None:
        target = self._now + ms
        while self._heap and self._heap[0][0] <= target:
            when, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback()
        self._now = target

    def pending(self) -> int:
        return sum(1 for _, _, t in self._heap if not t.cancelled)


class SessionTimer:
    """One member's session deadline and the single timer that watches it.

    A heartbeat only moves `deadline` later; the armed timer, when it fires before the
    deadline, re-arms itself once for what is left. So a heartbeat costs no timer call:
    cancelling and creating a loop timer per heartbeat (1 700 a second for 5 000 members
    at a 3 s interval) was most of the group's share of the server's time. A deadline
    moved *earlier* than the armed timer (a new member's long join timeout replaced by its
    session timeout) re-arms at once, so expiry is never late.
    """

    __slots__ = ("deadline", "fires_at", "handle")

    def __init__(self, deadline: float, handle: TimerHandle) -> None:
        self.deadline = deadline  # Scheduler.monotonic_ms() at which the session ends
        self.fires_at = deadline  # when `handle` fires; never after `deadline`
        self.handle = handle


# ---------------------------------------------------------------------------------------------
# Results handed back to the coordinator (it shapes them into per-version responses)
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class JoinResult:
    error: int = ErrorCode.NONE
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    # (member_id, group_instance_id, metadata) — only in the leader's answer
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int = ErrorCode.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class JoinRequest:
    """What the group needs from a JoinGroup (the coordinator has done the service-level checks)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    reason: str | None = None
    require_known_member_id: bool = True  # v4+
    supports_skip_assignment: bool = True  # v9+


class _JoinCounter:
    """How many of a group's members have a JoinGroup parked (Kafka's numMembersAwaitingJoin).

    Kept by the members' own `join_future` setter, so "has everyone rejoined?" is O(1) on
    every join and expiry instead of a scan of the group (10 k joins cost 10 k scans).
    """

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


@dataclass(slots=True, eq=False)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    sync_future: asyncio.Future | None = None
    is_new: bool = False
    _join_future: asyncio.Future | None = field(default=None, repr=False)
    _awaiting: _JoinCounter | None = field(default=None, repr=False)  # its group's, while it is a member

    @property
    def join_future(self) -> asyncio.Future | None:
        """Its parked JoinGroup, if any (setting it keeps the group's count of awaiting members)."""
        return self._join_future

    @join_future.setter
    def join_future(self, future: asyncio.Future | None) -> None:
        counter = self._awaiting
        if counter is not None:
            counter.count += (future is not None) - (self._join_future is not None)
        self._join_future = future

    def _attach(self, counter: _JoinCounter | None) -> None:
        """Enter (a counter) or leave (None) a group's count of members awaiting join."""
        if self._awaiting is not None and self._join_future is not None:
            self._awaiting.count -= 1
        self._awaiting = counter
        if counter is not None and self._join_future is not None:
            counter.count += 1

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata bytes (Kafka's `matches`)."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        # New members can expire even while waiting in JoinGroup; others waiting in a
        # rebalance count as alive until the rebalance answers them (which re-arms the timer).
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync


StoreGroup = Callable[["ClassicGroup", dict[str, bytes]], Awaitable[int]]
"""Start writing a GroupMetadata record of the group as it is *now* with the given assignment.

Called synchronously (the record must snapshot the current state); the awaitable resolves to a
Kafka error code, NONE once the record is durable.
"""


def _answer(future: asyncio.Future | None, result: object) -> bool:
    if future is None or future.done():  # done = the client went away and its wait was cancelled
        return False
    future.set_result(result)
    return True


ANSWERS_PER_TURN = 256


def _answer_all(answers: list[tuple[asyncio.Future | None, object]],
                then: Callable[[object], None] | None = None) -> None:
    """Answer many parked requests, at most ANSWERS_PER_TURN per event-loop turn.

    Every answered request runs its handler's rest (encode, write) in the next turn: the
    10 000 answers of a big group's join phase in one turn kept every other client waiting
    for all of them. Spread over turns, other connections are served in between.
    """
    def answer_from(start: int) -> None:
        end = start + ANSWERS_PER_TURN
        for future, result in answers[start:end]:
            if then is not None:
                then(result)
            _answer(future, result)
        if end < len(answers):
            asyncio.get_running_loop().call_soon(answer_from, end)

    answer_from(0)


def rebalance_kind(reason: str, initial: bool) -> str:
    """The bounded metrics label for a rebalance, from the reason this module wrote for it."""
    if initial:
        return "initial"
    if "expiration" in reason:
        return "member_expired"
    if "LeaveGroup" in reason:
        return "member_left"
    if reason.startswith("static member"):
        return "static_replaced"
    if "member" in reason:
        return "member_joined"
    return "other"


class ClassicGroup:
    """One classic group. Only the GroupCoordinator holds these; it calls in, never reaches in."""

    def __init__(
        self,
        group_id: str,
        *,
        config,
        scheduler: Scheduler,
        store: StoreGroup,
        state: GroupState = GroupState.EMPTY,
        metrics=None,
    ) -> None:
        self.group_id = group_id
        self._metrics = metrics  # cohort.coordinator.metrics.CoordinatorMetrics, or None
        self._config = config
        self._scheduler = scheduler
        self._store = store
        self.state = state
        self.previous_state: GroupState | None = None
        self.state_timestamp_ms: int | None = scheduler.now_ms()
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, GroupMember] = {}
        self.static_members: dict[str, str] = {}  # group_instance_id -> member_id
        self.pending_members: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED
        self._awaiting_join = _JoinCounter()  # members with a JoinGroup parked
        self.pending_sync_members: set[str] = set()
        self.new_member_added = False
        self.subscribed_topics: frozenset[str] | None = None
        self._supported_protocols: Counter[str] = Counter()
        self._heartbeat_timers: dict[str, SessionTimer] = {}
        self._join_timer: TimerHandle | None = None
        self._sync_timer: TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._rebalance_started_ms: int | None = None
        self._rebalance_kind = "other"

    # -----------------------------------------------------------------------------------------
    # State
    # -----------------------------------------------------------------------------------------
    def transition_to(self, target: GroupState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state} -> {target} is not an allowed transition"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = self._scheduler.now_ms()

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in REBALANCE_ALLOWED_FROM

    @property
    def is_simple(self) -> bool:
        """A group that exists only through offsets committed outside group management."""
        return self.protocol_type is None

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def awaiting_join_count(self) -> int:
        return self._awaiting_join.count

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count() == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[GroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    # -----------------------------------------------------------------------------------------
    # Membership bookkeeping
    # -----------------------------------------------------------------------------------------
    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"

    def add(self, member: GroupMember, join_future: asyncio.Future | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already in the group")
            self.static_members[member.group_instance_id] = member.member_id
        self.members[member.member_id] = member
        member._attach(self._awaiting_join)
        self._supported_protocols.update(set(member.protocol_names()))
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)
        member.join_future = join_future

    def remove(self, member_id: str) -> GroupMember | None:
        """Drop a member (or a pending id). Answers its parked requests with UNKNOWN_MEMBER_ID."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._supported_protocols.subtract(set(member.protocol_names()))
            self._supported_protocols += Counter()  # drop zero counts
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
            _answer(member.join_future, JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
            member.join_future = None
            member._attach(None)
            _answer(member.sync_future, SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
            member.sync_future = None
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        self._cancel_heartbeat(member_id)
        return member

    def update_member(
        self,
        member: GroupMember,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_future: asyncio.Future | None,
    ) -> None:
        self._supported_protocols.subtract(set(member.protocol_names()))
        member.protocols = list(protocols)
        self._supported_protocols.update(set(member.protocol_names()))
        self._supported_protocols += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.join_future is not None and member.join_future is not join_future:
            # A newer JoinGroup from the same member supersedes the parked one; the client has
            # given up on the old request, answer it so its connection is not blocked.
            _answer(member.join_future, JoinResult(error=ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_future = join_future

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> GroupMember:
        """Swap a static member's id; the old id's parked requests are fenced (KIP-345)."""
        old = self.members.pop(old_member_id, None)
        if old is None:
            raise KeyError(f"cannot replace {old_member_id}: not a member of {self.group_id}")
        _answer(old.join_future, JoinResult(error=ErrorCode.FENCED_INSTANCE_ID, member_id=old_member_id))
        old._attach(None)
        _answer(old.sync_future, SyncResult(error=ErrorCode.FENCED_INSTANCE_ID))
        new = GroupMember(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        new._attach(self._awaiting_join)
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        self._cancel_heartbeat(old_member_id)
        return new

    def validate_member(self, member_id: str, group_instance_id: str | None) -> int:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / NONE (Kafka's validateMember)."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                log.info("group %s: member %s fenced by static member %s (instance %s)",
                         self.group_id, member_id, existing, group_instance_id)
                return ErrorCode.FENCED_INSTANCE_ID
            return ErrorCode.NONE
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    # -----------------------------------------------------------------------------------------
    # Protocols
    # -----------------------------------------------------------------------------------------
    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        if self.protocol_type != protocol_type:
            return False
        n = len(self.members)
        return any(self._supported_protocols.get(name, 0) == n for name, _ in protocols)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Every member votes for its most preferred protocol that all members support.

        Ties (Kafka breaks them by hash-map order) go to the candidate voted first, in member order.
        """
        if not self.members:
            raise ValueError(f"group {self.group_id} has no members to select a protocol")
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        for m in self.members.values():
            choice = m.vote(candidates)
            if votes[choice] == best:
                return choice
        raise AssertionError("unreachable")

    def current_members(self) -> list[tuple[str, str | None, bytes]]:
        """The member list a leader assigns from: metadata for the selected protocol."""
        assert self.protocol_name is not None
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def _compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to, from their consumer-protocol metadata; None = unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        seen: set[bytes] = set()  # members mostly share one subscription: decode each distinct one once
        try:
            for m in self.members.values():
                metadata = m.metadata(self.protocol_name)
                if metadata not in seen:
                    seen.add(metadata)
                    topics.update(decode_subscription(metadata).topics)
        except Exception as exc:  # any undecodable subscription makes the set unknown (Kafka's rule)
            log.warning("group %s: cannot parse consumer subscription for protocol %s (%s); "
                        "subscribed topics unknown", self.group_id, self.protocol_name, exc)
            return None
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

    # -----------------------------------------------------------------------------------------
    # Timers
    # -----------------------------------------------------------------------------------------
    def schedule_heartbeat(self, member_id: str, timeout_ms: int | None = None) -> None:
        member = self.members.get(member_id)
        if member is None and member_id not in self.pending_members:
            return
        if timeout_ms is None:
            timeout_ms = member.session_timeout_ms  # type: ignore[union-attr]
        deadline = self._scheduler.monotonic_ms() + timeout_ms
        timer = self._heartbeat_timers.get(member_id)
        if timer is not None:
            if timer.fires_at <= deadline:
                timer.deadline = deadline  # the armed timer fires first and re-arms for the rest
                return
            timer.handle.cancel()
        self._heartbeat_timers[member_id] = SessionTimer(
            deadline, self._scheduler.call_later(timeout_ms, partial(self._session_timer_fired, member_id)))

    def session_deadline_ms(self, member_id: str) -> float | None:
        """When the member's (or pending id's) session ends, on the scheduler's monotonic clock."""
        timer = self._heartbeat_timers.get(member_id)
        return timer.deadline if timer is not None else None

    def _cancel_heartbeat(self, member_id: str) -> None:
        timer = self._heartbeat_timers.pop(member_id, None)
        if timer is not None:
            timer.handle.cancel()

    def _session_timer_fired(self, member_id: str) -> None:
        timer = self._heartbeat_timers.get(member_id)
        if timer is None:
            return
        remaining = timer.deadline - self._scheduler.monotonic_ms()
        if remaining > 0:  # heartbeats moved the deadline since the timer was armed
            timer.fires_at = timer.deadline
            timer.handle = self._scheduler.call_later(remaining, partial(self._session_timer_fired, member_id))
            return
        self._expire_heartbeat(member_id)

    def _expire_heartbeat(self, member_id: str) -> None:
        self._heartbeat_timers.pop(member_id, None)
        if self.state is GroupState.DEAD:
            return
        if member_id in self.pending_members:
            log.info("group %s: pending member %s expired before rejoining", self.group_id, member_id)
            self.remove(member_id)
            # Kafka: an expiry may end even the initial join phase once everyone left has joined.
            if self.state is GroupState.PREPARING_REBALANCE and self.has_all_members_joined():
                self._complete_join_phase()
            return
        member = self.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s expired (session timeout %d ms)", self.group_id, member_id,
                 member.session_timeout_ms if not member.is_new else self._config.group_new_member_join_timeout_ms)
        if self._metrics is not None:
            self._metrics.member_expired()
        self.remove(member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(f"removing member {member_id} on heartbeat expiration")
        elif self.state is GroupState.PREPARING_REBALANCE and self.has_all_members_joined():
            self._complete_join_phase()  # as above: no exception for the initial join phase

    def _cancel_join_timer(self) -> None:
        if self._join_timer is not None:
            self._join_timer.cancel()
            self._join_timer = None

    def _cancel_sync_timer(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None

    def cancel_all_timers(self) -> None:
        self._cancel_join_timer()
        self._cancel_sync_timer()
        for member_id in list(self._heartbeat_timers):
            self._cancel_heartbeat(member_id)

    def on_loaded(self) -> None:
        """After replay: members must keep heartbeating; an oversized group rebalances."""
        for member_id in self.members:
            self.schedule_heartbeat(member_id)
        if len(self.members) > self._config.group_max_size and self.can_rebalance():
            self.prepare_rebalance(f"loaded with {len(self.members)} members, over group.max.size "
                                   f"{self._config.group_max_size}")

    # -----------------------------------------------------------------------------------------
    # JoinGroup
    # -----------------------------------------------------------------------------------------
    def accepts_joining_member(self, member_id: str) -> bool:
        """`group.max.size`: room for this member in the current phase?"""
        max_size = self._config.group_max_size
        if self.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if self.state is GroupState.PREPARING_REBALANCE:
            m = self.members.get(member_id) if member_id else None
            return (m is not None and m.is_awaiting_join) or self.awaiting_join_count() < max_size
        return (bool(member_id) and member_id in self.members) or len(self.members) < max_size

    def join(self, req: JoinRequest) -> asyncio.Future:
        """Handle a JoinGroup; the returned future resolves to a JoinResult (maybe much later)."""
        future = asyncio.get_running_loop().create_future()
        if not self.accepts_joining_member(req.member_id):
            self.remove(req.member_id)
            log.info("group %s: join refused, group.max.size %d reached", self.group_id, self._config.group_max_size)
            future.set_result(JoinResult(error=ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif req.member_id == "":
            self._join_new_member(req, future)
        else:
            self._join_existing_member(req, future)
        # Don't hold JoinGroups longer than needed, except during the initial (delayed) rebalance.
        if (self.state is GroupState.PREPARING_REBALANCE and self.has_all_members_joined()
                and self.previous_state is not GroupState.EMPTY):
            self._complete_join_phase()
        return future

    def _join_new_member(self, req: JoinRequest, future: asyncio.Future) -> None:
        if self.state is GroupState.DEAD:
            future.set_result(JoinResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not self.supports_protocols(req.protocol_type, req.protocols):
            future.set_result(JoinResult(error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = self.generate_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            old_id = self.static_members.get(req.group_instance_id)
            if old_id is not None:
                self._replace_static_member_on_join(req, old_id, new_id, future)
            else:
                self._add_member_then_rebalance(req, new_id, future)
        elif req.require_known_member_id:
            log.info("group %s: new dynamic member, asking it to rejoin as %s (state %s)",
                     self.group_id, new_id, self.state)
            self.pending_members.add(new_id)
            self.schedule_heartbeat(new_id, req.session_timeout_ms)
            future.set_result(JoinResult(error=ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id))
        else:
            self._add_member_then_rebalance(req, new_id, future)

    def _join_existing_member(self, req: JoinRequest, future: asyncio.Future) -> None:
        if self.state is GroupState.DEAD:
            future.set_result(JoinResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=req.member_id))
            return
        if not self.supports_protocols(req.protocol_type, req.protocols):
            future.set_result(JoinResult(error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
            return
        if req.member_id in self.pending_members:
            if req.group_instance_id is not None:
                # Pending ids are only ever handed to dynamic members.
                future.set_result(JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id))
                return
            log.info("group %s: pending member %s rejoined (state %s)", self.group_id, req.member_id, self.state)
            self._add_member_then_rebalance(req, req.member_id, future)
            return
        error = self.validate_member(req.member_id, req.group_instance_id)
        if error:
            future.set_result(JoinResult(error=error, member_id=req.member_id))
            return
        member = self.members[req.member_id]
        reason = req.reason or "not provided"
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member_then_rebalance(
                req, member, future, f"member {member.member_id} joining during {self.state}; client reason: {reason}")
        elif self.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # Likely a lost JoinGroup answer: hand back this generation's data again.
                future.set_result(self._join_answer(member, skip_assignment=False))
            else:
                self._update_member_then_rebalance(
                    req, member, future, f"member {member.member_id} changed metadata during {self.state}; "
                                         f"client reason: {reason}")
        elif self.state is GroupState.STABLE:
            if self.is_leader(member.member_id):
                self._update_member_then_rebalance(
                    req, member, future, f"leader {member.member_id} rejoining; client reason: {reason}")
            elif not member.matches(req.protocols):
                self._update_member_then_rebalance(
                    req, member, future, f"member {member.member_id} changed metadata; client reason: {reason}")
            else:
                future.set_result(self._join_answer(member, skip_assignment=False, with_members=False))
        else:  # Empty: the member's generation is gone
            future.set_result(JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id))

    def _join_answer(self, member: GroupMember, *, skip_assignment: bool, with_members: bool | None = None,
                     leader: str | None = None) -> JoinResult:
        if with_members is None:
            with_members = self.is_leader(member.member_id)
        return JoinResult(
            error=ErrorCode.NONE,
            member_id=member.member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=(leader if leader is not None else self.leader_id) or "",
            skip_assignment=skip_assignment,
            members=self.current_members() if with_members else [],
        )

    def _add_member_then_rebalance(self, req: JoinRequest, member_id: str, future: asyncio.Future) -> None:
        member = GroupMember(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
            is_new=True,
        )
        if self.state is GroupState.PREPARING_REBALANCE and self.previous_state is GroupState.EMPTY:
            self.new_member_added = True  # lets the initial rebalance wait a little longer
        self.add(member, future)
        # A new member can't heartbeat while its JoinGroup is parked; if it vanishes, this
        # (long) timer removes it rather than its session timeout.
        self.schedule_heartbeat(member_id, self._config.group_new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(
            f"adding new member {member_id} with group instance id {req.group_instance_id}; "
            f"client reason: {req.reason or 'not provided'}")

    def _update_member_then_rebalance(self, req: JoinRequest, member: GroupMember, future: asyncio.Future,
                                      reason: str) -> None:
        self.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, future)
        self._maybe_prepare_rebalance_or_complete_join(reason)

    def _replace_static_member_on_join(self, req: JoinRequest, old_id: str, new_id: str,
                                       future: asyncio.Future) -> None:
        current_leader = self.leader_id
        member = self.replace_static_member(req.group_instance_id, old_id, new_id)  # type: ignore[arg-type]
        self.schedule_heartbeat(new_id)
        old_protocols, old_rebalance, old_session = member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms
        self.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, future)
        log.info("group %s: static member %s replaced %s with %s (state %s)",
                 self.group_id, req.group_instance_id, old_id, new_id, self.state)
        if self.state is GroupState.STABLE:
            if (self.protocol_name or "") == self.select_protocol():
                # Nothing the assignment depends on changed: persist the new id, no rebalance.
                assignment = {m.member_id: m.assignment for m in self.members.values()}
                generation = self.generation_id
                write = self._store(self, assignment)  # the record is built now, from this state

                async def persist() -> None:
                    error = await write
                    if error:
                        log.warning("group %s: could not persist static member %s as %s: %s",
                                    self.group_id, req.group_instance_id, new_id, ErrorCode(error).name)
                        if self.members.get(new_id) is member and self.state is not GroupState.DEAD:
                            if member.join_future is future:
                                member.join_future = None
                            self.update_member(member, old_protocols, old_rebalance, old_session, None)
                            self.replace_static_member(req.group_instance_id, new_id, old_id)  # type: ignore[arg-type]
                            self.schedule_heartbeat(old_id)
                        _answer(future, JoinResult(error=error, generation_id=self.generation_id,
                                                   protocol_type=self.protocol_type,
                                                   protocol_name=self.protocol_name, leader=current_leader or ""))
                        return
                    if member.join_future is not future:
                        return  # already answered (fenced or superseded) meanwhile
                    member.join_future = None
                    if self.generation_id != generation or self.members.get(new_id) is not member:
                        _answer(future, JoinResult(error=ErrorCode.REBALANCE_IN_PROGRESS, member_id=new_id))
                        return
                    if req.supports_skip_assignment:
                        is_leader = self.is_leader(new_id)
                        _answer(future, self._join_answer(member, skip_assignment=is_leader, with_members=is_leader))
                    else:
                        # Name the old leader so the new member doesn't run an assignment that a
                        # Stable group would never broadcast.
                        _answer(future, self._join_answer(member, skip_assignment=False, with_members=False,
                                                          leader=current_leader or ""))

                self._spawn(persist())
                return
            self._maybe_prepare_rebalance_or_complete_join(
                f"static member {req.group_instance_id} rejoined as {new_id} with a protocol change; "
                f"client reason: {req.reason or 'not provided'}")
            return
        if self.state is GroupState.COMPLETING_REBALANCE:
            # The leader may already have assigned to the old id: rebalance so the new id gets one.
            self.prepare_rebalance(f"static member {req.group_instance_id} rejoined as {new_id} during "
                                   f"{self.state}; client reason: {req.reason or 'not provided'}")
            return
        self._maybe_complete_join_phase()

    # -----------------------------------------------------------------------------------------
    # Rebalance
    # -----------------------------------------------------------------------------------------
    def _maybe_prepare_rebalance_or_complete_join(self, reason: str) -> None:
        if self.can_rebalance():
            self.prepare_rebalance(reason)
        else:
            self._maybe_complete_join_phase()

    def _maybe_complete_join_phase(self) -> None:
        if (self.state is GroupState.PREPARING_REBALANCE and self.has_all_members_joined()
                and self.previous_state is not GroupState.EMPTY):
            self._complete_join_phase()

    def prepare_rebalance(self, reason: str) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment(ErrorCode.REBALANCE_IN_PROGRESS)
        self._cancel_sync_timer()
        self._cancel_join_timer()
        initial = self.state is GroupState.EMPTY
        if self._rebalance_started_ms is None:
            self._rebalance_started_ms = self._scheduler.now_ms()
            self._rebalance_kind = rebalance_kind(reason, initial)
        self.transition_to(GroupState.PREPARING_REBALANCE)
        self.new_member_added = False
        if initial:
            delay = self._config.group_initial_rebalance_delay_ms
            remaining = max(self.rebalance_timeout_ms() - delay, 0)
            self._join_timer = self._scheduler.call_later(
                delay, lambda: self._initial_delay_elapsed(delay, remaining))
        else:
            self._join_timer = self._scheduler.call_later(self.rebalance_timeout_ms(), self._join_timer_fired)
        log.info("group %s: preparing to rebalance (state was %s, generation %d): %s",
                 self.group_id, self.previous_state, self.generation_id, reason)
        if not initial and self.has_all_members_joined():
            # Kafka's maybeCompleteJoinElseSchedule: e.g. the last member left, so the group is Empty now.
            self._complete_join_phase()

    def _rebalance_done(self) -> None:
        """A rebalance ended in Stable: count it by why it started, timed from its first prepare."""
        started, self._rebalance_started_ms = self._rebalance_started_ms, None
        if self._metrics is not None and started is not None:
            self._metrics.rebalance_completed(self._rebalance_kind,
                                              max(self._scheduler.now_ms() - started, 0) / 1000.0)

    def _initial_delay_elapsed(self, delay_ms: int, remaining_ms: int) -> None:
        self._join_timer = None
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if self.new_member_added and remaining_ms != 0:
            # Someone joined during the window: wait once more, within the rebalance timeout.
            self.new_member_added = False
            new_delay = min(self._config.group_initial_rebalance_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self._join_timer = self._scheduler.call_later(
                new_delay, lambda: self._initial_delay_elapsed(new_delay, new_remaining))
            return
        self._complete_join_phase()

    def _join_timer_fired(self) -> None:
        self._join_timer = None
        if self.state is GroupState.PREPARING_REBALANCE:
            self._complete_join_phase()

    def _complete_join_phase(self) -> None:
        self._cancel_join_timer()
        gone = [m for m in self.not_yet_rejoined() if not m.is_static]
        for m in gone:
            self.remove(m.member_id)
        if gone:
            log.info("group %s: removed dynamic members that did not rejoin: %s",
                     self.group_id, [m.member_id for m in gone])
        if self.state is GroupState.DEAD:
            return
        if not self._maybe_elect_new_joined_leader() and self.members:
            # Only static members that haven't rejoined remain: wait another rebalance timeout
            # (their sessions still expire them).
            log.warning("group %s: no member rejoined; extending the join phase", self.group_id)
            self._join_timer = self._scheduler.call_later(self.rebalance_timeout_ms(), self._join_timer_fired)
            return
        self._init_next_generation()
        if self.state is GroupState.EMPTY:
            log.info("group %s: generation %d is empty", self.group_id, self.generation_id)

            write = self._store(self, {})

            async def persist_empty() -> None:
                error = await write
                if error:
                    # The previous generation stays on disk; it has no live members, so that's safe.
                    log.warning("group %s: failed to write empty group metadata: %s",
                                self.group_id, ErrorCode(error).name)

            self._spawn(persist_empty())
            return
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 self.group_id, self.generation_id, len(self.members), self.protocol_name, self.leader_id)
        answers = []
        for member in self.members.values():
            answers.append((member.join_future, self._join_answer(member, skip_assignment=False)))
            member.join_future = None
            member.is_new = False
            self.pending_sync_members.add(member.member_id)
        generation = self.generation_id

        def rearm(result: JoinResult) -> None:
            # With its answer, each member's session restarts (a big group's answers go out over
            # several loop turns; until then the join timeout, never shorter, watches it).
            if self.generation_id == generation:
                self.schedule_heartbeat(result.member_id)

        _answer_all(answers, rearm)
        generation = self.generation_id
        self._sync_timer = self._scheduler.call_later(
            self.rebalance_timeout_ms(), lambda: self._pending_sync_expired(generation))

    def _maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for m in self.members.values():
            if m.is_awaiting_join:
                log.info("group %s: leader %s did not rejoin; %s is the new leader",
                         self.group_id, self.leader_id, m.member_id)
                self.leader_id = m.member_id
                return True
        return False

    def _init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self._compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self._compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    def _pending_sync_expired(self, generation: int) -> None:
        self._sync_timer = None
        if generation != self.generation_id or self.state not in (GroupState.COMPLETING_REBALANCE,
                                                                   GroupState.STABLE):
            return
        if not self.pending_sync_members:
            return
        late = sorted(self.pending_sync_members)
        for member_id in late:
            self.remove(member_id)
        log.info("group %s: members %s did not send SyncGroup in time", self.group_id, late)
        self.prepare_rebalance(f"removing {late} on pending sync request expiration")

    def _remove_pending_sync_member(self, member_id: str) -> None:
        self.pending_sync_members.discard(member_id)
        if not self.pending_sync_members:
            self._cancel_sync_timer()

    def _reset_and_propagate_assignment(self, error: int) -> None:
        for m in self.members.values():
            m.assignment = b""
        self._propagate_assignment(error)

    def _propagate_assignment(self, error: int) -> None:
        ok = error == ErrorCode.NONE
        answers = []
        for m in self.members.values():
            future, m.sync_future = m.sync_future, None
            if future is None:
                continue
            answers.append((future, SyncResult(
                error=error,
                protocol_type=self.protocol_type if ok else None,
                protocol_name=self.protocol_name if ok else None,
                assignment=m.assignment,
            )))
            # A session may have lapsed while the member waited for the leader: re-arm it.
            self.schedule_heartbeat(m.member_id)
        _answer_all(answers)

    # -----------------------------------------------------------------------------------------
    # SyncGroup
    # -----------------------------------------------------------------------------------------
    def sync(self, member_id: str, group_instance_id: str | None, generation_id: int,
             protocol_type: str | None, protocol_name: str | None,
             assignments: dict[str, bytes]) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        if self.state is GroupState.DEAD:
            future.set_result(SyncResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return future
        error = self.validate_member(member_id, group_instance_id)
        if not error and generation_id != self.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if not error and (_inconsistent(protocol_type, self.protocol_type)
                          or _inconsistent(protocol_name, self.protocol_name)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error:
            future.set_result(SyncResult(error=error))
            return future
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            future.set_result(SyncResult(error=ErrorCode.REBALANCE_IN_PROGRESS))
        elif self.state is GroupState.COMPLETING_REBALANCE:
            if member.sync_future is not None:
                _answer(member.sync_future, SyncResult(error=ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_future = future
            self._remove_pending_sync_member(member_id)
            if self.is_leader(member_id):
                self._store_leader_assignment(member_id, generation_id, assignments)
        elif self.state is GroupState.STABLE:
            self._remove_pending_sync_member(member_id)
            future.set_result(SyncResult(protocol_type=self.protocol_type, protocol_name=self.protocol_name,
                                         assignment=member.assignment))
        else:  # Empty has no members: validate_member answered already
            future.set_result(SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
        return future

    def _store_leader_assignment(self, leader_id: str, generation_id: int, assignments: dict[str, bytes]) -> None:
        full = {m: assignments.get(m, b"") for m in self.members}
        missing = [m for m in self.members if m not in assignments]
        if missing:
            log.warning("group %s: leader gave no assignment to %s in generation %d; they get empty ones",
                        self.group_id, missing, generation_id)
        log.info("group %s: assignment received from leader %s for generation %d (%d members)",
                 self.group_id, leader_id, generation_id, len(self.members))

        write = self._store(self, full)

        async def persist() -> None:
            error = await write
            # Someone may have joined while we wrote: only a group still waiting for exactly
            # this generation's assignment takes it.
            if self.state is not GroupState.COMPLETING_REBALANCE or self.generation_id != generation_id:
                return
            if error:
                log.warning("group %s: failed to store the assignment of generation %d: %s",
                            self.group_id, generation_id, ErrorCode(error).name)
                self._reset_and_propagate_assignment(error)
                self._maybe_prepare_rebalance_or_complete_join(
                    f"error {ErrorCode(error).name} storing the group assignment (leader {leader_id})")
                return
            for member_id, member in self.members.items():
                member.assignment = full.get(member_id, b"")
            self._propagate_assignment(ErrorCode.NONE)
            self.transition_to(GroupState.STABLE)
            log.info("group %s: generation %d is stable", self.group_id, generation_id)
            self._rebalance_done()

        self._spawn(persist())

    # -----------------------------------------------------------------------------------------
    # Heartbeat, LeaveGroup, offset-commit checks
    # -----------------------------------------------------------------------------------------
    def heartbeat(self, member_id: str, group_instance_id: str | None, generation_id: int) -> int:
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self.validate_member(member_id, group_instance_id)
        if error:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if self.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.schedule_heartbeat(member_id)
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, members: list[tuple[str, str | None, str | None]]) -> list[int]:
        """Remove each (member_id, group_instance_id, reason); returns one error code per entry."""
        if self.state is GroupState.DEAD:
            return [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(members)
        errors: list[int] = []
        removed: list[str] = []
        for member_id, instance_id, reason in members:
            reason = reason or "not provided"
            if member_id == "":
                # Admin removal by instance id.
                if instance_id is not None and instance_id in self.static_members:
                    target = self.static_members[instance_id]
                    self.remove(target)
                    log.info("group %s: static member %s (%s) removed by LeaveGroup; reason: %s",
                             self.group_id, instance_id, target, reason)
                    removed.append(target)
                    errors.append(ErrorCode.NONE)
                else:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
            elif member_id in self.pending_members:
                self.remove(member_id)
                log.info("group %s: pending member %s left; reason: %s", self.group_id, member_id, reason)
                errors.append(ErrorCode.NONE)
                removed.append(member_id)
            else:
                error = self.validate_member(member_id, instance_id)
                if error:
                    errors.append(error)
                    continue
                self.remove(member_id)
                log.info("group %s: member %s left; reason: %s", self.group_id, member_id, reason)
                errors.append(ErrorCode.NONE)
                removed.append(member_id)
        if removed:
            if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(f"explicit LeaveGroup for {removed}")
            elif self.state is GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join_phase()
        return errors

    def validate_offset_commit(self, member_id: str, group_instance_id: str | None, generation_id: int) -> int:
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return ErrorCode.NONE  # admin tools / standalone consumers
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            error = self.validate_member(member_id, group_instance_id)
            if error:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif self.state is not GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def note_offset_commit(self, member_id: str) -> None:
        """A member's commit keeps its session alive (Stable or PreparingRebalance only)."""
        if self.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE) and member_id in self.members:
            self.schedule_heartbeat(member_id)

    def validate_offset_delete(self) -> int:
        if self.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if self.state is not GroupState.EMPTY and not self.uses_consumer_protocol():
            return ErrorCode.NON_EMPTY_GROUP
        return ErrorCode.NONE

    def validate_delete(self) -> int:
        if self.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if self.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        return ErrorCode.NONE

    def offset_expiry_base(self) -> Callable[[int], int] | None:
        """KIP-211: maps an offset's commit timestamp to the time its retention counts from.

        None = nothing of this group expires now (rebalancing, or members of a non-consumer protocol).
        """
        if self.protocol_type is None:
            return lambda commit_ts: commit_ts  # simple group
        if self.state is GroupState.EMPTY:
            since = self.state_timestamp_ms
            if since is None or since < 0:
                return lambda commit_ts: commit_ts
            return lambda commit_ts: since
        if self.uses_consumer_protocol() and self.subscribed_topics is not None and self.state is GroupState.STABLE:
            return lambda commit_ts: commit_ts
        return None

    # -----------------------------------------------------------------------------------------
    # Load, death, plumbing
    # -----------------------------------------------------------------------------------------
    def load_members(self, generation: int, protocol_type: str, protocol: str | None, leader: str | None,
                     state_timestamp_ms: int, members: list[GroupMember]) -> None:
        """Rebuild from a GroupMetadata record: Stable with members, else Empty (timers start later)."""
        self.generation_id = generation
        self.protocol_type = protocol_type or None
        self.protocol_name = protocol
        self.leader_id = leader
        self.state_timestamp_ms = state_timestamp_ms if state_timestamp_ms >= 0 else None
        for m in self.members.values():
            m._attach(None)
        self.members = {}
        self.static_members = {}
        self._supported_protocols = Counter()
        for m in members:
            self.members[m.member_id] = m
            m._attach(self._awaiting_join)
            self._supported_protocols.update(set(m.protocol_names()))
            if m.group_instance_id is not None:
                self.static_members[m.group_instance_id] = m.member_id
        if self.leader_id is not None and self.leader_id not in self.members:
            self.leader_id = next(iter(self.members), None)
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.subscribed_topics = self._compute_subscribed_topics()

    def shutdown(self, error: int = ErrorCode.NOT_COORDINATOR) -> None:
        """Stop every timer and answer every parked request (coordinator shutdown or group death)."""
        self.cancel_all_timers()
        for m in self.members.values():
            _answer(m.join_future, JoinResult(error=error, member_id=m.member_id))
            m.join_future = None
            _answer(m.sync_future, SyncResult(error=error))
            m.sync_future = None
        for task in list(self._tasks):
            task.cancel()

    def mark_dead(self) -> None:
        self.shutdown(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self.transition_to(GroupState.DEAD)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group %s: background write failed", self.group_id, exc_info=task.exception())

    async def settle(self) -> None:
        """Wait for this group's in-flight metadata writes (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state}, generation={self.generation_id}, "
                f"members={list(self.members)}, leader={self.leader_id!r})")


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
