"""Who coordinates which offsets partition: the one abstraction behind single node, `--workers` and cluster mode.

Kafka routes a group to the broker that leads its `__consumer_offsets` partition. Cohort does the
same with an `Ownership`:

* single node: this node owns every partition (`StaticOwnership` with one node);
* `cohort serve --workers N`: a fixed map, partition -> worker, computed from N (`StaticOwnership`);
* cluster mode: etcd leases and create-if-absent keys, with handoffs (`cohort.coordinator.cluster`).

FindCoordinator and Metadata answer from `owner()`/`nodes()`; a request for a partition this node
does not own answers NOT_COORDINATOR. The coordinator learns about changes through the listener it
registers: `acquired(partition, epoch)` -> load from the `Store`, then serve; `lost(partition)` ->
answer parked requests NOT_COORDINATOR, forget the partition's groups, `Store.release`;
`serve_until(deadline)` -> an ownership that holds partitions under a lease (cluster mode) gives the
instant (`time.monotonic()`) past which no request may be answered as coordinator, whatever the
partitions' state, so that a node cut off from etcd, or paused, never answers after its lease may have
lapsed (another node may coordinate its groups by then).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from cohort.coordinator.contracts.partition_lifecycle import PartitionStates


@dataclass(frozen=True, slots=True)
class Node:
    """A Kafka broker as clients see it: id and advertised address (its first listener's).

    `listeners` holds the advertised address of each of its listeners by name, as Kafka's brokers
    register theirs: a client of listener L is told every broker's address on L."""

    node_id: int
    host: str
    port: int
    listeners: tuple[tuple[str, str, int], ...] = field(default=(), compare=False)

    def on_listener(self, name: str) -> "Node":
        """This node as clients of listener `name` reach it (its first address when it has no such one)."""
        for listener, host, port in self.listeners:
            if listener == name:
                return self if (host, port) == (self.host, self.port) else Node(self.node_id, host, port,
                                                                                  self.listeners)
        return self


class OwnershipListener(Protocol):
    # The node's one partition tracker: the listener moves it from LOADING on; an ownership that claims
    # (cluster mode) moves it UNOWNED -> CLAIMING and back, and follows the listener's moves through it.
    states: PartitionStates

    def acquired(self, partition: int, epoch: int) -> None: ...

    def lost(self, partition: int) -> None: ...

    async def released(self, partition: int) -> None:
        """Returns once the release `lost` started has finished (the store let the partition go)."""
        ...

    def serve_until(self, deadline: float) -> None: ...


class Ownership(Protocol):
    local: Node

    def owner(self, partition: int) -> Node | None:
        """The node coordinating `partition` now, or None while it has no owner (failover)."""
        ...

    def nodes(self) -> list[Node]:
        """The live nodes (Metadata's broker list)."""
        ...

    def owned(self) -> Iterable[int]:
        """The partitions this node owns now."""
        ...

    async def start(self, listener: OwnershipListener) -> None:
        """Begin: `listener.acquired` is called for every partition this node owns (now and later)."""
        ...

    async def stop(self) -> None:
        """Hand every owned partition over (graceful shutdown), calling `listener.lost` for each."""
        ...
