"""`StaticOwnership`: a fixed partition -> node map; its listener hears `acquired` for exactly this node's
partitions at start and `lost` for each at stop."""
from __future__ import annotations

from cohort.coordinator.contracts.ownership import Node
from cohort.coordinator.server.static_ownership import StaticOwnership

NODES = [Node(0, "h", 1), Node(1, "h", 2), Node(2, "h", 3)]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int | None]] = []

    def acquired(self, partition: int, epoch: int) -> None:
        self.events.append(("acquired", partition, epoch))

    def lost(self, partition: int) -> None:
        self.events.append(("lost", partition, None))


async def test_each_partition_has_exactly_one_owner_and_the_listener_hears_only_its_own():
    ownerships = [StaticOwnership(n, NODES, 50) for n in NODES]
    owned = [set(o.owned()) for o in ownerships]
    assert set().union(*owned) == set(range(50)) and sum(map(len, owned)) == 50
    for o in ownerships:
        assert all(o.owner(p) == NODES[[p in s for s in owned].index(True)] for p in range(50))
        assert o.nodes() == NODES
    recorder = Recorder()
    await ownerships[1].start(recorder)
    assert recorder.events == [("acquired", p, 0) for p in sorted(owned[1])]
    recorder.events.clear()
    await ownerships[1].stop()
    assert recorder.events == [("lost", p, None) for p in sorted(owned[1])]


async def test_a_single_node_owns_every_partition():
    single = StaticOwnership.single_node(NODES[0], 50)
    assert list(single.owned()) == list(range(50)) and {single.owner(p) for p in range(50)} == {NODES[0]}
