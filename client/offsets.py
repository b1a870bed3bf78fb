"""Committing and fetching a group's offsets, with the retry rules Kafka clients use.

A commit is either *member-fenced* (carrying the member's generation, member
id and instance id, so the coordinator refuses it once the group has moved
on) or *simple* (generation -1, no member: what admin tools and Spark-style
external committers send; Kafka accepts it only while the group has no
active members).

Retries: coordinator moves and loading are retried (see `Cluster.call_coordinator`);
fencing errors are not: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and
FENCED_INSTANCE_ID raise a `CommitFailedError` subclass and
REBALANCE_IN_PROGRESS raises `RebalanceInProgressError`, because the offsets
were not stored and only the application knows what to do about it.
"""
from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cohort.client.cluster import COORDINATOR_MOVED, Cluster
from cohort.client.connection import BrokerConnection
from cohort.client.errors import KafkaConnectionError, KafkaError, UnsupportedApi, kafka_error
from cohort.client.topic_partition import TopicPartition, partitions_by_topic
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import OffsetCommitRequest, OffsetFetchRequest

NO_OFFSET = -1  # what OffsetFetch answers for a partition without a committed offset


@dataclass(slots=True, frozen=True)
class OffsetAndMetadata:
    """A committed position: the next offset to read, plus free-form metadata."""

    offset: int
    metadata: str | None = ""
    leader_epoch: int = -1


@dataclass(slots=True, frozen=True)
class CommitFence:
    """Who is committing: a member of a generation, or nobody (a simple commit)."""

    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None

    @property
    def simple(self) -> bool:
        return self.generation_id < 0 and not self.member_id and self.group_instance_id is None


SIMPLE_COMMIT = CommitFence()


def as_offsets(offsets: Mapping) -> dict[TopicPartition, OffsetAndMetadata]:
    """Normalise {(topic, partition): offset | (offset, metadata) | OffsetAndMetadata}."""
    result = {}
    for tp, value in offsets.items():
        topic, partition = tp
        if isinstance(value, OffsetAndMetadata):
            om = value
        elif isinstance(value, int) and not isinstance(value, bool):
            om = OffsetAndMetadata(value)
        elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int):
            om = OffsetAndMetadata(value[0], value[1])
        else:
            raise TypeError(f"offset for {topic}-{partition} must be an int, (offset, metadata) or OffsetAndMetadata")
        if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
            raise TypeError(f"bad partition key {tp!r}: expected (topic: str, partition: int >= 0)")
        result[TopicPartition(topic, partition)] = om
    return result


def _offset_commit_request(group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata], fence: CommitFence):
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    Partition = Topic.OffsetCommitRequestPartition
    topics = [
        Topic(
            name=topic,
            partitions=[
                Partition(
                    partition_index=p,
                    committed_offset=offsets[TopicPartition(topic, p)].offset,
                    committed_leader_epoch=offsets[TopicPartition(topic, p)].leader_epoch,
                    committed_metadata=offsets[TopicPartition(topic, p)].metadata,
                )
                for p in numbers
            ],
        )
        for topic, numbers in partitions_by_topic(offsets).items()
    ]
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=fence.generation_id,
        member_id=fence.member_id,
        group_instance_id=fence.group_instance_id,
        topics=topics,
    )


async def commit_offsets(
    cluster: Cluster,
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    fence: CommitFence = SIMPLE_COMMIT,
    *,
    timeout_ms: int | None = None,
) -> None:
    """Store `offsets` for `group_id`; returns once the coordinator acknowledged every partition."""
    if not offsets:
        return
    offsets = as_offsets(offsets)
    request = _offset_commit_request(group_id, offsets, fence)

    async def attempt(conn: BrokerConnection) -> None:
        version = conn.version_for(OffsetCommitRequest.API_KEY)
        if version == 0 and not fence.simple:
            raise UnsupportedApi(f"broker {conn.address} only speaks OffsetCommit v0, which cannot fence a member")
        response = await conn.request(request, version)
        failed: dict[TopicPartition, int] = {}
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code != ErrorCode.NONE:
                    failed[TopicPartition(topic.name, p.partition_index)] = p.error_code
        if not failed:
            return
        # A coordinator-level problem shows up on every partition: let the caller retry it.
        codes = set(failed.values())
        for code in codes:
            if code in COORDINATOR_MOVED or (
                kafka_error(code).retriable and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            ):
                raise kafka_error(code, f"OffsetCommit for group {group_id!r}")
        code = min(codes, key=_commit_error_rank)
        who = "simple commit" if fence.simple else (
            f"generation {fence.generation_id}, member {fence.member_id!r}"
            + (f", instance {fence.group_instance_id!r}" if fence.group_instance_id else "")
        )
        names = ", ".join(str(tp) for tp, c in sorted(failed.items()) if c == code)
        error = kafka_error(code, f"OffsetCommit for group {group_id!r} ({who}) refused for {names}")
        error.partition_errors = failed
        raise error

    await cluster.call_coordinator(group_id, attempt, timeout_ms=timeout_ms)


def _commit_error_rank(code: int) -> int:
    """Fencing errors first: they say the most about what the application must do."""
    order = [
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.REBALANCE_IN_PROGRESS,
    ]
    return order.index(code) if code in order else len(order) + int(code)


def _partitions_of(topics) -> dict[TopicPartition, OffsetAndMetadata]:
    """Committed offsets from OffsetFetch topics; partition errors raise (retriable ones get retried)."""
    result = {}
    for topic in topics:
        for p in topic.partitions:
            if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue  # no such partition, hence no committed offset
            if p.error_code != ErrorCode.NONE:
                raise kafka_error(p.error_code, f"OffsetFetch for {topic.name}-{p.partition_index}")
            if p.committed_offset == NO_OFFSET:
                continue
            result[TopicPartition(topic.name, p.partition_index)] = OffsetAndMetadata(
                p.committed_offset, p.metadata, getattr(p, "committed_leader_epoch", -1)
            )
    return result


async def fetch_offsets(
    cluster: Cluster,
    group_id: str,
    partitions: Iterable[TopicPartition] | None = None,
    *,
    require_stable: bool = False,
    timeout_ms: int | None = None,
) -> dict[TopicPartition, OffsetAndMetadata]:
    """Committed offsets of `group_id`: for `partitions`, or for every partition when None.

    Partitions without a committed offset are left out of the result.
    """
    result = await fetch_offsets_many(
        cluster, {group_id: partitions}, require_stable=require_stable, timeout_ms=timeout_ms
    )
    return result[group_id]


async def fetch_offsets_many(
    cluster: Cluster,
    groups: Mapping[str, Iterable[TopicPartition] | None],
    *,
    require_stable: bool = False,
    timeout_ms: int | None = None,
) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
    """Committed offsets of several groups: one OffsetFetch per coordinator when it speaks v8+."""
    wanted = {g: (None if parts is None else sorted({TopicPartition(*tp) for tp in parts})) for g, parts in groups.items()}
    results: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
    deadline = cluster.deadline(timeout_ms)
    backoff = cluster.backoff()
    last_error: Exception | None = None
    while True:
        pending = [g for g in wanted if g not in results]
        if not pending:
            return results
        by_coordinator: dict[tuple[str, int], list[str]] = defaultdict(list)
        for group_id in pending:
            try:
                broker = await cluster.find_coordinator(group_id)
            except (KafkaError, KafkaConnectionError) as exc:
                if not exc.retriable or deadline.expired:
                    raise
                last_error = exc
                continue
            by_coordinator[(broker.host, broker.port)].append(group_id)
        outcomes = await asyncio.gather(
            *(_fetch_from(cluster, addr, gs, wanted, require_stable) for addr, gs in by_coordinator.items()),
            return_exceptions=True,
        )
        for (addr, gs), outcome in zip(by_coordinator.items(), outcomes):
            if isinstance(outcome, KafkaConnectionError):
                for group_id in gs:
                    cluster.forget_coordinator(group_id)
                last_error = outcome
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            for group_id, answer in outcome.items():
                if isinstance(answer, KafkaError):
                    if answer.code in COORDINATOR_MOVED:
                        cluster.forget_coordinator(group_id)
                    elif not answer.retriable:
                        raise answer
                    last_error = answer
                else:
                    results[group_id] = answer
        if len(results) < len(wanted):
            if deadline.expired:
                raise last_error or KafkaConnectionError("OffsetFetch did not complete in time")
            await asyncio.sleep(min(backoff.next_delay(), deadline.remaining()))


async def _fetch_from(
    cluster: Cluster,
    address: tuple[str, int],
    group_ids: list[str],
    wanted: Mapping[str, list[TopicPartition] | None],
    require_stable: bool,
) -> dict[str, dict[TopicPartition, OffsetAndMetadata] | KafkaError]:
    conn = cluster.connection(*address, purpose="coordinator")
    await conn.connect()
    version = conn.version_for(OffsetFetchRequest.API_KEY)
    if version < 2 and any(wanted[g] is None for g in group_ids):
        raise UnsupportedApi(f"broker {conn.address} cannot list all committed offsets (OffsetFetch < v2)")
    answers: dict[str, dict[TopicPartition, OffsetAndMetadata] | KafkaError] = {}
    if version >= 8:
        Group = OffsetFetchRequest.OffsetFetchRequestGroup
        request = OffsetFetchRequest(
            groups=[
                Group(
                    group_id=g,
                    topics=None if wanted[g] is None else [
                        Group.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                        for t, ps in partitions_by_topic(wanted[g]).items()
                    ],
                )
                for g in group_ids
            ],
            require_stable=require_stable,
        )
        response = await conn.request(request, version)
        for group in response.groups:
            answers[group.group_id] = _group_answer(group.group_id, group.error_code, group.topics)
        for g in group_ids:
            answers.setdefault(g, kafka_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"OffsetFetch: no answer for {g!r}"))
        return answers
    for g in group_ids:
        Topic = OffsetFetchRequest.OffsetFetchRequestTopic
        request = OffsetFetchRequest(
            group_id=g,
            topics=None if wanted[g] is None else [
                Topic(name=t, partition_indexes=ps) for t, ps in partitions_by_topic(wanted[g]).items()
            ],
            require_stable=require_stable,
        )
        response = await conn.request(request, version)
        answers[g] = _group_answer(g, getattr(response, "error_code", 0) or 0, response.topics)
    return answers


def _group_answer(group_id: str, error_code: int, topics) -> dict[TopicPartition, OffsetAndMetadata] | KafkaError:
    if error_code != ErrorCode.NONE:
        return kafka_error(error_code, f"OffsetFetch for group {group_id!r}")
    try:
        return _partitions_of(topics)
    except KafkaError as exc:
        return exc
