"""`Store`: what the coordinator needs from durability, whatever keeps the bytes.

The coordinator (group engine runtime, offsets table, topic registry) talks to storage only through
this interface, per coordinator partition (Kafka's `__consumer_offsets` partition: hash of the group
id mod `offsets.topic.num.partitions`). It never learns whether records sit in the local log
(`cohort.coordinator.log`, single node and `--workers`) or in etcd (cluster mode).

Records are ``(key, value)`` byte pairs as declared in `cohort.coordinator.records.types`; ``value=None``
is a tombstone. Storage knows records, not groups: compaction keeps the latest value per key.

Life of a partition on one node::

    await store.open()                           # once: node-wide set-up (no partition owned yet)
    async for chunk in store.load(p, epoch):     # the live records, latest value per key, in chunks
        replay(chunk)
    await store.append(p, records)               # a future: done once durable, or fails with StorageError
    await store.release(p)                       # stop owning p: in-flight appends finish first
    await store.close()

Offset history (optional): a store that keeps superseded records for a while (the local log, for
`offsets.history.retention.ms`) also has ``async history(partition, key_prefixes)`` -> (append time ms,
key, value) of every record it still holds of those keys, oldest first. The etcd store has none: it
keeps the latest value per key only, and the coordinator says so when asked for a history.

Hurry (optional): a store that syncs appends in rounds (the local log) also has ``hurry()``: start the
round of what is queued now rather than at the end of the loop turn. The node calls it for a commit made
while a rebalance burst makes that turn long.

Fencing: `load` is given the ownership epoch the node won `p` with (always 0 on the local log).
Every `append` is guarded by it: when another node has taken `p` since, the append fails with
`StorageError` with ``error_code=NOT_COORDINATOR`` and nothing of it is kept; the coordinator then
drops the partition.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from cohort.coordinator.contracts.partition_lifecycle import PartitionStates
from cohort.protocol.errors import ErrorCode

Record = tuple[bytes, bytes | None]


class StorageError(Exception):
    """An append (or the log) failed; `error_code` is the Kafka error to map for the client.

    KAFKA_STORAGE_ERROR for disk failures (the coordinator maps it to
    NOT_COORDINATOR), COORDINATOR_LOAD_IN_PROGRESS for a partition not loaded
    yet, NOT_COORDINATOR for a failed partition, a closed log or a lost
    ownership epoch.
    """

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.KAFKA_STORAGE_ERROR,
                 errno: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.errno = errno


class LogLoadError(Exception):
    """Some partitions could not be loaded (damage that is not a torn tail, or unreadable files)."""

    def __init__(self, errors: dict[int, Exception]) -> None:
        lines = [f"partition {p}: {e}" for p, e in sorted(errors.items())]
        super().__init__("offsets log failed to load: " + "; ".join(lines))
        self.errors = errors


class Store(Protocol):
    num_partitions: int
    # The node's one tracker of its partitions (`cohort.coordinator.contracts.partition_lifecycle`): the
    # partition runtime takes it as its own. The store reads it on every append (only LOADED partitions
    # take appends) and moves it: to LOADING when loaded on its own (tools), to LOADED once a load's last
    # chunk was taken, to FAILED when a load, the disk or a fenced write fails the partition, to UNOWNED
    # once a release finished (to RELEASING first when released on its own).
    states: PartitionStates

    async def open(self) -> None:
        """Node-wide set-up before any partition is loaded."""
        ...

    def load(self, partition: int, epoch: int) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """The live records of `partition` (no tombstones, each key once), in chunks.

        Raises `LogLoadError`/`StorageError` when the partition cannot be served (damage, lost
        ownership); the coordinator then answers NOT_COORDINATOR for its groups.
        """
        ...

    def append(self, partition: int, records: Sequence[Record]) -> asyncio.Future:
        """A future done once `records` are durable (replicated, in cluster mode); all or nothing.

        A future, not a coroutine, so a caller that only waits (a commit) needs no task of its own:
        it adds a done-callback. Errors, even refusals known at once, fail the future.
        """
        ...

    async def release(self, partition: int) -> None:
        """Give `partition` up: appends already accepted finish, later ones raise NOT_COORDINATOR."""
        ...

    def partition_error(self, partition: int) -> Exception | None:
        """Why the store moved `partition` to FAILED (a damaged load, a disk error, a fenced write), if it did."""
        ...

    async def close(self) -> None: ...
