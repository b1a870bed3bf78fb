"""`StaticOwnership`: a fixed partition -> node map (single node, and `cohort serve --workers N`).

The `Ownership` of `cohort.coordinator.contracts.ownership` without leases: nobody ever takes a partition from
anybody, so `start` acquires this node's share once and `stop` gives it up. The split of `--workers N`
is `worker_for_partition`: partition p belongs to worker ``p mod N`` -- stable for a given N, spread
evenly, and independent of ports and node ids (the data layout never depends on it either: each partition
directory has one owner at a time and each process writes journals of its own, see
`cohort.coordinator.log`).

Metadata's broker list is every worker; the owner of offsets partition 0 also keeps the topic
registry (its records live in that partition), so it is the controller and the leader of every topic
partition.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from cohort.coordinator.contracts.ownership import Node, OwnershipListener

TOPIC_REGISTRY_PARTITION = 0


def worker_for_partition(partition: int, workers: int) -> int:
    """The worker index that owns `partition` under `--workers workers`."""
    return partition % workers


def partitions_of_worker(index: int, workers: int, num_partitions: int) -> list[int]:
    return [p for p in range(num_partitions) if worker_for_partition(p, workers) == index]


class StaticOwnership:
    """Node `local` among `nodes`; partition p is owned by ``nodes[worker_for_partition(p, len(nodes))]``."""

    def __init__(self, local: Node, nodes: Sequence[Node], num_partitions: int) -> None:
        if local not in nodes:
            raise ValueError(f"{local} is not one of the nodes")
        self.local = local
        self._nodes = list(nodes)
        self.num_partitions = num_partitions
        self._owners = [self._nodes[worker_for_partition(p, len(self._nodes))] for p in range(num_partitions)]
        self._owned = [p for p, node in enumerate(self._owners) if node == local]
        self._listener: OwnershipListener | None = None

    @classmethod
    def single_node(cls, local: Node, num_partitions: int) -> "StaticOwnership":
        return cls(local, [local], num_partitions)

    def owner(self, partition: int) -> Node | None:
        return self._owners[partition]

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def peers(self) -> list[Node]:
        """Every node but this one."""
        return [n for n in self._nodes if n != self.local]

    def owned(self) -> Iterable[int]:
        return list(self._owned)

    async def start(self, listener: OwnershipListener) -> None:
        self._listener = listener
        for p in self._owned:
            listener.acquired(p, 0)

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            for p in self._owned:
                listener.lost(p)
