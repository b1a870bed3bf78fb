"""Kafka's `roundrobin` assignor.

All subscribed topic-partitions, sorted, are dealt in turn to the sorted
members; a member that does not subscribe to a partition's topic is skipped
for that partition. With identical subscriptions the counts differ by at most one.
"""
from __future__ import annotations

from collections.abc import Mapping

from cohort.client.assignors.assignor import (
    Assignment,
    PartitionAssignor,
    Subscription,
    member_order,
    subscribed_partitions,
)


class RoundRobinAssignor(PartitionAssignor):
    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> Assignment:
        ordered = member_order(subscriptions)
        assignment: Assignment = {member_id: [] for member_id in ordered}
        if not ordered:
            return assignment
        turn = 0
        for tp in subscribed_partitions(partitions_per_topic, subscriptions):
            # Some member subscribes to tp.topic (that is how tp was listed), so this ends.
            while tp.topic not in subscriptions[ordered[turn]].topics:
                turn = (turn + 1) % len(ordered)
            assignment[ordered[turn]].append(tp)
            turn = (turn + 1) % len(ordered)
        return assignment
