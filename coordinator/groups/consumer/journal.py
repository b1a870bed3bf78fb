"""What the operator journal learns of a KIP-848 consumer group's rebalances.

For the journal a rebalance runs from the epoch bump that starts it (its `EpochCause`) until the group
is Stable or Empty again (or converted to a classic group); bumps meanwhile join it, so a join storm
is one rebalance, as a classic group's join phase is. It then becomes one `RebalanceJournaled` whose
partition moves diff the target assignments (by topic name) before and after.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from cohort.coordinator.groups.consumer.assignors import Assignment
from cohort.coordinator.groups.consumer.member import ConsumerGroupMember
from cohort.coordinator.groups.effects import RebalanceJournaled


@dataclass(slots=True, frozen=True)
class EpochCause:
    """Why the group epoch is bumped, for the operator journal: a `reports.journal.TRIGGERS` word, the member
    it is about (if any) and its role there (`reports.journal.MEMBER_ROLES`), and what the log says."""

    trigger: str
    detail: str
    member: ConsumerGroupMember | None = None
    role: str = "cause"
    client_reason: str | None = None


@dataclass(slots=True)
class _Rebalance:
    """A rebalance under way, from its first epoch bump."""

    started_ms: int
    epoch_before: int
    cause: EpochCause
    members: dict[str, tuple]  # member id -> (member_id, instance_id, client_id, client_host, role)
    target_before: dict[str, list[tuple[str, int]]]
    bumps: int = 0
    upgraded_at: int | None = None  # the classic generation, when it starts right after an online upgrade


class RebalanceJournal:
    """One group's rebalance under way, and the topic names its entries use (ids the image has dropped
    keep their names, so a deleted topic's moves still read as that topic)."""

    __slots__ = ("group_id", "topic_names", "upgraded_at", "_rebalance")

    def __init__(self, group_id: str, topic_names: dict[uuid.UUID, str]) -> None:
        self.group_id = group_id
        self.topic_names = topic_names
        self.upgraded_at: int | None = None  # the classic generation it was converted from, until a rebalance
        self._rebalance: _Rebalance | None = None

    @property
    def under_way(self) -> bool:
        return self._rebalance is not None

    def bump(self, cause: EpochCause, now_ms: int, group_epoch: int, target: Mapping[str, Assignment]) -> None:
        """An epoch bump starts a rebalance, or joins the one under way (its member is named either way)."""
        rebalance = self._rebalance
        if rebalance is None:
            rebalance = self._rebalance = _Rebalance(now_ms, group_epoch, cause, {}, self.named(target),
                                                     upgraded_at=self.upgraded_at)
            self.upgraded_at = None
        rebalance.bumps += 1
        if cause.member is not None:
            rebalance.members.setdefault(cause.member.member_id, journal_member(cause.member, cause.role))

    def ended(self, now_ms: int, state: str, group_epoch: int, target: Mapping[str, Assignment],
              converted: bool = False) -> RebalanceJournaled:
        """The entry for the rebalance that ends now: the group is Stable or Empty, or `converted` to a
        classic group (`group_epoch` is then the generation it gets, `target` what its members take)."""
        rebalance, self._rebalance = self._rebalance, None
        assert rebalance is not None
        cause = rebalance.cause
        detail = cause.detail
        if rebalance.upgraded_at is not None:
            detail += f"; the group had just been converted from a classic group at generation {rebalance.upgraded_at}"
        if rebalance.bumps > 1:
            detail += f"; {rebalance.bumps - 1} more epoch bump(s) before the group settled"
        if converted:
            detail += "; only classic members were left: converted to a classic group"
        return RebalanceJournaled(
            self.group_id, "consumer", rebalance.started_ms, now_ms, rebalance.epoch_before, group_epoch,
            cause.trigger, cause.client_reason, detail, state, tuple(rebalance.members.values()),
            rebalance.target_before, self.named(target))

    def static_replacement(self, old: ConsumerGroupMember, new_member_id: str, now_ms: int, group_epoch: int,
                           state: str) -> RebalanceJournaled | None:
        """A static member back under a new member id takes over its place: no epoch bump (KIP-345), but
        the journal says who replaced whom (in the rebalance under way, or as an entry of its own)."""
        removed = journal_member(old, "removed")
        joined = (new_member_id,) + removed[1:4] + ("joined",)
        if self._rebalance is not None:
            self._rebalance.members.setdefault(old.member_id, removed)
            self._rebalance.members.setdefault(new_member_id, joined)
            return None
        return RebalanceJournaled(
            self.group_id, "consumer", now_ms, now_ms, group_epoch, group_epoch, "static_member_replaced", None,
            f"static member {old.instance_id} rejoined as {new_member_id}; nothing the assignment depends on "
            f"changed, so no new group epoch (KIP-345)", state, (removed, joined), {}, {})

    def forget(self) -> None:
        """The group is unloaded: its next owner starts from the records, with no rebalance under way."""
        self._rebalance = None

    def named(self, assignments: Mapping[str, Assignment]) -> dict[str, list[tuple[str, int]]]:
        """Assignments with topic names (the journal's partition moves name topics)."""
        names = self.topic_names
        return {member_id: [(names.get(t, str(t)), p) for t, ps in assignment.items() for p in ps]
                for member_id, assignment in assignments.items()}


def journal_member(member: ConsumerGroupMember, role: str) -> tuple:
    return (member.member_id, member.instance_id, member.client_id, member.client_host, role)
