"""`GroupCoordinatorShard`: one offsets partition's groups and committed offsets (Kafka's `GroupCoordinatorShard`).

The partition runtime makes a shard when it loads its partition, replays the partition's records into it
(`replay_chunk` while loading, `replay_durable` after each write) and drops it when the partition goes
(`unload`): what a partition holds lives and dies with it, and nothing of another partition is touched.
A shard holds state only; what a record means for a group (its engine, its timers) is the managers', which
the shard calls for the groups it holds.
"""
from __future__ import annotations

from cohort.coordinator.groups.offsets.table import OffsetsTable
from cohort.coordinator.groups.tracked_groups import TrackedGroups
from cohort.coordinator.records.types import (
    RECORD_TYPES,
    GroupJournalRecord,
    GroupJournalTombstone,
    GroupMetadataRecord,
    GroupMetadataTombstone,
    OffsetCommitRecord,
    OffsetCommitRun,
    OffsetCommitSourceRecord,
    OffsetCommitSourceTombstone,
    OffsetCommitTombstone,
    Record,
    decode_for_load,
)
from cohort.protocol.errors import ErrorCode

E = ErrorCode

# Records of KIP-848 consumer groups (Kafka's key types 3-8), records and tombstones: replayed into the group.
CONSUMER_GROUP_RECORDS = frozenset(cls for key in (3, 5, 6, 7, 8) if key in RECORD_TYPES
                                   for cls in (RECORD_TYPES[key].record, RECORD_TYPES[key].tombstone))
# Records that only the log's history reads (never live state).
_HISTORY_ONLY = (OffsetCommitSourceRecord, OffsetCommitSourceTombstone)
# A group record's type, the first part of its key in `durable_groups` (the member id is the second).
_RECORD_KEY_TYPE = {cls: key for key, rt in RECORD_TYPES.items() if key in (2, 3, 5, 6, 7, 8)
                    for cls in (rt.record, rt.tombstone)}


class GroupCoordinatorShard:
    """The groups (classic and consumer: a group id in at most one), committed offsets and last durable group
    records of one offsets partition, and the replay of its records into them."""

    __slots__ = ("partition", "groups", "consumer_groups", "offsets", "durable_groups", "_coordinator")

    def __init__(self, partition: int, coordinator, classic_stored, consumer_stored, offsets_new_group) -> None:
        """`coordinator` (`coordinator.GroupCoordinator`): the managers a record's meaning belongs to;
        `classic_stored`, `consumer_stored` and `offsets_new_group` hear of each group stored here and of each
        group's first offset (the node-wide views' listeners: the group overview's index)."""
        self.partition = partition
        self._coordinator = coordinator
        self.groups: dict = TrackedGroups()
        self.groups.listener = classic_stored
        self.consumer_groups: dict = TrackedGroups()
        self.consumer_groups.listener = consumer_stored
        self.offsets = OffsetsTable()
        self.offsets.watch_new_groups(offsets_new_group)
        # group id -> its group records as durable (record key -> record): what a group whose write failed
        # is rebuilt from (the last durable point).
        self.durable_groups: dict[str, dict[tuple, Record]] = {}

    # -- the partition runtime's side ----------------------------------------------------------
    def replay_chunk(self, records: list[tuple[bytes, bytes]], loaded_groups: set[str]) -> None:
        """Replay a chunk of the partition's live records (each key once, commits column-wise: `decode_for_load`)."""
        groups, consumer_groups = self.groups, self.consumer_groups
        offsets_manager = self._coordinator.offsets_manager
        for item in decode_for_load(records):
            if type(item) is OffsetCommitRun:
                group_id = item.group
                if group_id not in groups and group_id not in consumer_groups:
                    groups[group_id] = self._coordinator.group_manager.new_group(group_id)
                loaded_groups.add(group_id)
                self.offsets.put_run(item)
                offsets_manager.raise_high_watermarks(item.topic, item.partitions, item.offsets)
            else:
                self.replay(item)
                group_id = getattr(item, "group", None)
                if group_id is not None:
                    loaded_groups.add(group_id)

    def replay_durable(self, records: list[Record]) -> None:
        """Records a write made durable: the same replay as the load's, except that a group's own records
        (made by its engine, which holds them already) only become its last durable point."""
        for record in records:
            kind = type(record)
            if kind is GroupMetadataRecord or kind in CONSUMER_GROUP_RECORDS:
                self._remember(record)
            else:
                self.replay(record)

    def replay(self, record: Record) -> None:
        """Apply one record read back from the log (no writes, no timers)."""
        coordinator = self._coordinator
        kind = type(record)
        if kind is OffsetCommitRecord:
            if record.group not in self.groups and record.group not in self.consumer_groups:
                self.groups[record.group] = coordinator.group_manager.new_group(record.group)
            coordinator.offsets_manager.apply_commit(self.offsets, record)
        elif kind is OffsetCommitTombstone:
            self.offsets.delete(record.group, record.topic, record.partition)
        elif kind is GroupMetadataRecord:
            self._remember(record)
            group = self.groups.get(record.group)
            if group is None:
                group = self.groups[record.group] = coordinator.group_manager.new_group(record.group)
            coordinator.group_manager.runtime.load(group, record)
        elif kind is GroupMetadataTombstone:
            self._remember(record)
            group = self.groups.get(record.group)
            if group is not None:
                coordinator.group_manager.drop_group(group)
        elif kind in CONSUMER_GROUP_RECORDS:
            self._remember(record)
            coordinator.group_manager.replay_consumer_group_record(record)
        elif kind is GroupJournalRecord:
            coordinator.reports.journal.apply(record)
        elif kind is GroupJournalTombstone:
            coordinator.reports.journal.forget([record.group])
        elif kind in _HISTORY_ONLY:
            pass  # read back by the offset history, not kept in memory
        else:
            coordinator.other_record(record)

    def _remember(self, record: Record) -> None:
        """Keep a group record as the group's last durable point (a tombstone forgets its key)."""
        group_id = record.group
        kind = type(record)
        key = (_RECORD_KEY_TYPE[kind], getattr(record, "member_id", None))
        kept = self.durable_groups.get(group_id)
        if kind.__name__.endswith("Tombstone"):
            if kept is not None:
                kept.pop(key, None)
                if kind is GroupMetadataTombstone:
                    kept.pop((_RECORD_KEY_TYPE[GroupMetadataRecord], None), None)
                if not kept:
                    del self.durable_groups[group_id]
        else:
            if kept is None:
                kept = self.durable_groups[group_id] = {}
            kept[key] = record

    def loaded(self, loaded_groups: set[str]) -> None:
        """Every record of the partition is replayed: its groups' timers start."""
        runtime = self._coordinator.group_manager.runtime
        for group_id in loaded_groups:
            group = self.groups.get(group_id) or self.consumer_groups.get(group_id)
            if group is not None:
                runtime.load_completed(group)

    def unload(self) -> None:
        """The partition is no longer served here: its groups' parked requests answer NOT_COORDINATOR and their
        timers stop; the shard itself is dropped by the runtime, with every group and offset it held."""
        coordinator = self._coordinator
        runtime = coordinator.group_manager.runtime
        for groups in (self.groups, self.consumer_groups):
            for group in list(groups.values()):
                runtime.unload(group, E.NOT_COORDINATOR)
            groups.clear()
        coordinator.offsets_manager.forget_partition(self.partition)
        coordinator.reports.forget_partition(self.partition)
