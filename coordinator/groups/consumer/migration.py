"""Online migration of a classic group to a consumer group (KIP-848's upgrade path), engine side.

When the first ConsumerGroupHeartbeat reaches a non-empty classic group whose members speak the
consumer protocol, and `group.consumer.migration.policy` allows upgrades, Kafka converts the group in
place: each classic member becomes a consumer-group member that keeps speaking the classic protocol,
at member epoch = the classic generation, holding the partitions its last SyncGroup gave it (which
is also its target), and the group epoch is the generation. The heartbeat that triggered it then
joins as usual, bumps the epoch and starts an incremental rebalance; the classic members follow it
through JoinGroup/SyncGroup/Heartbeat answered by `ConsumerGroup` (REBALANCE_IN_PROGRESS when their
assignment must change). The way back (downgrade) happens inside `ConsumerGroup` when the last
consumer-protocol member leaves (`ConvertedToClassic`).

`upgrade_records(classic)` makes the conversion's records (the classic group's tombstone, then the
consumer group's); the runtime hands them to a new `ConsumerGroup` as `ConvertedFromClassic`, which
applies and appends them and starts the members' sessions, before giving it the heartbeat.
"""
from __future__ import annotations

from cohort.coordinator.groups.classic.engine import ClassicGroup, GroupState
from cohort.coordinator.groups.classic.member import CONSUMER_PROTOCOL_TYPE
from cohort.coordinator.groups.consumer.engine import MigrationPolicy
from cohort.coordinator.groups.consumer.events import TopicImage
from cohort.coordinator.groups.consumer.member import MemberState
from cohort.coordinator.records.types import (
    ClassicMemberMetadata,
    ClassicProtocolRecord,
    ConsumerGroupCurrentMemberAssignmentRecord,
    ConsumerGroupMemberMetadataRecord,
    ConsumerGroupMetadataRecord,
    ConsumerGroupTargetAssignmentMemberRecord,
    ConsumerGroupTargetAssignmentMetadataRecord,
    CurrentTopicPartitions,
    GroupMetadataTombstone,
    TargetTopicPartitions,
)
from cohort.protocol.consumer_protocol import decode_assignment, decode_subscription
from cohort.protocol.errors import ProtocolError


class UpgradeRefused(Exception):
    """The classic group cannot become a consumer group now; the message says why (for the log)."""


def check_upgrade(classic: ClassicGroup, policy: MigrationPolicy | str, consumer_max_size: int) -> None:
    """Kafka's validateOnlineUpgrade; raises UpgradeRefused."""
    policy = MigrationPolicy(policy)
    if not policy.upgrades:
        raise UpgradeRefused(f"online upgrade is disabled (group.consumer.migration.policy={policy.value})")
    if classic.state is GroupState.DEAD:
        raise UpgradeRefused("the classic group is being deleted")
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise UpgradeRefused(f"its protocol type is {classic.protocol_type!r}, not {CONSUMER_PROTOCOL_TYPE!r}")
    if len(classic.members) > consumer_max_size:
        raise UpgradeRefused(f"it has {len(classic.members)} members, more than group.consumer.max.size "
                             f"({consumer_max_size})")


def upgrade_records(classic: ClassicGroup, image: TopicImage) -> list:
    """The records turning `classic` into a consumer group; UpgradeRefused if a member's embedded
    consumer protocol is malformed."""
    group_id = classic.group_id
    epoch = classic.generation_id
    protocol = classic.protocol_name
    records: list = [GroupMetadataTombstone(group_id)]
    members: list = []
    for member in classic.members.values():
        try:
            metadata = member.metadata(protocol) if protocol is not None else member.protocols[0][1]
            subscription = decode_subscription(metadata)
            assignment = decode_assignment(member.assignment) if member.assignment else None
        except (ProtocolError, KeyError, IndexError) as exc:
            raise UpgradeRefused(f"member {member.member_id}'s consumer protocol data is malformed: {exc}") from None
        assigned: dict = {}
        for tp in (assignment.assigned_partitions if assignment is not None else ()):
            meta = image.get(tp.topic)
            if meta is not None:
                assigned.setdefault(meta.topic_id, set()).update(p for p in tp.partitions if 0 <= p < meta.partitions)
        # The group's chosen protocol first: a classic member is answered with its first protocol.
        protocols = sorted(member.protocols, key=lambda pm: pm[0] != protocol)
        members.append(ConsumerGroupMemberMetadataRecord(
            group_id, member.member_id, member.group_instance_id, subscription.rack_id or None, member.client_id,
            member.client_host, list(subscription.topics), None, member.rebalance_timeout_ms, None,
            ClassicMemberMetadata(member.session_timeout_ms,
                                  [ClassicProtocolRecord(name, bytes(meta)) for name, meta in protocols])))
        members.append(ConsumerGroupTargetAssignmentMemberRecord(
            group_id, member.member_id, [TargetTopicPartitions(t, sorted(ps)) for t, ps in assigned.items() if ps]))
        members.append(ConsumerGroupCurrentMemberAssignmentRecord(
            group_id, member.member_id, epoch, epoch, MemberState.STABLE.value,
            [CurrentTopicPartitions(t, sorted(ps)) for t, ps in assigned.items() if ps], []))
    records += members
    records.append(ConsumerGroupMetadataRecord(group_id, epoch, 0))  # the group fills in its metadata hash
    records.append(ConsumerGroupTargetAssignmentMetadataRecord(group_id, epoch))
    return records
