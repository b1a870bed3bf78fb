"""Version shaping: how the group APIs' answers look for each api_version, apart from the managers' logic.

The group and offsets managers decide outcomes (an error code, a result of the engines); what only
depends on the api_version a client speaks is here: JoinGroup's "" vs null protocol name, LeaveGroup
v0-2's single error, OffsetFetch's error placement (v0-1 per partition, v2+ per group), and the
response structs the hot paths build positionally, in their declaration's field order (keyword
arguments cost ~0.3 us more per object, a few per request).
"""
from __future__ import annotations

from cohort.coordinator.groups.classic.engine import JoinResult, SyncResult
from cohort.coordinator.groups.consumer.engine import HeartbeatResult
from cohort.protocol import messages as m
from cohort.protocol.errors import ErrorCode

E = ErrorCode

JoinAnswerMember = m.JoinGroupResponse.JoinGroupResponseMember
CommitResponse = m.OffsetCommitResponse
CommitTopicAnswer = CommitResponse.OffsetCommitResponseTopic
CommitAnswer = CommitTopicAnswer.OffsetCommitResponsePartition
FetchTopicAnswer = m.OffsetFetchResponse.OffsetFetchResponseTopic
FetchAnswer = FetchTopicAnswer.OffsetFetchResponsePartition
METADATA_TOO_LARGE = int(E.OFFSET_METADATA_TOO_LARGE)

# The answers a heartbeat usually gets, made once (answers are only read: encoded and counted).
HEARTBEAT_ANSWERS = {code: m.HeartbeatResponse(throttle_time_ms=0, error_code=int(code)) for code in (
    E.NONE, E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID)}


def java_string_length(text: str) -> int:
    """Java `String.length()`: UTF-16 code units (characters outside the BMP count twice)."""
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def metadata_too_large(metadata: str, max_bytes: int) -> bool:
    """Kafka counts the metadata's UTF-16 length; that is at most 2 * len, so short metadata needs no count."""
    return len(metadata) * 2 > max_bytes and java_string_length(metadata) > max_bytes


def join_response(version: int, r: JoinResult):
    if r.error and r.error != E.MEMBER_ID_REQUIRED:
        r = JoinResult(error=r.error, member_id=r.member_id)
    protocol_name = r.protocol_name
    if version < 7 and protocol_name is None:
        protocol_name = ""  # v0-6 cannot say null
    elif version >= 7 and protocol_name == "":
        protocol_name = None
    return m.JoinGroupResponse(
        throttle_time_ms=0,
        error_code=int(r.error),
        generation_id=r.generation_id,
        protocol_type=r.protocol_type,
        protocol_name=protocol_name,
        leader=r.leader,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        # (member_id, group_instance_id, metadata: positional, the leader's list may hold 10 000)
        members=[JoinAnswerMember(mid, iid, meta) for mid, iid, meta in r.members],
    )


def sync_response(r: SyncResult):
    return m.SyncGroupResponse(throttle_time_ms=0, error_code=int(r.error), protocol_type=r.protocol_type,
                               protocol_name=r.protocol_name, assignment=r.assignment)


def heartbeat_response(error: int):
    return HEARTBEAT_ANSWERS.get(error) or m.HeartbeatResponse(throttle_time_ms=0, error_code=int(error))


def leave_response(version: int, identities: list, top_error: int, member_errors: list[int]):
    """v0-2 name one member and answer one error (the group's, else that member's); v3+ one per member."""
    if version <= 2:
        error = top_error or (member_errors[0] if member_errors else E.NONE)
        return m.LeaveGroupResponse(throttle_time_ms=0, error_code=int(error))
    return m.LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=int(top_error),
        members=[] if top_error else [
            m.LeaveGroupResponse.MemberResponse(member_id=mid, group_instance_id=iid, error_code=int(err))
            for (mid, iid, _), err in zip(identities, member_errors)],
    )


def commit_error_response(req, error: int):
    """Every partition answers `error` (the request as a whole was refused)."""
    return CommitResponse(throttle_time_ms=0, topics=[
        CommitTopicAnswer(name=t.name, partitions=[
            CommitAnswer(partition_index=p.partition_index, error_code=int(error)) for p in t.partitions])
        for t in req.topics])


def commit_failed_response(req, error: int, max_metadata: int):
    """Every partition answers `error`, except those refused for their metadata size (a failed write)."""
    def code(p) -> int:
        md = p.committed_metadata
        return METADATA_TOO_LARGE if md is not None and metadata_too_large(md, max_metadata) else error
    return CommitResponse(throttle_time_ms=0, topics=[
        CommitTopicAnswer(name=t.name, partitions=[
            CommitAnswer(partition_index=p.partition_index, error_code=int(code(p))) for p in t.partitions])
        for t in req.topics])


def fetch_refused_response(req, version: int, error: int):
    """A one-group OffsetFetch (v0-7) whose group cannot be read: v0-1 have no group-level error, so every
    requested partition carries it; v2+ answer it once, for the group."""
    if version <= 1:
        topics = [FetchTopicAnswer(name=t.name, partitions=[
            FetchAnswer(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                        error_code=int(error))
            for p in t.partition_indexes]) for t in (req.topics or [])]
        return m.OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=topics)
    return m.OffsetFetchResponse(throttle_time_ms=0, error_code=int(error), topics=[])


_HeartbeatAssignment = m.ConsumerGroupHeartbeatResponse.HeartbeatAssignment
_HeartbeatTopic = _HeartbeatAssignment.HeartbeatAssignedTopicPartitions


def consumer_heartbeat_response(result: HeartbeatResult):
    assignment = None if result.assignment is None else _HeartbeatAssignment(topic_partitions=[
        _HeartbeatTopic(topic_id=topic_id, partitions=partitions) for topic_id, partitions in result.assignment])
    if result.error:
        return m.ConsumerGroupHeartbeatResponse(throttle_time_ms=0, error_code=int(result.error),
                                                error_message=result.error_message)
    return m.ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=0, member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)
