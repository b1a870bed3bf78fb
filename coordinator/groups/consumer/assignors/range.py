"""Kafka's server-side RangeAssignor: per topic, contiguous ranges in member order, co-partitioned.

For each topic, its subscribers (sorted by member id) get floor(P/N) partitions each and the first
P mod N of them one more; a fresh assignment gives member i the i-th contiguous range, so topics with
the same partition count and subscribers are assigned alike (co-partitioning: a member gets partition
k of every such topic). Like Kafka's, it is sticky: a member first keeps up to its quota of the
partitions it holds, and only the rest is handed out in ascending order.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping

from cohort.coordinator.groups.consumer.assignors import Assignment, MemberSubscription


class RangeAssignor:
    name = "range"

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        result: dict[str, Assignment] = {m: {} for m in members}
        for topic_id, count in partitions.items():
            subscribers = sorted(m for m, spec in members.items() if topic_id in spec.topics)
            if not subscribers:
                continue
            base, extra = divmod(count, len(subscribers))
            current = {m: sorted(p for p in members[m].current.get(topic_id, ()) if 0 <= p < count)
                       for m in subscribers}
            claimed: set[int] = set()
            kept: dict[str, list[int]] = {}
            for m in subscribers:
                kept[m] = [p for p in current[m] if p not in claimed][:base]
                claimed.update(kept[m])
            # The larger quotas go first to members holding more than `base` (they keep one more).
            spare = {m: [p for p in current[m] if p not in claimed] for m in subscribers}
            holders = [m for m in subscribers if spare[m]]
            quota = {m: base for m in subscribers}
            for m in (holders + [m for m in subscribers if not spare[m]])[:extra]:
                quota[m] += 1
                if spare[m] and spare[m][0] not in claimed:
                    kept[m].append(spare[m][0])
                    claimed.add(spare[m][0])
            free = [p for p in range(count) if p not in claimed]
            free.reverse()
            for m in subscribers:
                while len(kept[m]) < quota[m]:
                    kept[m].append(free.pop())
                if kept[m]:
                    result[m][topic_id] = frozenset(kept[m])
        return result
