"""The client's view of a Kafka-protocol cluster: brokers, metadata, group coordinators.

A `Cluster` starts from bootstrap addresses, learns the brokers from Metadata,
and keeps one connection per broker for ordinary requests plus one per
coordinator for group traffic (as Kafka clients do, even when both are the
same broker). Group coordinators are found with FindCoordinator and cached;
`call_coordinator` runs a group request with Kafka clients' retry rules:

- COORDINATOR_LOAD_IN_PROGRESS (and other retriable errors): back off, retry
  the same coordinator;
- NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / a broken connection: forget
  the coordinator, rediscover it, retry ("in case the offset manager moves,
  the consumer will need to rediscover");
- anything else: raise it.
Every retry loop is bounded by the API timeout.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cohort.client.errors import ClientError, KafkaConnectionError, KafkaError, kafka_error
from cohort.client.connection import BrokerConnection, parse_address
from cohort.client.retry import Backoff, Deadline
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import FindCoordinatorRequest, MetadataRequest

log = logging.getLogger(__name__)

T = TypeVar("T")

COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})


@dataclass(slots=True, frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True, frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass(slots=True, frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    error_code: int = 0
    is_internal: bool = False
    topic_id: str | None = None


@dataclass(slots=True, frozen=True)
class ClusterMetadata:
    brokers: dict[int, Broker]
    topics: dict[str, TopicInfo]
    controller_id: int = -1
    cluster_id: str | None = None


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """'h1:9092,h2:9092' or a list of addresses → [(host, port)]; ValueError if none is usable."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = [parse_address(item) for item in items if item.strip()]
    if not addresses:
        raise ValueError("no bootstrap server given")
    return addresses


class Cluster:
    """Connections, metadata and coordinator discovery for one client."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str = "cohort-client",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        api_timeout_ms: int = 60000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        security=None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security  # a cohort.client.security.ClientSecurity for every connection, or None
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.api_timeout_ms = api_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self._connections: dict[tuple[str, int, str], BrokerConnection] = {}
        self._brokers: dict[int, Broker] = {}
        self._coordinators: dict[str, Broker] = {}
        self.last_metadata: ClusterMetadata | None = None

    def backoff(self) -> Backoff:
        return Backoff(self.retry_backoff_ms, self.retry_backoff_max_ms)

    def deadline(self, timeout_ms: int | None = None) -> Deadline:
        return Deadline((self.api_timeout_ms if timeout_ms is None else timeout_ms) / 1000)

    # ------------------------------------------------------------ connections

    def connection(self, host: str, port: int, purpose: str = "default") -> BrokerConnection:
        """The (lazily connecting) connection to host:port for `purpose`."""
        key = (host, port, purpose)
        conn = self._connections.get(key)
        if conn is None:
            conn = BrokerConnection(
                host,
                port,
                client_id=self.client_id,
                request_timeout_ms=self.request_timeout_ms,
                connect_timeout_ms=self.connect_timeout_ms,
                security=self.security,
            )
            self._connections[key] = conn
        return conn

    async def any_connection(self) -> BrokerConnection:
        """A connected broker: known brokers first, then the bootstrap list."""
        candidates = [(b.host, b.port) for b in self._brokers.values()] + self.bootstrap
        errors = []
        for host, port in dict.fromkeys(candidates):
            conn = self.connection(host, port)
            try:
                await conn.connect()
                return conn
            except KafkaConnectionError as exc:
                errors.append(str(exc))
        raise KafkaConnectionError("; ".join(dict.fromkeys(errors)) or "no broker to connect to")

    async def broker_connection(self, node_id: int) -> BrokerConnection:
        broker = self._brokers.get(node_id)
        if broker is None:
            await self.metadata([])
            broker = self._brokers.get(node_id)
            if broker is None:
                raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        conn = self.connection(broker.host, broker.port)
        await conn.connect()
        return conn

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    # ------------------------------------------------------------ metadata

    async def metadata(
        self, topics: Sequence[str] | None = None, *, allow_auto_topic_creation: bool = False
    ) -> ClusterMetadata:
        """Brokers and the given topics (None: every topic), retrying unreachable brokers."""
        deadline = self.deadline()
        backoff = self.backoff()
        while True:
            try:
                conn = await self.any_connection()
                version = conn.version_for(MetadataRequest.API_KEY)
                if topics is None:
                    # v0 has no null: an empty list means all topics there.
                    requested = [] if version == 0 else None
                else:
                    if version == 0 and not topics:
                        raise ClientError("broker only speaks Metadata v0, which cannot ask for no topics")
                    requested = [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
                request = MetadataRequest(topics=requested, allow_auto_topic_creation=allow_auto_topic_creation)
                response = await conn.request(request, version)
                break
            except KafkaConnectionError:
                if deadline.expired:
                    raise
                await asyncio.sleep(min(backoff.next_delay(), deadline.remaining()))
        brokers = {b.node_id: Broker(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self._brokers = brokers or self._brokers
        topic_infos = {}
        for t in response.topics:
            if t.name is None:
                continue
            partitions = tuple(
                sorted(
                    (
                        PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes), p.error_code)
                        for p in t.partitions
                    ),
                    key=lambda p: p.partition,
                )
            )
            topic_id = str(t.topic_id) if getattr(t, "topic_id", None) is not None else None
            topic_infos[t.name] = TopicInfo(t.name, partitions, t.error_code, t.is_internal, topic_id)
        self.last_metadata = ClusterMetadata(brokers, topic_infos, response.controller_id, response.cluster_id)
        return self.last_metadata

    async def controller_connection(self) -> BrokerConnection:
        """The controller when the metadata names one (admin writes go there), else any broker."""
        meta = self.last_metadata or await self.metadata([])
        if meta.controller_id in self._brokers:
            try:
                return await self.broker_connection(meta.controller_id)
            except KafkaConnectionError:
                pass
        return await self.any_connection()

    # ------------------------------------------------------------ coordinators

    async def find_coordinator(self, group_id: str) -> Broker:
        """The group's coordinator (cached), retrying while it is loading or unavailable."""
        cached = self._coordinators.get(group_id)
        if cached is not None:
            return cached
        deadline = self.deadline()
        backoff = self.backoff()
        while True:
            try:
                broker = await self._find_coordinator_once(group_id)
                self._coordinators[group_id] = broker
                return broker
            except (KafkaConnectionError, KafkaError) as exc:
                if not getattr(exc, "retriable", False) or deadline.expired:
                    raise
                log.debug("FindCoordinator(%s) failed, retrying: %s", group_id, exc)
                await asyncio.sleep(min(backoff.next_delay(), deadline.remaining()))

    async def _find_coordinator_once(self, group_id: str) -> Broker:
        conn = await self.any_connection()
        version = conn.version_for(FindCoordinatorRequest.API_KEY)
        if version >= 4:
            response = await conn.request(
                FindCoordinatorRequest(key_type=0, coordinator_keys=[group_id]), version
            )
            entries = [c for c in response.coordinators if c.key == group_id]
            if not entries:
                raise kafka_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"FindCoordinator({group_id}) gave no answer")
            entry = entries[0]
            error, node_id, host, port = entry.error_code, entry.node_id, entry.host, entry.port
        else:
            response = await conn.request(FindCoordinatorRequest(key=group_id, key_type=0), version)
            error, node_id, host, port = response.error_code, response.node_id, response.host, response.port
        if error != ErrorCode.NONE:
            raise kafka_error(error, f"FindCoordinator for group {group_id!r}")
        return Broker(node_id, host, port)

    def forget_coordinator(self, group_id: str) -> None:
        self._coordinators.pop(group_id, None)

    async def coordinator_connection(self, group_id: str) -> BrokerConnection:
        broker = await self.find_coordinator(group_id)
        conn = self.connection(broker.host, broker.port, purpose="coordinator")
        try:
            await conn.connect()
        except KafkaConnectionError:
            self.forget_coordinator(group_id)
            raise
        return conn

    async def call_coordinator(
        self,
        group_id: str,
        attempt: Callable[[BrokerConnection], Awaitable[T]],
        *,
        timeout_ms: int | None = None,
    ) -> T:
        """Run `attempt(conn)` on the group's coordinator with Kafka's retry rules.

        `attempt` raises `kafka_error(code)` for a group-level error; this
        decides whether to rediscover, retry or give up.
        """
        deadline = self.deadline(timeout_ms)
        backoff = self.backoff()
        while True:
            try:
                conn = await self.coordinator_connection(group_id)
                return await attempt(conn)
            except KafkaConnectionError:
                self.forget_coordinator(group_id)
                if deadline.expired:
                    raise
            except KafkaError as exc:
                if exc.code in COORDINATOR_MOVED:
                    self.forget_coordinator(group_id)
                elif not exc.retriable:
                    raise
                if deadline.expired:
                    raise
                log.debug("group %s: %s, retrying", group_id, exc)
            await asyncio.sleep(min(backoff.next_delay(), deadline.remaining()))
