"""An independent model of KIP-848 reconciliation as clients see it (imports nothing of Cohort).

It knows only what the protocol promises a client: the member epoch it is told never goes down and is
never ahead of the group epoch; the partitions it holds are the last assignment it was given; no
partition is held by two live members at once; once membership stops changing, every partition of every
topic some live member subscribes to is held by exactly one such subscriber; a member that was fenced or
left is no longer in the group.

And Kafka's rule for the group epoch: a group is created at epoch 1; each of these bumps it by one: a
member joining with a subscription (one subscribing to nothing bumps nothing), a member changing its
subscription, a member leaving or fenced, and a change to the metadata of a topic some member subscribes to.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelMember:
    topics: frozenset[str]
    epoch: int = 0
    held: set[tuple[str, int]] = field(default_factory=set)


class ReconciliationModel:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = dict(topics)  # name -> partition count
        self.live: dict[str, ModelMember] = {}
        self.gone: set[str] = set()
        self.group_epoch = 1

    def joined(self, member_id: str, topics: frozenset[str]) -> None:
        self.live[member_id] = ModelMember(topics)
        self.gone.discard(member_id)
        if topics:
            self.group_epoch += 1

    def resubscribed(self, member_id: str, topics: frozenset[str]) -> None:
        member = self.live[member_id]
        if topics != member.topics:
            self.group_epoch += 1
        member.topics = topics

    def answered(self, member_id: str, epoch: int, assignment: set[tuple[str, int]] | None) -> None:
        member = self.live[member_id]
        assert epoch >= member.epoch, f"{member_id}'s epoch went back from {member.epoch} to {epoch}"
        assert epoch <= self.group_epoch, f"{member_id} was given epoch {epoch}, ahead of group epoch {self.group_epoch}"
        member.epoch = epoch
        if assignment is not None:
            member.held = set(assignment)
        self.check_no_partition_held_twice()

    def removed(self, member_id: str) -> None:
        """Left, or fenced: a fenced client abandons its partitions."""
        if self.live.pop(member_id, None) is not None:
            self.group_epoch += 1
        self.gone.add(member_id)

    def topics_changed(self, topics: dict[str, int]) -> None:
        changed = {t for t in self.topics.keys() | topics.keys() if self.topics.get(t) != topics.get(t)}
        if any(changed & m.topics for m in self.live.values()):
            self.group_epoch += 1
        self.topics = dict(topics)

    def check_group_epoch(self, group_epoch: int) -> None:
        assert group_epoch == self.group_epoch, f"group epoch {group_epoch}, Kafka's rule says {self.group_epoch}"

    def check_no_partition_held_twice(self) -> None:
        seen: dict[tuple[str, int], str] = {}
        for member_id, member in self.live.items():
            for tp in member.held:
                assert tp not in seen, f"{tp} held by {seen[tp]} and {member_id}"
                seen[tp] = member_id

    def check_converged(self) -> None:
        self.check_no_partition_held_twice()
        wanted = {(t, p) for m in self.live.values() for t in m.topics if t in self.topics
                  for p in range(self.topics[t])}
        held = {tp for m in self.live.values() for tp in m.held}
        assert held == wanted, f"missing {sorted(wanted - held)}, extra {sorted(held - wanted)}"
        for member_id, member in self.live.items():
            assert all(t in member.topics for t, _ in member.held), f"{member_id} holds an unsubscribed topic"
