"""The operator journal of each group: its rebalances and the admin actions taken on it.

Kafka keeps no record of why a group rebalanced or who reset its offsets; operators dig through broker
logs. Here each finished rebalance (a `RebalanceJournaled` effect of an engine) and each admin action
(offset reset, offset delete, group delete) becomes one entry, persisted as a type-103 record through
the `Store` and replayed at start-up. The record key is (group, sequence mod `group.journal.max.entries`),
so a group's entries form a ring that compaction keeps at the last N without any cleanup pass.

`GroupJournal` holds the entries in memory, per group, oldest first; it builds records (`*_record`) and
takes them back once durable (`apply`) or at replay. It never writes: the coordinator owns the write path.
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from cohort.coordinator.groups.effects import RebalanceJournaled
from cohort.coordinator.records.types import (
    GroupJournalRecord,
    GroupJournalTombstone,
    JournalMemberRecord,
    PartitionMoveRecord,
)
from cohort.protocol.consumer_protocol import decode_assignment

# Why a rebalance started (engines map their causes onto these words).
TRIGGERS = ("member_joined", "member_left", "session_expired", "rebalance_timeout", "metadata_changed",
            "static_member_replaced", "topic_change", "admin_action", "storage_error", "over_max_size")
# What an admin did (entries of kind "admin").
ADMIN_ACTIONS = ("reset_offsets", "delete_offsets", "delete_group")
# How a member took part: it caused the rebalance, joined, was removed (left, replaced), its session
# expired during the rebalance, it was dropped for not rejoining within the rebalance timeout, or it sent
# the admin request.
MEMBER_ROLES = ("cause", "joined", "removed", "expired", "rebalance_timeout", "admin")
MAX_MOVES_KEPT = 1000  # per entry; `moves_total` counts them all
_DETAIL_PARTITIONS = 20  # an admin entry names at most this many partitions


@dataclass(slots=True, frozen=True)
class JournalMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    role: str


@dataclass(slots=True, frozen=True)
class PartitionMove:
    topic: str
    partition: int
    from_member: str | None  # None: the partition was unassigned before
    to_member: str | None    # None: nobody owns it now


@dataclass(slots=True, frozen=True)
class JournalEntry:
    """One journal entry, as the read API (CLI, console) sees it; times are epoch milliseconds."""

    group: str
    sequence: int
    kind: str          # "rebalance" | "admin"
    group_type: str    # "classic" | "consumer"
    started_ms: int
    ended_ms: int
    epoch_before: int  # generation (classic) or group epoch (consumer)
    epoch_after: int
    trigger: str       # a word of TRIGGERS, or of ADMIN_ACTIONS for admin entries
    client_reason: str | None
    detail: str
    state_after: str
    principal: str | None
    members: tuple[JournalMember, ...]
    moves: tuple[PartitionMove, ...]
    moves_total: int

    @property
    def duration_ms(self) -> int:
        return max(self.ended_ms - self.started_ms, 0)

    def to_json(self, topic_visible: Callable[[str], bool] | None = None) -> dict:
        """The JSON shape the private admin API, the CLI and the console share, naming only the topics
        `topic_visible` admits (None: all): other partition moves and admin changes are left out, and
        counts that would include them (`moves_total`, an admin entry's "… (N partitions)") count what is shown."""
        moves = self.moves if topic_visible is None else tuple(mv for mv in self.moves if topic_visible(mv.topic))
        detail, moves_total = self.detail, self.moves_total
        if topic_visible is not None and len(moves) < len(self.moves):
            moves_total = len(moves)
        if topic_visible is not None and self.kind == "admin":
            detail = _visible_detail(self.detail, topic_visible)
        return {
            "group": self.group, "sequence": self.sequence, "kind": self.kind, "group_type": self.group_type,
            "started_ms": self.started_ms, "ended_ms": self.ended_ms, "duration_ms": self.duration_ms,
            "epoch_before": self.epoch_before, "epoch_after": self.epoch_after, "trigger": self.trigger,
            "client_reason": self.client_reason, "detail": detail, "state_after": self.state_after,
            "principal": self.principal,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host, "role": m.role}
                        for m in self.members],
            "moves": [{"topic": mv.topic, "partition": mv.partition, "from": mv.from_member, "to": mv.to_member}
                      for mv in moves],
            "moves_total": moves_total,
        }


# An admin entry's change about a partition: "topic:partition" then what changed (topic names have no ':').
_PARTITION_CHANGE = re.compile(r"([^:, ]+):\d+(?: .*)?")
_MORE_PARTITIONS = re.compile(r"… \(\d+ partitions\)")


def _visible_detail(detail: str, topic_visible: Callable[[str], bool]) -> str:
    """An admin entry's detail without the changes of topics `topic_visible` hides (and without the count of
    all partitions when it hid some)."""
    kept, hidden = [], False
    for change in detail.split(", ") if detail else []:
        about = _PARTITION_CHANGE.fullmatch(change)
        if about is not None and not topic_visible(about.group(1)):
            hidden = True
        elif not (hidden and _MORE_PARTITIONS.fullmatch(change)):
            kept.append(change)
    return ", ".join(kept)


def entry_from_record(rec: GroupJournalRecord) -> JournalEntry:
    return JournalEntry(
        rec.group, rec.sequence, rec.kind, rec.group_type, rec.started_ms, rec.ended_ms, rec.epoch_before,
        rec.epoch_after, rec.trigger, rec.client_reason, rec.detail, rec.state_after, rec.principal,
        tuple(JournalMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.role)
              for m in rec.members),
        tuple(PartitionMove(mv.topic, mv.partition, mv.from_member, mv.to_member) for mv in rec.moves),
        rec.moves_total)


def partition_moves(before: Mapping[str, object], after: Mapping[str, object]) -> tuple[list[PartitionMove], int]:
    """The partitions whose owner changed between two assignments (member -> ConsumerProtocol bytes or
    (topic, partition) pairs), sorted, at most MAX_MOVES_KEPT of them, and how many there were."""
    old = _owners(before)
    new = _owners(after)
    moved = sorted(tp for tp in old.keys() | new.keys() if old.get(tp) != new.get(tp))
    return [PartitionMove(t, p, old.get((t, p)), new.get((t, p))) for t, p in moved[:MAX_MOVES_KEPT]], len(moved)


def _owners(assignments: Mapping[str, object]) -> dict[tuple[str, int], str]:
    owners: dict[tuple[str, int], str] = {}
    for member_id, assigned in assignments.items():
        if isinstance(assigned, (bytes, bytearray, memoryview)):
            if not assigned:
                continue
            try:
                pairs = [(tp.topic, p) for tp in decode_assignment(bytes(assigned)).assigned_partitions
                         for p in tp.partitions]
            except Exception:  # noqa: BLE001 - a custom protocol's bytes: no moves to show for it
                continue
        else:
            pairs = assigned
        for tp in pairs:
            owners[tuple(tp)] = member_id
    return owners


# Free text kept per entry (a reason or detail): far below a record string's 32 767 UTF-8 bytes.
MAX_TEXT_CHARS = 4_000


class GroupJournal:
    """Every group's last `max_entries` journal entries, oldest first."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: dict[str, list[JournalEntry]] = {}
        self._next: dict[str, int] = {}  # group -> next sequence (also counts records not yet durable)

    # -- reading ---------------------------------------------------------------------------------
    def entries(self, group: str, since_ms: int | None = None, kind: str | None = None) -> list[JournalEntry]:
        """The group's entries ending at or after `since_ms`, oldest first (optionally of one kind)."""
        return [e for e in self._entries.get(group, ())
                if (since_ms is None or e.ended_ms >= since_ms) and (kind is None or e.kind == kind)]

    def groups(self) -> list[str]:
        return list(self._entries)

    # -- building records ------------------------------------------------------------------------
    def claim(self, group: str) -> tuple[int, int]:
        """The next entry's (sequence, slot) of `group`: claimed in order, built later (`rebalance_record_of`)."""
        sequence = self._next.get(group, 0)
        self._next[group] = sequence + 1
        return sequence, sequence % self.max_entries

    def rebalance_record(self, effect: RebalanceJournaled) -> GroupJournalRecord:
        return rebalance_record_of(effect, *self.claim(effect.group_id))

    def admin_record(self, group: str, action: str, *, now_ms: int, principal: str, client_id: str,
                     client_host: str, group_type: str, epoch: int, state: str,
                     changes: Iterable[str]) -> GroupJournalRecord:
        """An admin action: who (principal, client), from where (host), when, and what it changed."""
        changes = list(changes)
        detail = ", ".join(changes[:_DETAIL_PARTITIONS])
        if len(changes) > _DETAIL_PARTITIONS:
            detail += f", … ({len(changes)} partitions)"
        sequence, slot = self.claim(group)
        return GroupJournalRecord(
            group, slot, sequence, "admin", group_type, now_ms, now_ms, epoch, epoch, action, None, detail, state,
            principal, [JournalMemberRecord("", None, client_id, client_host, "admin")], [], 0)

    def tombstones(self, group: str) -> list[GroupJournalTombstone]:
        """Tombstones for every slot the group's journal may use (its records go at the next compaction)."""
        used = min(self._next.get(group, 0), self.max_entries)
        return [GroupJournalTombstone(group, slot) for slot in range(used)]

    # -- taking records in -----------------------------------------------------------------------
    def apply(self, record: GroupJournalRecord, entry: JournalEntry | None = None) -> None:
        """A durable (or replayed) entry (`entry`: the record's, if already made); only the latest
        `max_entries` of a group are kept."""
        if entry is None:
            entry = entry_from_record(record)
        entries = self._entries.setdefault(record.group, [])
        sequences = [e.sequence for e in entries]
        at = bisect.bisect_left(sequences, entry.sequence)
        if at < len(entries) and entries[at].sequence == entry.sequence:
            entries[at] = entry
        else:
            entries.insert(at, entry)
        del entries[:-self.max_entries]
        if self._next.get(record.group, 0) <= entry.sequence:
            self._next[record.group] = entry.sequence + 1

    def forget(self, groups: Iterable[str]) -> None:
        """Groups whose offsets partition this node no longer owns."""
        for group in groups:
            self._entries.pop(group, None)
            self._next.pop(group, None)


def rebalance_record_of(effect: RebalanceJournaled, sequence: int, slot: int) -> GroupJournalRecord:
    """The record of a claimed rebalance entry. Pure (no journal state), so a 10 000-member group's entry,
    whose partition moves decode every assignment twice, can be built off the event loop."""
    moves, total = partition_moves(effect.assignments_before, effect.assignments_after)
    return GroupJournalRecord(
        effect.group_id, slot, sequence, "rebalance", effect.group_type, effect.started_ms, effect.ended_ms,
        effect.epoch_before, effect.epoch_after, effect.trigger, _fitting(effect.client_reason),
        _fitting(effect.detail),
        effect.state_after, None,
        [JournalMemberRecord(*m) for m in effect.members],
        [PartitionMoveRecord(mv.topic, mv.partition, mv.from_member, mv.to_member) for mv in moves], total)


def _fitting(text: str | None) -> str | None:
    """`text`, cut to what a record's string field holds (an int16 length of UTF-8 bytes), marked as cut."""
    if text is None or len(text) <= MAX_TEXT_CHARS:
        return text
    return text[:MAX_TEXT_CHARS] + "…"
