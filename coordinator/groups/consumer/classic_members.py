"""Classic members inside a KIP-848 consumer group (online migration): their JoinGroup, SyncGroup,
Heartbeat and LeaveGroup, and the classic GroupMetadata record a downgrade writes.

A converted classic group's members (`ConvertedFromClassic`), or classic clients joining a consumer
group, speak the classic protocol in it. Their JoinGroup is one reconciliation step answered at once
(generation = member epoch), SyncGroup returns what they may hold now, Heartbeat answers
REBALANCE_IN_PROGRESS until they are reconciled. These are the group's own steps for another protocol,
as Kafka's GroupMetadataManager runs them over its ConsumerGroup: functions of the group, dispatched by
its event table, working through the same member updates and reconciliation as a ConsumerGroupHeartbeat.
The group (`engine.ConsumerGroup`) is handed in, never imported: the engine imports this module.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import replace

from cohort.coordinator.groups.classic.events import (
    Heartbeat,
    JoinGroup,
    JoinResult,
    LeaveGroup,
    SyncGroup,
    SyncResult,
)
from cohort.coordinator.groups.classic.member import CONSUMER_PROTOCOL_TYPE
from cohort.coordinator.groups.consumer.events import AnswerWhenStored, GroupChangeWrite
from cohort.coordinator.groups.consumer.heartbeat import HeartbeatError
from cohort.coordinator.groups.consumer.journal import EpochCause
from cohort.coordinator.groups.consumer.member import ConsumerGroupMember
from cohort.coordinator.groups.effects import Answer, AppendRecords, Now, Reply
from cohort.coordinator.records.types import GroupMemberRecord, GroupMetadataRecord
from cohort.protocol.consumer_protocol import ConsumerProtocolAssignment, decode_subscription, encode_assignment
from cohort.protocol.errors import ErrorCode, ProtocolError


def supports_protocols(group, protocol_type: str, names: Iterable[str]) -> bool:
    """Kafka's rule for a classic member joining: protocol type "consumer", and a protocol in common
    with every classic member already here."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return False
    wanted = set(names)
    for member in group.members.values():
        if member.classic_protocols is not None:
            wanted &= {name for name, _ in member.classic_protocols}
    return bool(wanted)


def join(group, event: JoinGroup, now: Now) -> None:
    """A classic member's JoinGroup: answered from its target assignment, without a join phase."""
    req = event.request
    member_id = req.member_id
    unknown = member_id == ""
    if unknown:
        member_id = group.new_member_id()

    def answer(result: JoinResult) -> None:
        group._effects.append(Answer(event.request_id, result))

    if (member_id not in group.members and req.group_instance_id not in group.static_members
            and len(group.members) >= group.max_size):
        return answer(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=req.member_id))
    if not supports_protocols(group, req.protocol_type, (name for name, _ in req.protocols)):
        return answer(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
    if unknown and req.group_instance_id is None and req.require_known_member_id:
        return answer(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id))
    try:
        subscription = decode_subscription(req.protocols[0][1])
    except ProtocolError:
        return answer(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
    records: list = []
    member = _member(group, req, member_id, records)
    if isinstance(member, int):
        return answer(JoinResult(member, member_id=req.member_id))
    updated = replace(
        member,
        instance_id=req.group_instance_id,
        rack_id=subscription.rack_id or member.rack_id,
        client_id=req.client_id,
        client_host=req.client_host,
        subscribed_topic_names=tuple(subscription.topics),
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms,
        classic_protocols=tuple((name, bytes(meta)) for name, meta in req.protocols),
        classic_session_timeout_ms=req.session_timeout_ms,
    )
    group._update_member(member, updated, updated.subscribed_topic_names != member.subscribed_topic_names,
                        records, now)
    # What it still holds (cooperative clients list it; eager ones gave everything up before joining).
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for tp in subscription.owned_partitions or ():
        meta = group._topics.image.get(tp.topic)
        if meta is not None:
            owned[meta.topic_id] = owned.get(meta.topic_id, frozenset()) | frozenset(tp.partitions)
    try:
        group._reconcile(group.members[updated.member_id], owned, records, now)
    except HeartbeatError as exc:
        result = JoinResult(exc.error, member_id=updated.member_id)
    else:
        member = group.members[updated.member_id]
        result = JoinResult(member_id=member.member_id, generation_id=member.member_epoch,
                            protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=member.classic_protocols[0][0],
                            leader="", skip_assignment=False)
    group._effects.append(AppendRecords(records, AnswerWhenStored(event.request_id, result)) if records
                         else Answer(event.request_id, result))


def _member(group, req, member_id: str, records: list) -> ConsumerGroupMember | int:
    """The member a classic JoinGroup is about (new, existing, or a static member taking over its
    instance id), or the error code it gets."""
    if req.group_instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            return ConsumerGroupMember(member_id)
        if not member.uses_classic_protocol:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return member
    existing_id = group.static_members.get(req.group_instance_id)
    if existing_id is None:
        return ConsumerGroupMember(member_id, instance_id=req.group_instance_id)
    existing = group.members[existing_id]
    if existing_id == member_id:
        return existing
    # A classic static member rejoining under a new member id replaces the old one (KIP-345).
    return group._replace_static_member(existing, member_id, records)


def _member_error(group, member_id: str, instance_id: str | None) -> int:
    member = group.members.get(member_id)
    if member is None or not member.uses_classic_protocol:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if instance_id is not None and group.static_members.get(instance_id) != member_id:
        return ErrorCode.FENCED_INSTANCE_ID
    return ErrorCode.NONE


def sync(group, event: SyncGroup, now: Now) -> None:
    """A classic member's SyncGroup: its assignment is what it may hold now (assigned, not pending)."""
    error = _member_error(group, event.member_id, event.group_instance_id)
    member = group.members.get(event.member_id)
    if not error and event.generation_id != member.member_epoch:
        error = ErrorCode.ILLEGAL_GENERATION
    if not error and ((event.protocol_type is not None and event.protocol_type != CONSUMER_PROTOCOL_TYPE)
                      or (event.protocol_name is not None
                          and event.protocol_name != member.classic_protocols[0][0])):
        error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    if error:
        group._effects.append(Answer(event.request_id, SyncResult(error)))
        return
    group._refresh_session(member.member_id, now)
    group._effects.append(Answer(event.request_id, SyncResult(
        protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=member.classic_protocols[0][0],
        assignment=assignment(group, member))))


def assignment(group, member: ConsumerGroupMember) -> bytes:
    """The member's assigned partitions as a ConsumerProtocolAssignment (topic names, not ids)."""
    names = {meta.topic_id: name for name, meta in group._topics.image.items()}
    partitions = [ConsumerProtocolAssignment.TopicPartition(names[t], sorted(ps))
                  for t, ps in sorted(member.assigned.items(), key=lambda kv: names.get(kv[0], ""))
                  if t in names and ps]
    return encode_assignment(ConsumerProtocolAssignment(assigned_partitions=partitions))


def heartbeat(group, event: Heartbeat, now: Now) -> None:
    """A classic member's Heartbeat: REBALANCE_IN_PROGRESS makes it rejoin while it is not reconciled
    to the current target (its JoinGroup is where it gets the next step)."""
    error = _member_error(group, event.member_id, event.group_instance_id)
    member = group.members.get(event.member_id)
    if not error and event.generation_id != member.member_epoch:
        error = ErrorCode.ILLEGAL_GENERATION
    if not error:
        group._refresh_session(member.member_id, now)
        if (group.group_epoch > group.target_assignment_epoch
                or not member.is_reconciled_to(group.target_assignment_epoch)):
            error = ErrorCode.REBALANCE_IN_PROGRESS
    group._effects.append(Reply(error))


def leave(group, event: LeaveGroup, now: Now) -> None:
    """LeaveGroup (classic members, or an admin removing members by instance id): one code each."""
    errors: list[int] = []
    records: list = []
    for member_id, instance_id, reason in event.members:
        if member_id == "" and instance_id is not None:
            member_id = group.static_members.get(instance_id, "")
        member = group.members.get(member_id)
        if member is None:  # (also once the group was converted to a classic group: it has no members left)
            errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
            continue
        if instance_id is not None and member.instance_id != instance_id:
            errors.append(ErrorCode.FENCED_INSTANCE_ID)
            continue
        group._remove_member(member_id, records, EpochCause(
            "member_left", f"member {member_id} left with LeaveGroup", member, "removed", reason or None), now)
        errors.append(ErrorCode.NONE)
    group._effects.append(Reply(errors))
    if records:
        group._effects.append(AppendRecords(records, GroupChangeWrite("members left with LeaveGroup")))


def group_record(group, protocol: str, now: Now) -> GroupMetadataRecord:
    """The classic GroupMetadata record of a group whose members all speak the classic protocol (a downgrade):
    generation = group epoch, each member with its classic session and what it holds now."""
    return GroupMetadataRecord(
        group=group.group_id, protocol_type=CONSUMER_PROTOCOL_TYPE, generation=group.group_epoch,
        protocol=protocol, leader=next(iter(group.members)), current_state_timestamp=now.wall_ms,
        members=[GroupMemberRecord(
            member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=group._session_timeout(m.member_id),
            subscription=dict(m.classic_protocols)[protocol], assignment=assignment(group, m))
            for m in group.members.values()])
