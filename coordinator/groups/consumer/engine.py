"""The KIP-848 consumer group (Kafka's `ConsumerGroup`) as a pure engine: events in, effects out.

Theory of operation
-------------------
Members speak one request, ConsumerGroupHeartbeat. A member joins with member epoch 0, leaves with
-1 (a static member, one with `group.instance.id`, leaves "for now" with -2: it keeps its place and
partitions until its session expires or a new member id takes its instance id over), and otherwise
sends the member epoch it was last told. The coordinator assigns, not a leader: three epochs drive it.

- The **group epoch** is bumped (ConsumerGroupMetadata record) whenever what an assignment depends on
  changes: a member joins with a subscription (one joining with no topic names and no regex bumps
  nothing), leaves, or changes its subscription or assignor, or the metadata of a subscribed topic
  changes (a topic created or deleted, partitions added, a regex matching more). As Kafka's, a group is
  created at group epoch 1 with a target assignment of epoch 1, so its first subscribing member gets 2.
- The **target assignment epoch**: when it is behind the group epoch the group is **Assigning**; the
  next heartbeat runs the server-side assignor (`TargetAssignmentBuilder`, sticky) and stores every
  member's target (ConsumerGroupTargetAssignmentMember/Metadata records).
- Each **member epoch** moves to the target epoch as the member reconciles (`CurrentAssignmentBuilder`,
  ConsumerGroupCurrentMemberAssignment records). Revoke before assign: a member first gives up what its
  target no longer has (it stays **UNREVOKED_PARTITIONS** at its epoch until a heartbeat's owned
  partitions show them released, or its rebalance timeout fences it); then it gets the new epoch and
  every partition of its target that nobody else still holds; partitions another member holds
  wait (**UNRELEASED_PARTITIONS**) until released. So a partition never has two owners.

The group's state is derived: **Empty** (no members), **Assigning** (group epoch ahead of the target),
**Reconciling** (some member not STABLE at the target epoch), **Stable**; **Dead** once deleted
(or converted back to a classic group).
Every change goes through `_transition(step)`, checked against TRANSITIONS and journaled. For the operator
journal a rebalance runs from the epoch bump that starts it (its `EpochCause`) until the group is Stable or
Empty again; it then becomes one `RebalanceJournaled` whose moves diff the target assignments.

Every change of state is a record, applied through `_replay` both live (the heartbeat's records are
applied, then appended; the answer waits for `RecordsAppended`) and at load (`RecordReplayed`), so
replaying the log rebuilds the group exactly and a restart does not rebalance. Timers: a member's
session (`SessionTimeout`, re-armed lazily like the classic group's, so a heartbeat costs no effect),
its revocation deadline (`RevocationTimeout`, the member's rebalance timeout), and the group's
`AssignmentDue`: the assignor runs at most once per `group.consumer.assignment.interval.ms` (Kafka
4.3), so a join storm of N members costs a few assignor runs, not N.

Online migration: members may also speak the classic protocol inside the group (a converted classic
group's members, `ConvertedFromClassic`, or classic clients joining it). Their JoinGroup is one
reconciliation step answered at once (generation = member epoch), SyncGroup returns what they may hold,
Heartbeat answers REBALANCE_IN_PROGRESS until they are reconciled. When only classic members are left
(and `group.consumer.migration.policy` allows), the group writes its tombstones and a classic
GroupMetadata record, goes Dead (Step.CONVERTED) and emits `ConvertedToClassic`.

Around this state machine, by concern: `consumer_events` (events, results, timer keys, why it appends),
`consumer_heartbeat` (the checks made before any group state is read), `consumer_member` (a member and
its records), `consumer_assignment` (the target and current assignment builders), `consumer_topics`
(subscriptions over the topic image), `consumer_classic` (classic members inside the group) and
`consumer_journal` (what the operator journal learns of a rebalance).
"""
from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from cohort.coordinator.groups.consumer import classic_members as consumer_classic
from cohort.coordinator.groups.consumer.assignors import ASSIGNORS, DEFAULT_ASSIGNORS, Assignment, MemberSubscription
from cohort.coordinator.groups.classic.events import Heartbeat, JoinGroup, JoinResult, LeaveGroup, SyncGroup, SyncResult
from cohort.coordinator.groups.consumer.assignment import (
    MEMBER_TRANSITIONS,
    CurrentAssignmentBuilder,
    TargetAssignmentBuilder,
)
from cohort.coordinator.groups.consumer.events import (
    AnswerWhenStored,
    AssignmentDue,
    ConsumerGroupHeartbeat,
    ConvertedFromClassic,
    ConvertedToClassic,
    GroupChangeWrite,
    HeartbeatResult,
    RecordReplayed,
    RevocationTimeout,
    SessionTimeout,
    TopicImage,
    TopicMetadata,  # (re-exported: the topic image's entries, as the group sees them)
    TopicsChanged,
)
from cohort.coordinator.groups.consumer.heartbeat import (
    CREATED_GROUP_EPOCH,
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    HeartbeatError,
    validate_heartbeat,
)
from cohort.coordinator.groups.consumer.journal import EpochCause, RebalanceJournal
from cohort.coordinator.groups.consumer.topics import SubscribedTopics
from cohort.coordinator.groups.consumer.member import (
    ConsumerGroupMember,
    MemberAssignment,
    MemberState,
    assignment_of,
    current_assignment_record,
    is_subset,
    member_epoch_error,
    member_metadata_record,
    metadata_differs,
    random_member_id,
    sorted_assignment,
    topic_partitions,
)
from cohort.coordinator.groups.effects import (
    Answer,
    AppendRecords,
    CancelAllTimers,
    CancelTimer,
    Deleted,
    LoadCompleted,
    MemberExpired,
    Now,
    RecordsAppended,
    Reply,
    SetTimer,
    StateChanged,
    TimerFired,
    Unloaded,
)
from cohort.coordinator.records.types import (
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupCurrentMemberAssignmentTombstone,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMemberMetadataTombstone,
    ConsumerGroupMetadataRecord,
    ConsumerGroupMetadataTombstone,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMemberTombstone,
    ConsumerGroupTargetAssignmentMetadataRecord,
    ConsumerGroupTargetAssignmentMetadataTombstone,
    GroupMetadataRecord,
    GroupMetadataTombstone,
    TargetTopicPartitions,
)
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.group")


# Kafka's GroupCoordinatorConfig defaults and bounds (group.consumer.*).
SESSION_TIMEOUT_MS = 45_000
MIN_SESSION_TIMEOUT_MS = 45_000
MAX_SESSION_TIMEOUT_MS = 60_000
HEARTBEAT_INTERVAL_MS = 5_000
MIN_HEARTBEAT_INTERVAL_MS = 5_000
MAX_HEARTBEAT_INTERVAL_MS = 15_000
MAX_SIZE = 2**31 - 1
# group.consumer.assignment.interval.ms (Kafka 4.3, KAFKA-20300): the target is recomputed at most once per
# interval, so a join storm costs one assignor run per interval, not one per joining member. Kafka's
# default is 1000; 0 recomputes at every epoch bump (Kafka before 4.3).
ASSIGNMENT_INTERVAL_MS = 1_000


class MigrationPolicy(enum.Enum):
    """group.consumer.migration.policy: which online conversions between classic and consumer groups run."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


class ConsumerGroupState(enum.Enum):
    """Kafka's state names, exactly: admin tools compare these strings."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


class Step(enum.Enum):
    """Why the group's state may change: the middle column of TRANSITIONS."""

    EPOCH_BUMPED = "group epoch bumped"              # membership, subscription or topic metadata changed
    TARGET_COMPUTED = "target assignment computed"   # the assignor ran for the group epoch
    MEMBER_RECONCILED = "member reconciled"          # a member's current assignment or epoch changed
    MEMBER_REMOVED = "member removed"                # left, fenced or expired (with the epoch bump)
    LOADED = "loaded"                                # records replayed from the log
    CONVERTED = "converted to a classic group"       # the last consumer-protocol member left (downgrade)
    DELETED = "deleted"                              # DeleteGroups of an empty group, or unload


_S = ConsumerGroupState
_LIVE = frozenset({_S.EMPTY, _S.ASSIGNING, _S.RECONCILING, _S.STABLE})
# (state, step) -> the states that step may lead to. The group's state is derived from its epochs and
# members; this table is what the derivation is allowed to yield.
TRANSITIONS: dict[tuple[ConsumerGroupState, Step], frozenset[ConsumerGroupState]] = {
    **{(s, Step.EPOCH_BUMPED): frozenset({_S.ASSIGNING}) for s in _LIVE},
    (_S.ASSIGNING, Step.TARGET_COMPUTED): frozenset({_S.RECONCILING, _S.STABLE}),
    (_S.RECONCILING, Step.MEMBER_RECONCILED): frozenset({_S.RECONCILING, _S.STABLE}),
    (_S.STABLE, Step.MEMBER_RECONCILED): frozenset({_S.RECONCILING, _S.STABLE}),
    # a static member leaving with -2 while the target is not yet computed
    (_S.ASSIGNING, Step.MEMBER_RECONCILED): frozenset({_S.ASSIGNING}),
    # a member subscribing to nothing joins an empty group and bumps no epoch: it reconciles to the target
    # at once; when the group epoch is ahead (the last member left) the target is computed for it first,
    # or, within the assignment interval, it waits in Assigning
    (_S.EMPTY, Step.MEMBER_RECONCILED): frozenset({_S.STABLE, _S.ASSIGNING}),
    (_S.EMPTY, Step.TARGET_COMPUTED): frozenset({_S.RECONCILING, _S.STABLE}),
    **{(s, Step.MEMBER_REMOVED): frozenset({_S.ASSIGNING, _S.EMPTY}) for s in _LIVE - {_S.EMPTY}},
    **{(s, Step.LOADED): _LIVE for s in _LIVE},
    **{(s, Step.CONVERTED): frozenset({_S.DEAD}) for s in _LIVE},
    **{(s, Step.DELETED): frozenset({_S.DEAD}) for s in _LIVE},
}


class IllegalStateTransition(RuntimeError):
    """A transition outside TRANSITIONS: a coordinator bug, never a client error."""


def missing_group_result(group_id: str) -> HeartbeatResult:
    """The answer to a heartbeat with a non-zero epoch for a group that does not exist."""
    return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")


# ---------------------------------------------------------------------------------------------
# The group
# ---------------------------------------------------------------------------------------------
class ConsumerGroup:
    """One KIP-848 consumer group; `handle(event, now)` is the whole interface (plus read-only views
    and the offset commit/fetch checks, which change nothing)."""

    def __init__(self, group_id: str, *, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS, max_size: int = MAX_SIZE,
                 assignors: Iterable[str] = DEFAULT_ASSIGNORS, image: TopicImage | None = None,
                 assignment_interval_ms: int = ASSIGNMENT_INTERVAL_MS,
                 migration_policy: MigrationPolicy | str = MigrationPolicy.BIDIRECTIONAL,
                 classic_max_size: int = MAX_SIZE,
                 new_member_id: Callable[[], str] | None = None, topic_access_checked: bool = False) -> None:
        """`topic_access_checked`: heartbeats carry `describable_topics`, and a regex matches only those."""
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.assignment_interval_ms = assignment_interval_ms
        self.migration_policy = MigrationPolicy(migration_policy)
        self.classic_max_size = classic_max_size  # group.max.size: a downgrade must fit in it
        self.assignor_names = tuple(assignors)
        unknown = [n for n in self.assignor_names if n not in ASSIGNORS]
        if unknown or not self.assignor_names:
            raise ValueError(f"group.consumer.assignors: unknown assignor(s) {unknown}; known: {sorted(ASSIGNORS)}")
        self.new_member_id = new_member_id or random_member_id
        self.state = ConsumerGroupState.EMPTY
        # Kafka creates a consumer group at group epoch 1 with a target assignment of epoch 1, so the
        # first member that subscribes to something gets epoch 2 (its records then carry the real epochs).
        self.group_epoch = CREATED_GROUP_EPOCH
        self.target_assignment_epoch = CREATED_GROUP_EPOCH
        self.metadata_hash = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.target_assignment: dict[str, Assignment] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self._owners: dict[tuple[uuid.UUID, int], str] = {}  # partition -> member holding it
        self._topics = SubscribedTopics(image or {}, topic_access_checked)
        self._last_assignment_ms: float | None = None  # when the assignor last ran (monotonic)
        self._assignment_timer = False
        self._sessions: dict[str, float] = {}  # member id -> session deadline (monotonic ms)
        self._revocations: dict[str, int] = {}  # member id -> the epoch its revocation timer watches
        self._unreconciled: set[str] = set()  # members not STABLE at the target epoch (O(1) state)
        self._converted: GroupMetadataRecord | None = None  # set once a downgrade's records are written
        self._journal = RebalanceJournal(group_id, self._topics.names)
        self._loading = False
        self._now = Now(0, 0.0)
        self._effects: list = []

    # ---- views ----------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return not self.members

    def preferred_assignor(self) -> str:
        """The server assignor most members ask for, else the first configured (Kafka's rule)."""
        counts: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor is not None:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        if not counts:
            return self.assignor_names[0]
        return max(sorted(counts), key=lambda name: counts[name])

    def subscribed_topic_names(self) -> set[str]:
        return self._topics.subscribed()

    def is_subscribed_to(self, topic: str) -> bool:
        """OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC check."""
        return topic in self.subscribed_topic_names()

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self._owners.get((topic_id, partition))

    # ---- offset commit / fetch checks (Kafka's ConsumerGroup.validateOffsetCommit/Fetch) ------
    def validate_offset_commit(self, member_id: str, instance_id: str | None, member_epoch: int,
                               api_version: int, transactional: bool = False) -> int:
        """The error an OffsetCommit gets (NONE to accept it)."""
        # Epoch -1: an admin client or a consumer without group management; accepted while empty.
        if member_epoch < 0 and not self.members:
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and not member.uses_classic_protocol and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION  # members of a consumer group commit with v9+
        return member_epoch_error(member, member_epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        """The error an OffsetFetch gets (NONE to accept it)."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE  # an admin client, or a client that does not say
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return member_epoch_error(member, member_epoch)

    def offset_expiry_base(self):
        """KIP-211 for consumer groups (Kafka's ConsumerGroup.offsetExpirationCondition): an offset's
        retention counts from its commit; topics the group subscribes to never expire (the caller checks)."""
        return lambda commit_ts: commit_ts

    def tombstones(self) -> list:
        """The records deleting this (empty) group: the wire side writes them with its offsets'."""
        return [ConsumerGroupTargetAssignmentMetadataTombstone(self.group_id),
                ConsumerGroupMetadataTombstone(self.group_id)]

    # ---- the engine -------------------------------------------------------------------------
    def handle(self, event: object, now: Now) -> list:
        """Apply one event; returns the effects for the runtime, in order."""
        if self.state is ConsumerGroupState.DEAD and not isinstance(event, (RecordsAppended, Unloaded)):
            return _dead_group_answer(event)
        self._effects = effects = []
        self._now = now
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"consumer group engine got an unknown event {event!r}")
        handler(self, event, now)
        self._effects = []
        return effects

    # ---- heartbeats ---------------------------------------------------------------------------
    def _on_heartbeat(self, request: ConsumerGroupHeartbeat, now: Now) -> None:
        records: list = []
        try:
            validate_heartbeat(self.group_id, request, self.assignor_names)
            if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                result = self._leave(request, records, now)
            elif request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                result = self._static_leave(request, records)
            else:
                result = self._join_or_heartbeat(request, records, now)
        except HeartbeatError as exc:
            error = HeartbeatResult(exc.error, exc.message)
            # Only a member in an UNKNOWN state is rejected after records were made (its join, say).
            self._effects.append(AppendRecords(records, AnswerWhenStored(request.request_id, error)) if records
                                 else Reply(error))
            return
        if records:
            self._effects.append(AppendRecords(records, AnswerWhenStored(request.request_id, result)))
        else:
            self._effects.append(Reply(result))

    def _join_or_heartbeat(self, request: ConsumerGroupHeartbeat, records: list, now: Now) -> HeartbeatResult:
        epoch = request.member_epoch
        if request.instance_id is None:
            member = self._dynamic_member(request, records)
        else:
            member = self._static_member(request, records)
        if epoch != JOIN_GROUP_MEMBER_EPOCH:
            self._check_member_epoch(member, epoch, request.topic_partitions)
        access_changed = self._topics.update_access(member, request.describable_topics,
                                                    member.member_id in self.members)
        updated = replace(
            member,
            instance_id=request.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            client_id=request.client_id,
            client_host=request.client_host,
            subscribed_topic_names=(tuple(request.subscribed_topic_names)
                                    if request.subscribed_topic_names is not None else member.subscribed_topic_names),
            subscribed_topic_regex=(None if request.subscribed_topic_regex == ""
                                    else request.subscribed_topic_regex if request.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
            classic_protocols=None,  # it speaks the consumer protocol now
            classic_session_timeout_ms=-1,
        )
        self._update_member(member, updated, (
            access_changed
            or updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
            or updated.server_assignor != member.server_assignor), records, now)
        member = self.members[updated.member_id]
        owned = (None if request.topic_partitions is None
                 else {t: frozenset(ps) for t, ps in request.topic_partitions})
        before = (member.member_epoch, member.state, member.assigned)
        self._reconcile(member, owned, records, now)
        member = self.members[updated.member_id]
        full_request = (request.rebalance_timeout_ms != -1 and request.topic_partitions is not None
                        and (request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None))
        changed = member.assigned != before[2]
        return HeartbeatResult(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            assignment=(sorted_assignment(member.assigned)
                        if full_request or changed or epoch == JOIN_GROUP_MEMBER_EPOCH else None),
        )

    def _update_member(self, member: ConsumerGroupMember, updated: ConsumerGroupMember, subscription_changed: bool,
                       records: list, now: Now) -> None:
        """The first steps of every join or heartbeat, as Kafka's: store the member if anything of it
        changed, keep its session, bump the group epoch if a subscription (or a subscribed topic) changed,
        and bring the target assignment up to date."""
        is_new = updated.member_id not in self.members
        if is_new or metadata_differs(updated, member):
            self._write(records, member_metadata_record(self.group_id, updated))
        if is_new:
            self._start_session(updated.member_id, now)
        else:
            self._refresh_session(updated.member_id, now)
        if is_new and (updated.subscribed_topic_names or updated.subscribed_topic_regex):
            self._bump_epoch(records, EpochCause("member_joined", f"member {updated.member_id} joined", updated,
                                                 "joined"))
        elif subscription_changed and not is_new:
            self._bump_epoch(records, EpochCause("metadata_changed", f"member {updated.member_id} changed its "
                                                 "subscription or assignor", updated))
        elif self._topics.metadata_hash(bool(self.members)) != self.metadata_hash:
            self._bump_epoch(records, EpochCause("topic_change", "subscribed topic metadata changed"))
        if self.group_epoch > self.target_assignment_epoch:
            self._maybe_compute_target(records, now)

    def _dynamic_member(self, request: ConsumerGroupHeartbeat, records: list) -> ConsumerGroupMember:
        member_id = request.member_id
        if request.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if member_id == "":
                member_id = self.new_member_id()
            existing = self.members.get(member_id)
            if existing is not None:
                # A member rejoining with epoch 0 has abandoned what it held (KIP-848 fencing): it starts over.
                return self._reset_member(existing, records)
            self._check_not_full()
            return ConsumerGroupMember(member_id)
        member = self.members.get(member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {self.group_id}.")
        return member

    def _static_member(self, request: ConsumerGroupHeartbeat, records: list) -> ConsumerGroupMember:
        instance_id = request.instance_id
        member_id = request.member_id or self.new_member_id()
        existing_id = self.static_members.get(instance_id)
        existing = self.members.get(existing_id) if existing_id is not None else None
        if request.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if existing is None:
                self._check_not_full()
                return ConsumerGroupMember(member_id, instance_id=instance_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                     f"Static member {member_id} with instance id {instance_id} cannot join the "
                                     f"group because the instance id is owned by {existing.member_id} member.")
            return self._replace_static_member(existing, member_id, records)
        return self.members[self._static_member_id(instance_id, request.member_id)]

    def _static_member_id(self, instance_id: str, member_id: str) -> str:
        """The member holding `instance_id`, which must be `member_id` (Kafka's checks and messages)."""
        existing_id = self.static_members.get(instance_id)
        if existing_id is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing_id != member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} was fenced by "
                                 f"member {existing_id}.")
        return existing_id

    def _check_not_full(self) -> None:
        if len(self.members) >= self.max_size:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of {self.max_size} members.")

    def _check_member_epoch(self, member: ConsumerGroupMember, received: int,
                            owned: list[tuple[uuid.UUID, list[int]]] | None) -> None:
        if received > member.member_epoch:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a greater member epoch ({received}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                 f"all its partitions and rejoin.")
        if received < member.member_epoch:
            # The answer carrying the bumped epoch may have been lost: the previous epoch is accepted
            # while the member holds nothing beyond its current assignment.
            if received != member.previous_member_epoch or not is_subset(owned, member.assigned):
                raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                     f"The consumer group member has a smaller member epoch ({received}) than the "
                                     f"one known by the group coordinator ({member.member_epoch}). The member must "
                                     f"abandon all its partitions and rejoin.")

    def _reset_member(self, member: ConsumerGroupMember, records: list) -> ConsumerGroupMember:
        self._write(records, ConsumerGroupCurrentMemberAssignmentRecord(
            self.group_id, member.member_id, 0, 0, MemberState.STABLE.value, [], []))
        return self.members[member.member_id]

    def _replace_static_member(self, old: ConsumerGroupMember, member_id: str, records: list) -> ConsumerGroupMember:
        """A static member rejoins under a new member id: it takes over the old one's place and partitions."""
        if not self._loading:
            entry = self._journal.static_replacement(old, member_id, self._now.wall_ms, self.group_epoch,
                                                     self.state.value)
            if entry is not None:
                self._effects.append(entry)
        target = self.target_assignment.get(old.member_id, {})
        new = replace(old, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        self._remove_records(old.member_id, records)
        self._write(records, member_metadata_record(self.group_id, new))
        self._write(records, ConsumerGroupTargetAssignmentMemberRecord(
            self.group_id, member_id, topic_partitions(target, TargetTopicPartitions)))
        self._write(records, current_assignment_record(self.group_id, member_id, MemberAssignment(
            0, 0, old.state, old.assigned, old.pending_revocation)))
        self._sessions.pop(old.member_id, None)
        self._effects.append(CancelTimer(SessionTimeout(old.member_id)))
        self._effects.append(SetTimer(SessionTimeout(member_id), self._session_timeout(member_id)))
        self._cancel_revocation(old.member_id)
        return self.members[member_id]

    def _leave(self, request: ConsumerGroupHeartbeat, records: list, now: Now) -> HeartbeatResult:
        member = self.members.get(request.member_id)
        if request.instance_id is not None:
            self._static_member_id(request.instance_id, request.member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {request.member_id} is not a member of group {self.group_id}.")
        self._remove_member(member.member_id, records, EpochCause(
            "member_left", f"member {member.member_id} left", member, "removed"), now)
        return HeartbeatResult(member_id=request.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                               heartbeat_interval_ms=0)

    def _static_leave(self, request: ConsumerGroupHeartbeat, records: list) -> HeartbeatResult:
        member = self.members[self._static_member_id(request.instance_id, request.member_id)]
        # It keeps its partitions (nobody else gets them) until it comes back or its session expires.
        self._write(records, current_assignment_record(self.group_id, member.member_id, MemberAssignment(
            LEAVE_GROUP_STATIC_MEMBER_EPOCH, member.member_epoch, member.state, member.assigned,
            member.pending_revocation)))
        self._cancel_revocation(member.member_id)
        self._transition(Step.MEMBER_RECONCILED)
        return HeartbeatResult(member_id=request.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                               heartbeat_interval_ms=0)

    def _maybe_downgrade(self, records: list, now: Now) -> None:
        """Kafka's online downgrade: once only classic members are left, the group becomes a classic
        group again (records: this group's tombstones, then the classic GroupMetadata record)."""
        if (not self.migration_policy.downgrades or not self.members or self.state is ConsumerGroupState.DEAD
                or len(self.members) > self.classic_max_size
                or not all(m.uses_classic_protocol for m in self.members.values())):
            return
        common: list[str] | None = None
        for member in self.members.values():
            names = [name for name, _ in member.classic_protocols]
            common = names if common is None else [n for n in common if n in names]
        if not common:
            return
        classic = consumer_classic.group_record(self, common[0], now)
        held = {m.member_id: m.assigned for m in self.members.values()}  # what the classic group gets
        for member_id in list(self.members):
            self._remove_records(member_id, records)
        for tombstone in self.tombstones():
            self._write(records, tombstone)
        records.append(classic)
        self._converted = classic
        self._sessions.clear()
        self._revocations.clear()
        self._effects.append(CancelAllTimers())
        self._transition(Step.CONVERTED, ConsumerGroupState.DEAD)
        if self._journal.under_way:
            self._effects.append(self._journal.ended(now.wall_ms, self.state.value, classic.generation, held,
                                                     converted=True))
        log.info("consumer group %s: only classic members are left; it becomes a classic group", self.group_id)

    def _on_converted_from_classic(self, event: ConvertedFromClassic, now: Now) -> None:
        self._loading = True
        records = []
        for record in event.records:
            if type(record) is ConsumerGroupMetadataRecord:  # with the hash of what the members subscribe to
                record = ConsumerGroupMetadataRecord(self.group_id, record.epoch,
                                                     self._topics.metadata_hash(bool(self.members)))
            if type(record) is not GroupMetadataTombstone:
                self._replay(record)
            records.append(record)
        self._loading = False
        self._journal.upgraded_at = self.group_epoch
        for member_id in self.members:
            self._start_session(member_id, now)
        self._transition(Step.LOADED)
        self._effects.append(AppendRecords(records, GroupChangeWrite("converted from a classic group")))

    # ---- group changes -------------------------------------------------------------------------
    def _remove_member(self, member_id: str, records: list, cause: EpochCause, now: Now) -> None:
        self._journal_bump(cause)  # before its records go: the journal names who it was
        self._remove_records(member_id, records)
        self._effects.append(CancelTimer(SessionTimeout(member_id)))
        self._sessions.pop(member_id, None)
        self._cancel_revocation(member_id)
        self._bump_epoch(records, None, Step.MEMBER_REMOVED)
        log.info("consumer group %s: %s (group epoch %d)", self.group_id, cause.detail, self.group_epoch)
        self._maybe_downgrade(records, now)

    def _remove_records(self, member_id: str, records: list) -> None:
        self._write(records, ConsumerGroupCurrentMemberAssignmentTombstone(self.group_id, member_id))
        self._write(records, ConsumerGroupTargetAssignmentMemberTombstone(self.group_id, member_id))
        self._write(records, ConsumerGroupMemberMetadataTombstone(self.group_id, member_id))

    def _bump_epoch(self, records: list, cause: EpochCause | None, step: Step = Step.EPOCH_BUMPED) -> None:
        """A new group epoch (`cause` None: the caller journaled it already)."""
        if cause is not None:
            self._journal_bump(cause)
        self.metadata_hash = self._topics.metadata_hash(bool(self.members))
        self._write(records, ConsumerGroupMetadataRecord(self.group_id, self.group_epoch + 1, self.metadata_hash))
        self._transition(step)

    def _maybe_compute_target(self, records: list, now: Now) -> None:
        """Run the assignor now, or once the assignment interval since its last run has passed."""
        last = self._last_assignment_ms
        if last is None or now.monotonic_ms >= last + self.assignment_interval_ms:
            self._compute_target(records, now)
        elif not self._assignment_timer:
            self._assignment_timer = True
            self._effects.append(SetTimer(AssignmentDue(), last + self.assignment_interval_ms - now.monotonic_ms))

    def _compute_target(self, records: list, now: Now) -> None:
        self._last_assignment_ms = now.monotonic_ms
        if self._assignment_timer:
            self._assignment_timer = False
            self._effects.append(CancelTimer(AssignmentDue()))
        subscriptions: dict[str, MemberSubscription] = {}
        counts = {meta.topic_id: meta.partitions for meta in self._topics.image.values()}
        topics: dict[uuid.UUID, int] = {}
        for member_id, member in self.members.items():
            ids = self._topics.topic_ids(member)
            for topic_id in ids:
                topics[topic_id] = counts[topic_id]
            subscriptions[member_id] = MemberSubscription(
                ids, self.target_assignment.get(member_id, {}), member.instance_id, member.rack_id)
        builder = TargetAssignmentBuilder(self.group_id, ASSIGNORS[self.preferred_assignor()], self.group_epoch)
        for record in builder.build(subscriptions, topics, self.target_assignment):
            self._write(records, record)
        self._transition(Step.TARGET_COMPUTED)

    def _reconcile(self, member: ConsumerGroupMember, owned: Mapping[uuid.UUID, frozenset[int]] | None,
                   records: list, now: Now) -> None:
        builder = CurrentAssignmentBuilder(member, self.target_assignment_epoch,
                                           self.target_assignment.get(member.member_id, {}),
                                           self._owner_epoch_for(member.member_id), owned,
                                           self._topics.topic_ids(member))
        nxt = builder.build()
        if nxt.state not in MEMBER_TRANSITIONS[member.state]:
            raise IllegalStateTransition(f"member {member.member_id}: {member.state} -> {nxt.state}")
        if (nxt.member_epoch, nxt.previous_member_epoch, nxt.state, nxt.assigned, nxt.pending_revocation) != (
                member.member_epoch, member.previous_member_epoch, member.state, member.assigned,
                member.pending_revocation):
            self._write(records, current_assignment_record(self.group_id, member.member_id, nxt))
            self._transition(Step.MEMBER_RECONCILED)
        if nxt.state is MemberState.UNREVOKED_PARTITIONS:
            if self._revocations.get(member.member_id) != nxt.member_epoch:
                self._revocations[member.member_id] = nxt.member_epoch
                self._effects.append(SetTimer(RevocationTimeout(member.member_id), max(member.rebalance_timeout_ms, 0)))
        else:
            self._cancel_revocation(member.member_id)

    def _owner_epoch_for(self, member_id: str) -> Callable[[uuid.UUID, int], int]:
        owners, members = self._owners, self.members

        def owner_epoch(topic_id: uuid.UUID, partition: int) -> int:
            owner = owners.get((topic_id, partition))
            if owner is None or owner == member_id:
                return -1
            return members[owner].member_epoch
        return owner_epoch

    def _cancel_revocation(self, member_id: str) -> None:
        if self._revocations.pop(member_id, None) is not None:
            self._effects.append(CancelTimer(RevocationTimeout(member_id)))

    def session_deadline_ms(self, member_id: str) -> float | None:
        """When the member's session runs out (monotonic ms; None: no session running), for health reports."""
        return self._sessions.get(member_id)

    def session_timeout_for(self, member_id: str) -> int:
        """The member's session timeout (a classic member's own, else the group's)."""
        return self._session_timeout(member_id)

    def _session_timeout(self, member_id: str) -> int:
        member = self.members.get(member_id)
        if member is not None and member.uses_classic_protocol and member.classic_session_timeout_ms > 0:
            return member.classic_session_timeout_ms  # a classic member's own, from its JoinGroup
        return self.session_timeout_ms

    def _start_session(self, member_id: str, now: Now) -> None:
        timeout = self._session_timeout(member_id)
        self._sessions[member_id] = now.monotonic_ms + timeout
        self._effects.append(SetTimer(SessionTimeout(member_id), timeout))

    def _refresh_session(self, member_id: str, now: Now) -> None:
        self._sessions[member_id] = now.monotonic_ms + self._session_timeout(member_id)

    def _on_topics_changed(self, event: TopicsChanged, now: Now) -> None:
        self._topics.image_changed(event.image, self.members.values())
        if self._loading or not self.members or self._topics.metadata_hash(bool(self.members)) == self.metadata_hash:
            return
        records: list = []
        self._bump_epoch(records, EpochCause("topic_change", "subscribed topic metadata changed (topics created, "
                                             "deleted or given partitions)"))
        self._effects.append(AppendRecords(records, GroupChangeWrite("subscribed topic metadata changed")))

    # ---- timers -------------------------------------------------------------------------------------
    def _on_timer(self, event: TimerFired, now: Now) -> None:
        key = event.key
        if isinstance(key, SessionTimeout):
            deadline = self._sessions.get(key.member_id)
            if deadline is None or key.member_id not in self.members:
                return
            if now.monotonic_ms < deadline:
                self._effects.append(SetTimer(key, deadline - now.monotonic_ms))
                return
            self._fence(key.member_id, EpochCause("session_expired", f"member {key.member_id} session expired",
                                                  self.members[key.member_id], "expired"), now)
            self._effects.append(MemberExpired(self.group_id, key.member_id))
        elif isinstance(key, AssignmentDue):
            self._assignment_timer = False
            if self.members and self.group_epoch > self.target_assignment_epoch:
                records: list = []
                self._compute_target(records, now)
                self._effects.append(AppendRecords(records, GroupChangeWrite("new target assignment")))
        elif isinstance(key, RevocationTimeout):
            epoch = self._revocations.pop(key.member_id, None)
            member = self.members.get(key.member_id)
            if (member is None or epoch is None or member.state is not MemberState.UNREVOKED_PARTITIONS
                    or member.member_epoch != epoch):
                return
            self._fence(key.member_id, EpochCause(
                "rebalance_timeout", f"member {key.member_id} did not revoke its partitions within its "
                                     f"rebalance timeout of {member.rebalance_timeout_ms} ms",
                member, "rebalance_timeout"), now)

    def _fence(self, member_id: str, cause: EpochCause, now: Now) -> None:
        records: list = []
        self._remove_member(member_id, records, cause, now)
        self._effects.append(AppendRecords(records, GroupChangeWrite(cause.detail)))

    # ---- writes, loading, lifecycle -----------------------------------------------------------
    def _on_appended(self, event: RecordsAppended, now: Now) -> None:
        purpose = event.purpose
        if isinstance(purpose, AnswerWhenStored):
            result = purpose.result if event.error == ErrorCode.NONE else type(purpose.result)(event.error)
            self._effects.append(Answer(purpose.request_id, result))
        elif event.error != ErrorCode.NONE:
            log.warning("consumer group %s: records of %r not stored (error %d)", self.group_id, purpose, event.error)
        if self._converted is not None:
            record, self._converted = self._converted, None
            if event.error == ErrorCode.NONE:
                self._effects.append(ConvertedToClassic(record))

    def _on_replayed(self, event: RecordReplayed, now: Now) -> None:
        self._loading = True
        self._replay(event.record)

    def _on_load_completed(self, event: LoadCompleted, now: Now) -> None:
        self._loading = False
        self._topics.loaded(self.members, self.target_assignment)
        for member_id, member in self.members.items():
            self._start_session(member_id, now)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._revocations[member_id] = member.member_epoch
                self._effects.append(SetTimer(RevocationTimeout(member_id), max(member.rebalance_timeout_ms, 0)))
        self._transition(Step.LOADED)
        if self.members and self._topics.metadata_hash(bool(self.members)) != self.metadata_hash:
            records: list = []
            self._bump_epoch(records, EpochCause("topic_change", "subscribed topic metadata changed while the "
                                                 "group was not loaded"))
            self._effects.append(AppendRecords(records, GroupChangeWrite("subscribed topic metadata changed")))

    def _on_unloaded(self, event: Unloaded, now: Now) -> None:
        self._effects.append(CancelAllTimers())
        self._assignment_timer = False
        self._journal.forget()
        self._sessions.clear()
        self._revocations.clear()

    def _on_deleted(self, event: Deleted, now: Now) -> None:
        self._transition(Step.DELETED, ConsumerGroupState.DEAD)
        self._effects.append(CancelAllTimers())

    def _write(self, records: list, record: object) -> None:
        """Apply `record` now (the same code as replay) and queue it for the append."""
        self._replay(record)
        records.append(record)

    def _replay(self, record: object) -> None:
        kind = type(record)
        if kind is ConsumerGroupMetadataRecord:
            self.group_epoch = record.epoch
            self.metadata_hash = record.metadata_hash
        elif kind is ConsumerGroupTargetAssignmentMetadataRecord:
            self.target_assignment_epoch = record.assignment_epoch
            epoch = record.assignment_epoch
            self._unreconciled = {m for m, member in self.members.items() if not member.is_reconciled_to(epoch)}
        elif kind is ConsumerGroupMemberMetadataRecord:
            member = self.members.get(record.member_id)
            if member is not None:
                self._topics.unsubscribe(member)
            else:
                member = ConsumerGroupMember(record.member_id)
            member.instance_id = record.instance_id
            member.rack_id = record.rack_id
            member.client_id = record.client_id
            member.client_host = record.client_host
            member.subscribed_topic_names = tuple(record.subscribed_topic_names)
            member.subscribed_topic_regex = record.subscribed_topic_regex
            member.rebalance_timeout_ms = record.rebalance_timeout_ms
            member.server_assignor = record.server_assignor
            classic = record.classic_member_metadata
            if classic is not None and classic.supported_protocols:
                member.classic_protocols = tuple((p.name, bytes(p.metadata)) for p in classic.supported_protocols)
                member.classic_session_timeout_ms = classic.session_timeout_ms
            else:
                member.classic_protocols, member.classic_session_timeout_ms = None, -1
            self.members[record.member_id] = member
            self._topics.subscribe(member)
            if member.instance_id is not None:
                self.static_members[member.instance_id] = member.member_id
        elif kind is ConsumerGroupMemberMetadataTombstone:
            self._topics.forget(record.member_id)
            member = self.members.pop(record.member_id, None)
            if member is not None:
                self._topics.unsubscribe(member, gone=True)
                self._release(member)
                if member.instance_id is not None and self.static_members.get(member.instance_id) == member.member_id:
                    del self.static_members[member.instance_id]
        elif kind is ConsumerGroupTargetAssignmentMemberRecord:
            self.target_assignment[record.member_id] = assignment_of(record.topic_partitions)
        elif kind is ConsumerGroupTargetAssignmentMemberTombstone:
            self.target_assignment.pop(record.member_id, None)
        elif kind is ConsumerGroupCurrentMemberAssignmentRecord:
            member = self.members.get(record.member_id)
            if member is None:  # a current assignment before its metadata: keep it for the metadata
                member = self.members[record.member_id] = ConsumerGroupMember(record.member_id)
            self._release(member)
            member.member_epoch = record.member_epoch
            member.previous_member_epoch = record.previous_member_epoch
            try:
                member.state = MemberState(record.state)
            except ValueError:
                member.state = MemberState.UNKNOWN
            member.assigned = assignment_of(record.assigned_partitions)
            member.pending_revocation = assignment_of(record.partitions_pending_revocation)
            for tp in member.owned():
                holder = self._owners.get(tp)
                if holder is not None and holder != member.member_id and not self._loading:
                    raise IllegalStateTransition(f"partition {tp} given to {member.member_id} while "
                                                 f"{holder} holds it")
                self._owners[tp] = member.member_id
        elif kind is ConsumerGroupCurrentMemberAssignmentTombstone:
            member = self.members.get(record.member_id)
            if member is not None:
                self._release(member)
                member.assigned, member.pending_revocation = {}, {}
        elif kind is ConsumerGroupMetadataTombstone:  # the group is gone: records after it are a new group's
            self.group_epoch = CREATED_GROUP_EPOCH
            self.metadata_hash = 0
        elif kind is ConsumerGroupTargetAssignmentMetadataTombstone:
            self.target_assignment_epoch = CREATED_GROUP_EPOCH
        else:
            raise TypeError(f"not a consumer group record: {record!r}")
        member_id = getattr(record, "member_id", None)
        if member_id is not None:  # keep the set of members not reconciled to the target (the group's state)
            member = self.members.get(member_id)
            if member is None or member.is_reconciled_to(self.target_assignment_epoch):
                self._unreconciled.discard(member_id)
            else:
                self._unreconciled.add(member_id)

    def _release(self, member: ConsumerGroupMember) -> None:
        for tp in member.owned():
            if self._owners.get(tp) == member.member_id:
                del self._owners[tp]

    def _journal_bump(self, cause: EpochCause) -> None:
        if not self._loading:
            self._journal.bump(cause, self._now.wall_ms, self.group_epoch, self.target_assignment)

    # ---- state ---------------------------------------------------------------------------------------
    def _derived_state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        return ConsumerGroupState.RECONCILING if self._unreconciled else ConsumerGroupState.STABLE

    def _transition(self, step: Step, target: ConsumerGroupState | None = None) -> None:
        if self._loading and step is not Step.LOADED:
            return
        source = self.state
        target = target or self._derived_state()
        allowed = TRANSITIONS.get((source, step))
        if allowed is None or target not in allowed:
            raise IllegalStateTransition(f"consumer group {self.group_id}: {source} --{step.value}--> {target}")
        if target is not source:
            self.state = target
            self._effects.append(StateChanged(self.group_id, source, step, target))
            if target in _SETTLED and self._journal.under_way:
                self._effects.append(self._journal.ended(self._now.wall_ms, target.value, self.group_epoch,
                                                         self.target_assignment))


_SETTLED = frozenset({ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY})

_HANDLERS: dict[type, Callable[[ConsumerGroup, object, Now], None]] = {
    ConsumerGroupHeartbeat: ConsumerGroup._on_heartbeat,
    TopicsChanged: ConsumerGroup._on_topics_changed,
    TimerFired: ConsumerGroup._on_timer,
    RecordsAppended: ConsumerGroup._on_appended,
    RecordReplayed: ConsumerGroup._on_replayed,
    ConvertedFromClassic: ConsumerGroup._on_converted_from_classic,
    JoinGroup: consumer_classic.join,
    SyncGroup: consumer_classic.sync,
    Heartbeat: consumer_classic.heartbeat,
    LeaveGroup: consumer_classic.leave,
    LoadCompleted: ConsumerGroup._on_load_completed,
    Unloaded: ConsumerGroup._on_unloaded,
    Deleted: ConsumerGroup._on_deleted,
}


def _dead_group_answer(event: object) -> list:
    """A deleted (or converted) group answers requests COORDINATOR_NOT_AVAILABLE: the client looks again."""
    error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if isinstance(event, ConsumerGroupHeartbeat):
        return [Reply(HeartbeatResult(error))]
    if isinstance(event, JoinGroup):
        return [Answer(event.request_id, JoinResult(error))]
    if isinstance(event, SyncGroup):
        return [Answer(event.request_id, SyncResult(error))]
    if isinstance(event, Heartbeat):
        return [Reply(error)]
    if isinstance(event, LeaveGroup):
        return [Reply([error] * len(event.members))]
    return []


