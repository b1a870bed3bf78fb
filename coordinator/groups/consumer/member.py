"""A KIP-848 consumer group's member (Kafka's `ConsumerGroupMember`) and the records that describe it.

A member is what its records say: its metadata (ConsumerGroupMemberMetadata) and its current assignment
(ConsumerGroupCurrentMemberAssignment); its target is kept by the group. The helpers here turn a member
and its assignments into those records and back.
"""
from __future__ import annotations

import base64
import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cohort.coordinator.groups.consumer.assignors import Assignment
from cohort.coordinator.records.types import (
    ClassicMemberMetadata,
    ClassicProtocolRecord,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    CurrentTopicPartitions,
)
from cohort.protocol.errors import ErrorCode


class MemberState(enum.Enum):
    """Kafka's MemberState; the value is its record code (ConsumerGroupCurrentMemberAssignment.State)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(slots=True)
class ConsumerGroupMember:
    """A member as its records describe it (metadata, current assignment); target kept by the group."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # A member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside this group.
    classic_protocols: tuple[tuple[str, bytes], ...] | None = None
    classic_session_timeout_ms: int = -1

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_protocols is not None

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def owned(self) -> Iterable[tuple[uuid.UUID, int]]:
        """The partitions it holds: assigned ones and those it has not yet revoked."""
        for assignment in (self.assigned, self.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    yield topic_id, p


@dataclass(slots=True, frozen=True)
class MemberAssignment:
    """A member's next current assignment, as `CurrentAssignmentBuilder` computes it."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment


def member_epoch_error(member: ConsumerGroupMember, received: int) -> int:
    """Kafka's validateMemberEpoch: a classic member's generation is its member epoch."""
    if received == member.member_epoch:
        return ErrorCode.NONE
    return ErrorCode.ILLEGAL_GENERATION if member.uses_classic_protocol else ErrorCode.STALE_MEMBER_EPOCH


def random_member_id() -> str:
    """A member id as Kafka makes one (a random UUID's URL-safe base64, 22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def is_subset(owned: list[tuple[uuid.UUID, list[int]]] | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(t, ()) for t, ps in owned for p in ps)


def metadata_differs(a: ConsumerGroupMember, b: ConsumerGroupMember) -> bool:
    fields = ("instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names",
              "subscribed_topic_regex", "rebalance_timeout_ms", "server_assignor", "classic_protocols",
              "classic_session_timeout_ms")
    return any(getattr(a, f) != getattr(b, f) for f in fields)


def member_metadata_record(group_id: str, m: ConsumerGroupMember) -> ConsumerGroupMemberMetadataRecord:
    classic = None
    if m.classic_protocols is not None:
        classic = ClassicMemberMetadata(m.classic_session_timeout_ms,
                                        [ClassicProtocolRecord(name, meta) for name, meta in m.classic_protocols])
    return ConsumerGroupMemberMetadataRecord(
        group_id, m.member_id, m.instance_id, m.rack_id, m.client_id, m.client_host,
        list(m.subscribed_topic_names), m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor,
        classic)


def current_assignment_record(group_id: str, member_id: str,
                               a: MemberAssignment) -> ConsumerGroupCurrentMemberAssignmentRecord:
    return ConsumerGroupCurrentMemberAssignmentRecord(
        group_id, member_id, a.member_epoch, a.previous_member_epoch, a.state.value,
        topic_partitions(a.assigned, CurrentTopicPartitions),
        topic_partitions(a.pending_revocation, CurrentTopicPartitions))


def topic_partitions(assignment: Mapping[uuid.UUID, frozenset[int]], cls: type) -> list:
    return [cls(topic_id, sorted(ps)) for topic_id, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])) if ps]


def assignment_of(topic_partitions: Iterable) -> Assignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


def sorted_assignment(assignment: Assignment) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])) if ps]
