"""Why a classic group rebalances, and what the operator journal and the metrics learn of each rebalance.

A rebalance runs from its first PreparingRebalance (its `RebalanceReason`) until the group is Stable, or
Empty when nobody is left; later causes meanwhile join it. Its end becomes a `RebalanceCompleted` (the
metrics, by cause) and a `RebalanceJournaled` naming who caused it, who joined, who was dropped and
the partition moves (the consumer protocol's assignments before and after).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from cohort.coordinator.groups.classic.member import GroupMember, MemberSnapshot, snapshot
from cohort.coordinator.groups.effects import RebalanceCompleted, RebalanceJournaled


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


class RebalanceJournal:
    """A group's rebalance under way (from its first prepare), and who held what in its last Stable
    generation (to name departed members and diff assignments)."""

    __slots__ = ("group_id", "started_ms", "reason", "initial", "generation_before", "dropped", "last_stable")

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.started_ms: int | None = None
        self.reason: RebalanceReason | None = None
        self.initial = False
        self.generation_before = 0
        self.dropped: list[tuple[GroupMember, str]] = []  # (member, journal role): expired, or gone at the timeout
        self.last_stable: dict[str, MemberSnapshot] = {}

    def started(self, reason: RebalanceReason, now_ms: int, initial: bool, generation: int) -> None:
        """A prepare: it starts a rebalance unless one is under way (whose first cause is kept)."""
        if self.started_ms is None:
            self.started_ms = now_ms
            self.reason = reason
            self.initial = initial
            self.generation_before = generation
            self.dropped = []

    def drop(self, member: GroupMember, role: str) -> None:
        if self.started_ms is not None:
            self.dropped.append((member, role))

    def stable(self, now_ms: int, group) -> list:
        """The rebalance ended in Stable: counted by why it started, timed from its first prepare."""
        out: list = []
        started, self.started_ms = self.started_ms, None
        if started is not None and self.reason is not None:
            out.append(RebalanceCompleted(self.group_id, self.reason, self.initial, max(now_ms - started, 0)))
            out.append(self._entry(started, now_ms, group))
        self.reason = None
        self.last_stable = {m.member_id: snapshot(m) for m in group.members.values()}
        return out

    def empty(self, now_ms: int, group) -> list:
        """The join phase ended with nobody left: the next rebalance starts from Empty and counts as initial."""
        out = [self._entry(self.started_ms, now_ms, group)] \
            if self.started_ms is not None and self.reason is not None else []
        self.last_stable = {}
        self.started_ms = self.reason = None
        return out

    def loaded(self, group) -> None:
        self.last_stable = {m.member_id: snapshot(m) for m in group.members.values()}

    def static_replacement(self, now_ms: int, group, instance_id: str, old_member_id: str,
                           member: GroupMember) -> RebalanceJournaled:
        """A static member back under a new id, with nothing the assignment depends on changed (KIP-345)."""
        old = self.last_stable.pop(old_member_id, None)
        self.last_stable[member.member_id] = snapshot(member)
        generation = group.generation_id
        return RebalanceJournaled(
            self.group_id, "classic", now_ms, now_ms, generation, generation, "static_member_replaced",
            None, f"static member {instance_id} rejoined as {member.member_id}; nothing the assignment "
                  f"depends on changed, so no rebalance (KIP-345)", group.state.value,
            ((old_member_id, instance_id, old.client_id if old else member.client_id,
              old.client_host if old else member.client_host, "removed"),
             (member.member_id, instance_id, member.client_id, member.client_host, "joined")), {}, {})

    def _entry(self, started_ms: int, now_ms: int, group) -> RebalanceJournaled:
        """The operator journal's entry for the rebalance that ends now (Stable or Empty)."""
        reason = self.reason
        assert reason is not None
        before = self.last_stable
        members_now = group.members
        involved: dict[str, str] = {m: "cause" for m in reason.members}
        for m, role in self.dropped:
            involved.setdefault(m.member_id, role)
        for member_id in members_now.keys() - before.keys():
            involved.setdefault(member_id, "joined")
        for member_id in before.keys() - members_now.keys():
            involved.setdefault(member_id, "removed")
        dropped = {m.member_id: m for m, _ in self.dropped}
        members = []
        for member_id, role in involved.items():
            m = members_now.get(member_id) or before.get(member_id) or dropped.get(member_id)
            members.append((member_id, m.group_instance_id, m.client_id, m.client_host, role) if m is not None
                           else (member_id, None, "", "", role))
        self.dropped = []
        consumer = group.uses_consumer_protocol()
        return RebalanceJournaled(
            self.group_id, "classic", started_ms, now_ms, self.generation_before, group.generation_id,
            reason.cause.journal_trigger, reason.client_reason, str(reason), group.state.value, tuple(members),
            {m: s.assignment for m, s in before.items()} if consumer else {},
            {m: s.assignment for m, s in members_now.items()} if consumer else {})
