"""The classic consumer group (Kafka's `ClassicGroup`) as a pure engine: events in, effects out.

Theory of operation
-------------------
A group starts **Empty**. The first JoinGroup moves it to **PreparingRebalance**, the join
phase: every member must (re)send JoinGroup, and each request stays parked (by request id) until
the phase ends. The phase ends at once when every member has rejoined and nobody holds a
MEMBER_ID_REQUIRED id, or when the join timer fires (the largest member rebalance timeout; the
first rebalance of an Empty group instead waits `group.initial.rebalance.delay.ms`, extended while
new members keep arriving, unless a session expiry leaves only members that have rejoined). A
rebalance of a non-empty group in which everyone has already joined ends as it starts (the last
member left: the group is Empty again at once). Ending the phase drops dynamic members that did
not rejoin, bumps the generation, picks a protocol by vote and moves to **CompletingRebalance**:
everyone gets its JoinGroup answer and the leader also gets the member list. Followers'
SyncGroups park until the leader's SyncGroup brings the assignment; once the GroupMetadata record
holding it is durable (`RecordsAppended`) the group is **Stable** and every parked SyncGroup is
answered. Any membership change (a join with new metadata, a leave, an expired session, a missing
SyncGroup) starts the next rebalance. A join phase that ends with nobody left makes the group Empty
again. Loading a GroupMetadata record makes a group Stable (members) or Empty. **Dead** is
terminal: the group was deleted and must not be touched.

`ClassicGroup.handle(event, now)` is the whole interface: it updates the group in place (copying a
10 000-member group per heartbeat would cost more than the heartbeat) and returns effects for the
runtime to execute: answer request R, append these records, set/cancel timer T, journal/metric
entries. No IO, no clock, no event loop: `now` is passed in. Every state change goes through
`_transition`, which checks it against TRANSITIONS below and emits a `StateChanged` entry.

Timers are keyed: a member's session by its member id, the join phase by `GroupTimer.JOIN_PHASE`,
the pending-sync wait by `GroupTimer.PENDING_SYNC`. A session is a deadline watched by one timer
that re-arms itself when heartbeats moved the deadline, so a heartbeat costs no timer effect.
"""
from __future__ import annotations

import enum
import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from cohort.coordinator.groups.effects import (
    Answer,
    AnswerAll,
    AppendRecords,
    CancelAllTimers,
    CancelTimer,
    Deleted,
    LoadCompleted,
    MemberExpired,
    Now,
    RebalanceCompleted,
    RebalanceJournaled,
    RecordsAppended,
    Reply,
    SetTimer,
    StateChanged,
    TimerFired,
    Unloaded,
)
from cohort.coordinator.records.types import GroupMemberRecord, GroupMetadataRecord
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


class Step(enum.Enum):
    """Why the group changes state: the middle column of TRANSITIONS."""

    PREPARE_REBALANCE = "prepare rebalance"          # a membership change (RebalanceReason says which)
    JOIN_PHASE_COMPLETED = "join phase completed"    # everyone (left) rejoined, or the join timer fired
    ASSIGNMENT_STORED = "assignment stored"          # the leader's assignment is durable
    LOADED = "loaded"                                # a GroupMetadata record read back from the log
    DELETED = "deleted"                              # DeleteGroups, or expiry of an empty group


_S = GroupState
# (state, step) -> the states that step may lead to. Everything the engine does to `state` is here.
TRANSITIONS: dict[tuple[GroupState, Step], frozenset[GroupState]] = {
    (_S.EMPTY, Step.PREPARE_REBALANCE): frozenset({_S.PREPARING_REBALANCE}),
    (_S.STABLE, Step.PREPARE_REBALANCE): frozenset({_S.PREPARING_REBALANCE}),
    (_S.COMPLETING_REBALANCE, Step.PREPARE_REBALANCE): frozenset({_S.PREPARING_REBALANCE}),
    (_S.PREPARING_REBALANCE, Step.JOIN_PHASE_COMPLETED): frozenset({_S.COMPLETING_REBALANCE, _S.EMPTY}),
    (_S.COMPLETING_REBALANCE, Step.ASSIGNMENT_STORED): frozenset({_S.STABLE}),
    # Kafka builds a loaded group in its final state; here loading is a step like any other.
    (_S.EMPTY, Step.LOADED): frozenset({_S.EMPTY, _S.STABLE}),
    (_S.STABLE, Step.LOADED): frozenset({_S.EMPTY, _S.STABLE}),
    **{(state, Step.DELETED): frozenset({_S.DEAD}) for state in GroupState},
}
REBALANCE_ALLOWED_FROM = frozenset(s for (s, step) in TRANSITIONS if step is Step.PREPARE_REBALANCE)


class IllegalStateTransition(RuntimeError):
    """A transition outside TRANSITIONS: a coordinator bug, never a client error."""


class GroupTimer(enum.Enum):
    """A group's own timers; a member's session timer is keyed by its member id instead."""

    JOIN_PHASE = "join phase"        # initial delay or rebalance timeout
    PENDING_SYNC = "pending sync"    # members that got their JoinGroup answer must SyncGroup in time


# ---------------------------------------------------------------------------------------------
# Why a rebalance started (structured: the journal records it, metrics label by it)
# ---------------------------------------------------------------------------------------------
class RebalanceCause(enum.Enum):
    # name = (metrics label, journal trigger, what the log says)
    MEMBER_JOINED = ("member_joined", "member_joined", "new member joined")
    MEMBER_METADATA_CHANGED = ("member_joined", "metadata_changed", "member rejoined with changed metadata")
    # A Stable group's leader rejoins when its consumer sees the subscribed topics' metadata change.
    LEADER_REJOINED = ("member_joined", "topic_change", "leader rejoined")
    MEMBER_LEFT = ("member_left", "member_left", "members left with LeaveGroup")
    SESSION_EXPIRED = ("member_expired", "session_expired", "member session expired")
    SYNC_EXPIRED = ("member_expired", "rebalance_timeout", "members did not send SyncGroup within the rebalance timeout")
    STATIC_MEMBER_REPLACED = ("static_replaced", "static_member_replaced", "static member rejoined under a new member id")
    ASSIGNMENT_NOT_STORED = ("other", "storage_error", "the assignment could not be stored")
    OVER_MAX_SIZE = ("other", "over_max_size", "loaded with more members than group.max.size")
    REQUESTED = ("other", "admin_action", "rebalance requested (admin action or metadata change)")

    def __init__(self, metric_label: str, journal_trigger: str, description: str) -> None:
        self.metric_label = metric_label
        self.journal_trigger = journal_trigger
        self.description = description


# A reason names this many of its members (a 10 000-member LeaveGroup's reason stays one readable line).
REASON_MEMBERS_NAMED = 10


@dataclass(slots=True, frozen=True)
class RebalanceReason:
    cause: RebalanceCause
    members: tuple[str, ...] = ()
    client_reason: str | None = None  # JoinGroup v8+ / LeaveGroup v5+ `reason`
    detail: str = ""

    def __str__(self) -> str:
        text = self.cause.description
        if self.members:
            named = list(self.members[:REASON_MEMBERS_NAMED])
            text += f" {named}" if len(self.members) <= REASON_MEMBERS_NAMED else \
                f" {named} and {len(self.members) - REASON_MEMBERS_NAMED} more"
        if self.detail:
            text += f" ({self.detail})"
        if self.client_reason:
            text += f"; client reason: {self.client_reason}"
        return text


# ---------------------------------------------------------------------------------------------
# Requests in, results out (the coordinator shapes results into per-version responses)
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


class JoinAnswers(Sequence):
    """The join phase's answers, (request id, JoinResult) each, made as they are read.

    Why: a 10 000-member phase's answers cost tens of milliseconds to build at once; the runtime
    answers them a slice per loop turn, so each answer is built in the turn it goes out. What
    they say is fixed when the phase ends: the leader's answer (with the member list) and the
    fields every follower's answer copies from it.
    """

    __slots__ = ("_parked", "_leader")

    def __init__(self, parked: list[tuple[int | None, str]], leader: JoinResult) -> None:
        self._parked = parked  # (request id, member id), in member order
        self._leader = leader

    def __len__(self) -> int:
        return len(self._parked)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._answer(item) for item in self._parked[index]]
        return self._answer(self._parked[index])

    def _answer(self, item: tuple[int | None, str]) -> tuple[int | None, JoinResult]:
        request_id, member_id = item
        leader = self._leader
        if member_id == leader.member_id:
            return request_id, leader
        return request_id, JoinResult(ErrorCode.NONE, member_id, leader.generation_id, leader.protocol_type,
                                      leader.protocol_name, leader.leader, False, [])


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


# Events (besides the shared TimerFired and RecordsAppended)
@dataclass(slots=True)
class JoinGroup:
    request_id: int
    request: JoinRequest


@dataclass(slots=True)
class SyncGroup:
    request_id: int
    member_id: str
    group_instance_id: str | None
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]


@dataclass(slots=True)
class Heartbeat:
    member_id: str
    group_instance_id: str | None
    generation_id: int


@dataclass(slots=True)
class LeaveGroup:
    members: list[tuple[str, str | None, str | None]]  # (member_id, group_instance_id, reason)


@dataclass(slots=True)
class OffsetCommitted:
    """A member committed offsets: that keeps its session alive (Stable or PreparingRebalance)."""

    member_id: str


@dataclass(slots=True)
class JoinAnswered:
    """A join-phase answer went out: the member's session restarts now (AnswerAll's feedback)."""

    member_id: str
    generation_id: int


@dataclass(slots=True, frozen=True)
class RebalanceRequested:
    """Someone outside the group's requests wants a rebalance (admin action, metadata change)."""

    reason: RebalanceReason


@dataclass(slots=True, frozen=True)
class MetadataLoaded:
    """A GroupMetadata record read back from the log (replay: no timers yet)."""

    record: GroupMetadataRecord


# Why the engine asked for an append (fed back in RecordsAppended.purpose)
@dataclass(slots=True, frozen=True)
class AssignmentWrite:
    generation_id: int
    leader_id: str
    assignment: dict[str, bytes]


@dataclass(slots=True, frozen=True)
class EmptyGenerationWrite:
    generation_id: int


@dataclass(slots=True, frozen=True)
class StaticReplacementWrite:
    """A static member rejoined Stable with nothing the assignment depends on changed (KIP-345)."""

    request_id: int
    group_instance_id: str
    old_member_id: str
    member: "GroupMember"
    generation_id: int
    old_protocols: list[tuple[str, bytes]]
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int
    leader_id: str | None
    supports_skip_assignment: bool


# ---------------------------------------------------------------------------------------------
# Members
# ---------------------------------------------------------------------------------------------
class _JoinCounter:
    """How many of a group's members have a JoinGroup parked (Kafka's numMembersAwaitingJoin).

    Kept by the members' own `join_request` setter, so "has everyone rejoined?" is O(1) on
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
    sync_request: int | None = None
    is_new: bool = False
    _join_request: int | None = field(default=None, repr=False)
    _awaiting: _JoinCounter | None = field(default=None, repr=False)  # its group's, while it is a member

    @property
    def join_request(self) -> int | None:
        """Its parked JoinGroup's request id, if any (setting it keeps the group's awaiting count)."""
        return self._join_request

    @join_request.setter
    def join_request(self, request_id: int | None) -> None:
        counter = self._awaiting
        if counter is not None:
            counter.count += (request_id is not None) - (self._join_request is not None)
        self._join_request = request_id

    def _attach(self, counter: _JoinCounter | None) -> None:
        """Enter (a counter) or leave (None) a group's count of members awaiting join."""
        if self._awaiting is not None and self._join_request is not None:
            self._awaiting.count -= 1
        self._awaiting = counter
        if counter is not None and self._join_request is not None:
            counter.count += 1

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_request is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_request is not None

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
        # rebalance count as alive until the rebalance answers them (which restarts the session).
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync


class _Session:
    """One member's session deadline and when its (single) timer fires; never after the deadline."""

    __slots__ = ("deadline", "fires_at")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fires_at = deadline


_REPLIES = {code: (Reply(code),) for code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS,
                                              ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                                              ErrorCode.FENCED_INSTANCE_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE)}


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


# ---------------------------------------------------------------------------------------------
# The group
# ---------------------------------------------------------------------------------------------
class ClassicGroup:
    """One classic group's state; `handle` is the only way to change it."""

    def __init__(self, group_id: str, *, config, created_ms: int) -> None:
        self.group_id = group_id
        self._config = config
        self.state = GroupState.EMPTY
        self.previous_state: GroupState | None = None
        self.state_timestamp_ms: int | None = created_ms
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
        self._sessions: dict[str, _Session] = {}
        self._join_timer_armed = False
        self._initial_delay: tuple[int, int] | None = None  # (delay, remaining) of an initial-delay join timer
        self._sync_timer_generation: int | None = None
        self._rebalance_started_ms: int | None = None
        self._rebalance_reason: RebalanceReason | None = None
        self._rebalance_initial = False
        # For the operator journal: the generation a rebalance started from, members it dropped at the
        # rebalance timeout, and who held what in the last Stable generation (to name departed members
        # and diff assignments).
        self._rebalance_generation_before = 0
        self._rebalance_dropped: list[tuple[GroupMember, str]] = []  # (member, journal role)
        self._last_stable: dict[str, MemberSnapshot] = {}
        self._now = Now(created_ms, 0.0)
        self._out: list = []

    # =========================================================================================
    # The interface
    # =========================================================================================
    def handle(self, event, now: Now) -> list | tuple:
        """Apply one event at time `now`; returns the effects to execute, in order."""
        self._now = now
        if type(event) is Heartbeat:  # the hot path: usually a constant, allocation-free answer
            return self._on_heartbeat(event)
        out = self._out = []
        _HANDLERS[type(event)](self, event)
        return out

    def _transition(self, step: Step, target: GroupState, reason: RebalanceReason | None = None) -> None:
        allowed = TRANSITIONS.get((self.state, step))
        if allowed is None or target not in allowed:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state} -> {target} by {step.value} is not in TRANSITIONS")
        self._out.append(StateChanged(self.group_id, self.state, step, target, reason))
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = self._now.wall_ms

    # =========================================================================================
    # Read-only questions (the coordinator asks them without an event)
    # =========================================================================================
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

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def session_deadline_ms(self, member_id: str) -> float | None:
        """When the member's (or pending id's) session ends, on the monotonic clock."""
        session = self._sessions.get(member_id)
        return session.deadline if session is not None else None

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

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

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

    def offset_expiry_base(self):
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

    def metadata_record(self, assignment: dict[str, bytes]) -> GroupMetadataRecord:
        """The GroupMetadata record of the group as it is now, with the given assignment."""
        protocol = self.protocol_name
        return GroupMetadataRecord(
            group=self.group_id,
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=protocol,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp_ms if self.state_timestamp_ms is not None else -1,
            # (positional: member_id, group_instance_id, client_id, client_host, rebalance_timeout,
            # session_timeout, subscription, assignment; a third cheaper for 10 000 members)
            members=[GroupMemberRecord(
                mem.member_id, mem.group_instance_id, mem.client_id, mem.client_host, mem.rebalance_timeout_ms,
                mem.session_timeout_ms, mem.metadata(protocol) if protocol is not None else b"",
                assignment.get(mem.member_id, b""))
                for mem in self.members.values()],
        )

    # =========================================================================================
    # Effects
    # =========================================================================================
    def _answer(self, request_id: int | None, result: object) -> None:
        if request_id is not None:
            self._out.append(Answer(request_id, result))

    def _append_metadata(self, assignment: dict[str, bytes], purpose: object) -> None:
        self._out.append(AppendRecords([self.metadata_record(assignment)], purpose))

    # =========================================================================================
    # Membership bookkeeping
    # =========================================================================================
    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"

    def _add(self, member: GroupMember, join_request: int | None = None) -> None:
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
        member.join_request = join_request

    def _remove(self, member_id: str) -> GroupMember | None:
        """Drop a member (or a pending id). Answers its parked requests with UNKNOWN_MEMBER_ID."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._supported_protocols.subtract(set(member.protocol_names()))
            self._supported_protocols += Counter()  # drop zero counts
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
            self._answer(member.join_request, JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
            member.join_request = None
            member._attach(None)
            self._answer(member.sync_request, SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
            member.sync_request = None
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        self._cancel_session(member_id)
        return member

    def _update_member(self, member: GroupMember, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                       session_timeout_ms: int, join_request: int | None) -> None:
        self._supported_protocols.subtract(set(member.protocol_names()))
        member.protocols = list(protocols)
        self._supported_protocols.update(set(member.protocol_names()))
        self._supported_protocols += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.join_request is not None and member.join_request != join_request:
            # A newer JoinGroup from the same member supersedes the parked one; the client has
            # given up on the old request, answer it so its connection is not blocked.
            self._answer(member.join_request,
                         JoinResult(error=ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_request = join_request

    def _replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> GroupMember:
        """Swap a static member's id; the old id's parked requests are fenced (KIP-345)."""
        old = self.members.pop(old_member_id, None)
        if old is None:
            raise KeyError(f"cannot replace {old_member_id}: not a member of {self.group_id}")
        self._answer(old.join_request, JoinResult(error=ErrorCode.FENCED_INSTANCE_ID, member_id=old_member_id))
        old._attach(None)
        self._answer(old.sync_request, SyncResult(error=ErrorCode.FENCED_INSTANCE_ID))
        new = GroupMember(
            member_id=new_member_id, group_instance_id=old.group_instance_id, client_id=old.client_id,
            client_host=old.client_host, rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms, protocol_type=old.protocol_type, protocols=old.protocols,
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
        self._cancel_session(old_member_id)
        return new

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

    # =========================================================================================
    # Timers
    # =========================================================================================
    def _schedule_session(self, member_id: str, timeout_ms: int | None = None) -> None:
        """(Re)start a member's or pending id's session; a timer effect only when none is armed early enough."""
        member = self.members.get(member_id)
        if member is None and member_id not in self.pending_members:
            return
        if timeout_ms is None:
            timeout_ms = member.session_timeout_ms  # type: ignore[union-attr]
        deadline = self._now.monotonic_ms + timeout_ms
        session = self._sessions.get(member_id)
        if session is None:
            self._sessions[member_id] = _Session(deadline)
        elif session.fires_at <= deadline:
            session.deadline = deadline  # the armed timer fires first and re-arms for the rest
            return
        else:  # moved earlier than the armed timer (a join timeout replaced by a session): re-arm now
            session.deadline = session.fires_at = deadline
        self._out.append(SetTimer(member_id, timeout_ms))

    def _cancel_session(self, member_id: str) -> None:
        if self._sessions.pop(member_id, None) is not None:
            self._out.append(CancelTimer(member_id))

    def _session_timer_fired(self, member_id: str) -> None:
        session = self._sessions.get(member_id)
        if session is None:
            return
        remaining = session.deadline - self._now.monotonic_ms
        if remaining > 0:  # heartbeats moved the deadline since the timer was armed
            session.fires_at = session.deadline
            self._out.append(SetTimer(member_id, remaining))
            return
        del self._sessions[member_id]
        self._expire_session(member_id)

    def _expire_session(self, member_id: str) -> None:
        if self.state is GroupState.DEAD:
            return
        if member_id in self.pending_members:
            log.info("group %s: pending member %s expired before rejoining", self.group_id, member_id)
            self._remove(member_id)
            self._complete_join_phase_if_all_joined()
            return
        member = self.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s expired (session timeout %d ms)", self.group_id, member_id,
                 member.session_timeout_ms if not member.is_new else self._config.group_new_member_join_timeout_ms)
        self._out.append(MemberExpired(self.group_id, member_id))
        if self._rebalance_started_ms is not None:  # it expired during a rebalance: the journal names it
            self._rebalance_dropped.append((member, "expired"))
        self._remove_member_and_update(member, RebalanceReason(RebalanceCause.SESSION_EXPIRED, (member_id,)))

    def _set_join_timer(self, delay_ms: int, initial: tuple[int, int] | None = None) -> None:
        self._join_timer_armed = True
        self._initial_delay = initial
        self._out.append(SetTimer(GroupTimer.JOIN_PHASE, delay_ms))

    def _cancel_join_timer(self) -> None:
        if self._join_timer_armed:
            self._join_timer_armed = False
            self._initial_delay = None
            self._out.append(CancelTimer(GroupTimer.JOIN_PHASE))

    def _cancel_sync_timer(self) -> None:
        if self._sync_timer_generation is not None:
            self._sync_timer_generation = None
            self._out.append(CancelTimer(GroupTimer.PENDING_SYNC))

    def _stop_timers(self) -> None:
        self._join_timer_armed = False
        self._initial_delay = None
        self._sync_timer_generation = None
        self._sessions.clear()
        self._out.append(CancelAllTimers())

    def _on_timer(self, event: TimerFired) -> None:
        key = event.key
        if type(key) is str:
            self._session_timer_fired(key)
        elif key is GroupTimer.JOIN_PHASE:
            self._join_timer_fired()
        elif key is GroupTimer.PENDING_SYNC:
            generation, self._sync_timer_generation = self._sync_timer_generation, None
            self._pending_sync_expired(generation)
        else:
            raise ValueError(f"group {self.group_id}: no timer {key!r}")

    def _join_timer_fired(self) -> None:
        self._join_timer_armed = False
        initial, self._initial_delay = self._initial_delay, None
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if initial is not None:
            delay_ms, remaining_ms = initial
            if self.new_member_added and remaining_ms != 0:
                # Someone joined during the window: wait once more, within the rebalance timeout.
                self.new_member_added = False
                new_delay = min(self._config.group_initial_rebalance_delay_ms, remaining_ms)
                self._set_join_timer(new_delay, (new_delay, max(remaining_ms - delay_ms, 0)))
                return
        self._complete_join_phase()

    def _pending_sync_expired(self, generation: int | None) -> None:
        if generation != self.generation_id or self.state not in (GroupState.COMPLETING_REBALANCE,
                                                                   GroupState.STABLE):
            return
        if not self.pending_sync_members:
            return
        late = sorted(self.pending_sync_members)
        for member_id in late:
            self._remove(member_id)
        log.info("group %s: members %s did not send SyncGroup in time", self.group_id, late)
        self._prepare_rebalance(RebalanceReason(RebalanceCause.SYNC_EXPIRED, tuple(late)))

    def _remove_pending_sync_member(self, member_id: str) -> None:
        self.pending_sync_members.discard(member_id)
        if not self.pending_sync_members:
            self._cancel_sync_timer()

    # =========================================================================================
    # JoinGroup
    # =========================================================================================
    def accepts_joining_member(self, member_id: str) -> bool:
        """`group.max.size`: room for this member in the current phase?"""
        max_size = self._config.group_max_size
        if self.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if self.state is GroupState.PREPARING_REBALANCE:
            m = self.members.get(member_id) if member_id else None
            return (m is not None and m.is_awaiting_join) or self.awaiting_join_count() < max_size
        return (bool(member_id) and member_id in self.members) or len(self.members) < max_size

    def _on_join(self, event: JoinGroup) -> None:
        req, request_id = event.request, event.request_id
        if not self.accepts_joining_member(req.member_id):
            self._remove(req.member_id)
            log.info("group %s: join refused, group.max.size %d reached", self.group_id, self._config.group_max_size)
            self._answer(request_id, JoinResult(error=ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif req.member_id == "":
            self._join_new_member(req, request_id)
        else:
            self._join_existing_member(req, request_id)
        # Don't hold JoinGroups longer than needed, except during the initial (delayed) rebalance.
        if (self.state is GroupState.PREPARING_REBALANCE and self.has_all_members_joined()
                and self.previous_state is not GroupState.EMPTY):
            self._complete_join_phase()

    def _join_new_member(self, req: JoinRequest, request_id: int) -> None:
        if self.state is GroupState.DEAD:
            self._answer(request_id, JoinResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not self.supports_protocols(req.protocol_type, req.protocols):
            self._answer(request_id, JoinResult(error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = self.generate_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            old_id = self.static_members.get(req.group_instance_id)
            if old_id is not None:
                self._replace_static_member_on_join(req, old_id, new_id, request_id)
            else:
                self._add_member_then_rebalance(req, new_id, request_id)
        elif req.require_known_member_id:
            log.info("group %s: new dynamic member, asking it to rejoin as %s (state %s)",
                     self.group_id, new_id, self.state)
            self.pending_members.add(new_id)
            self._schedule_session(new_id, req.session_timeout_ms)
            self._answer(request_id, JoinResult(error=ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id))
        else:
            self._add_member_then_rebalance(req, new_id, request_id)

    def _join_existing_member(self, req: JoinRequest, request_id: int) -> None:
        if self.state is GroupState.DEAD:
            self._answer(request_id, JoinResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=req.member_id))
            return
        if not self.supports_protocols(req.protocol_type, req.protocols):
            self._answer(request_id, JoinResult(error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
            return
        if req.member_id in self.pending_members:
            if req.group_instance_id is not None:
                # Pending ids are only ever handed to dynamic members.
                self._answer(request_id, JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id))
                return
            log.info("group %s: pending member %s rejoined (state %s)", self.group_id, req.member_id, self.state)
            self._add_member_then_rebalance(req, req.member_id, request_id)
            return
        error = self.validate_member(req.member_id, req.group_instance_id)
        if error:
            self._answer(request_id, JoinResult(error=error, member_id=req.member_id))
            return
        member = self.members[req.member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member_then_rebalance(req, member, request_id, RebalanceCause.MEMBER_METADATA_CHANGED)
        elif self.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # Likely a lost JoinGroup answer: hand back this generation's data again.
                self._answer(request_id, self._join_answer(member, skip_assignment=False))
            else:
                self._update_member_then_rebalance(req, member, request_id, RebalanceCause.MEMBER_METADATA_CHANGED)
        elif self.state is GroupState.STABLE:
            if self.is_leader(member.member_id):
                self._update_member_then_rebalance(req, member, request_id, RebalanceCause.LEADER_REJOINED)
            elif not member.matches(req.protocols):
                self._update_member_then_rebalance(req, member, request_id, RebalanceCause.MEMBER_METADATA_CHANGED)
            else:
                self._answer(request_id, self._join_answer(member, skip_assignment=False, with_members=False))
        else:  # Empty: the member's generation is gone
            self._answer(request_id, JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id))

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

    def _add_member_then_rebalance(self, req: JoinRequest, member_id: str, request_id: int) -> None:
        member = GroupMember(
            member_id=member_id, group_instance_id=req.group_instance_id, client_id=req.client_id,
            client_host=req.client_host, rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms, protocol_type=req.protocol_type,
            protocols=list(req.protocols), is_new=True,
        )
        if self.state is GroupState.PREPARING_REBALANCE and self.previous_state is GroupState.EMPTY:
            self.new_member_added = True  # lets the initial rebalance wait a little longer
        self._add(member, request_id)
        # A new member can't heartbeat while its JoinGroup is parked; if it vanishes, this
        # (long) timer removes it rather than its session timeout.
        self._schedule_session(member_id, self._config.group_new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(
            RebalanceReason(RebalanceCause.MEMBER_JOINED, (member_id,), req.reason,
                            f"group instance id {req.group_instance_id}" if req.group_instance_id else ""))

    def _update_member_then_rebalance(self, req: JoinRequest, member: GroupMember, request_id: int,
                                      cause: RebalanceCause) -> None:
        self._update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, request_id)
        self._maybe_prepare_rebalance_or_complete_join(
            RebalanceReason(cause, (member.member_id,), req.reason, f"during {self.state}"))

    def _replace_static_member_on_join(self, req: JoinRequest, old_id: str, new_id: str, request_id: int) -> None:
        instance_id = req.group_instance_id
        assert instance_id is not None
        current_leader = self.leader_id
        member = self._replace_static_member(instance_id, old_id, new_id)
        self._schedule_session(new_id)
        old_protocols, old_rebalance, old_session = member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms
        self._update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, request_id)
        log.info("group %s: static member %s replaced %s with %s (state %s)",
                 self.group_id, instance_id, old_id, new_id, self.state)
        reason = RebalanceReason(RebalanceCause.STATIC_MEMBER_REPLACED, (old_id, new_id), req.reason,
                                 f"instance {instance_id} during {self.state}")
        if self.state is GroupState.STABLE:
            if (self.protocol_name or "") == self.select_protocol():
                # Nothing the assignment depends on changed: persist the new id, no rebalance.
                self._append_metadata(
                    {m.member_id: m.assignment for m in self.members.values()},
                    StaticReplacementWrite(request_id, instance_id, old_id, member, self.generation_id,
                                           old_protocols, old_rebalance, old_session, current_leader,
                                           req.supports_skip_assignment))
                return
            self._maybe_prepare_rebalance_or_complete_join(reason)
            return
        if self.state is GroupState.COMPLETING_REBALANCE:
            # The leader may already have assigned to the old id: rebalance so the new id gets one.
            self._prepare_rebalance(reason)
            return
        self._maybe_complete_join_phase()

    def _static_replacement_written(self, write: StaticReplacementWrite, error: int) -> None:
        member, new_id, request_id = write.member, write.member.member_id, write.request_id
        if error:
            log.warning("group %s: could not persist static member %s as %s: %s",
                        self.group_id, write.group_instance_id, new_id, ErrorCode(error).name)
            if self.members.get(new_id) is member:
                if member.join_request == request_id:
                    member.join_request = None
                self._update_member(member, write.old_protocols, write.old_rebalance_timeout_ms,
                                    write.old_session_timeout_ms, None)
                self._replace_static_member(write.group_instance_id, new_id, write.old_member_id)
                self._schedule_session(write.old_member_id)
            self._answer(request_id, JoinResult(error=error, generation_id=self.generation_id,
                                                protocol_type=self.protocol_type, protocol_name=self.protocol_name,
                                                leader=write.leader_id or ""))
            return
        if member.join_request != request_id:
            return  # already answered (fenced or superseded) meanwhile
        member.join_request = None
        old = self._last_stable.pop(write.old_member_id, None)
        self._last_stable[new_id] = _snapshot(member)
        now = self._now.wall_ms
        self._out.append(RebalanceJournaled(
            self.group_id, "classic", now, now, self.generation_id, self.generation_id, "static_member_replaced",
            None, f"static member {write.group_instance_id} rejoined as {new_id}; nothing the assignment "
                  f"depends on changed, so no rebalance (KIP-345)", self.state.value,
            ((write.old_member_id, write.group_instance_id, old.client_id if old else member.client_id,
              old.client_host if old else member.client_host, "removed"),
             (new_id, write.group_instance_id, member.client_id, member.client_host, "joined")), {}, {}))
        if self.generation_id != write.generation_id or self.members.get(new_id) is not member:
            self._answer(request_id, JoinResult(error=ErrorCode.REBALANCE_IN_PROGRESS, member_id=new_id))
        elif write.supports_skip_assignment:
            is_leader = self.is_leader(new_id)
            self._answer(request_id, self._join_answer(member, skip_assignment=is_leader, with_members=is_leader))
        else:
            # Name the old leader so the new member doesn't run an assignment that a Stable group
            # would never broadcast.
            self._answer(request_id, self._join_answer(member, skip_assignment=False, with_members=False,
                                                       leader=write.leader_id or ""))

    # =========================================================================================
    # Rebalance
    # =========================================================================================
    def _maybe_prepare_rebalance_or_complete_join(self, reason: RebalanceReason) -> None:
        if self.can_rebalance():
            self._prepare_rebalance(reason)
        else:
            self._maybe_complete_join_phase()

    def _maybe_complete_join_phase(self) -> None:
        """After a join or a leave: everyone has joined ends the phase, except the initial (delayed) one."""
        if self.previous_state is not GroupState.EMPTY:
            self._complete_join_phase_if_all_joined()

    def _complete_join_phase_if_all_joined(self) -> None:
        """After an expiry: ends even the initial join phase (Kafka's removeMemberAndUpdateClassicGroup
        and removePendingMemberAndUpdateClassicGroup skip maybeCompleteJoinPhase's initial check)."""
        if self.state is GroupState.PREPARING_REBALANCE and self.has_all_members_joined():
            self._complete_join_phase()

    def _prepare_rebalance(self, reason: RebalanceReason) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment(ErrorCode.REBALANCE_IN_PROGRESS)
        self._cancel_sync_timer()
        self._cancel_join_timer()
        initial = self.state is GroupState.EMPTY
        if self._rebalance_started_ms is None:
            self._rebalance_started_ms = self._now.wall_ms
            self._rebalance_reason = reason
            self._rebalance_initial = initial
            self._rebalance_generation_before = self.generation_id
            self._rebalance_dropped = []
        self._transition(Step.PREPARE_REBALANCE, GroupState.PREPARING_REBALANCE, reason)
        self.new_member_added = False
        log.info("group %s: preparing to rebalance (state was %s, generation %d): %s",
                 self.group_id, self.previous_state, self.generation_id, reason)
        if initial:
            delay = self._config.group_initial_rebalance_delay_ms
            self._set_join_timer(delay, (delay, max(self.rebalance_timeout_ms() - delay, 0)))
        elif self.has_all_members_joined():
            # Kafka's maybeCompleteJoinElseSchedule: e.g. the last member left, so the group is Empty now.
            self._complete_join_phase()
        else:
            self._set_join_timer(self.rebalance_timeout_ms())

    def _rebalance_done(self) -> None:
        """A rebalance ended in Stable: count it by why it started, timed from its first prepare."""
        started, self._rebalance_started_ms = self._rebalance_started_ms, None
        if started is not None and self._rebalance_reason is not None:
            self._out.append(RebalanceCompleted(self.group_id, self._rebalance_reason, self._rebalance_initial,
                                                max(self._now.wall_ms - started, 0)))
            self._journal_rebalance(started)
        self._rebalance_reason = None
        self._last_stable = {m.member_id: _snapshot(m) for m in self.members.values()}

    def _journal_rebalance(self, started_ms: int) -> None:
        """The operator journal's entry for the rebalance that ends now (Stable or Empty)."""
        reason = self._rebalance_reason
        assert reason is not None
        before = self._last_stable
        involved: dict[str, str] = {m: "cause" for m in reason.members}
        for m, role in self._rebalance_dropped:
            involved.setdefault(m.member_id, role)
        for member_id in self.members.keys() - before.keys():
            involved.setdefault(member_id, "joined")
        for member_id in before.keys() - self.members.keys():
            involved.setdefault(member_id, "removed")
        dropped = {m.member_id: m for m, _ in self._rebalance_dropped}
        members = []
        for member_id, role in involved.items():
            m = self.members.get(member_id) or before.get(member_id) or dropped.get(member_id)
            members.append((member_id, m.group_instance_id, m.client_id, m.client_host, role) if m is not None
                           else (member_id, None, "", "", role))
        self._out.append(RebalanceJournaled(
            self.group_id, "classic", started_ms, self._now.wall_ms, self._rebalance_generation_before,
            self.generation_id, reason.cause.journal_trigger, reason.client_reason, str(reason), self.state.value,
            tuple(members),
            {m: s.assignment for m, s in before.items()} if self.uses_consumer_protocol() else {},
            {m: s.assignment for m, s in self.members.items()} if self.uses_consumer_protocol() else {}))
        self._rebalance_dropped = []

    def _complete_join_phase(self) -> None:
        self._cancel_join_timer()
        gone = [m for m in self.not_yet_rejoined() if not m.is_static]
        self._rebalance_dropped.extend((m, "rebalance_timeout") for m in gone)
        for m in gone:
            self._remove(m.member_id)
        if gone:
            log.info("group %s: removed dynamic members that did not rejoin: %s",
                     self.group_id, [m.member_id for m in gone])
        if not self._maybe_elect_new_joined_leader() and self.members:
            # Only static members that haven't rejoined remain: wait another rebalance timeout
            # (their sessions still expire them).
            log.warning("group %s: no member rejoined; extending the join phase", self.group_id)
            self._set_join_timer(self.rebalance_timeout_ms())
            return
        self._init_next_generation()
        if self.state is GroupState.EMPTY:
            log.info("group %s: generation %d is empty", self.group_id, self.generation_id)
            # Nothing became stable: the next rebalance starts from Empty and counts as initial.
            if self._rebalance_started_ms is not None and self._rebalance_reason is not None:
                self._journal_rebalance(self._rebalance_started_ms)
            self._last_stable = {}
            self._rebalance_started_ms = self._rebalance_reason = None
            self._append_metadata({}, EmptyGenerationWrite(self.generation_id))
            return
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 self.group_id, self.generation_id, len(self.members), self.protocol_name, self.leader_id)
        parked = []
        for member in self.members.values():
            parked.append((member.join_request, member.member_id))
            member.join_request = None
            member.is_new = False
        self.pending_sync_members.update(self.members)
        # Each member's session restarts as its answer goes out (a big group's answers take several
        # loop turns; until then the join timeout, never shorter, watches it).
        self._out.append(AnswerAll(JoinAnswers(parked, self._join_answer(self.members[self.leader_id],
                                                                         skip_assignment=False)),
                                   restart_sessions_of=self.generation_id))
        self._sync_timer_generation = self.generation_id
        self._out.append(SetTimer(GroupTimer.PENDING_SYNC, self.rebalance_timeout_ms()))

    def _on_join_answered(self, event: JoinAnswered) -> None:
        if event.generation_id == self.generation_id:
            self._schedule_session(event.member_id)

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
            self._transition(Step.JOIN_PHASE_COMPLETED, GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self._compute_subscribed_topics()
            self._transition(Step.JOIN_PHASE_COMPLETED, GroupState.EMPTY)
        self.pending_sync_members.clear()

    def _reset_and_propagate_assignment(self, error: int) -> None:
        for m in self.members.values():
            m.assignment = b""
        self._propagate_assignment(error)

    def _propagate_assignment(self, error: int) -> None:
        ok = error == ErrorCode.NONE
        protocol_type = self.protocol_type if ok else None
        protocol_name = self.protocol_name if ok else None
        answers = []
        for m in self.members.values():
            request_id, m.sync_request = m.sync_request, None
            if request_id is None:
                continue
            # (error, protocol_type, protocol_name, assignment: positional, for 10 000 members at once)
            answers.append((request_id, SyncResult(error, protocol_type, protocol_name, m.assignment)))
            # A session may have lapsed while the member waited for the leader: restart it.
            self._schedule_session(m.member_id)
        if answers:
            self._out.append(AnswerAll(answers))

    def _remove_member_and_update(self, member: GroupMember, reason: RebalanceReason) -> None:
        self._remove(member.member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(reason)
        else:
            self._complete_join_phase_if_all_joined()

    def _on_rebalance_requested(self, event: RebalanceRequested) -> None:
        if self.can_rebalance():
            self._prepare_rebalance(event.reason)

    # =========================================================================================
    # SyncGroup
    # =========================================================================================
    def _on_sync(self, event: SyncGroup) -> None:
        request_id, member_id = event.request_id, event.member_id
        if self.state is GroupState.DEAD:
            self._answer(request_id, SyncResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        error = self.validate_member(member_id, event.group_instance_id)
        if not error and event.generation_id != self.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if not error and (_inconsistent(event.protocol_type, self.protocol_type)
                          or _inconsistent(event.protocol_name, self.protocol_name)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error:
            self._answer(request_id, SyncResult(error=error))
            return
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            self._answer(request_id, SyncResult(error=ErrorCode.REBALANCE_IN_PROGRESS))
        elif self.state is GroupState.COMPLETING_REBALANCE:
            if member.sync_request is not None:
                self._answer(member.sync_request, SyncResult(error=ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_request = request_id
            self._remove_pending_sync_member(member_id)
            if self.is_leader(member_id):
                self._store_leader_assignment(member_id, event.generation_id, event.assignments)
        elif self.state is GroupState.STABLE:
            self._remove_pending_sync_member(member_id)
            self._answer(request_id, SyncResult(protocol_type=self.protocol_type, protocol_name=self.protocol_name,
                                                assignment=member.assignment))
        else:  # Empty has no members: validate_member answered already
            self._answer(request_id, SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID))

    def _store_leader_assignment(self, leader_id: str, generation_id: int, assignments: dict[str, bytes]) -> None:
        full = {m: assignments.get(m, b"") for m in self.members}
        missing = [m for m in self.members if m not in assignments]
        if missing:
            log.warning("group %s: leader gave no assignment to %s in generation %d; they get empty ones",
                        self.group_id, missing, generation_id)
        log.info("group %s: assignment received from leader %s for generation %d (%d members)",
                 self.group_id, leader_id, generation_id, len(self.members))
        self._append_metadata(full, AssignmentWrite(generation_id, leader_id, full))

    def _assignment_written(self, write: AssignmentWrite, error: int) -> None:
        # Someone may have joined while we wrote: only a group still waiting for exactly this
        # generation's assignment takes it.
        if self.state is not GroupState.COMPLETING_REBALANCE or self.generation_id != write.generation_id:
            return
        if error:
            log.warning("group %s: failed to store the assignment of generation %d: %s",
                        self.group_id, write.generation_id, ErrorCode(error).name)
            self._reset_and_propagate_assignment(error)
            self._maybe_prepare_rebalance_or_complete_join(
                RebalanceReason(RebalanceCause.ASSIGNMENT_NOT_STORED, (write.leader_id,),
                                detail=ErrorCode(error).name))
            return
        for member_id, member in self.members.items():
            member.assignment = write.assignment.get(member_id, b"")
        self._propagate_assignment(ErrorCode.NONE)
        self._transition(Step.ASSIGNMENT_STORED, GroupState.STABLE)
        log.info("group %s: generation %d is stable", self.group_id, write.generation_id)
        self._rebalance_done()

    def _on_appended(self, event: RecordsAppended) -> None:
        if self.state is GroupState.DEAD:
            return
        purpose = event.purpose
        if type(purpose) is AssignmentWrite:
            self._assignment_written(purpose, event.error)
        elif type(purpose) is StaticReplacementWrite:
            self._static_replacement_written(purpose, event.error)
        elif type(purpose) is EmptyGenerationWrite:
            if event.error:
                # The previous generation stays on disk; it has no live members, so that's safe.
                log.warning("group %s: failed to write empty group metadata: %s",
                            self.group_id, ErrorCode(event.error).name)
        else:
            raise ValueError(f"group {self.group_id}: no write {purpose!r}")

    # =========================================================================================
    # Heartbeat, LeaveGroup, offset commits
    # =========================================================================================
    def _on_heartbeat(self, event: Heartbeat) -> list | tuple:
        # The checks a heartbeat passes before it counts, in the order Kafka makes them.
        member_id = event.member_id
        if self.state is GroupState.DEAD:
            return _REPLIES[ErrorCode.COORDINATOR_NOT_AVAILABLE]
        code = self.validate_member(member_id, event.group_instance_id)
        if code:
            return _REPLIES.get(code) or (Reply(code),)
        if event.generation_id != self.generation_id:
            return _REPLIES[ErrorCode.ILLEGAL_GENERATION]
        if self.state is GroupState.EMPTY:
            return _REPLIES[ErrorCode.UNKNOWN_MEMBER_ID]
        code = ErrorCode.REBALANCE_IN_PROGRESS if self.state is GroupState.PREPARING_REBALANCE else ErrorCode.NONE
        session = self._sessions.get(member_id)
        deadline = self._now.monotonic_ms + self.members[member_id].session_timeout_ms
        if session is not None and session.fires_at <= deadline:
            session.deadline = deadline  # the usual case: the armed timer fires first and re-arms
            return _REPLIES[code]
        out = self._out = []  # rare: the session timer must be (re-)armed
        self._schedule_session(member_id)
        out.append(Reply(code))
        return out

    def _on_leave(self, event: LeaveGroup) -> None:
        """Remove each (member_id, group_instance_id, reason); replies one error code per entry."""
        if self.state is GroupState.DEAD:
            self._out.append(Reply([ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(event.members)))
            return
        errors: list[int] = []
        removed: list[str] = []
        client_reasons = set()
        for member_id, instance_id, reason in event.members:
            reason = reason or "not provided"
            if member_id == "":
                # Admin removal by instance id.
                if instance_id is not None and instance_id in self.static_members:
                    target = self.static_members[instance_id]
                    self._remove(target)
                    log.info("group %s: static member %s (%s) removed by LeaveGroup; reason: %s",
                             self.group_id, instance_id, target, reason)
                    removed.append(target)
                    client_reasons.add(reason)
                    errors.append(ErrorCode.NONE)
                else:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
            elif member_id in self.pending_members:
                self._remove(member_id)
                log.info("group %s: pending member %s left; reason: %s", self.group_id, member_id, reason)
                errors.append(ErrorCode.NONE)
                removed.append(member_id)
                client_reasons.add(reason)
            else:
                error = self.validate_member(member_id, instance_id)
                if error:
                    errors.append(error)
                    continue
                self._remove(member_id)
                log.info("group %s: member %s left; reason: %s", self.group_id, member_id, reason)
                errors.append(ErrorCode.NONE)
                removed.append(member_id)
                client_reasons.add(reason)
        if removed:
            reason = RebalanceReason(RebalanceCause.MEMBER_LEFT, tuple(removed),
                                     "; ".join(sorted(client_reasons)) or None)
            if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(reason)
            elif self.state is GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join_phase()
        self._out.append(Reply(errors))

    def _on_offset_committed(self, event: OffsetCommitted) -> None:
        if self.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE) and event.member_id in self.members:
            self._schedule_session(event.member_id)

    # =========================================================================================
    # Load, unload, death
    # =========================================================================================
    def _on_metadata_loaded(self, event: MetadataLoaded) -> None:
        """Rebuild from a GroupMetadata record: Stable with members, else Empty (sessions start at LoadCompleted)."""
        record = event.record
        members = [GroupMember(
            member_id=r.member_id, group_instance_id=r.group_instance_id, client_id=r.client_id,
            client_host=r.client_host,
            rebalance_timeout_ms=r.rebalance_timeout if r.rebalance_timeout >= 0 else r.session_timeout,
            session_timeout_ms=r.session_timeout, protocol_type=record.protocol_type,
            protocols=[(record.protocol or "", bytes(r.subscription))], assignment=bytes(r.assignment))
            for r in record.members]
        self._transition(Step.LOADED, GroupState.STABLE if members else GroupState.EMPTY)
        self.generation_id = record.generation
        self.protocol_type = record.protocol_type or None
        self.protocol_name = record.protocol
        self.leader_id = record.leader
        timestamp = record.current_state_timestamp
        self.state_timestamp_ms = timestamp if timestamp >= 0 else None
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
        self.subscribed_topics = self._compute_subscribed_topics()
        self._last_stable = {m.member_id: _snapshot(m) for m in self.members.values()}

    def _on_load_completed(self, event: LoadCompleted) -> None:
        """After replay: members must keep heartbeating; an oversized group rebalances."""
        for member_id in self.members:
            self._schedule_session(member_id)
        if len(self.members) > self._config.group_max_size and self.can_rebalance():
            self._prepare_rebalance(RebalanceReason(
                RebalanceCause.OVER_MAX_SIZE,
                detail=f"{len(self.members)} members, group.max.size {self._config.group_max_size}"))

    def _answer_all_parked(self, error: int) -> None:
        for m in self.members.values():
            self._answer(m.join_request, JoinResult(error=error, member_id=m.member_id))
            m.join_request = None
            self._answer(m.sync_request, SyncResult(error=error))
            m.sync_request = None

    def _on_unloaded(self, event: Unloaded) -> None:
        """Stop every timer and answer every parked request (coordinator shutdown, partition moved)."""
        self._stop_timers()
        self._answer_all_parked(event.error)

    def _on_deleted(self, event: Deleted) -> None:
        self._stop_timers()
        self._answer_all_parked(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self._transition(Step.DELETED, GroupState.DEAD)

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state}, generation={self.generation_id}, "
                f"members={list(self.members)}, leader={self.leader_id!r})")


class MemberSnapshot(NamedTuple):
    """Who a member was and what it held, frozen for the journal (the live one changes in place).

    A tuple of strings and bytes: cheap to make for 10 000 members at the end of every rebalance, and
    nothing the cyclic garbage collector has to walk."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: bytes


def _snapshot(member: GroupMember) -> MemberSnapshot:
    return MemberSnapshot(member.member_id, member.group_instance_id, member.client_id, member.client_host,
                          member.assignment)


_HANDLERS = {
    JoinGroup: ClassicGroup._on_join,
    SyncGroup: ClassicGroup._on_sync,
    LeaveGroup: ClassicGroup._on_leave,
    OffsetCommitted: ClassicGroup._on_offset_committed,
    JoinAnswered: ClassicGroup._on_join_answered,
    RebalanceRequested: ClassicGroup._on_rebalance_requested,
    TimerFired: ClassicGroup._on_timer,
    RecordsAppended: ClassicGroup._on_appended,
    MetadataLoaded: ClassicGroup._on_metadata_loaded,
    LoadCompleted: ClassicGroup._on_load_completed,
    Unloaded: ClassicGroup._on_unloaded,
    Deleted: ClassicGroup._on_deleted,
}
