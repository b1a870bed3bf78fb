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

Around this state machine, by concern: `classic_events` (the requests and other events, the results,
why the group appends), `classic_member` (a member, `Membership`: who is in the group, the protocol
vote), `classic_timers` (what is armed) and `classic_rebalance` (why a rebalance started, and what the
journal and the metrics learn of it).
"""
from __future__ import annotations

import enum
import logging

from cohort.coordinator.groups.classic.events import (
    AssignmentWrite,
    EmptyGenerationWrite,
    Heartbeat,
    JoinAnswered,
    JoinAnswers,
    JoinGroup,
    JoinRequest,
    JoinResult,
    LeaveGroup,
    MetadataLoaded,
    OffsetCommitted,
    RebalanceRequested,
    StaticReplacementWrite,
    SyncGroup,
    SyncResult,
)
from cohort.coordinator.groups.classic.member import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMember,
    Membership,
    member_records,
    members_of,
    new_member_id,
    subscribed_topics,
)
from cohort.coordinator.groups.classic.rebalance import RebalanceCause, RebalanceJournal, RebalanceReason
from cohort.coordinator.groups.classic.timers import GroupTimer, GroupTimers
from cohort.coordinator.groups.effects import (
    Answer,
    AnswerAll,
    AppendRecords,
    Deleted,
    LoadCompleted,
    MemberExpired,
    Now,
    RecordsAppended,
    Reply,
    StateChanged,
    TimerFired,
    Unloaded,
)
from cohort.coordinator.records.types import GroupMetadataRecord
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.group")


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
        self.membership = Membership(group_id)
        self.members = self.membership.members  # (the same dict, never rebound: what every request reads)
        self.pending_sync_members: set[str] = set()
        self.new_member_added = False
        self.subscribed_topics: frozenset[str] | None = None
        self._timers = GroupTimers()
        self._journal = RebalanceJournal(group_id)  # the rebalance under way, as the journal and metrics see it
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

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_leader(self, member_id: str) -> bool:
        return self.membership.leader_id == member_id

    def session_deadline_ms(self, member_id: str) -> float | None:
        """When the member's (or pending id's) session ends, on the monotonic clock."""
        session = self._timers.sessions.get(member_id)
        return session.deadline if session is not None else None

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        return self.protocol_type == protocol_type and self.membership.protocols.any_supported_by_all(protocols)

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
            error = self.membership.validate(member_id, group_instance_id)
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
            leader=self.membership.leader_id,
            current_state_timestamp=self.state_timestamp_ms if self.state_timestamp_ms is not None else -1,
            members=member_records(self.members.values(), protocol, assignment),
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
    # Members in and out (`Membership` keeps the books; here their parked requests and sessions)
    # =========================================================================================
    def _remove(self, member_id: str) -> GroupMember | None:
        """Drop a member (or a pending id). Answers its parked requests with UNKNOWN_MEMBER_ID."""
        member = self.members.get(member_id)
        if member is not None:
            self._answer(member.join_request, JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
            self._answer(member.sync_request, SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
        self.membership.remove(member_id)
        self.pending_sync_members.discard(member_id)
        self._timers.cancel_session(member_id, self._out)
        return member

    def _update_member(self, member: GroupMember, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                       session_timeout_ms: int, join_request: int | None) -> None:
        self.membership.update_protocols(member, protocols)
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
        old = self.members.get(old_member_id)
        if old is not None:
            self._answer(old.join_request, JoinResult(error=ErrorCode.FENCED_INSTANCE_ID, member_id=old_member_id))
            self._answer(old.sync_request, SyncResult(error=ErrorCode.FENCED_INSTANCE_ID))
        new = self.membership.replace_static(group_instance_id, old_member_id, new_member_id)
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self._timers.cancel_session(old_member_id, self._out)
        return new

    # =========================================================================================
    # Timers
    # =========================================================================================
    def _schedule_session(self, member_id: str, timeout_ms: int | None = None) -> None:
        """(Re)start a member's or pending id's session (by default its own session timeout)."""
        member = self.members.get(member_id)
        if member is None and member_id not in self.membership.pending_members:
            return
        if timeout_ms is None:
            timeout_ms = member.session_timeout_ms  # type: ignore[union-attr]
        self._timers.start_session(member_id, timeout_ms, self._now.monotonic_ms, self._out)

    def _expire_session(self, member_id: str) -> None:
        if self.state is GroupState.DEAD:
            return
        if member_id in self.membership.pending_members:
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
        self._journal.drop(member, "expired")  # it expired during a rebalance: the journal names it
        self._remove_member_and_update(member, RebalanceReason(RebalanceCause.SESSION_EXPIRED, (member_id,)))

    def _on_timer(self, event: TimerFired) -> None:
        key = event.key
        if type(key) is str:
            if self._timers.session_fired(key, self._now.monotonic_ms, self._out):
                self._expire_session(key)
        elif key is GroupTimer.JOIN_PHASE:
            self._join_timer_fired()
        elif key is GroupTimer.PENDING_SYNC:
            self._pending_sync_expired(self._timers.sync_fired())
        else:
            raise ValueError(f"group {self.group_id}: no timer {key!r}")

    def _join_timer_fired(self) -> None:
        initial = self._timers.join_fired()
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if initial is not None:
            delay_ms, remaining_ms = initial
            if self.new_member_added and remaining_ms != 0:
                # Someone joined during the window: wait once more, within the rebalance timeout.
                self.new_member_added = False
                new_delay = min(self._config.group_initial_rebalance_delay_ms, remaining_ms)
                self._timers.set_join(new_delay, self._out, (new_delay, max(remaining_ms - delay_ms, 0)))
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
            self._timers.cancel_sync(self._out)

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
            return (m is not None and m.is_awaiting_join) or self.membership.awaiting_join_count() < max_size
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
        if (self.state is GroupState.PREPARING_REBALANCE and self.membership.has_all_joined()
                and self.previous_state is not GroupState.EMPTY):
            self._complete_join_phase()

    def _join_new_member(self, req: JoinRequest, request_id: int) -> None:
        if self.state is GroupState.DEAD:
            self._answer(request_id, JoinResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not self.supports_protocols(req.protocol_type, req.protocols):
            self._answer(request_id, JoinResult(error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = new_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            old_id = self.membership.static_members.get(req.group_instance_id)
            if old_id is not None:
                self._replace_static_member_on_join(req, old_id, new_id, request_id)
            else:
                self._add_member_then_rebalance(req, new_id, request_id)
        elif req.require_known_member_id:
            log.info("group %s: new dynamic member, asking it to rejoin as %s (state %s)",
                     self.group_id, new_id, self.state)
            self.membership.pending_members.add(new_id)
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
        if req.member_id in self.membership.pending_members:
            if req.group_instance_id is not None:
                # Pending ids are only ever handed to dynamic members.
                self._answer(request_id, JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id))
                return
            log.info("group %s: pending member %s rejoined (state %s)", self.group_id, req.member_id, self.state)
            self._add_member_then_rebalance(req, req.member_id, request_id)
            return
        error = self.membership.validate(req.member_id, req.group_instance_id)
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
            leader=(leader if leader is not None else self.membership.leader_id) or "",
            skip_assignment=skip_assignment,
            members=self.membership.current_members(self.protocol_name) if with_members else [],
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
        if not self.members:
            self.protocol_type = member.protocol_type
        self.membership.add(member, request_id)
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
        current_leader = self.membership.leader_id
        member = self._replace_static_member(instance_id, old_id, new_id)
        self._schedule_session(new_id)
        old_protocols, old_rebalance, old_session = member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms
        self._update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, request_id)
        log.info("group %s: static member %s replaced %s with %s (state %s)",
                 self.group_id, instance_id, old_id, new_id, self.state)
        reason = RebalanceReason(RebalanceCause.STATIC_MEMBER_REPLACED, (old_id, new_id), req.reason,
                                 f"instance {instance_id} during {self.state}")
        if self.state is GroupState.STABLE:
            if (self.protocol_name or "") == self.membership.protocols.select(self.members.values()):
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
        self._out.append(self._journal.static_replacement(self._now.wall_ms, self, write.group_instance_id,
                                                          write.old_member_id, member))
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
        if self.state is GroupState.PREPARING_REBALANCE and self.membership.has_all_joined():
            self._complete_join_phase()

    def _prepare_rebalance(self, reason: RebalanceReason) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment(ErrorCode.REBALANCE_IN_PROGRESS)
        self._timers.cancel_sync(self._out)
        self._timers.cancel_join(self._out)
        initial = self.state is GroupState.EMPTY
        self._journal.started(reason, self._now.wall_ms, initial, self.generation_id)
        self._transition(Step.PREPARE_REBALANCE, GroupState.PREPARING_REBALANCE, reason)
        self.new_member_added = False
        log.info("group %s: preparing to rebalance (state was %s, generation %d): %s",
                 self.group_id, self.previous_state, self.generation_id, reason)
        if initial:
            delay = self._config.group_initial_rebalance_delay_ms
            self._timers.set_join(delay, self._out, (delay, max(self.membership.rebalance_timeout_ms() - delay, 0)))
        elif self.membership.has_all_joined():
            # Kafka's maybeCompleteJoinElseSchedule: e.g. the last member left, so the group is Empty now.
            self._complete_join_phase()
        else:
            self._timers.set_join(self.membership.rebalance_timeout_ms(), self._out)

    def _complete_join_phase(self) -> None:
        self._timers.cancel_join(self._out)
        gone = [m for m in self.membership.not_yet_rejoined() if not m.is_static]
        self._journal.dropped.extend((m, "rebalance_timeout") for m in gone)
        for m in gone:
            self._remove(m.member_id)
        if gone:
            log.info("group %s: removed dynamic members that did not rejoin: %s",
                     self.group_id, [m.member_id for m in gone])
        if not self.membership.elect_joined_leader() and self.members:
            # Only static members that haven't rejoined remain: wait another rebalance timeout
            # (their sessions still expire them).
            log.warning("group %s: no member rejoined; extending the join phase", self.group_id)
            self._timers.set_join(self.membership.rebalance_timeout_ms(), self._out)
            return
        self._init_next_generation()
        if self.state is GroupState.EMPTY:
            log.info("group %s: generation %d is empty", self.group_id, self.generation_id)
            self._out.extend(self._journal.empty(self._now.wall_ms, self))
            self._append_metadata({}, EmptyGenerationWrite(self.generation_id))
            return
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 self.group_id, self.generation_id, len(self.members), self.protocol_name, self.membership.leader_id)
        parked = []
        for member in self.members.values():
            parked.append((member.join_request, member.member_id))
            member.join_request = None
            member.is_new = False
        self.pending_sync_members.update(self.members)
        # Each member's session restarts as its answer goes out (a big group's answers take several
        # loop turns; until then the join timeout, never shorter, watches it).
        self._out.append(AnswerAll(JoinAnswers(parked, self._join_answer(self.members[self.membership.leader_id],
                                                                         skip_assignment=False)),
                                   restart_sessions_of=self.generation_id))
        self._timers.set_sync(self.generation_id, self.membership.rebalance_timeout_ms(), self._out)

    def _on_join_answered(self, event: JoinAnswered) -> None:
        if event.generation_id == self.generation_id:
            self._schedule_session(event.member_id)

    def _init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.membership.protocols.select(self.members.values())
            self.subscribed_topics = subscribed_topics(self.group_id, self.protocol_type, self.protocol_name,
                                                   self.members.values())
            self._transition(Step.JOIN_PHASE_COMPLETED, GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = subscribed_topics(self.group_id, self.protocol_type, self.protocol_name,
                                                   self.members.values())
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
        error = self.membership.validate(member_id, event.group_instance_id)
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
        self._out.extend(self._journal.stable(self._now.wall_ms, self))

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
        code = self.membership.validate(member_id, event.group_instance_id)
        if code:
            return _REPLIES.get(code) or (Reply(code),)
        if event.generation_id != self.generation_id:
            return _REPLIES[ErrorCode.ILLEGAL_GENERATION]
        if self.state is GroupState.EMPTY:
            return _REPLIES[ErrorCode.UNKNOWN_MEMBER_ID]
        code = ErrorCode.REBALANCE_IN_PROGRESS if self.state is GroupState.PREPARING_REBALANCE else ErrorCode.NONE
        session = self._timers.sessions.get(member_id)
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
                if instance_id is not None and instance_id in self.membership.static_members:
                    target = self.membership.static_members[instance_id]
                    self._remove(target)
                    log.info("group %s: static member %s (%s) removed by LeaveGroup; reason: %s",
                             self.group_id, instance_id, target, reason)
                    removed.append(target)
                    client_reasons.add(reason)
                    errors.append(ErrorCode.NONE)
                else:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
            elif member_id in self.membership.pending_members:
                self._remove(member_id)
                log.info("group %s: pending member %s left; reason: %s", self.group_id, member_id, reason)
                errors.append(ErrorCode.NONE)
                removed.append(member_id)
                client_reasons.add(reason)
            else:
                error = self.membership.validate(member_id, instance_id)
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
        members = members_of(record)
        self._transition(Step.LOADED, GroupState.STABLE if members else GroupState.EMPTY)
        self.generation_id = record.generation
        self.protocol_type = record.protocol_type or None
        self.protocol_name = record.protocol
        timestamp = record.current_state_timestamp
        self.state_timestamp_ms = timestamp if timestamp >= 0 else None
        self.membership.load(members, record.leader)
        self.subscribed_topics = subscribed_topics(self.group_id, self.protocol_type, self.protocol_name,
                                                   self.members.values())
        self._journal.loaded(self)

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
        self._timers.stop(self._out)
        self._answer_all_parked(event.error)

    def _on_deleted(self, event: Deleted) -> None:
        self._timers.stop(self._out)
        self._answer_all_parked(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self._transition(Step.DELETED, GroupState.DEAD)

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state}, generation={self.generation_id}, "
                f"members={list(self.members)}, leader={self.membership.leader_id!r})")


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
