"""Partition assignors, named and encoded exactly as Kafka's Java ones so any client can share a group."""
from __future__ import annotations

from cohort.client.assignors.assignor import (
    Assignment,
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
    member_order,
)
from cohort.client.assignors.range import RangeAssignor
from cohort.client.assignors.roundrobin import RoundRobinAssignor
from cohort.client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def assignor_named(name: str) -> PartitionAssignor:
    """A fresh assignor for a Kafka protocol name; ValueError for a name we don't implement."""
    try:
        return ASSIGNORS[name]()
    except KeyError:
        raise ValueError(f"unknown partition assignor {name!r} (known: {', '.join(ASSIGNORS)})") from None


__all__ = [
    "ASSIGNORS",
    "Assignment",
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "assignor_named",
    "member_order",
]
