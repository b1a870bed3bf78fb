"""`CoordinatorResult`: what an operation hands the write gate (Kafka's `CoordinatorResult`).

An operation (a commit, a deletion, an engine's records, a journal entry, a credential, a topic) decides
synchronously, without waiting for anything, and returns the records it wants written and how it answers.
`PartitionRuntime.write` is the one gate: it appends the records, and once they are durable replays them
into memory through the shard's `replay` (the load's replay) and calls `then(state, error)` for the answer;
when the append fails, nothing is replayed and `then` hears the error Kafka's coordinator maps it to.
"""
from __future__ import annotations

from collections.abc import Callable


class CoordinatorResult:
    """Records to append and the answer once they are durable.

    `records`: typed records (`records.types`), or, with `encoded`, (key, value) pairs already encoded (the
    commit path encodes its records field by field). `replay`: replay the typed records into memory once
    durable (False when the maker already holds what they say: an engine's own records, a commit applied
    by `then` column-wise). `then(state, error)` makes the answer (`state` rather than a closure: one
    object less per commit; None: the result itself, as a commit, which is its own result, is given); `then`
    None: the write answers its error code (NONE once durable).
    """

    __slots__ = ("records", "then", "state", "encoded", "replay")

    def __init__(self, records: list, then: Callable[[object, int], object] | None = None, state: object = None,
                 *, encoded: bool = False, replay: bool = True) -> None:
        self.records = records
        self.then = then
        self.state = state
        self.encoded = encoded
        self.replay = replay and not encoded
