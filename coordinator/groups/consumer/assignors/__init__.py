"""Server-side assignors of KIP-848 consumer groups (Kafka's `ConsumerGroupPartitionAssignor`s).

The coordinator, not a group leader, computes a consumer group's target assignment: it hands an
assignor every member's subscription (topic ids) and its current target, and the partition count of
each subscribed topic; the assignor returns each member's new target. Assignors are pure and
deterministic (same input, same output), and sticky: they start from the current target, so a new
one moves as few partitions as their rules allow. One module per assignor; `ASSIGNORS` names them
as members do in `ServerAssignor` and as `group.consumer.assignors` lists them.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

Assignment = dict[uuid.UUID, frozenset[int]]
"""topic id -> partitions: one member's (target or current) assignment."""


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What an assignor knows of one member: the existing topics it subscribes to and its current target."""

    topics: frozenset[uuid.UUID]
    current: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    instance_id: str | None = None
    rack_id: str | None = None


class Assignor(Protocol):
    name: str

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        """Every member's new target: each partition of a subscribed topic goes to exactly one of its
        subscribers (none is left out while a subscriber exists); members without partitions get {}."""
        ...


def kept_partitions(members: Mapping[str, MemberSubscription],
                    partitions: Mapping[uuid.UUID, int]) -> dict[str, dict[uuid.UUID, set[int]]]:
    """Each member's current partitions that it may keep: of a topic it still subscribes to, still
    existing, and not claimed by a member earlier in member-id order (a corrupt input never makes a
    partition go twice). Per topic sets, so the work per partition is an int operation."""
    claimed: dict[uuid.UUID, set[int]] = {t: set() for t in partitions}
    kept: dict[str, dict[uuid.UUID, set[int]]] = {}
    for member_id in sorted(members):
        spec = members[member_id]
        mine = kept[member_id] = {}
        for topic_id, current in spec.current.items():
            count = partitions.get(topic_id)
            if count is None or topic_id not in spec.topics or not current:
                continue
            taken = claimed[topic_id]
            ok = {p for p in current if 0 <= p < count} - taken
            if ok:
                taken |= ok
                mine[topic_id] = ok
    return kept


def as_assignment(owned: Mapping[uuid.UUID, set[int]]) -> Assignment:
    return {topic_id: frozenset(ps) for topic_id, ps in owned.items() if ps}


def load(owned: Mapping[uuid.UUID, set[int]]) -> int:
    return sum(map(len, owned.values()))


def _registry() -> dict[str, Assignor]:
    from cohort.coordinator.groups.consumer.assignors.range import RangeAssignor
    from cohort.coordinator.groups.consumer.assignors.uniform import UniformAssignor

    return {a.name: a for a in (UniformAssignor(), RangeAssignor())}


ASSIGNORS: dict[str, Assignor] = _registry()
"""Kafka's server-side assignor names -> assignor; `group.consumer.assignors` defaults to both, uniform first."""
DEFAULT_ASSIGNORS = ("uniform", "range")
