"""The KIP-848 consumer group (Kafka's `ConsumerGroup`) as a pure engine: events in, effects out.

Theory of operation
-------------------
Members speak one request, ConsumerGroupHeartbeat. A member joins with member epoch 0, leaves with
-1 (a static member, one with `group.instance.id`, leaves "for now" with -2: it keeps its place and
partitions until its session expires or a new member id takes its instance id over), and otherwise
sends the member epoch it was last told. The coordinator assigns, not a leader: three epochs drive it.

- The **group epoch** is bumped (ConsumerGroupMetadata record) whenever what an assignment depends on
  changes: a member joins or leaves or changes its subscription or assignor, or the metadata of a
  subscribed topic changes (a topic created or deleted, partitions added, a regex matching more).
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
"""
from __future__ import annotations

import enum
import hashlib
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import re2

from cohort.coordinator.groups.assignors import ASSIGNORS, DEFAULT_ASSIGNORS, Assignment, Assignor, MemberSubscription
from cohort.coordinator.groups.effects import (
    Answer,
    AppendRecords,
    CancelAllTimers,
    CancelTimer,
    Deleted,
    LoadCompleted,
    MemberExpired,
    Now,
    RebalanceJournaled,
    RecordsAppended,
    Reply,
    SetTimer,
    StateChanged,
    TimerFired,
    Unloaded,
)
from cohort.coordinator.groups.classic import (
    CONSUMER_PROTOCOL_TYPE,
    Heartbeat,
    JoinGroup,
    JoinResult,
    LeaveGroup,
    SyncGroup,
    SyncResult,
)
from cohort.coordinator.records.types import (
    ClassicMemberMetadata,
    ClassicProtocolRecord,
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
    CurrentTopicPartitions,
    GroupMemberRecord,
    GroupMetadataRecord,
    GroupMetadataTombstone,
    TargetTopicPartitions,
)
from cohort.protocol.consumer_protocol import ConsumerProtocolAssignment, decode_subscription, encode_assignment
from cohort.protocol.errors import ErrorCode, ProtocolError

log = logging.getLogger("cohort.group")

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
GENERATED_MEMBER_ID_REQUIRED_VERSION = 1  # ConsumerGroupHeartbeat v1+: the client makes its member id

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
    **{(s, Step.MEMBER_REMOVED): frozenset({_S.ASSIGNING, _S.EMPTY}) for s in _LIVE - {_S.EMPTY}},
    **{(s, Step.LOADED): _LIVE for s in _LIVE},
    **{(s, Step.CONVERTED): frozenset({_S.DEAD}) for s in _LIVE},
    **{(s, Step.DELETED): frozenset({_S.DEAD}) for s in _LIVE},
}


class MemberState(enum.Enum):
    """Kafka's MemberState; the value is its record code (ConsumerGroupCurrentMemberAssignment.State)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


_M = MemberState
# What `CurrentAssignmentBuilder` may move a member to from each state (UNKNOWN: a record from a newer
# writer; the member is reconciled afresh).
MEMBER_TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    _M.STABLE: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
    _M.UNREVOKED_PARTITIONS: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
    _M.UNRELEASED_PARTITIONS: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
    _M.UNKNOWN: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
}


class IllegalStateTransition(RuntimeError):
    """A transition outside TRANSITIONS: a coordinator bug, never a client error."""


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic of the topic registry as a consumer group sees it."""

    topic_id: uuid.UUID
    partitions: int


TopicImage = Mapping[str, TopicMetadata]
"""topic name -> its id and partition count: the topic registry now."""


# ---------------------------------------------------------------------------------------------
# Events (besides the shared TimerFired, RecordsAppended, LoadCompleted, Unloaded, Deleted)
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class ConsumerGroupHeartbeat:
    """A ConsumerGroupHeartbeat request (fields as the wire has them; None = not sent/null)."""

    request_id: int
    member_id: str
    member_epoch: int
    api_version: int = 1
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: list[tuple[uuid.UUID, list[int]]] | None = None  # owned partitions
    client_id: str = ""
    client_host: str = ""
    # The topics the member's principal may DESCRIBE now, from the authorizer (None: not checked). Only
    # these are matched against its regex (Kafka: KAFKA-18813); a change is a change of its subscription.
    describable_topics: frozenset[str] | None = None


@dataclass(slots=True, frozen=True)
class TopicsChanged:
    """The topic registry changed (created, deleted, partitions added): the whole image now."""

    image: TopicImage


@dataclass(slots=True, frozen=True)
class ConvertedFromClassic:
    """A classic group becomes this (new, empty) consumer group: `records` (made by `migration`, the
    classic group's tombstone first) are applied and appended, and the members' sessions start."""

    records: list


@dataclass(slots=True, frozen=True)
class RecordReplayed:
    """One consumer-group record (or tombstone) of this group read back from the log; no timers yet."""

    record: object


# ---------------------------------------------------------------------------------------------
# Results, timer keys, write purposes
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class HeartbeatResult:
    """A ConsumerGroupHeartbeat response; `assignment` None = field null (no change to tell)."""

    error: int = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: list[tuple[uuid.UUID, list[int]]] | None = None


@dataclass(slots=True, frozen=True)
class SessionTimeout:
    """Timer key: member `member_id`'s session (group.consumer.session.timeout.ms)."""

    member_id: str


@dataclass(slots=True, frozen=True)
class RevocationTimeout:
    """Timer key: member `member_id` must release its revoked partitions within its rebalance timeout."""

    member_id: str


@dataclass(slots=True, frozen=True)
class AssignmentDue:
    """Timer key: the assignment interval has passed while the group waits for a new target."""


@dataclass(slots=True, frozen=True)
class AnswerWhenStored:
    """Request `request_id` (a ConsumerGroupHeartbeat, or a classic member's JoinGroup) is answered with
    `result` once its records are durable, else with a result of the same type carrying the error."""

    request_id: int
    result: HeartbeatResult | JoinResult


@dataclass(slots=True, frozen=True)
class ConvertedToClassic:
    """Effect: the group's last consumer-protocol member left and its records are replaced by `record`;
    the runtime must serve the group id with a classic group loaded from it and start a rebalance."""

    record: GroupMetadataRecord


@dataclass(slots=True, frozen=True)
class GroupChangeWrite:
    """Records of a change nobody waits for (a member fenced or expired, a topic metadata change)."""

    reason: str


@dataclass(slots=True, frozen=True)
class EpochCause:
    """Why the group epoch is bumped, for the operator journal: a `group_journal.TRIGGERS` word, the member
    it is about (if any) and its role there (`group_journal.MEMBER_ROLES`), and what the log says."""

    trigger: str
    detail: str
    member: ConsumerGroupMember | None = None
    role: str = "cause"
    client_reason: str | None = None


@dataclass(slots=True)
class _JournaledRebalance:
    """A rebalance under way: from its first epoch bump until the group is Stable or Empty again; bumps
    meanwhile join it (a join storm is one rebalance, as a classic group's join phase is)."""

    started_ms: int
    epoch_before: int
    cause: EpochCause
    members: dict[str, tuple]  # member id -> (member_id, instance_id, client_id, client_host, role)
    target_before: dict[str, list[tuple[str, int]]]
    bumps: int = 0
    upgraded_at: int | None = None  # the classic generation, when it starts right after an online upgrade


class HeartbeatError(Exception):
    """A heartbeat rejected with a Kafka error code and message (a value in the response)."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


# ---------------------------------------------------------------------------------------------
# Members
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class ConsumerGroupMember:
    """A member as its records describe it (metadata, current assignment); target kept by the group."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # A member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside this group.
    classic_protocols: tuple[tuple[str, bytes], ...] | None = None
    classic_session_timeout_ms: int = -1

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_protocols is not None

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def owned(self) -> Iterable[tuple[uuid.UUID, int]]:
        """The partitions it holds: assigned ones and those it has not yet revoked."""
        for assignment in (self.assigned, self.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    yield topic_id, p


@dataclass(slots=True, frozen=True)
class MemberAssignment:
    """A member's next current assignment, as `CurrentAssignmentBuilder` computes it."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment


class CurrentAssignmentBuilder:
    """Kafka's CurrentAssignmentBuilder: a member's next step toward its target, revoke before assign.

    `owner_epoch(topic_id, partition)` is the epoch of the other member currently holding the partition,
    or -1 if it is free (or held by this member); `owned` are the partitions the member's heartbeat says
    it holds (None if the heartbeat did not say: then nothing counts as released); `subscribed` are the
    ids of the existing topics the member subscribes to (a target partition of any other topic is
    treated as not targeted, as Kafka does while a new target is pending).
    """

    def __init__(self, member: ConsumerGroupMember, target_epoch: int, target: Assignment,
                 owner_epoch: Callable[[uuid.UUID, int], int],
                 owned: Mapping[uuid.UUID, frozenset[int]] | None,
                 subscribed: frozenset[uuid.UUID]) -> None:
        self.member = member
        self.target_epoch = target_epoch
        self.target = target
        self.owner_epoch = owner_epoch
        self.owned = owned
        self.subscribed = subscribed

    def build(self) -> MemberAssignment:
        m = self.member
        if m.state is MemberState.STABLE:
            if m.member_epoch != self.target_epoch:
                return self._next(m.member_epoch)
            return self._drop_unsubscribed()
        if m.state is MemberState.UNREVOKED_PARTITIONS:
            if self._holds_any(m.pending_revocation):
                return self._drop_unsubscribed()
            return self._next(m.member_epoch)
        if m.state is MemberState.UNRELEASED_PARTITIONS:
            return self._next(m.member_epoch)
        # UNKNOWN: a state from a newer writer; the member must start over without partitions.
        if self.owned is None or any(self.owned.values()):
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state. "
                                 "The member must abandon all its partitions and rejoin.")
        return self._next(self.target_epoch)

    def _current(self) -> MemberAssignment:
        m = self.member
        return MemberAssignment(m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)

    def _holds_any(self, revoking: Assignment) -> bool:
        """Whether the heartbeat shows the member still holding any of `revoking` (unknown: yes)."""
        if self.owned is None:
            return True
        return any(p in revoking.get(t, ()) for t, ps in self.owned.items() for p in ps)

    def _drop_unsubscribed(self) -> MemberAssignment:
        """Partitions of topics the member no longer subscribes to are revoked at once (Kafka's
        updateCurrentAssignment), without waiting for a new target."""
        m = self.member
        dropped = {t: ps for t, ps in m.assigned.items() if t not in self.subscribed}
        if not dropped:
            return self._current()
        kept = {t: ps for t, ps in m.assigned.items() if t in self.subscribed}
        revoking = dict(m.pending_revocation)
        for t, ps in dropped.items():
            revoking[t] = revoking.get(t, frozenset()) | ps
        if self._holds_any(revoking):
            return MemberAssignment(m.member_epoch, m.member_epoch, MemberState.UNREVOKED_PARTITIONS, kept, revoking)
        return MemberAssignment(m.member_epoch, m.member_epoch, m.state, kept, m.pending_revocation)

    def _next(self, member_epoch: int) -> MemberAssignment:
        m = self.member
        keep: Assignment = {}
        revoke: Assignment = {}
        add: Assignment = {}
        unreleased = False
        for topic_id in m.assigned.keys() | self.target.keys():
            target = self.target.get(topic_id, frozenset()) if topic_id in self.subscribed else frozenset()
            current = m.assigned.get(topic_id, frozenset())
            if current & target:
                keep[topic_id] = current & target
            if current - target:
                revoke[topic_id] = current - target
            wanted = target - current
            free = frozenset(p for p in wanted if self.owner_epoch(topic_id, p) == -1)
            unreleased |= len(free) < len(wanted)
            if free:
                add[topic_id] = free
        if revoke and self._holds_any(revoke):
            # Revoke first: the member stays at its epoch and keeps only what its target still has.
            return MemberAssignment(member_epoch, m.member_epoch, MemberState.UNREVOKED_PARTITIONS, keep, revoke)
        assigned = {t: keep.get(t, frozenset()) | add.get(t, frozenset()) for t in keep.keys() | add.keys()}
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        return MemberAssignment(self.target_epoch, m.member_epoch, state, assigned, {})


class TargetAssignmentBuilder:
    """Kafka's TargetAssignmentBuilder: runs the assignor over the members' subscriptions and returns
    the records of the members whose target changed, then the target epoch's."""

    def __init__(self, group_id: str, assignor: Assignor, group_epoch: int) -> None:
        self.group_id = group_id
        self.assignor = assignor
        self.group_epoch = group_epoch

    def build(self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, int],
              current: Mapping[str, Assignment]) -> list:
        new = self.assignor.assign(members, topics)
        records: list = []
        for member_id in sorted(members):
            target = {t: ps for t, ps in new.get(member_id, {}).items() if ps}
            if target != current.get(member_id, {}) or member_id not in current:
                records.append(ConsumerGroupTargetAssignmentMemberRecord(
                    self.group_id, member_id, _topic_partitions(target, TargetTopicPartitions)))
        records.append(ConsumerGroupTargetAssignmentMetadataRecord(self.group_id, self.group_epoch))
        return records


# ---------------------------------------------------------------------------------------------
# Request validation (pure; the wire side may call it before a group exists)
# ---------------------------------------------------------------------------------------------
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def compile_regex(regex: str):
    """An RE2 pattern (Kafka resolves subscriptions with RE2/J); HeartbeatError if it does not compile."""
    try:
        return re2.compile(regex, options=_RE2_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                             f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {detail}.") from None


def validate_heartbeat(group_id: str, request: ConsumerGroupHeartbeat,
                       assignors: Iterable[str] = DEFAULT_ASSIGNORS) -> None:
    """Kafka's checks of a heartbeat before any group state is looked at; raises HeartbeatError."""
    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

    epoch = request.member_epoch
    if (request.api_version >= GENERATED_MEMBER_ID_REQUIRED_VERSION or epoch > 0
            or epoch == LEAVE_GROUP_MEMBER_EPOCH) and request.member_id == "":
        raise invalid("MemberId can't be empty.")
    if group_id == "":
        raise invalid("GroupId can't be empty.")
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.topic_partitions is None or request.topic_partitions:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    names = list(assignors)
    if request.server_assignor is not None and request.server_assignor not in names:
        raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {request.server_assignor} is not supported. "
                             f"Supported assignors: {', '.join(names)}.")
    if request.subscribed_topic_regex:
        compile_regex(request.subscribed_topic_regex)


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
        self.topic_access_checked = topic_access_checked
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
        self.new_member_id = new_member_id or _random_member_id
        self.state = ConsumerGroupState.EMPTY
        self.group_epoch = 0
        self.target_assignment_epoch = 0
        self.metadata_hash = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.target_assignment: dict[str, Assignment] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self._owners: dict[tuple[uuid.UUID, int], str] = {}  # partition -> member holding it
        self._image: TopicImage = dict(image or {})
        self._regexes: dict[str, frozenset[str]] = {}  # regex -> matching topic names in the image
        # member id -> the topics its regex may match (topic_access_checked): what its last heartbeat said
        # its principal may DESCRIBE; after a load, until that heartbeat, the topics it was assigned.
        self._describable: dict[str, frozenset[str]] = {}
        self._hash: int | None = None  # _subscription_hash() until a subscription or the image changes
        self._topic_ids: dict[str, frozenset[uuid.UUID]] = {}  # member id -> its existing subscribed topics
        self._last_assignment_ms: float | None = None  # when the assignor last ran (monotonic)
        self._assignment_timer = False
        self._sessions: dict[str, float] = {}  # member id -> session deadline (monotonic ms)
        self._revocations: dict[str, int] = {}  # member id -> the epoch its revocation timer watches
        self._subscribers: Counter[str] = Counter()  # topic name -> members subscribing (names or regex)
        self._unreconciled: set[str] = set()  # members not STABLE at the target epoch (O(1) state)
        self._converted: GroupMetadataRecord | None = None  # set once a downgrade's records are written
        self._rebalance: _JournaledRebalance | None = None  # the rebalance the journal will get, once it ends
        self._upgraded_at: int | None = None  # the classic generation it was converted from, until a rebalance
        self._topic_names: dict[uuid.UUID, str] = {meta.topic_id: name for name, meta in self._image.items()}
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
        return set(self._subscribers)

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
        return _member_epoch_error(member, member_epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        """The error an OffsetFetch gets (NONE to accept it)."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE  # an admin client, or a client that does not say
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return _member_epoch_error(member, member_epoch)

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
        access_changed = self._update_topic_access(member, request.describable_topics)
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
            assignment=(_sorted_assignment(member.assigned)
                        if full_request or changed or epoch == JOIN_GROUP_MEMBER_EPOCH else None),
        )

    def _update_member(self, member: ConsumerGroupMember, updated: ConsumerGroupMember, subscription_changed: bool,
                       records: list, now: Now) -> None:
        """The first steps of every join or heartbeat, as Kafka's: store the member if anything of it
        changed, keep its session, bump the group epoch if a subscription (or a subscribed topic) changed,
        and bring the target assignment up to date."""
        is_new = updated.member_id not in self.members
        if is_new or _metadata_differs(updated, member):
            self._write(records, _member_metadata_record(self.group_id, updated))
        if is_new:
            self._start_session(updated.member_id, now)
        else:
            self._refresh_session(updated.member_id, now)
        if is_new:
            self._bump_epoch(records, EpochCause("member_joined", f"member {updated.member_id} joined", updated,
                                                 "joined"))
        elif subscription_changed:
            self._bump_epoch(records, EpochCause("metadata_changed", f"member {updated.member_id} changed its "
                                                 "subscription or assignor", updated))
        elif self._subscription_hash() != self.metadata_hash:
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
            if received != member.previous_member_epoch or not _is_subset(owned, member.assigned):
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
        self._journal_static_replacement(old, member_id)
        target = self.target_assignment.get(old.member_id, {})
        new = replace(old, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        self._remove_records(old.member_id, records)
        self._write(records, _member_metadata_record(self.group_id, new))
        self._write(records, ConsumerGroupTargetAssignmentMemberRecord(
            self.group_id, member_id, _topic_partitions(target, TargetTopicPartitions)))
        self._write(records, _current_assignment_record(self.group_id, member_id, MemberAssignment(
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
        self._write(records, _current_assignment_record(self.group_id, member.member_id, MemberAssignment(
            LEAVE_GROUP_STATIC_MEMBER_EPOCH, member.member_epoch, member.state, member.assigned,
            member.pending_revocation)))
        self._cancel_revocation(member.member_id)
        self._transition(Step.MEMBER_RECONCILED)
        return HeartbeatResult(member_id=request.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                               heartbeat_interval_ms=0)

    # ---- classic members (online migration) ------------------------------------------------------
    def supports_classic_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Kafka's rule for a classic member joining: protocol type "consumer", and a protocol in common
        with every classic member already here."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        wanted = set(names)
        for member in self.members.values():
            if member.classic_protocols is not None:
                wanted &= {name for name, _ in member.classic_protocols}
        return bool(wanted)

    def _on_classic_join(self, event: JoinGroup, now: Now) -> None:
        """A classic member's JoinGroup: answered from its target assignment, without a join phase."""
        req = event.request
        member_id = req.member_id
        unknown = member_id == ""
        if unknown:
            member_id = self.new_member_id()

        def answer(result: JoinResult) -> None:
            self._effects.append(Answer(event.request_id, result))

        if (member_id not in self.members and req.group_instance_id not in self.static_members
                and len(self.members) >= self.max_size):
            return answer(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=req.member_id))
        if not self.supports_classic_protocols(req.protocol_type, (name for name, _ in req.protocols)):
            return answer(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
        if unknown and req.group_instance_id is None and req.require_known_member_id:
            return answer(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id))
        try:
            subscription = decode_subscription(req.protocols[0][1])
        except ProtocolError:
            return answer(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
        records: list = []
        member = self._classic_member(req, member_id, records)
        if isinstance(member, int):
            return answer(JoinResult(member, member_id=req.member_id))
        updated = replace(
            member,
            instance_id=req.group_instance_id,
            rack_id=subscription.rack_id or member.rack_id,
            client_id=req.client_id,
            client_host=req.client_host,
            subscribed_topic_names=tuple(subscription.topics),
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms,
            classic_protocols=tuple((name, bytes(meta)) for name, meta in req.protocols),
            classic_session_timeout_ms=req.session_timeout_ms,
        )
        self._update_member(member, updated, updated.subscribed_topic_names != member.subscribed_topic_names,
                            records, now)
        # What it still holds (cooperative clients list it; eager ones gave everything up before joining).
        owned: dict[uuid.UUID, frozenset[int]] = {}
        for tp in subscription.owned_partitions or ():
            meta = self._image.get(tp.topic)
            if meta is not None:
                owned[meta.topic_id] = owned.get(meta.topic_id, frozenset()) | frozenset(tp.partitions)
        try:
            self._reconcile(self.members[updated.member_id], owned, records, now)
        except HeartbeatError as exc:
            result = JoinResult(exc.error, member_id=updated.member_id)
        else:
            member = self.members[updated.member_id]
            result = JoinResult(member_id=member.member_id, generation_id=member.member_epoch,
                                protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=member.classic_protocols[0][0],
                                leader="", skip_assignment=False)
        self._effects.append(AppendRecords(records, AnswerWhenStored(event.request_id, result)) if records
                             else Answer(event.request_id, result))

    def _classic_member(self, req, member_id: str, records: list) -> ConsumerGroupMember | int:
        """The member a classic JoinGroup is about (new, existing, or a static member taking over its
        instance id), or the error code it gets."""
        if req.group_instance_id is None:
            member = self.members.get(member_id)
            if member is None:
                return ConsumerGroupMember(member_id)
            if not member.uses_classic_protocol:
                return ErrorCode.UNKNOWN_MEMBER_ID
            return member
        existing_id = self.static_members.get(req.group_instance_id)
        if existing_id is None:
            return ConsumerGroupMember(member_id, instance_id=req.group_instance_id)
        existing = self.members[existing_id]
        if existing_id == member_id:
            return existing
        # A classic static member rejoining under a new member id replaces the old one (KIP-345).
        return self._replace_static_member(existing, member_id, records)

    def _classic_member_error(self, member_id: str, instance_id: str | None) -> int:
        member = self.members.get(member_id)
        if member is None or not member.uses_classic_protocol:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if instance_id is not None and self.static_members.get(instance_id) != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE

    def _on_classic_sync(self, event: SyncGroup, now: Now) -> None:
        """A classic member's SyncGroup: its assignment is what it may hold now (assigned, not pending)."""
        error = self._classic_member_error(event.member_id, event.group_instance_id)
        member = self.members.get(event.member_id)
        if not error and event.generation_id != member.member_epoch:
            error = ErrorCode.ILLEGAL_GENERATION
        if not error and ((event.protocol_type is not None and event.protocol_type != CONSUMER_PROTOCOL_TYPE)
                          or (event.protocol_name is not None
                              and event.protocol_name != member.classic_protocols[0][0])):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error:
            self._effects.append(Answer(event.request_id, SyncResult(error)))
            return
        self._refresh_session(member.member_id, now)
        self._effects.append(Answer(event.request_id, SyncResult(
            protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=member.classic_protocols[0][0],
            assignment=self._classic_assignment(member))))

    def _classic_assignment(self, member: ConsumerGroupMember) -> bytes:
        """The member's assigned partitions as a ConsumerProtocolAssignment (topic names, not ids)."""
        names = {meta.topic_id: name for name, meta in self._image.items()}
        partitions = [ConsumerProtocolAssignment.TopicPartition(names[t], sorted(ps))
                      for t, ps in sorted(member.assigned.items(), key=lambda kv: names.get(kv[0], ""))
                      if t in names and ps]
        return encode_assignment(ConsumerProtocolAssignment(assigned_partitions=partitions))

    def _on_classic_heartbeat(self, event: Heartbeat, now: Now) -> None:
        """A classic member's Heartbeat: REBALANCE_IN_PROGRESS makes it rejoin while it is not reconciled
        to the current target (its JoinGroup is where it gets the next step)."""
        error = self._classic_member_error(event.member_id, event.group_instance_id)
        member = self.members.get(event.member_id)
        if not error and event.generation_id != member.member_epoch:
            error = ErrorCode.ILLEGAL_GENERATION
        if not error:
            self._refresh_session(member.member_id, now)
            if (self.group_epoch > self.target_assignment_epoch
                    or not member.is_reconciled_to(self.target_assignment_epoch)):
                error = ErrorCode.REBALANCE_IN_PROGRESS
        self._effects.append(Reply(error))

    def _on_classic_leave(self, event: LeaveGroup, now: Now) -> None:
        """LeaveGroup (classic members, or an admin removing members by instance id): one code each."""
        errors: list[int] = []
        records: list = []
        for member_id, instance_id, reason in event.members:
            if self.state is ConsumerGroupState.DEAD:  # converted to a classic group meanwhile
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            if member_id == "" and instance_id is not None:
                member_id = self.static_members.get(instance_id, "")
            member = self.members.get(member_id)
            if member is None:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            if instance_id is not None and member.instance_id != instance_id:
                errors.append(ErrorCode.FENCED_INSTANCE_ID)
                continue
            self._remove_member(member_id, records, EpochCause(
                "member_left", f"member {member_id} left with LeaveGroup", member, "removed", reason or None), now)
            errors.append(ErrorCode.NONE)
        self._effects.append(Reply(errors))
        if records:
            self._effects.append(AppendRecords(records, GroupChangeWrite("members left with LeaveGroup")))

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
        protocol = common[0]
        classic = GroupMetadataRecord(
            group=self.group_id, protocol_type=CONSUMER_PROTOCOL_TYPE, generation=self.group_epoch,
            protocol=protocol, leader=next(iter(self.members)), current_state_timestamp=now.wall_ms,
            members=[GroupMemberRecord(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=self._session_timeout(m.member_id),
                subscription=dict(m.classic_protocols)[protocol], assignment=self._classic_assignment(m))
                for m in self.members.values()])
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
        if self._rebalance is not None:
            self._journal_rebalance((classic.generation, held))
        log.info("consumer group %s: only classic members are left; it becomes a classic group", self.group_id)

    def _on_converted_from_classic(self, event: ConvertedFromClassic, now: Now) -> None:
        self._loading = True
        records = []
        for record in event.records:
            if type(record) is ConsumerGroupMetadataRecord:  # with the hash of what the members subscribe to
                record = ConsumerGroupMetadataRecord(self.group_id, record.epoch, self._subscription_hash())
            if type(record) is not GroupMetadataTombstone:
                self._replay(record)
            records.append(record)
        self._loading = False
        self._upgraded_at = self.group_epoch
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
        self.metadata_hash = self._subscription_hash()
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
        counts = {meta.topic_id: meta.partitions for meta in self._image.values()}
        topics: dict[uuid.UUID, int] = {}
        for member_id, member in self.members.items():
            ids = self._subscribed_topic_ids(member)
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
                                           self._subscribed_topic_ids(member))
        nxt = builder.build()
        if nxt.state not in MEMBER_TRANSITIONS[member.state]:
            raise IllegalStateTransition(f"member {member.member_id}: {member.state} -> {nxt.state}")
        if (nxt.member_epoch, nxt.previous_member_epoch, nxt.state, nxt.assigned, nxt.pending_revocation) != (
                member.member_epoch, member.previous_member_epoch, member.state, member.assigned,
                member.pending_revocation):
            self._write(records, _current_assignment_record(self.group_id, member.member_id, nxt))
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

    # ---- topics ----------------------------------------------------------------------------------
    def _subscribed_topic_ids(self, member: ConsumerGroupMember) -> frozenset[uuid.UUID]:
        ids = self._topic_ids.get(member.member_id)
        if ids is None:
            ids = self._topic_ids[member.member_id] = frozenset(
                self._image[name].topic_id for name in self._member_topics(member) if name in self._image)
        return ids

    def _member_topics(self, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            matches = self._regex_matches(member.subscribed_topic_regex)
            if self.topic_access_checked:
                # Unknown (a member being loaded): nothing yet; `_on_load_completed` fills it in.
                matches = matches & self._describable.get(member.member_id, frozenset())
            names |= matches
        return names

    def _update_topic_access(self, member: ConsumerGroupMember, describable: frozenset[str] | None) -> bool:
        """Take the topics the member may now DESCRIBE; True when that changes what its regex matches."""
        if not self.topic_access_checked or describable is None:
            return False
        member_id = member.member_id
        if self._describable.get(member_id) == describable:
            return False
        if member_id not in self.members:  # a new member: counted once its metadata record is applied
            self._describable[member_id] = describable
            return False
        before = self._member_topics(member)
        self._describable[member_id] = describable
        after = self._member_topics(member)
        if before == after:
            return False
        self._subscribers.subtract(before)
        self._subscribers.update(after)
        self._subscribers = +self._subscribers
        self._topic_ids.pop(member_id, None)
        self._hash = None
        return True

    def _assigned_topic_names(self, member: ConsumerGroupMember) -> frozenset[str]:
        ids = {*member.assigned, *member.pending_revocation, *self.target_assignment.get(member.member_id, {})}
        return frozenset(self._topic_names[i] for i in ids if i in self._topic_names)

    def _regex_matches(self, regex: str) -> frozenset[str]:
        matches = self._regexes.get(regex)
        if matches is None:
            try:
                pattern = compile_regex(regex)
            except HeartbeatError:  # a record from a writer that accepted it: it matches nothing here
                matches = frozenset()
            else:
                matches = frozenset(name for name in self._image if pattern.fullmatch(name))
            self._regexes[regex] = matches
        return matches

    def _subscription_hash(self) -> int:
        """A hash of the subscribed topics' ids and partition counts (Kafka's MetadataHash, KIP-1101):
        when it differs from the one stored with the group epoch, the epoch is bumped."""
        if self._hash is not None:
            return self._hash
        if not self.members:
            return 0
        digest = hashlib.blake2b(digest_size=8)
        for name in sorted(self.subscribed_topic_names()):
            meta = self._image.get(name)
            if meta is not None:
                digest.update(f"{name}\0{meta.topic_id}\0{meta.partitions}\n".encode())
        self._hash = int.from_bytes(digest.digest(), "big", signed=True)
        return self._hash

    def _on_topics_changed(self, event: TopicsChanged, now: Now) -> None:
        self._image = dict(event.image)
        self._topic_names.update((meta.topic_id, name) for name, meta in self._image.items())
        self._regexes.clear()
        self._hash = None
        self._topic_ids.clear()
        self._subscribers = Counter(name for member in self.members.values() for name in self._member_topics(member))
        if self._loading or not self.members or self._subscription_hash() == self.metadata_hash:
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
        if self.topic_access_checked:
            # Who may describe what is not stored: until its next heartbeat says, a member's regex keeps
            # the topics it was given (all of them authorized when it was), so a restart moves nothing.
            for member_id, member in self.members.items():
                if member.subscribed_topic_regex and member_id not in self._describable:
                    self._describable[member_id] = self._assigned_topic_names(member)
            self._subscribers = Counter(name for m in self.members.values() for name in self._member_topics(m))
            self._topic_ids.clear()
            self._hash = None
        for member_id, member in self.members.items():
            self._start_session(member_id, now)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._revocations[member_id] = member.member_epoch
                self._effects.append(SetTimer(RevocationTimeout(member_id), max(member.rebalance_timeout_ms, 0)))
        self._transition(Step.LOADED)
        if self.members and self._subscription_hash() != self.metadata_hash:
            records: list = []
            self._bump_epoch(records, EpochCause("topic_change", "subscribed topic metadata changed while the "
                                                 "group was not loaded"))
            self._effects.append(AppendRecords(records, GroupChangeWrite("subscribed topic metadata changed")))

    def _on_unloaded(self, event: Unloaded, now: Now) -> None:
        self._effects.append(CancelAllTimers())
        self._assignment_timer = False
        self._rebalance = None  # the next owner starts from the records; no rebalance is under way there
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
            self._hash = None
            self._topic_ids.pop(record.member_id, None)
            member = self.members.get(record.member_id)
            if member is not None:
                self._subscribers.subtract(self._member_topics(member))
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
            self._subscribers.update(self._member_topics(member))
            self._subscribers = +self._subscribers  # drop topics nobody subscribes to any more
            if member.instance_id is not None:
                self.static_members[member.instance_id] = member.member_id
        elif kind is ConsumerGroupMemberMetadataTombstone:
            self._hash = None
            self._topic_ids.pop(record.member_id, None)
            member = self.members.pop(record.member_id, None)
            if member is not None:
                self._subscribers.subtract(self._member_topics(member))
                self._subscribers = +self._subscribers
                self._describable.pop(record.member_id, None)
                self._release(member)
                if member.instance_id is not None and self.static_members.get(member.instance_id) == member.member_id:
                    del self.static_members[member.instance_id]
        elif kind is ConsumerGroupTargetAssignmentMemberRecord:
            self.target_assignment[record.member_id] = _assignment_of(record.topic_partitions)
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
            member.assigned = _assignment_of(record.assigned_partitions)
            member.pending_revocation = _assignment_of(record.partitions_pending_revocation)
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
        elif kind is ConsumerGroupMetadataTombstone:
            self.group_epoch = 0
            self.metadata_hash = 0
        elif kind is ConsumerGroupTargetAssignmentMetadataTombstone:
            self.target_assignment_epoch = 0
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

    # ---- the operator journal -----------------------------------------------------------------------
    def _journal_bump(self, cause: EpochCause) -> None:
        """An epoch bump starts a rebalance, or joins the one under way (its member is named either way)."""
        if self._loading:
            return
        rebalance = self._rebalance
        if rebalance is None:
            rebalance = self._rebalance = _JournaledRebalance(
                self._now.wall_ms, self.group_epoch, cause, {}, self._named(self.target_assignment),
                upgraded_at=self._upgraded_at)
            self._upgraded_at = None
        rebalance.bumps += 1
        if cause.member is not None:
            rebalance.members.setdefault(cause.member.member_id, _journal_member(cause.member, cause.role))

    def _journal_rebalance(self, converted: tuple[int, Mapping[str, Assignment]] | None = None) -> None:
        """The journal's entry for the rebalance that ends now: the group is Stable or Empty, or
        `converted` to a classic group (the generation it gets, what its members take along)."""
        rebalance, self._rebalance = self._rebalance, None
        cause = rebalance.cause
        detail = cause.detail
        if rebalance.upgraded_at is not None:
            detail += f"; the group had just been converted from a classic group at generation {rebalance.upgraded_at}"
        if rebalance.bumps > 1:
            detail += f"; {rebalance.bumps - 1} more epoch bump(s) before the group settled"
        if self.state is ConsumerGroupState.DEAD:
            detail += "; only classic members were left: converted to a classic group"
        self._effects.append(RebalanceJournaled(
            self.group_id, "consumer", rebalance.started_ms, self._now.wall_ms, rebalance.epoch_before,
            self.group_epoch if converted is None else converted[0], cause.trigger, cause.client_reason, detail,
            self.state.value, tuple(rebalance.members.values()), rebalance.target_before,
            self._named(self.target_assignment if converted is None else converted[1])))

    def _journal_static_replacement(self, old: ConsumerGroupMember, new_member_id: str) -> None:
        """A static member back under a new member id takes over its place: no epoch bump (KIP-345), but
        the journal says who replaced whom (in the rebalance under way, or as an entry of its own)."""
        if self._loading:
            return
        removed = _journal_member(old, "removed")
        joined = (new_member_id,) + removed[1:4] + ("joined",)
        if self._rebalance is not None:
            self._rebalance.members.setdefault(old.member_id, removed)
            self._rebalance.members.setdefault(new_member_id, joined)
            return
        now = self._now.wall_ms
        self._effects.append(RebalanceJournaled(
            self.group_id, "consumer", now, now, self.group_epoch, self.group_epoch, "static_member_replaced", None,
            f"static member {old.instance_id} rejoined as {new_member_id}; nothing the assignment depends on "
            f"changed, so no new group epoch (KIP-345)", self.state.value, (removed, joined), {}, {}))

    def _named(self, assignments: Mapping[str, Assignment]) -> dict[str, list[tuple[str, int]]]:
        """Assignments with topic names (the journal's partition moves name topics)."""
        names = self._topic_names
        return {member_id: [(names.get(t, str(t)), p) for t, ps in assignment.items() for p in ps]
                for member_id, assignment in assignments.items()}

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
            if target in _SETTLED and self._rebalance is not None:
                self._journal_rebalance()


_SETTLED = frozenset({ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY})

_HANDLERS: dict[type, Callable[[ConsumerGroup, object, Now], None]] = {
    ConsumerGroupHeartbeat: ConsumerGroup._on_heartbeat,
    TopicsChanged: ConsumerGroup._on_topics_changed,
    TimerFired: ConsumerGroup._on_timer,
    RecordsAppended: ConsumerGroup._on_appended,
    RecordReplayed: ConsumerGroup._on_replayed,
    ConvertedFromClassic: ConsumerGroup._on_converted_from_classic,
    JoinGroup: ConsumerGroup._on_classic_join,
    SyncGroup: ConsumerGroup._on_classic_sync,
    Heartbeat: ConsumerGroup._on_classic_heartbeat,
    LeaveGroup: ConsumerGroup._on_classic_leave,
    LoadCompleted: ConsumerGroup._on_load_completed,
    Unloaded: ConsumerGroup._on_unloaded,
    Deleted: ConsumerGroup._on_deleted,
}


def _journal_member(member: ConsumerGroupMember, role: str) -> tuple:
    return (member.member_id, member.instance_id, member.client_id, member.client_host, role)


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


# ---------------------------------------------------------------------------------------------
# Helpers of this module
# ---------------------------------------------------------------------------------------------
def _member_epoch_error(member: ConsumerGroupMember, received: int) -> int:
    """Kafka's validateMemberEpoch: a classic member's generation is its member epoch."""
    if received == member.member_epoch:
        return ErrorCode.NONE
    return ErrorCode.ILLEGAL_GENERATION if member.uses_classic_protocol else ErrorCode.STALE_MEMBER_EPOCH


def _random_member_id() -> str:
    """A member id as Kafka makes one (a random UUID's URL-safe base64, 22 characters)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _is_subset(owned: list[tuple[uuid.UUID, list[int]]] | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(t, ()) for t, ps in owned for p in ps)


def _metadata_differs(a: ConsumerGroupMember, b: ConsumerGroupMember) -> bool:
    fields = ("instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names",
              "subscribed_topic_regex", "rebalance_timeout_ms", "server_assignor", "classic_protocols",
              "classic_session_timeout_ms")
    return any(getattr(a, f) != getattr(b, f) for f in fields)


def _member_metadata_record(group_id: str, m: ConsumerGroupMember) -> ConsumerGroupMemberMetadataRecord:
    classic = None
    if m.classic_protocols is not None:
        classic = ClassicMemberMetadata(m.classic_session_timeout_ms,
                                        [ClassicProtocolRecord(name, meta) for name, meta in m.classic_protocols])
    return ConsumerGroupMemberMetadataRecord(
        group_id, m.member_id, m.instance_id, m.rack_id, m.client_id, m.client_host,
        list(m.subscribed_topic_names), m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor,
        classic)


def _current_assignment_record(group_id: str, member_id: str,
                               a: MemberAssignment) -> ConsumerGroupCurrentMemberAssignmentRecord:
    return ConsumerGroupCurrentMemberAssignmentRecord(
        group_id, member_id, a.member_epoch, a.previous_member_epoch, a.state.value,
        _topic_partitions(a.assigned, CurrentTopicPartitions),
        _topic_partitions(a.pending_revocation, CurrentTopicPartitions))


def _topic_partitions(assignment: Mapping[uuid.UUID, frozenset[int]], cls: type) -> list:
    return [cls(topic_id, sorted(ps)) for topic_id, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])) if ps]


def _assignment_of(topic_partitions: Iterable) -> Assignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


def _sorted_assignment(assignment: Assignment) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])) if ps]
