"""Rendezvous hashing, stated independently: one owner among the live nodes, minimal movement."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cohort.coordinator.cluster.ownership import preferred_owner

node_sets = st.sets(st.integers(min_value=0, max_value=1000), min_size=1, max_size=12)


@given(node_sets, st.integers(min_value=0, max_value=49))
def test_the_preferred_owner_is_a_live_node_and_does_not_depend_on_order(nodes, partition):
    owner = preferred_owner(partition, nodes)
    assert owner in nodes
    assert preferred_owner(partition, sorted(nodes, reverse=True)) == owner


@given(node_sets, st.integers(min_value=1001, max_value=2000))
def test_a_joining_node_only_takes_partitions_for_itself(nodes, newcomer):
    for partition in range(50):
        before = preferred_owner(partition, nodes)
        after = preferred_owner(partition, nodes | {newcomer})
        assert after in (before, newcomer)


@given(node_sets.filter(lambda s: len(s) >= 2))
def test_a_leaving_node_moves_only_its_own_partitions(nodes):
    leaving = min(nodes)
    for partition in range(50):
        before = preferred_owner(partition, nodes)
        if before != leaving:
            assert preferred_owner(partition, nodes - {leaving}) == before


def test_fifty_partitions_spread_over_three_nodes():
    counts = [sum(preferred_owner(p, {1, 2, 3}) == n for p in range(50)) for n in (1, 2, 3)]
    assert min(counts) >= 8
