"""OffsetsTable behaves exactly like a plain dict keyed by (group, topic, partition)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from cohort.coordinator.groups.offsets.table import OffsetAndMetadata, OffsetsTable

groups = st.sampled_from(["g1", "g2", "g3"])
topics = st.sampled_from(["t1", "t2"])
# Mostly small dense numbers, sometimes a huge or negative one (the sparse path).
partitions = st.one_of(st.integers(0, 12), st.integers(-5, 2**31 - 1))
values = st.builds(
    OffsetAndMetadata,
    offset=st.integers(-(2**63) + 1, 2**63 - 1),
    leader_epoch=st.integers(-1, 2**31 - 1),
    metadata=st.sampled_from(["", "", "m", "ü-meta"]),
    commit_timestamp=st.integers(-1, 2**50),
    expire_timestamp=st.integers(-1, 2**50),
)


class OffsetsTableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = OffsetsTable()
        self.model: dict[tuple[str, str, int], OffsetAndMetadata] = {}

    @rule(g=groups, t=topics, p=partitions, v=values)
    def put(self, g, t, p, v):
        self.table.put(g, t, p, v)
        self.model[(g, t, p)] = v

    @rule(g=groups, t=topics, p=partitions)
    def delete(self, g, t, p):
        assert self.table.delete(g, t, p) == ((g, t, p) in self.model)
        self.model.pop((g, t, p), None)

    @rule(g=groups)
    def delete_group(self, g):
        gone = sorted(self.table.delete_group(g))
        expected = sorted((t, p) for (gg, t, p) in self.model if gg == g)
        assert gone == expected
        for t, p in expected:
            del self.model[(g, t, p)]

    @rule(g=groups, t=topics, p=partitions)
    def get(self, g, t, p):
        assert self.table.get(g, t, p) == self.model.get((g, t, p))

    @invariant()
    def same_content(self):
        assert len(self.table) == len(self.model)
        assert sorted(self.table.groups()) == sorted({g for g, _, _ in self.model})
        for g in ("g1", "g2", "g3"):
            expected: dict[str, dict[int, OffsetAndMetadata]] = {}
            for (gg, t, p), v in self.model.items():
                if gg == g:
                    expected.setdefault(t, {})[p] = v
            assert self.table.group_offsets(g) == expected
            assert self.table.has_offsets(g) == bool(expected)
            assert self.table.group_offset_count(g) == sum(map(len, expected.values()))
            assert sorted(self.table.retention_candidates(g)) == sorted(
                (t, p, v.commit_timestamp, v.expire_timestamp) for t, ps in expected.items() for p, v in ps.items()
            )
        assert sorted(self.table.items(), key=repr) == sorted(
            ((g, t, p, v) for (g, t, p), v in self.model.items()), key=repr
        )


OffsetsTableMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_offsets_table_matches_a_dict_model = OffsetsTableMachine.TestCase


def test_metadata_is_stored_only_where_it_is_not_empty():
    table = OffsetsTable()
    table.put("g", "t", 0, OffsetAndMetadata(1, metadata="x"))
    table.put("g", "t", 0, OffsetAndMetadata(2))
    assert table.get("g", "t", 0) == OffsetAndMetadata(2)
    assert table.get("g", "t", 1) is None
    assert table.get("nope", "t", 0) is None


@settings(max_examples=100, deadline=None)
@given(
    partitions=st.lists(st.integers(0, 20), unique=True, min_size=1, max_size=12),
    offsets=st.lists(st.integers(0, 2**40), min_size=12, max_size=12),
    existing=st.booleans(),
)
def test_a_column_wise_run_stores_what_commit_by_commit_puts_store(partitions, offsets, existing):
    from cohort.coordinator.records.types import OffsetCommitRun

    n = len(partitions)
    from array import array

    slots = array("q", [x for o in offsets[:n] for x in (o, 3, 7, -1)])
    run = OffsetCommitRun("g", "t", tuple(partitions), slots)
    by_run, by_put = OffsetsTable(), OffsetsTable()
    if existing:
        for table in (by_run, by_put):
            table.put("g", "t", 99, OffsetAndMetadata(1))
    by_run.put_run(run)
    for p, o in zip(partitions, offsets):
        by_put.put("g", "t", p, OffsetAndMetadata(o, 3, "", 7, -1))
    assert by_run.group_offsets("g") == by_put.group_offsets("g")
    assert len(by_run) == len(by_put)


def test_a_partition_stored_sparsely_stays_counted_once_when_the_slots_grow_past_it():
    from cohort.coordinator.groups.offsets.table import OffsetAndMetadata, OffsetsTable

    table = OffsetsTable()
    table.put("g1", "t1", 65, OffsetAndMetadata(1))   # far from 0 in an empty topic: stored sparsely
    table.delete("g1", "t1", 0)
    table.put("g1", "t1", 65, OffsetAndMetadata(2))   # now within the dense range of a topic of one offset
    table.put_fields("g1", "t1", 65, 3, -1, "", -1, -1)

    assert len(table) == 1
    assert table.get("g1", "t1", 65).offset == 3
    assert table.group_offset_count("g1") == 1
