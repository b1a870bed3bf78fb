"""The sink's per-batch decision, without Spark: merge, idempotence by batch id, never backwards."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.client.spark.commit_plan import (
    CommitMarker,
    CommittedOffset,
    QueryConflict,
    merge_next_offsets,
    next_offsets,
    plan_batch_commit,
)
from cohort.client.topic_partition import TopicPartition

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
Q, OTHER = "query-a", "query-b"


def stamped(offset: int, query: str, batch: int) -> CommittedOffset:
    return CommittedOffset(offset, CommitMarker(query, batch).encode())


def test_next_offsets_is_max_plus_one_per_partition():
    rows = [("t", 0, 5), ("t", 0, 9), ("t", 1, 0), ("u", 0, 41), ("t", 0, 7)]
    assert next_offsets(rows) == {T0: 10, T1: 1, U0: 42}


@pytest.mark.parametrize("row", [(None, 0, 1), ("t", None, 1), ("t", 0, None), ("t", -1, 1), ("t", 0, -5), ("t", 2**31, 1)])
def test_next_offsets_refuses_null_or_negative_fields(row):
    with pytest.raises(ValueError, match="row with"):
        next_offsets([row])


rows_strategy = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.integers(0, 10**12)))


@given(st.lists(rows_strategy, max_size=6))
@settings(max_examples=60, deadline=None)
def test_merging_task_maps_equals_one_pass_over_all_rows(tasks):
    merged = merge_next_offsets([next_offsets(rows) for rows in tasks] + [None])
    assert merged == next_offsets([row for rows in tasks for row in rows])


@given(st.text(max_size=40), st.integers(-1, 2**62))
@settings(max_examples=60, deadline=None)
def test_marker_round_trips(query, batch):
    assert CommitMarker.decode(CommitMarker(query, batch).encode()) == CommitMarker(query, batch)


@pytest.mark.parametrize("metadata", [None, "", "hello", "cohort-spark:", "cohort-spark:{", "cohort-spark:[1]",
                                      'cohort-spark:{"query":1,"batch":2}', 'cohort-spark:{"query":"q","batch":true}'])
def test_foreign_or_damaged_metadata_is_not_a_marker(metadata):
    assert CommitMarker.decode(metadata) is None


def test_first_batch_commits_its_offsets_with_the_marker():
    plan = plan_batch_commit("g", Q, 0, {T0: 10, T1: 3}, {})
    assert not plan.skip
    assert plan.offsets == {T0: 10, T1: 3}
    assert plan.marker == CommitMarker(Q, 0)


@pytest.mark.parametrize("stored_batch", [4, 5])
def test_a_batch_not_newer_than_the_stored_one_is_skipped(stored_batch):
    committed = {T0: stamped(10, Q, stored_batch), T1: stamped(3, Q, stored_batch - 1)}
    plan = plan_batch_commit("g", Q, 4, {T0: 10, T1: 3}, committed)
    assert plan.skip and plan.skipped_replay_of == stored_batch
    assert plan.offsets == {}


def test_a_newer_batch_commits():
    plan = plan_batch_commit("g", Q, 6, {T0: 12}, {T0: stamped(10, Q, 5)})
    assert plan.offsets == {T0: 12} and not plan.skip


def test_an_offset_never_moves_backwards():
    committed = {T0: stamped(50, Q, 5), T1: CommittedOffset(7, "someone else")}
    plan = plan_batch_commit("g", Q, 6, {T0: 40, T1: 3, U0: 1}, committed)
    assert plan.offsets == {T0: 50, T1: 7, U0: 1}
    assert plan.held_back == {T0: (40, 50), T1: (3, 7)}


def test_another_query_is_refused_with_a_message_naming_group_and_queries():
    with pytest.raises(QueryConflict, match=r"'g'.*query-b.*batch 9.*query-a.*allowQueryTakeover"):
        plan_batch_commit("g", Q, 0, {T0: 1}, {T1: stamped(5, OTHER, 9)})


def test_take_over_restamps_the_previous_owner_partitions():
    committed = {T0: stamped(10, OTHER, 9), T1: stamped(5, OTHER, 9)}
    plan = plan_batch_commit("g", Q, 0, {T0: 12}, committed, allow_query_takeover=True)
    assert plan.offsets == {T0: 12, T1: 5}
    assert plan.taken_over_from == {OTHER}
    # After the take-over every partition carries the new owner's marker: the next batch is not refused.
    after = {tp: CommittedOffset(o, plan.marker.encode()) for tp, o in plan.offsets.items()}
    assert plan_batch_commit("g", Q, 1, {T0: 13}, after).offsets == {T0: 13}


@given(
    st.dictionaries(st.sampled_from([T0, T1, U0]), st.integers(0, 100)),
    st.dictionaries(st.sampled_from([T0, T1, U0]), st.integers(0, 100)),
    st.integers(0, 5),
    st.integers(0, 5),
)
@settings(max_examples=100, deadline=None)
def test_plan_never_lowers_a_committed_offset(batch, current, stored_batch, batch_id):
    committed = {tp: stamped(o, Q, stored_batch) for tp, o in current.items()}
    plan = plan_batch_commit("g", Q, batch_id, batch, committed)
    if batch_id <= stored_batch and committed:
        assert plan.skip
    for tp, offset in plan.offsets.items():
        assert offset >= current.get(tp, 0)
        assert offset == max(batch.get(tp, -1), current.get(tp, -1))
    assert set(plan.offsets) <= set(batch) | set(current)
