"""The node's reads and writes of groups and offsets, taken to the shard of the group's offsets partition.

Each offsets partition's groups and committed offsets live in that partition's shard
(`shard.GroupCoordinatorShard`), which the partition runtime makes when it loads the partition and drops
when it lets the partition go. The managers answer requests for any group of the node; these views route
a group id to its shard by Kafka's hash rule (what Kafka's `GroupCoordinatorService` does with
`topicPartitionFor` before it schedules an operation on that partition's shard) and walk the loaded shards
for node-wide reads (ListGroups, the reports, metrics). A group of a partition with no shard here is not
there: reads find nothing, and storing one is a `LookupError` (the managers check `serves` first).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import attrgetter

_MISSING = object()


def _not_loaded(partition: int) -> LookupError:
    return LookupError(f"offsets partition {partition} is not loaded on this node")


class ShardGroups:
    """One of the shards' maps by group id (`groups`, `consumer_groups` or `durable_groups`), as one dict.

    `listener(group_id)`, when set, hears of each group stored in any shard (the group overview's index):
    the shards' `TrackedGroups` call `stored`."""

    __slots__ = ("_shards", "_partition_for", "_map_of", "listener")

    def __init__(self, shards: list, partition_for: Callable[[str], int], kind: str) -> None:
        self._shards = shards
        self._partition_for = partition_for
        self._map_of = attrgetter(kind)
        self.listener: Callable[[str], None] | None = None

    def stored(self, group_id: str) -> None:
        if self.listener is not None:
            self.listener(group_id)

    def _map(self, group_id: str) -> dict | None:
        shard = self._shards[self._partition_for(group_id)]
        return None if shard is None else self._map_of(shard)

    def _map_to_store(self, group_id: str) -> dict:
        partition = self._partition_for(group_id)
        shard = self._shards[partition]
        if shard is None:
            raise _not_loaded(partition)
        return self._map_of(shard)

    def _maps(self) -> list[dict]:
        return [self._map_of(shard) for shard in self._shards if shard is not None]

    def get(self, group_id: str, default=None):
        groups = self._map(group_id)
        return default if groups is None else groups.get(group_id, default)

    def __getitem__(self, group_id: str):
        value = self.get(group_id, _MISSING)
        if value is _MISSING:
            raise KeyError(group_id)
        return value

    def __contains__(self, group_id: str) -> bool:
        groups = self._map(group_id)
        return groups is not None and group_id in groups

    def __setitem__(self, group_id: str, value) -> None:
        self._map_to_store(group_id)[group_id] = value

    def __delitem__(self, group_id: str) -> None:
        groups = self._map(group_id)
        if groups is None:
            raise KeyError(group_id)
        del groups[group_id]

    def pop(self, group_id: str, *default):
        groups = self._map(group_id)
        if groups is None:
            if default:
                return default[0]
            raise KeyError(group_id)
        return groups.pop(group_id, *default)

    def __iter__(self) -> Iterator[str]:
        for groups in self._maps():
            yield from list(groups)

    def keys(self) -> list[str]:
        return [group_id for groups in self._maps() for group_id in groups]

    def values(self) -> list:
        return [value for groups in self._maps() for value in groups.values()]

    def items(self) -> list[tuple[str, object]]:
        return [item for groups in self._maps() for item in groups.items()]

    def __len__(self) -> int:
        return sum(len(groups) for groups in self._maps())

    def __bool__(self) -> bool:
        return any(self._maps())


class ShardOffsets:
    """The shards' `OffsetsTable`s as one table to read: a group's offsets are in its partition's shard (they are
    written there by the shard's replay and the commit's answer, into the shard's own table)."""

    __slots__ = ("_shards", "_partition_for", "_on_new_group")

    def __init__(self, shards: list, partition_for: Callable[[str], int]) -> None:
        self._shards = shards
        self._partition_for = partition_for
        self._on_new_group: Callable[[str], None] | None = None

    def watch_new_groups(self, listener: Callable[[str], None]) -> None:
        """Call `listener(group)` whenever a group gets its first offset in any shard."""
        self._on_new_group = listener
        for shard in self._shards:
            if shard is not None:
                shard.offsets.watch_new_groups(listener)

    def new_group_listener(self) -> Callable[[str], None] | None:
        """What a new shard's table calls for a group's first offset."""
        return self._on_new_group

    def _table(self, group: str):
        shard = self._shards[self._partition_for(group)]
        return None if shard is None else shard.offsets

    def _tables(self) -> list:
        return [shard.offsets for shard in self._shards if shard is not None]

    # -- one group's offsets, in its shard ------------------------------------------------------
    def get(self, group: str, topic: str, partition: int):
        table = self._table(group)
        return None if table is None else table.get(group, topic, partition)

    def committed(self, group: str, topic: str, partitions: list[int]) -> list:
        table = self._table(group)
        return [None] * len(partitions) if table is None else table.committed(group, topic, partitions)

    def has_offsets(self, group: str) -> bool:
        table = self._table(group)
        return table is not None and table.has_offsets(group)

    def topics(self, group: str) -> list[str]:
        table = self._table(group)
        return [] if table is None else table.topics(group)

    def partitions(self, group: str, topic: str) -> list[int]:
        table = self._table(group)
        return [] if table is None else table.partitions(group, topic)

    def group_offsets(self, group: str) -> dict:
        table = self._table(group)
        return {} if table is None else table.group_offsets(group)

    def group_offset_count(self, group: str) -> int:
        table = self._table(group)
        return 0 if table is None else table.group_offset_count(group)

    # -- every loaded shard --------------------------------------------------------------------
    def groups(self) -> list[str]:
        return [group for table in self._tables() for group in table.groups()]

    def group_count(self) -> int:
        return sum(table.group_count() for table in self._tables())

    def __len__(self) -> int:
        return sum(len(table) for table in self._tables())

    def items(self) -> Iterator[tuple]:
        for table in self._tables():
            yield from table.items()
