"""How a consumer group member's assignment moves: Kafka's `TargetAssignmentBuilder` (the assignor's run
over every subscription: each member's target) and `CurrentAssignmentBuilder` (a member's next step
toward its target, revoke before assign), with the table of the member states that step may reach.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from cohort.coordinator.groups.consumer.assignors import Assignment, Assignor, MemberSubscription
from cohort.coordinator.groups.consumer.heartbeat import HeartbeatError
from cohort.coordinator.groups.consumer.member import (
    ConsumerGroupMember,
    MemberAssignment,
    MemberState,
    topic_partitions,
)
from cohort.coordinator.records.types import (
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
    TargetTopicPartitions,
)
from cohort.protocol.errors import ErrorCode

_M = MemberState
# What `CurrentAssignmentBuilder` may move a member to from each state (UNKNOWN: a record from a newer
# writer; the member is reconciled afresh).
MEMBER_TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    _M.STABLE: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
    _M.UNREVOKED_PARTITIONS: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
    _M.UNRELEASED_PARTITIONS: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
    _M.UNKNOWN: frozenset({_M.STABLE, _M.UNREVOKED_PARTITIONS, _M.UNRELEASED_PARTITIONS}),
}


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
                    self.group_id, member_id, topic_partitions(target, TargetTopicPartitions)))
        records.append(ConsumerGroupTargetAssignmentMetadataRecord(self.group_id, self.group_epoch))
        return records

