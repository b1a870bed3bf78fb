"""What every partition assignor sees and returns, on plain data.

The leader of a consumer group runs the assignor chosen by the coordinator's
protocol vote. Subscriptions arrive as Kafka's ConsumerProtocolSubscription
(decoded by the membership layer into `Subscription`); the result is a list of
partitions per member id, which the membership layer encodes as
ConsumerProtocolAssignment. Keeping the algorithms on plain data makes them
testable without a network and shareable with any Kafka client in the group.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from cohort.client.topic_partition import TopicPartition


class RebalanceProtocol(IntEnum):
    """Kafka's two client-side rebalance protocols (the Java byte ids)."""

    EAGER = 0  # revoke everything before joining, get a fresh assignment
    COOPERATIVE = 1  # keep what you own; only moved partitions are revoked, over two rebalances


@dataclass(slots=True, frozen=True)
class Subscription:
    """One member's ConsumerProtocolSubscription, as the assignor needs it."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1  # subscription v2+; -1 when the member did not say
    rack_id: str | None = None
    group_instance_id: str | None = None


Assignment = dict[str, list[TopicPartition]]


class PartitionAssignor(ABC):
    """A Kafka consumer-protocol assignor, named exactly as Kafka's Java one."""

    name: ClassVar[str]
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, topics: Sequence[str], previous_assignment: Sequence[TopicPartition], generation_id: int
    ) -> bytes | None:
        """Bytes this member puts in its subscription's user data; None for most assignors."""
        return None

    @abstractmethod
    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> Assignment:
        """Map every member id to its partitions.

        `partitions_per_topic` holds the topics the cluster knows with their
        partition counts; subscribed topics missing from it are not assigned.
        Every member id of `subscriptions` appears in the result, possibly with
        an empty list.
        """


def member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Kafka's MemberInfo order: static members by instance id first, then dynamic ones by member id.

    Sorting static members by their instance id keeps their assignment stable
    when they restart with a new member id.
    """
    static = sorted(
        (s.group_instance_id, member_id)
        for member_id, s in subscriptions.items()
        if s.group_instance_id is not None
    )
    dynamic = sorted(member_id for member_id, s in subscriptions.items() if s.group_instance_id is None)
    return [member_id for _, member_id in static] + dynamic


def subscribed_partitions(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> list[TopicPartition]:
    """Every partition of every topic some member subscribes to and the cluster knows, sorted."""
    topics = sorted({t for s in subscriptions.values() for t in s.topics if t in partitions_per_topic})
    return [TopicPartition(t, p) for t in topics for p in range(max(partitions_per_topic[t], 0))]
