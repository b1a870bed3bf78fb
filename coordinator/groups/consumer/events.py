"""What goes into a KIP-848 consumer group and what comes out: its events (besides the shared TimerFired,
RecordsAppended, LoadCompleted, Unloaded, Deleted), its answers, its timer keys and why it asks for
an append (fed back in `RecordsAppended.purpose`).
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from cohort.coordinator.groups.classic.events import JoinResult
from cohort.coordinator.records.types import GroupMetadataRecord
from cohort.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic of the topic registry as a consumer group sees it."""

    topic_id: uuid.UUID
    partitions: int


TopicImage = Mapping[str, TopicMetadata]
"""topic name -> its id and partition count: the topic registry now."""


@dataclass(slots=True)
class ConsumerGroupHeartbeat:
    """A ConsumerGroupHeartbeat request (fields as the wire has them; None = not sent/null)."""

    request_id: int
    member_id: str
    member_epoch: int
    api_version: int = 1
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: list[tuple[uuid.UUID, list[int]]] | None = None  # owned partitions
    client_id: str = ""
    client_host: str = ""
    # The topics the member's principal may DESCRIBE now, from the authorizer (None: not checked). Only
    # these are matched against its regex (Kafka: KAFKA-18813); a change is a change of its subscription.
    describable_topics: frozenset[str] | None = None


@dataclass(slots=True, frozen=True)
class TopicsChanged:
    """The topic registry changed (created, deleted, partitions added): the whole image now."""

    image: TopicImage


@dataclass(slots=True, frozen=True)
class ConvertedFromClassic:
    """A classic group becomes this (new, empty) consumer group: `records` (made by `migration`, the
    classic group's tombstone first) are applied and appended, and the members' sessions start."""

    records: list


@dataclass(slots=True, frozen=True)
class RecordReplayed:
    """One consumer-group record (or tombstone) of this group read back from the log; no timers yet."""

    record: object


@dataclass(slots=True)
class HeartbeatResult:
    """A ConsumerGroupHeartbeat response; `assignment` None = field null (no change to tell)."""

    error: int = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: list[tuple[uuid.UUID, list[int]]] | None = None


@dataclass(slots=True, frozen=True)
class SessionTimeout:
    """Timer key: member `member_id`'s session (group.consumer.session.timeout.ms)."""

    member_id: str


@dataclass(slots=True, frozen=True)
class RevocationTimeout:
    """Timer key: member `member_id` must release its revoked partitions within its rebalance timeout."""

    member_id: str


@dataclass(slots=True, frozen=True)
class AssignmentDue:
    """Timer key: the assignment interval has passed while the group waits for a new target."""


@dataclass(slots=True, frozen=True)
class AnswerWhenStored:
    """Request `request_id` (a ConsumerGroupHeartbeat, or a classic member's JoinGroup) is answered with
    `result` once its records are durable, else with a result of the same type carrying the error."""

    request_id: int
    result: HeartbeatResult | JoinResult


@dataclass(slots=True, frozen=True)
class ConvertedToClassic:
    """Effect: the group's last consumer-protocol member left and its records are replaced by `record`;
    the runtime must serve the group id with a classic group loaded from it and start a rebalance."""

    record: GroupMetadataRecord


@dataclass(slots=True, frozen=True)
class GroupChangeWrite:
    """Records of a change nobody waits for (a member fenced or expired, a topic metadata change)."""

    reason: str
