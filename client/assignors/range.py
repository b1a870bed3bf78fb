"""Kafka's `range` assignor.

Per topic, partitions and subscribed members are sorted; each member gets a
contiguous range of `P // M` partitions and the first `P % M` members one
extra. With several topics the extras pile up on the first members (two
topics of 10 partitions over three members give the first one 8).
"""
from __future__ import annotations

from collections.abc import Mapping

from cohort.client.assignors.assignor import Assignment, PartitionAssignor, Subscription, member_order
from cohort.client.topic_partition import TopicPartition


class RangeAssignor(PartitionAssignor):
    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> Assignment:
        ordered = member_order(subscriptions)
        assignment: Assignment = {member_id: [] for member_id in ordered}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        for topic in topics:
            count = partitions_per_topic.get(topic)
            if count is None or count <= 0:
                continue
            members = [m for m in ordered if topic in subscriptions[m].topics]
            share, extra = divmod(count, len(members))
            for i, member_id in enumerate(members):
                start = share * i + min(i, extra)
                length = share + (1 if i < extra else 0)
                assignment[member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return assignment
