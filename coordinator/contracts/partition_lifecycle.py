"""The life of an offsets partition on one node: one enum, one table and one tracker for every layer.

Kafka's coordinator runtime keeps one `CoordinatorState` per `__consumer_offsets` partition with the
states each may be entered from. A Cohort node keeps one tracker (`PartitionStates`) of its partitions,
made by its store (`Store.states`) and taken by the partition runtime and the ownership; each reads it
and moves it for its part of the life:

* the ownership (`cohort.coordinator.cluster.ownership`) moves UNOWNED -> CLAIMING while it claims in etcd
  (-> UNOWNED when the claim is lost) and follows the rest through `watch`;
* the partition runtime moves UNOWNED/CLAIMING/FAILED -> LOADING when it acquires a partition, LOADING ->
  FAILED when it cannot replay a record, -> RELEASING when the partition is lost, and every partition to
  CLOSED at shutdown;
* the store (the local log; the etcd store) moves LOADING -> LOADED once a load's last chunk was taken,
  LOADING/LOADED -> FAILED when the load, the disk or a fenced write fails the partition, RELEASING ->
  UNOWNED once its release finished (its accepted appends done); called on its own (tools, tests) it
  also moves the partition to LOADING and RELEASING itself. It takes appends only for LOADED partitions.

CLOSED is never left. An illegal move raises loudly.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Iterable


class PartitionLifecycle(enum.Enum):
    UNOWNED = "unowned"  # not this node's: never claimed, or released
    CLAIMING = "claiming"  # asking to own it (cluster mode's create-if-absent claim in etcd)
    LOADING = "loading"  # owned; its records are being read (its groups answer COORDINATOR_LOAD_IN_PROGRESS)
    LOADED = "loaded"  # owned and served
    FAILED = "failed"  # owned, but its load, its disk or a fenced write failed it: NOT_COORDINATOR until loaded again
    RELEASING = "releasing"  # being let go: parked requests answered, the store's release under way
    CLOSED = "closed"  # the node shuts down: answers COORDINATOR_NOT_AVAILABLE; its release still runs (terminal)


L = PartitionLifecycle
# Every legal move: state -> the states it may be entered from (Kafka's `CoordinatorState.canTransitionFrom`).
ENTERED_FROM: dict[PartitionLifecycle, frozenset[PartitionLifecycle]] = {
    L.CLAIMING: frozenset({L.UNOWNED}),
    L.LOADING: frozenset({L.UNOWNED, L.CLAIMING, L.FAILED}),
    L.LOADED: frozenset({L.LOADING}),
    L.FAILED: frozenset({L.LOADING, L.LOADED}),
    L.RELEASING: frozenset({L.LOADING, L.LOADED, L.FAILED}),
    L.UNOWNED: frozenset({L.CLAIMING, L.LOADING, L.LOADED, L.FAILED, L.RELEASING}),
    L.CLOSED: frozenset(s for s in PartitionLifecycle if s is not PartitionLifecycle.CLOSED),
}
# Where the partition is this node's to serve or to load.
OWNED_STATES = frozenset({L.LOADING, L.LOADED, L.FAILED})


class IllegalPartitionTransition(RuntimeError):
    """A move the table does not allow: a bug in whoever asked for it."""


def check_transition(partition: int, old: PartitionLifecycle, new: PartitionLifecycle) -> None:
    if old not in ENTERED_FROM[new]:
        raise IllegalPartitionTransition(f"partition {partition}: {old.value} -> {new.value} is not a legal move")


class PartitionStates:
    """Each partition's state, moved only through `move` (checked against the table).

    `in_state[s]` is the set of partitions in state s, kept up to date, so the hot path asks
    `p in states.loaded` at the cost of one set lookup.
    """

    __slots__ = ("_state", "in_state", "loaded", "_watchers")

    def __init__(self, partitions: Iterable[int] = ()) -> None:
        self._state: dict[int, PartitionLifecycle] = {}
        self._watchers: list[Callable[[int, PartitionLifecycle, PartitionLifecycle], None]] = []
        self.in_state: dict[PartitionLifecycle, set[int]] = {s: set() for s in PartitionLifecycle}
        self.loaded = self.in_state[L.LOADED]
        for p in partitions:
            self._state[p] = L.UNOWNED
            self.in_state[L.UNOWNED].add(p)

    def __getitem__(self, partition: int) -> PartitionLifecycle:
        return self._state.get(partition, L.UNOWNED)

    def move(self, partition: int, new: PartitionLifecycle) -> PartitionLifecycle:
        """Move `partition` to `new` (raises `IllegalPartitionTransition`); returns the state it left."""
        old = self._state.get(partition, L.UNOWNED)
        if old is new:
            return old
        check_transition(partition, old, new)
        self.in_state[old].discard(partition)
        self.in_state[new].add(partition)
        self._state[partition] = new
        for watcher in self._watchers:
            watcher(partition, old, new)
        return old

    def watch(self, watcher: Callable[[int, PartitionLifecycle, PartitionLifecycle], None]) -> None:
        """Call `watcher(partition, old, new)` after every move (e.g. the ownership follows the loads)."""
        self._watchers.append(watcher)

    def partitions(self, *states: PartitionLifecycle) -> list[int]:
        """The partitions in any of `states`, in order."""
        return sorted(p for s in states for p in self.in_state[s])

    def items(self) -> list[tuple[int, PartitionLifecycle]]:
        return sorted(self._state.items())
