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

from cohort.coordinator.groups.consumer.assignors import (
    Assignment,
    MemberSubscription,
    as_assignment,
    kept_partitions,
    load,
)

Owned = dict[str, dict[uuid.UUID, set[int]]]


class UniformAssignor:
    name = "uniform"

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        if not members:
            return {}
        owned = kept_partitions(members, partitions)
        subscriptions = {frozenset(spec.topics & partitions.keys()) for spec in members.values()}
        if len(subscriptions) == 1:
            _balance_homogeneous(owned, sorted(next(iter(subscriptions)), key=str), partitions)
        else:
            _balance_heterogeneous(owned, members, partitions)
        return {member_id: as_assignment(mine) for member_id, mine in owned.items()}


def _free(owned: Owned, topics: list[uuid.UUID], partitions: Mapping[uuid.UUID, int]) -> list[tuple[uuid.UUID, int]]:
    """The partitions of `topics` nobody keeps, in (topic, partition) order."""
    taken: dict[uuid.UUID, set[int]] = {t: set() for t in topics}
    for mine in owned.values():
        for t, ps in mine.items():
            taken[t] |= ps
    return [(t, p) for t in topics for p in range(partitions[t]) if p not in taken[t]]


def _balance_homogeneous(owned: Owned, topics: list[uuid.UUID], partitions: Mapping[uuid.UUID, int]) -> None:
    total = sum(partitions[t] for t in topics)
    base, extra = divmod(total, len(owned))
    loads = {m: load(mine) for m, mine in owned.items()}
    # The members holding the most keep the `extra` larger quotas: fewer moves.
    order = sorted(owned, key=lambda m: (-loads[m], m))
    quota = {m: base + (i < extra) for i, m in enumerate(order)}
    free = _free(owned, topics, partitions)
    for m in order:
        surplus = loads[m] - quota[m]
        mine = owned[m]
        for t in sorted(mine, key=str, reverse=True):
            if surplus <= 0:
                break
            ps = mine[t]
            for p in sorted(ps, reverse=True)[:surplus]:
                ps.discard(p)
                free.append((t, p))
                surplus -= 1
        loads[m] = quota[m] if loads[m] > quota[m] else loads[m]
    free.sort(key=lambda tp: (str(tp[0]), tp[1]), reverse=True)
    for m in sorted(owned):
        mine = owned[m]
        for _ in range(quota[m] - loads[m]):
            t, p = free.pop()
            mine.setdefault(t, set()).add(p)


def _balance_heterogeneous(owned: Owned, members: Mapping[str, MemberSubscription],
                           partitions: Mapping[uuid.UUID, int]) -> None:
    subscribers = {t: sorted(m for m, spec in members.items() if t in spec.topics) for t in partitions}
    loads = {m: load(mine) for m, mine in owned.items()}
    # Topics with the fewest subscribers first: their partitions have the least choice.
    topics = sorted(partitions, key=lambda t: (len(subscribers[t]), str(t)))
    for topic_id, p in _free(owned, topics, partitions):
        candidates = subscribers[topic_id]
        if candidates:
            member_id = min(candidates, key=lambda m: (loads[m], m))
            owned[member_id].setdefault(topic_id, set()).add(p)
            loads[member_id] += 1
    moved = True
    while moved:
        moved = False
        for topic_id in sorted(partitions, key=str):
            candidates = subscribers[topic_id]
            if len(candidates) < 2:
                continue
            while True:
                holders = [m for m in candidates if owned[m].get(topic_id)]
                if not holders:
                    break
                giver = max(holders, key=lambda m: (loads[m], m))
                taker = min(candidates, key=lambda m: (loads[m], m))
                if loads[giver] <= loads[taker] + 1:
                    break
                partition = max(owned[giver][topic_id])
                owned[giver][topic_id].discard(partition)
                owned[taker].setdefault(topic_id, set()).add(partition)
                loads[giver] -= 1
                loads[taker] += 1
                moved = True
