"""The partition lifecycle table: Kafka's coordinator-state rules, stated independently here."""
from hypothesis import given, strategies as st

import pytest

from cohort.coordinator.contracts.partition_lifecycle import (
    IllegalPartitionTransition,
    PartitionLifecycle as L,
    PartitionStates,
)

# The rules as a reader of Kafka's CoordinatorState would state them, plus Cohort's claim and release:
# a partition is claimed only from unowned, loaded only after loading, served only after loading
# succeeded, every state may be dropped to unowned at once except unowned itself, and a shutdown closes
# every state for good.
ALLOWED = {
    (L.UNOWNED, L.CLAIMING), (L.UNOWNED, L.LOADING), (L.CLAIMING, L.LOADING), (L.FAILED, L.LOADING),
    (L.LOADING, L.LOADED), (L.LOADING, L.FAILED), (L.LOADED, L.FAILED),
    (L.LOADING, L.RELEASING), (L.LOADED, L.RELEASING), (L.FAILED, L.RELEASING),
} | {(s, L.UNOWNED) for s in L if s not in (L.UNOWNED, L.CLOSED)} | {(s, L.CLOSED) for s in L if s is not L.CLOSED}


@given(st.lists(st.sampled_from(list(L)), max_size=40))
def test_moves_follow_the_rules_and_the_sets_follow_the_moves_and_watchers_see_each_one(targets):
    states = PartitionStates([7])
    seen: list[tuple[int, L, L]] = []
    states.watch(lambda partition, old, new: seen.append((partition, old, new)))
    current = L.UNOWNED
    for new in targets:
        if new is current or (current, new) in ALLOWED:
            assert states.move(7, new) is current
            if new is not current:
                assert seen.pop() == (7, current, new)
            assert not seen  # one call per move, none for staying put
            current = new
        else:
            with pytest.raises(IllegalPartitionTransition):
                states.move(7, new)
            assert not seen  # a refused move is not reported
        assert states[7] is current
        assert [s for s in L if 7 in states.in_state[s]] == [current]
        assert (7 in states.loaded) == (current is L.LOADED)


def test_a_partition_never_seen_is_unowned():
    states = PartitionStates()
    assert states[3] is L.UNOWNED
    states.move(3, L.LOADING)
    assert states.partitions(L.LOADING, L.LOADED) == [3]
