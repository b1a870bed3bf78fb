"""The record batch: validation of its lengths, and the newest-first merge recovery builds the live records with."""
from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.coordinator.log.batch import (
    ATTR_TOMBSTONES,
    CRC_START,
    HEADER_SIZE,
    BatchError,
    KeyRuns,
    encode_batch,
    iter_batches,
    read_batch,
)


def _with_lengths(batch: bytes, key_lengths: list[int], value_lengths: list[int], attributes: int | None = None
                  ) -> bytes:
    """`batch` with its length arrays (and attributes) replaced and its CRC made valid again."""
    n = len(key_lengths)
    out = bytearray(batch)
    struct.pack_into(f">{2 * n}i", out, HEADER_SIZE, *key_lengths, *value_lengths)
    if attributes is not None:
        out[CRC_START + 1] = attributes
    struct.pack_into(">I", out, 12, crc32c.crc32c(bytes(out[CRC_START:])))
    return bytes(out)


def test_a_batch_with_tombstones_reads_back():
    batch = encode_batch(0, 1, [b"k1", b"k2"], [b"v", None])
    view = read_batch(batch, 0, 0)
    assert view.keys_values(batch) == ([b"k1", b"k2"], [b"v", None])


def test_a_tombstone_in_a_batch_not_marked_as_having_them_is_refused():
    batch = encode_batch(0, 1, [b"k1", b"k2"], [b"v", None])
    unmarked = _with_lengths(batch, [2, 2], [1, -1], attributes=batch[CRC_START + 1] & ~ATTR_TOMBSTONES)
    with pytest.raises(BatchError, match="not marked as having tombstones"):
        read_batch(unmarked, 0, 0)


@pytest.mark.parametrize("key_lengths,value_lengths", [
    ([2, 3], [1, 1]),  # one byte more than the batch holds
    ([2, 1], [1, 1]),  # one byte less
    ([-2, 2], [1, 1]),  # a negative key length
    ([2, 2], [1, -2]),  # a value length below -1
])
def test_lengths_that_do_not_add_up_are_refused(key_lengths, value_lengths):
    batch = encode_batch(0, 1, [b"k1", b"k2"], [b"v", b"w"])
    marked = ATTR_TOMBSTONES if min(key_lengths + value_lengths) < 0 else None
    bad = _with_lengths(batch, key_lengths, value_lengths, attributes=marked)
    with pytest.raises(BatchError, match="do not add up"):
        read_batch(bad, 0, 0)


# --- the newest-first merge -----------------------------------------------------------------------------------
_keys = st.sampled_from([b"a", b"bb", b"ab", b"b", b"", b"ccc"])
_values = st.one_of(st.none(), st.binary(min_size=1, max_size=3))
_batch = st.lists(st.tuples(_keys, _values), min_size=1, max_size=6)


def _latest_by_model(batches: list[list[tuple[bytes, bytes | None]]]) -> dict[bytes, bytes | None]:
    """Kafka's rule, stated directly: a key's latest record is its last one in log order."""
    latest: dict[bytes, bytes | None] = {}
    for batch in batches:
        for key, value in batch:
            latest[key] = value
    return latest


def _merged(segment: bytes, key_runs: KeyRuns | None) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for view in reversed(list(iter_batches(segment))):
        view.merge_older_into(segment, latest, key_runs)
    return latest


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_batch, st.integers(0, 20)), min_size=1, max_size=25), st.integers(0, 64))
def test_merging_newest_first_keeps_each_keys_latest_record(plan, budget):
    """Integers in the plan repeat an earlier batch's keys (with new values), as a consumer's next commit does."""
    batches: list[list[tuple[bytes, bytes | None]]] = []
    for step in plan:
        if isinstance(step, int):
            if not batches:
                continue
            earlier = batches[step % len(batches)]
            step = [(key, (value or b"") + b"'") for key, value in earlier]
        batches.append(step)
    segment, offset = b"", 0
    for batch in batches:
        segment += encode_batch(offset, 1, [k for k, _ in batch], [v for _, v in batch])
        offset += len(batch)
    expected = _latest_by_model(batches)
    assert _merged(segment, None) == expected
    assert _merged(segment, KeyRuns()) == expected
    assert _merged(segment, KeyRuns(budget_bytes=budget)) == expected


def test_a_repeated_key_run_is_recognised_and_a_different_split_of_the_same_bytes_is_not():
    runs = KeyRuns()
    assert not runs.seen(struct.pack(">2i", 1, 2), b"abc")
    assert runs.seen(struct.pack(">2i", 1, 2), b"abc")
    assert not runs.seen(struct.pack(">2i", 2, 1), b"abc")  # keys "ab", "c": not the run "a", "bc"


def test_key_runs_beyond_the_budget_are_not_kept():
    runs = KeyRuns(budget_bytes=12)
    assert not runs.seen(struct.pack(">i", 4), b"abcd")  # 8 bytes: kept
    assert not runs.seen(struct.pack(">i", 4), b"efgh")  # 8 more: over the budget, not kept
    assert runs.seen(struct.pack(">i", 4), b"abcd")
    assert not runs.seen(struct.pack(">i", 4), b"efgh")
