"""Kafka's UniformAssignor (the default server-side assignor): balanced and sticky.

Balanced means no member could take a partition from another member holding two or more partitions
more than it while subscribing to that partition's topic; with identical subscriptions that is every
member holding floor(P/N) or ceil(P/N) partitions. Sticky means members keep what their current
target has, as far as balance allows: only excess partitions and unowned ones move. Heterogeneous
subscriptions are balanced by moving single partitions from the most to the least loaded subscriber
until no such move is left (each move lowers the sum of squared loads, so this ends).
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping

from cohort.coordinator.groups.assignors import Assignment, MemberSubscription, as_assignment, kept_partitions


class UniformAssignor:
    name = "uniform"

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        if not members:
            return {}
        owned = kept_partitions(members, partitions)
        subscriptions = {frozenset(spec.topics & partitions.keys()) for spec in members.values()}
        if len(subscriptions) == 1:
            _balance_homogeneous(owned, sorted(next(iter(subscriptions))), partitions)
        else:
            _balance_heterogeneous(owned, members, partitions)
        return {member_id: as_assignment(mine) for member_id, mine in owned.items()}


def _balance_homogeneous(owned: dict[str, set[tuple[uuid.UUID, int]]], topics: list[uuid.UUID],
                         partitions: Mapping[uuid.UUID, int]) -> None:
    total = sum(partitions[t] for t in topics)
    base, extra = divmod(total, len(owned))
    # The members holding the most keep the `extra` larger quotas: fewer moves.
    order = sorted(owned, key=lambda m: (-len(owned[m]), m))
    quota = {m: base + (i < extra) for i, m in enumerate(order)}
    taken = set().union(*owned.values())
    free = [(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken]
    for m in order:
        mine = owned[m]
        if len(mine) > quota[m]:
            surplus = sorted(mine)[quota[m]:]
            mine.difference_update(surplus)
            free.extend(surplus)
    free.sort(reverse=True)
    for m in sorted(owned):
        mine = owned[m]
        while len(mine) < quota[m]:
            mine.add(free.pop())


def _balance_heterogeneous(owned: dict[str, set[tuple[uuid.UUID, int]]],
                           members: Mapping[str, MemberSubscription],
                           partitions: Mapping[uuid.UUID, int]) -> None:
    subscribers = {t: sorted(m for m, spec in members.items() if t in spec.topics) for t in partitions}
    taken = set().union(*owned.values())
    # Topics with the fewest subscribers first: their partitions have the least choice.
    for topic_id in sorted(partitions, key=lambda t: (len(subscribers[t]), str(t))):
        candidates = subscribers[topic_id]
        if not candidates:
            continue
        for p in range(partitions[topic_id]):
            if (topic_id, p) not in taken:
                member_id = min(candidates, key=lambda m: (len(owned[m]), m))
                owned[member_id].add((topic_id, p))
    moved = True
    while moved:
        moved = False
        for topic_id in sorted(partitions, key=str):
            candidates = subscribers[topic_id]
            if len(candidates) < 2:
                continue
            while True:
                holders = [m for m in candidates if any(t == topic_id for t, _ in owned[m])]
                if not holders:
                    break
                giver = max(holders, key=lambda m: (len(owned[m]), m))
                taker = min(candidates, key=lambda m: (len(owned[m]), m))
                if len(owned[giver]) <= len(owned[taker]) + 1:
                    break
                partition = max(tp for tp in owned[giver] if tp[0] == topic_id)
                owned[giver].discard(partition)
                owned[taker].add(partition)
                moved = True
