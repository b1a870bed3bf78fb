"""Group, offset and topic administration over the Kafka protocol (asyncio).

Every operation goes where a Kafka admin client would send it, so this works
against any Kafka-compatible cluster, not only Cohort: group operations to the
group's coordinator (FindCoordinator), ListGroups to every broker, ListOffsets
to each partition's leader, topic changes to the controller when the metadata
names one. Retriable errors are retried within the API timeout; the rest come
back as `KafkaError` (or per-item error codes where Kafka reports per item).
"""
from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cohort.client.cluster import COORDINATOR_MOVED, Broker, Cluster, TopicInfo
from cohort.client.connection import BrokerConnection
from cohort.client.errors import (
    ClientError,
    KafkaConnectionError,
    KafkaError,
    RequestTimedOut,
    UnsupportedApi,
    kafka_error,
)
from cohort.client.offsets import (
    SIMPLE_COMMIT,
    OffsetAndMetadata,
    as_offsets,
    commit_offsets,
    fetch_offsets,
    fetch_offsets_many,
)
from cohort.client.topic_partition import TopicPartition, flatten_partitions, partitions_by_topic
from cohort.protocol.consumer_protocol import decode_assignment, decode_subscription
from cohort.protocol.errors import ErrorCode, ProtocolError
from cohort.protocol.messages import (
    ConsumerGroupDescribeRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DescribeEndOffsetsRequest,
    DescribeGroupsRequest,
    GroupOverviewRequest,
    GroupReportRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    OffsetDeleteRequest,
    ReportEndOffsetsRequest,
)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
# Topic changes retried by Kafka's admin client; e.g. UNKNOWN_TOPIC_OR_PARTITION is final here.
TOPIC_CHANGE_RETRIABLE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.THROTTLING_QUOTA_EXCEEDED})
# Cohort's end-offset APIs: worth another try at the controller (an unknown topic is an answer, not a wait).
_PRIVATE_TOPIC_API_RETRIABLE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT,
                                          ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Assigning", "Reconciling")

CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1 MemberType (0: a classic member)


@dataclass(slots=True, frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None = None  # None when the broker is too old to say (ListGroups < v4)
    group_type: str | None = None


@dataclass(slots=True, frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...] = ()
    subscribed_topics: tuple[str, ...] = ()
    # KIP-848 consumer groups only (None for classic members)
    member_epoch: int | None = None
    target_assignment: tuple[TopicPartition, ...] | None = None
    # in a consumer group: whether the member speaks the consumer protocol (False: a classic member)
    upgraded: bool | None = None


@dataclass(slots=True, frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # classic: the chosen assignor; consumer: the server-side assignor
    members: tuple[MemberDescription, ...]
    coordinator: Broker | None = None
    group_type: str = "classic"
    group_epoch: int | None = None  # consumer groups: the group epoch and target-assignment epoch
    assignment_epoch: int | None = None

    @property
    def exists(self) -> bool:
        return self.state != "Dead"

    @property
    def is_inactive(self) -> bool:
        """Kafka's rule for resetting offsets: Empty or Dead."""
        return self.state in ("Empty", "Dead")


@dataclass(slots=True, frozen=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class ReportedEnd:
    """A partition's end offset as its source reported it to Cohort, and when (epoch ms)."""

    end_offset: int
    reported_ms: int


@dataclass(slots=True, frozen=True)
class ListedOffset:
    offset: int  # -1 when no offset matches (e.g. a timestamp after the last record)
    timestamp: int = -1



async def _private_request(conn: BrokerConnection, what: str, request, version: int = 0):
    """One of Cohort's private APIs (v0 unless said) on `conn`. A server that does not know it closes the
    connection: that raises `UnsupportedApi` (a time-out stays `RequestTimedOut`)."""
    await conn.connect()
    try:
        return await conn.request(request, version=version)
    except RequestTimedOut:
        raise
    except KafkaConnectionError:
        raise UnsupportedApi(f"{conn.address} closed the connection on Cohort's {what} API: "
                             "not a Cohort server, or an older one") from None

class Admin:
    """An asyncio admin client; use as `async with Admin("host:9092") as admin: ...`."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str = "cohort-admin",
        request_timeout_ms: int = 30000,
        api_timeout_ms: int = 60000,
        connect_timeout_ms: int = 10000,
        retry_backoff_ms: int = 100,
        security=None,
    ) -> None:
        """`security`: a `cohort.client.security.ClientSecurity` (TLS, SASL) for every connection."""
        self.cluster = Cluster(
            bootstrap,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            api_timeout_ms=api_timeout_ms,
            connect_timeout_ms=connect_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            security=security,
        )

    async def __aenter__(self) -> "Admin":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self.cluster.close()

    # ------------------------------------------------------------ groups

    async def list_groups(self, states: Iterable[str] | None = None,
                          types: Iterable[str] | None = None) -> list[GroupListing]:
        """Every group on every broker, optionally only those in `states` and of `types` ("classic",
        "consumer"; case-insensitive; brokers before ListGroups v5 know only classic groups)."""
        wanted = {s.lower() for s in states} if states else None
        wanted_types = {t.lower() for t in types} if types else None
        meta = await self.cluster.metadata([])
        node_ids = list(meta.brokers) or [None]
        listings: dict[str, GroupListing] = {}
        for node_id in node_ids:
            conn = await (self.cluster.broker_connection(node_id) if node_id is not None else self.cluster.any_connection())
            for listing in await self._list_groups_on(conn, wanted, wanted_types):
                listings[listing.group_id] = listing
        result = sorted(listings.values(), key=lambda g: g.group_id)
        if wanted is not None and any(g.state is None for g in result):
            # Old brokers don't report states: ask the coordinators.
            described = await self.describe_groups([g.group_id for g in result if g.state is None])
            result = [
                GroupListing(g.group_id, g.protocol_type, described[g.group_id].state, g.group_type)
                if g.state is None else g
                for g in result
            ]
        if wanted is not None:
            result = [g for g in result if g.state is not None and g.state.lower() in wanted]
        if wanted_types is not None:
            result = [g for g in result if (g.group_type or "classic").lower() in wanted_types]
        return result

    async def _list_groups_on(self, conn: BrokerConnection, wanted: set[str] | None,
                              wanted_types: set[str] | None = None) -> list[GroupListing]:
        deadline = self.cluster.deadline()
        backoff = self.cluster.backoff()
        version = conn.version_for(ListGroupsRequest.API_KEY)
        while True:
            request = ListGroupsRequest(states_filter=sorted(wanted) if wanted and version >= 4 else [],
                                        types_filter=sorted(wanted_types) if wanted_types and version >= 5 else [])
            response = await conn.request(request, version)
            if response.error_code == ErrorCode.NONE:
                return [
                    GroupListing(
                        g.group_id,
                        g.protocol_type,
                        g.group_state if version >= 4 else None,
                        g.group_type if version >= 5 else None,
                    )
                    for g in response.groups
                ]
            error = kafka_error(response.error_code, f"ListGroups on {conn.address}")
            if not error.retriable or deadline.expired:
                raise error
            await asyncio.sleep(min(backoff.next_delay(), deadline.remaining()))

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """Descriptions by group id; a group that does not exist is described as state 'Dead'."""
        ids = list(dict.fromkeys(group_ids))
        descriptions = await asyncio.gather(*(self.describe_group(g) for g in ids))
        return dict(zip(ids, descriptions))

    async def describe_group(self, group_id: str) -> GroupDescription:
        """Kafka's admin client's order: ConsumerGroupDescribe where the coordinator speaks it, and
        DescribeGroups for a group it does not know as a consumer group (a classic one, or none)."""
        async def attempt(conn: BrokerConnection) -> GroupDescription:
            if conn.supports(ConsumerGroupDescribeRequest.API_KEY):
                described = await self._consumer_group_description(conn, group_id)
                if described is not None:
                    return described
            response = await conn.request(DescribeGroupsRequest(groups=[group_id], include_authorized_operations=False))
            entry = next((g for g in response.groups if g.group_id == group_id), None)
            if entry is None:
                raise kafka_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"DescribeGroups gave no answer for {group_id!r}")
            if entry.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                return GroupDescription(group_id, "Dead", "", "", (), await self.cluster.find_coordinator(group_id))
            if entry.error_code != ErrorCode.NONE:
                raise kafka_error(entry.error_code, f"DescribeGroups for {group_id!r}")
            members = tuple(
                _member_description(m, entry.protocol_type) for m in entry.members
            )
            return GroupDescription(
                group_id,
                entry.group_state,
                entry.protocol_type,
                entry.protocol_data,
                members,
                await self.cluster.find_coordinator(group_id),
            )

        return await self.cluster.call_coordinator(group_id, attempt)

    async def _consumer_group_description(self, conn: BrokerConnection, group_id: str) -> GroupDescription | None:
        """The group as a KIP-848 consumer group, or None when the coordinator has no such consumer group."""
        response = await conn.request(ConsumerGroupDescribeRequest(group_ids=[group_id]))
        entry = next((g for g in response.groups if g.group_id == group_id), None)
        if entry is None:
            raise kafka_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"ConsumerGroupDescribe gave no answer for {group_id!r}")
        if entry.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        if entry.error_code != ErrorCode.NONE:
            raise kafka_error(entry.error_code, f"ConsumerGroupDescribe for {group_id!r}")
        if entry.group_epoch < 0:
            # No consumer group has a negative epoch (they start at 1): a server that answers for its
            # classic groups this way (Tansu: no members, epoch -1) is asked with DescribeGroups.
            return None

        def partitions(assignment) -> tuple[TopicPartition, ...]:
            return tuple(sorted(flatten_partitions((t.topic_name, t.partitions) for t in assignment.topic_partitions)))

        members = tuple(MemberDescription(
            m.member_id, m.instance_id, m.client_id, m.client_host, partitions(m.assignment),
            tuple(m.subscribed_topic_names), m.member_epoch, partitions(m.target_assignment),
            None if m.member_type < 0 else m.member_type == CONSUMER_MEMBER_TYPE)
            for m in entry.members)
        return GroupDescription(group_id, entry.group_state, "consumer", entry.assignor_name, members,
                                await self.cluster.find_coordinator(group_id), "consumer", entry.group_epoch,
                                entry.assignment_epoch)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, KafkaError | None]:
        """Delete each (empty) group; the value is None on success or the group's error."""
        ids = list(dict.fromkeys(group_ids))

        async def delete_one(group_id: str) -> KafkaError | None:
            async def attempt(conn: BrokerConnection) -> KafkaError | None:
                response = await conn.request(DeleteGroupsRequest(groups_names=[group_id]))
                entry = next((r for r in response.results if r.group_id == group_id), None)
                if entry is None:
                    raise kafka_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"DeleteGroups gave no answer for {group_id!r}")
                if entry.error_code == ErrorCode.NONE:
                    return None
                error = kafka_error(entry.error_code, f"group {group_id!r}")
                if error.code in COORDINATOR_MOVED or error.retriable:
                    raise error
                return error

            return await self.cluster.call_coordinator(group_id, attempt)

        results = await asyncio.gather(*(delete_one(g) for g in ids))
        return dict(zip(ids, results))

    # ------------------------------------------------------------ committed offsets

    async def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets (all partitions when `partitions` is None); partitions without one are left out."""
        return await fetch_offsets(self.cluster, group_id, partitions)

    async def fetch_offsets_many(
        self, groups: Mapping[str, Iterable[TopicPartition] | None]
    ) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        return await fetch_offsets_many(self.cluster, groups)

    async def alter_offsets(self, group_id: str, offsets: Mapping) -> None:
        """Set committed offsets with a simple commit (no membership): Kafka accepts it only for inactive groups."""
        await commit_offsets(self.cluster, group_id, as_offsets(offsets), SIMPLE_COMMIT)

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Delete committed offsets; returns each partition's error code (0 = deleted).

        Group-level refusals (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) raise.
        """
        wanted = sorted({TopicPartition(*tp) for tp in partitions})
        if not wanted:
            return {}
        Topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
        request = OffsetDeleteRequest(
            group_id=group_id,
            topics=[
                Topic(name=t, partitions=[Topic.OffsetDeleteRequestPartition(partition_index=p) for p in ps])
                for t, ps in partitions_by_topic(wanted).items()
            ],
        )

        async def attempt(conn: BrokerConnection) -> dict[TopicPartition, int]:
            response = await conn.request(request)
            if response.error_code != ErrorCode.NONE:
                raise kafka_error(response.error_code, f"OffsetDelete for group {group_id!r}")
            return {
                TopicPartition(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
            }

        return await self.cluster.call_coordinator(group_id, attempt)

    # ------------------------------------------------------------ Cohort's own reports

    async def group_report(self, group_id: str, report: str, *, since_ms: int = -1, at_ms: int = -1,
                           topic: str | None = None, partition: int = -1):
        """A Cohort server's report on a group, decoded from its JSON: "rebalances" (the journal), "history"
        (commits), "health", or "offsets-at" (what the group had committed at `at_ms`).

        GroupReport is Cohort's private API (key 10000, never advertised): it is sent as v0 to the group's
        coordinator. A server that does not know it closes the connection: that raises `UnsupportedApi`.
        """
        request = GroupReportRequest(group_id=group_id, report=report, since_ms=since_ms, at_ms=at_ms, topic=topic,
                                     partition=partition)

        async def attempt(conn: BrokerConnection):
            response = await _private_request(conn, "GroupReport", request)
            if response.error_code != ErrorCode.NONE:
                raise kafka_error(response.error_code, response.error_message or f"GroupReport for {group_id!r}")
            return json.loads(response.report)

        return await self.cluster.call_coordinator(group_id, attempt)

    async def broker_ids(self) -> list[int]:
        """The brokers' node ids, as Metadata names them now."""
        return sorted((await self.cluster.metadata([])).brokers)

    async def group_overview_pages(self, node_id: int | None, *, search: str | None = None, page_size: int = 500):
        """The groups broker `node_id` coordinates (None: any broker), as Cohort summarizes them (state,
        members, health, lag per topic), one bounded GroupOverview page (Cohort's private API 10003) at a
        time: yields each page's document (a page refused for the principal's page rate is asked again).

        A server that does not know the API closes the connection: that raises `UnsupportedApi`."""
        after = ""
        deadline = self.cluster.deadline()
        while True:
            conn = await (self.cluster.broker_connection(node_id) if node_id is not None
                          else self.cluster.any_connection())
            response = await _private_request(conn, "GroupOverview",
                                              GroupOverviewRequest(after=after, limit=page_size, search=search))
            if response.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and not deadline.expired:
                await asyncio.sleep(min(1.0, deadline.remaining()))  # this principal's page rate: ask again
                continue
            if response.error_code != ErrorCode.NONE:
                raise kafka_error(response.error_code, response.error_message or f"GroupOverview on {conn.address}")
            page = json.loads(response.overview)
            yield page
            if not page["more"]:
                return
            after = page["next_after"]
            deadline = self.cluster.deadline()

    # ------------------------------------------------------------ reported end offsets (Cohort's own)

    async def report_end_offsets(self, ends: Mapping[TopicPartition, int], *,
                                 force: bool = False) -> dict[TopicPartition, int | KafkaError]:
        """Tell Cohort how far each partition's data goes (the source's latest offsets). Per partition: the end
        now kept (ends only move forward: a lower report leaves the higher one) or the error (e.g.
        TOPIC_AUTHORIZATION_FAILED without topic WRITE or ALTER, UNKNOWN_TOPIC_OR_PARTITION).

        `force` is an operator's correction: the given end replaces the kept one even when lower (-1 removes
        it; the answer is then -1); it needs topic or CLUSTER ALTER and is audited on the server.

        ReportEndOffsets is Cohort's private API (key 10001, never advertised), sent to the controller (v0, v1
        when forced); a server that does not know it closes the connection: that raises `UnsupportedApi`."""
        wanted = {TopicPartition(*tp): end for tp, end in ends.items()}
        Topic = ReportEndOffsetsRequest.ReportedTopic

        def request(pending):
            return ReportEndOffsetsRequest(force=force, topics=[
                Topic(name=t, partitions=[Topic.ReportedPartition(partition_index=p,
                                                                  end_offset=pending[TopicPartition(t, p)])
                                          for p in ps])
                for t, ps in partitions_by_topic(pending).items()])

        def answers(response):
            return {TopicPartition(t.name, p.partition_index): (p.error_code, p.error_message, p.end_offset)
                    for t in response.topics for p in t.partitions}

        results = await self._private_to_controller("ReportEndOffsets", wanted, request, answers,
                                                    version=1 if force else 0)
        return {tp: value if isinstance(value, KafkaError) else value[2] for tp, value in results.items()}

    async def delete_end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | KafkaError]:
        """Remove the reported ends of `partitions` (an operator's correction: their lag becomes unknown until
        a source reports again); per partition -1 or the error. Needs topic or CLUSTER ALTER."""
        return await self.report_end_offsets({tp: -1 for tp in partitions}, force=True)

    async def describe_end_offsets(self, topics: Iterable[str]) -> dict[str, dict[int, ReportedEnd | None] | KafkaError]:
        """Each topic's partitions with their reported end (None: never reported), or the topic's error."""
        names = list(dict.fromkeys(topics))

        def request(pending):
            return DescribeEndOffsetsRequest(topics=list(pending))

        def answers(response):
            return {t.name: (t.error_code, t.error_message, {
                p.partition_index: ReportedEnd(p.end_offset, p.reported_ms) if p.end_offset >= 0 else None
                for p in t.partitions}) for t in response.topics}

        results = await self._private_to_controller("DescribeEndOffsets", dict.fromkeys(names), request, answers)
        return {name: value if isinstance(value, KafkaError) else value[2] for name, value in results.items()}

    async def _private_to_controller(self, what: str, pending: dict, request, answers, version: int = 0) -> dict:
        """Send one of Cohort's private topic APIs (v0) to the controller, retrying NOT_CONTROLLER and
        lost connections until the API timeout; `answers(response)` maps each key to (code, message, value)."""
        deadline = self.cluster.deadline()
        backoff = self.cluster.backoff()
        results: dict = {}
        while pending:
            retry: dict = {}
            try:
                response = await _private_request(await self.cluster.controller_connection(), what, request(pending),
                                                  version)
            except KafkaConnectionError:
                if deadline.expired:
                    raise
                retry = pending
            else:
                got = answers(response)
                for key in pending:
                    code, message, value = got.get(key, (ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: no answer", None))
                    if code == ErrorCode.NONE:
                        results[key] = (code, message, value)
                        continue
                    error = kafka_error(code, message or f"{what} {key}")
                    if error.code in _PRIVATE_TOPIC_API_RETRIABLE and not deadline.expired:
                        retry[key] = pending[key]
                        if error.code == ErrorCode.NOT_CONTROLLER:
                            await self.cluster.metadata([])
                    else:
                        results[key] = error
            pending = retry
            if pending:
                await asyncio.sleep(min(backoff.next_delay(), deadline.remaining()))
        return results

    # ------------------------------------------------------------ topics

    async def list_topics(self, *, include_internal: bool = False) -> dict[str, TopicInfo]:
        meta = await self.cluster.metadata(None)
        return {
            name: info
            for name, info in sorted(meta.topics.items())
            if include_internal or not info.is_internal
        }

    async def describe_topics(self, names: Iterable[str]) -> dict[str, TopicInfo]:
        """Topic metadata; a missing topic comes back with error UNKNOWN_TOPIC_OR_PARTITION."""
        names = list(dict.fromkeys(names))
        meta = await self.cluster.metadata(names, allow_auto_topic_creation=False)
        return {
            name: meta.topics.get(name, TopicInfo(name, (), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)) for name in names
        }

    async def create_topics(
        self, topics: Iterable[NewTopic], *, validate_only: bool = False, timeout_ms: int = 30000
    ) -> dict[str, KafkaError | None]:
        """Create topics; the value is None on success or the topic's error (e.g. TOPIC_ALREADY_EXISTS)."""
        by_name = {t.name: t for t in topics}
        Creatable = CreateTopicsRequest.CreatableTopic

        async def send(conn: BrokerConnection, names: list[str]):
            version = conn.version_for(CreateTopicsRequest.API_KEY)
            chosen = [by_name[n] for n in names]
            if validate_only and version < 1:
                raise UnsupportedApi(f"broker {conn.address} cannot validate topic creation (CreateTopics v0)")
            if version < 4 and any(t.num_partitions < 0 or t.replication_factor < 0 for t in chosen):
                raise UnsupportedApi(f"broker {conn.address} needs explicit partitions and replication factor")
            request = CreateTopicsRequest(
                topics=[
                    Creatable(
                        name=t.name,
                        num_partitions=t.num_partitions,
                        replication_factor=t.replication_factor,
                        assignments=[],
                        configs=[Creatable.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()],
                    )
                    for t in chosen
                ],
                timeout_ms=timeout_ms,
                validate_only=validate_only,
            )
            response = await conn.request(request, version)
            return {t.name: (t.error_code, getattr(t, "error_message", None)) for t in response.topics}

        return await self._to_controller(send, list(by_name), "CreateTopics")

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        async def send(conn: BrokerConnection, chosen: list[str]):
            version = conn.version_for(DeleteTopicsRequest.API_KEY)
            if version >= 6:
                State = DeleteTopicsRequest.DeleteTopicState
                request = DeleteTopicsRequest(topics=[State(name=n) for n in chosen], timeout_ms=timeout_ms)
            else:
                request = DeleteTopicsRequest(topic_names=chosen, timeout_ms=timeout_ms)
            response = await conn.request(request, version)
            return {r.name: (r.error_code, getattr(r, "error_message", None)) for r in response.responses}

        return await self._to_controller(send, list(dict.fromkeys(names)), "DeleteTopics")

    async def create_partitions(
        self, new_totals: Mapping[str, int], *, validate_only: bool = False, timeout_ms: int = 30000
    ) -> dict[str, KafkaError | None]:
        """Grow topics to `new_totals[topic]` partitions."""
        Topic = CreatePartitionsRequest.CreatePartitionsTopic

        async def send(conn: BrokerConnection, chosen: list[str]):
            request = CreatePartitionsRequest(
                topics=[Topic(name=t, count=new_totals[t], assignments=None) for t in chosen],
                timeout_ms=timeout_ms,
                validate_only=validate_only,
            )
            response = await conn.request(request)
            return {r.name: (r.error_code, r.error_message) for r in response.results}

        return await self._to_controller(send, list(new_totals), "CreatePartitions")

    async def _to_controller(self, send, names: list[str], what: str) -> dict[str, KafkaError | None]:
        """Send a topic change to the controller; retry NOT_CONTROLLER and other retriable errors per topic."""
        deadline = self.cluster.deadline()
        backoff = self.cluster.backoff()
        results: dict[str, KafkaError | None] = {}
        pending = list(names)
        while pending:
            retry: list[str] = []
            try:
                conn = await self.cluster.controller_connection()
                answers = await send(conn, pending)
            except KafkaConnectionError:
                if deadline.expired:
                    raise
                retry = pending
            else:
                for name in pending:
                    code, message = answers.get(name, (ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: no answer"))
                    error = None if code == ErrorCode.NONE else kafka_error(code, message or f"{what} {name!r}")
                    if error is not None and error.code in TOPIC_CHANGE_RETRIABLE and not deadline.expired:
                        retry.append(name)
                        if error.code == ErrorCode.NOT_CONTROLLER:
                            await self.cluster.metadata([])
                    else:
                        results[name] = error
            pending = retry
            if pending:
                await asyncio.sleep(min(backoff.next_delay(), deadline.remaining()))
        return {name: results[name] for name in names}

    # ------------------------------------------------------------ log offsets

    async def list_partition_offsets(
        self, specs: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, ListedOffset]:
        """ListOffsets for each partition: EARLIEST_TIMESTAMP, LATEST_TIMESTAMP or a timestamp in ms.

        Raises `KafkaError` for a partition that does not exist.
        """
        pending = {TopicPartition(*tp): ts for tp, ts in specs.items()}
        results: dict[TopicPartition, ListedOffset] = {}
        deadline = self.cluster.deadline()
        backoff = self.cluster.backoff()
        while pending:
            meta = await self.cluster.metadata(sorted({tp.topic for tp in pending}))
            by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
            retry: dict[TopicPartition, int] = {}
            last_error: KafkaError | None = None
            for tp, ts in pending.items():
                info = meta.topics.get(tp.topic)
                partition = None if info is None else next((p for p in info.partitions if p.partition == tp.partition), None)
                if partition is None:
                    raise kafka_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {tp}")
                if partition.leader < 0:
                    retry[tp] = ts
                    last_error = kafka_error(ErrorCode.LEADER_NOT_AVAILABLE, f"partition {tp}")
                    continue
                by_leader[partition.leader][tp] = ts
            for leader, wanted in by_leader.items():
                try:
                    conn = await self.cluster.broker_connection(leader)
                    answers = await _list_offsets_on(conn, wanted)
                except KafkaConnectionError as exc:
                    retry.update(wanted)
                    last_error = exc
                    continue
                for tp, answer in answers.items():
                    if isinstance(answer, KafkaError):
                        if not answer.retriable:
                            raise answer
                        retry[tp] = wanted[tp]
                        last_error = answer
                    else:
                        results[tp] = answer
            pending = retry
            if pending:
                if deadline.expired:
                    raise last_error or ClientError("ListOffsets did not complete in time")
                await asyncio.sleep(min(backoff.next_delay(), deadline.remaining()))
        return results


async def _list_offsets_on(
    conn: BrokerConnection, wanted: Mapping[TopicPartition, int]
) -> dict[TopicPartition, ListedOffset | KafkaError]:
    version = conn.version_for(ListOffsetsRequest.API_KEY)
    Topic = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            Topic(
                name=t,
                partitions=[
                    Topic.ListOffsetsPartition(partition_index=p, timestamp=wanted[TopicPartition(t, p)], max_num_offsets=1)
                    for p in ps
                ],
            )
            for t, ps in partitions_by_topic(wanted).items()
        ],
    )
    response = await conn.request(request, version)
    answers: dict[TopicPartition, ListedOffset | KafkaError] = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if p.error_code != ErrorCode.NONE:
                answers[tp] = kafka_error(p.error_code, f"ListOffsets for {tp}")
            elif version == 0:
                offsets = list(p.old_style_offsets)
                answers[tp] = ListedOffset(offsets[0] if offsets else -1)
            else:
                answers[tp] = ListedOffset(p.offset, p.timestamp)
    for tp in wanted:
        answers.setdefault(tp, kafka_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"ListOffsets: no answer for {tp}"))
    return answers


def _member_description(member, protocol_type: str) -> MemberDescription:
    assignment: tuple[TopicPartition, ...] = ()
    topics: tuple[str, ...] = ()
    if protocol_type == "consumer":
        if member.member_assignment:
            try:
                decoded = decode_assignment(member.member_assignment)
                assignment = tuple(sorted(flatten_partitions((t.topic, t.partitions) for t in decoded.assigned_partitions)))
            except ProtocolError:
                pass
        if member.member_metadata:
            try:
                topics = tuple(decode_subscription(member.member_metadata).topics)
            except ProtocolError:
                pass
    return MemberDescription(
        member.member_id, member.group_instance_id, member.client_id, member.client_host, assignment, topics
    )
