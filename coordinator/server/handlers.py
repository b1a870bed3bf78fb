"""What the server answers: the API dispatch table and every handler that is not group logic.

The connection (`cohort.coordinator.server.connection`) turns bytes into a decoded request and hands
it here with the API version and a `RequestContext`; a handler returns the
response message. Group APIs (JoinGroup … OffsetDelete) are forwarded to the
`GroupCoordinator`, which owns every group. The rest is answered here:

* **ApiVersions** advertises exactly the APIs in the dispatch table, at the
  codec's version ranges; nothing else (no Produce, no telemetry, no share-group
  APIs), because clients switch to whatever is advertised.
* **FindCoordinator**: the owner of the group's offsets partition, from the
  `Ownership` (this node when it runs alone; one of the workers with
  `--workers N`).
* **Metadata / CreateTopics / DeleteTopics / CreatePartitions**: the topic
  registry (`cohort.coordinator.server.topics`). The brokers are the Ownership's nodes;
  the owner of the registry's offsets partition is the controller and the
  leader, only replica and only in-sync replica of every topic partition
  (leader epoch 0). Other workers forward Metadata to it and answer topic
  changes NOT_CONTROLLER, ListOffsets and Fetch NOT_LEADER_OR_FOLLOWER
  (`cohort.coordinator.server.peers`).
* **ListOffsets / Fetch — topics without records.** Cohort is a coordinator,
  not a message log, but consumers call ListOffsets and Fetch right after an
  assignment and some clients crash without them. Every partition therefore
  behaves as a log with no readable records: log start offset 0, high
  watermark = the end offset its source reported (ReportEndOffsets, Cohort's
  own API), else the highest non-negative offset any group committed for it (0
  if none), so no committed position is ever out of range and no consumer
  resets over a good commit. ListOffsets: earliest → 0, latest → the high
  watermark, by timestamp T → the earliest end reported at or after T (with
  that report's time), else not found. Fetch waits up to its max wait (capped
  by ``fetch.max.wait.cap.ms``), or until another request comes in on its
  connection, and returns no records; it never answers
  OFFSET_OUT_OF_RANGE. Fetch sessions (KIP-227) are declined the way Kafka
  declines them when its session cache is full: session id 0, full responses.

A handler is a plain function or a coroutine function; the dispatch table makes
every route a plain one that answers the response, ready now, or a
`PendingAnswer` (`cohort.coordinator.contracts.answers`): a plain handler hands
one back itself when it must wait (a commit's append, an OffsetFetch behind
writes in flight), and a coroutine function is wrapped here (`answering`): it
runs in an asyncio task of its own, started eagerly
(`cohort.coordinator.server.eager_tasks`), so handlers may use what needs a current
task (``asyncio.timeout``, ``wait_for``, ``current_task``), and its response is
answered at once when it finished in that first step. Either way the connection
writes responses in request order.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from cohort.coordinator.config import CoordinatorConfig, HostPort
from cohort.coordinator.contracts.answers import PendingAnswer, answer_of, settling
from cohort.coordinator.contracts.requests import RequestContext
from cohort.coordinator.server.eager_tasks import start_eager_task
from cohort.coordinator.server.end_offsets_api import EndOffsetsApis
from cohort.coordinator.groups.coordinator import GroupCoordinator
from cohort.coordinator.groups.reports.overview import GroupOverview, PageRate
from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.contracts.ownership import Node, Ownership
from cohort.coordinator.records.types import EndOffsetRecord, TopicRecord, TopicTombstone
from cohort.coordinator.server.peers import PEER_CLIENT_ID, PeerLink, Peers
from cohort.coordinator.server.static_ownership import TOPIC_REGISTRY_PARTITION, StaticOwnership
from cohort.coordinator.server.topics import RESERVED_TOPIC_NAMES, Topic, TopicRefusal, TopicRegistry, topic_name_problem
from cohort.protocol.errors import ErrorCode
from cohort.protocol.framing import SUPPORTED_VERSIONS
from cohort.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DescribeEndOffsetsRequest,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeGroupsRequest,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GroupOverviewRequest,
    GroupOverviewResponse,
    GroupReportRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    PRIVATE_API_KEYS,
    ReportEndOffsetsRequest,
    SyncGroupRequest,
)

log = logging.getLogger("cohort.coordinator.server.handlers")
REGISTRY_MIRROR_S = 1.0

ZERO_UUID = uuid.UUID(int=0)
INT32_MIN = -2147483648
LEADER_EPOCH = 0  # a single, never-changing leader per partition

# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

# FindCoordinator key types.
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2

FETCH_SESSION_FINAL_EPOCH = -1
FETCH_SESSION_INITIAL_EPOCH = 0
READ_COMMITTED = 1

# Kafka's AclOperation codes, as bits of the "authorized operations" fields.
# With no authorizer every operation a resource supports is allowed.
_ACL_READ, _ACL_WRITE, _ACL_CREATE, _ACL_DELETE, _ACL_ALTER, _ACL_DESCRIBE = 3, 4, 5, 6, 7, 8
_ACL_CLUSTER_ACTION, _ACL_DESCRIBE_CONFIGS, _ACL_ALTER_CONFIGS, _ACL_IDEMPOTENT_WRITE = 9, 10, 11, 12
_ACL_CREATE_TOKENS, _ACL_DESCRIBE_TOKENS = 13, 14
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (
    _ACL_READ, _ACL_WRITE, _ACL_CREATE, _ACL_DELETE, _ACL_ALTER, _ACL_DESCRIBE, _ACL_DESCRIBE_CONFIGS,
    _ACL_ALTER_CONFIGS))
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in (
    _ACL_CREATE, _ACL_ALTER, _ACL_DESCRIBE, _ACL_CLUSTER_ACTION, _ACL_DESCRIBE_CONFIGS, _ACL_ALTER_CONFIGS,
    _ACL_IDEMPOTENT_WRITE, _ACL_CREATE_TOKENS, _ACL_DESCRIBE_TOKENS))

# KIP-511: client software name and version must match this.
_SOFTWARE_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

Handler = Callable[[Any, int, RequestContext], Any]


def answering(handler: Callable[..., Awaitable]) -> Handler:
    """A coroutine handler as a route: its coroutine runs in a task of its own, started eagerly; the
    response if that first step finished it (most requests), else the `PendingAnswer` it settles."""
    def run(request, version: int, ctx: RequestContext):
        answer = PendingAnswer()
        task = start_eager_task(asyncio.get_running_loop(), settling(handler(request, version, ctx), answer))
        if answer.done and answer.error is None:
            return answer if answer.off_loop else answer.response
        answer.source = task  # (one that failed at once is answered as any other: the connection logs it)
        return answer
    run.__name__ = getattr(handler, "__name__", "handler")
    return run


class FetchWaits:
    """The Fetch requests parked for their max wait; released early when the server stops, and when
    another request comes in on the same connection: answers leave in request order, so a parked Fetch
    would hold that request's answer back (a FindCoordinator while a group's coordinator moves, say)."""

    def __init__(self) -> None:
        self._waiting: set[asyncio.Future] = set()
        # id of the connection's RequestContext -> its parked Fetch requests (a connection reads it before it
        # calls `cut_short`: empty unless some Fetch is parked, so other requests pay no call)
        self.by_connection: dict[int, set[asyncio.Future]] = {}
        self.closed = False

    async def wait(self, seconds: float, ctx: RequestContext | None = None) -> None:
        if self.closed or seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        timer = loop.call_later(seconds, _release, fut)
        self._waiting.add(fut)
        if ctx is not None:
            self.by_connection.setdefault(id(ctx), set()).add(fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._waiting.discard(fut)
            if ctx is not None:
                parked = self.by_connection.get(id(ctx))
                if parked is not None:
                    parked.discard(fut)
                    if not parked:
                        del self.by_connection[id(ctx)]

    def cut_short(self, ctx: RequestContext) -> None:
        """A request came in behind the Fetch requests parked with `ctx`: answer them now (empty, as at
        the end of their wait)."""
        parked = self.by_connection.get(id(ctx))
        if parked:
            for fut in list(parked):
                _release(fut)

    @property
    def parked(self) -> int:
        """How many Fetch requests are waiting right now."""
        return len(self._waiting)

    def release_all(self) -> None:
        self.closed = True
        for fut in list(self._waiting):
            _release(fut)


def _release(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


_LEARN_TOPICS_VERSION = 9  # a Metadata version with allow_auto_topic_creation, topic ids not needed


class RequestHandlers(EndOffsetsApis):
    """The dispatch table of one server, and the handlers of the non-group APIs."""

    def __init__(
        self,
        config: CoordinatorConfig,
        topics: TopicRegistry,
        groups: GroupCoordinator,
        cluster_id: str,
        advertised: Callable[[str], HostPort],
        ownership: Ownership | None = None,
        *,
        registry_everywhere: bool = False,
        extra_handlers: dict[type, Handler] | None = None,
        guard: Callable[[int, Handler], Handler] | None = None,
        peer_link: PeerLink | None = None,
    ) -> None:
        """`advertised(listener_name)` is the address clients of that listener are given;
        `ownership`: who owns which offsets partition (default: this node alone, at its first listener);
        `registry_everywhere`: every node keeps the whole topic registry (cluster mode, where it lives in
        etcd) and is its controller, instead of the owner of its offsets partition; `extra_handlers` adds
        APIs (the security admin APIs); `guard(api_key, handler)` wraps each handler (authorization);
        `peer_link`: how a `--workers` worker reaches the others."""
        self.config = config
        self._registry_everywhere = registry_everywhere
        if ownership is None:
            address = advertised(config.endpoints[0].name)
            ownership = StaticOwnership.single_node(Node(config.node_id, address.host, address.port),
                                                    config.offsets_topic_num_partitions)
        self.ownership = ownership
        # A cluster node reaches the others at their advertised address in plaintext (the worker link is
        # `--workers` only): with a secured listener it cannot, and reports its own high watermarks alone.
        # It uses their PLAINTEXT listener when the nodes have one (an internal listener, say).
        plaintext = next((e.name for e in config.endpoints if config.security_protocol(e.name) == "PLAINTEXT"), None)
        reachable = peer_link is not None or plaintext is not None
        self.peers = Peers(lambda: [n.on_listener(plaintext) if plaintext and peer_link is None else n
                                    for n in self.ownership.nodes() if n != self.ownership.local and reachable],
                           peer_link)
        # --workers N: a worker without the topic registry mirrors it for its consumer groups' subscriptions
        self._registry_mirror_due = 0.0
        self._registry_mirroring: asyncio.Task | None = None
        self._mirror_task: asyncio.Task | None = None  # the periodic mirror (start_registry_mirror)
        self._mirror_failing = False  # the last mirror attempt failed (logged once per outage)
        # name -> (topic id, partitions) as the registry's owner last told this node (when it is another node)
        self._known_topics: dict[str, tuple[uuid.UUID, int]] = {}
        self.topics = topics
        self.groups = groups
        self.cluster_id = cluster_id
        self._advertised = advertised
        self.fetch_waits = FetchWaits()
        self._partition_lists: dict[int, list] = {}
        self._overview = GroupOverview(groups.reports, groups.partitions.partition_states)
        self._overview_rate = PageRate(config.group_overview_max_pages_per_second)

        # The one dispatch table, keyed by request message: its API key comes from the schema.
        handlers: dict[type, Handler] = {
            ApiVersionsRequest: self.api_versions,
            FindCoordinatorRequest: self.find_coordinator,
            MetadataRequest: self.metadata,
            ListOffsetsRequest: self.list_offsets,
            FetchRequest: self.fetch,
            CreateTopicsRequest: self.create_topics,
            DeleteTopicsRequest: self.delete_topics,
            CreatePartitionsRequest: self.create_partitions,
            # Group APIs: the GroupCoordinator owns every group; its managers answer (taken here directly,
            # as `GroupCoordinator`'s delegating methods would cost each request one more call).
            OffsetCommitRequest: groups.offsets_manager.offset_commit,
            OffsetFetchRequest: groups.offsets_manager.offset_fetch,
            OffsetDeleteRequest: groups.offsets_manager.offset_delete,
            JoinGroupRequest: groups.group_manager.join_group,
            HeartbeatRequest: groups.group_manager.heartbeat,
            LeaveGroupRequest: groups.group_manager.leave_group,
            SyncGroupRequest: groups.group_manager.sync_group,
            DescribeGroupsRequest: groups.group_manager.describe_groups,
            ListGroupsRequest: groups.group_manager.list_groups,
            DeleteGroupsRequest: groups.group_manager.delete_groups,
            ConsumerGroupHeartbeatRequest: self.consumer_group_heartbeat,
            ConsumerGroupDescribeRequest: groups.group_manager.consumer_group_describe,
            GroupReportRequest: groups.reports.group_report,  # Cohort's own: journal, history, health (not advertised)
            GroupOverviewRequest: self.group_overview,  # Cohort's own: the console's group list (not advertised)
            ReportEndOffsetsRequest: self.report_end_offsets,  # Cohort's own: sources say how far data goes
            DescribeEndOffsetsRequest: self.describe_end_offsets,
            **(extra_handlers or {}),
        }
        if guard is not None:
            handlers = {request: guard(request.API_KEY, handler) for request, handler in handlers.items()}
        self.routes: dict[int, Handler] = {
            request.API_KEY: answering(handler) if inspect.iscoroutinefunction(handler) else handler
            for request, handler in handlers.items()
        }
        handled = set(self.routes)
        missing = handled - set(SUPPORTED_VERSIONS)
        if missing:
            raise RuntimeError(f"the codec declares no messages for API keys {sorted(missing)}")
        # What ApiVersions advertises: exactly the APIs with a handler.
        self.advertised_versions: dict[int, tuple[int, int]] = {
            key: SUPPORTED_VERSIONS[key] for key in sorted(handled - PRIVATE_API_KEYS)
        }
        self._api_keys = [
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in self.advertised_versions.items()
        ]

    # ------------------------------------------------------------------ ApiVersions
    def api_versions(self, request, version: int, ctx: RequestContext) -> ApiVersionsResponse:
        if version >= 3 and not (
            _SOFTWARE_NAME.fullmatch(request.client_software_name or "")
            and _SOFTWARE_NAME.fullmatch(request.client_software_version or "")
        ):
            log.info("ApiVersions with an invalid client software name or version", extra={
                "client_id": ctx.client_id, "client_host": ctx.client_host,
                "software_name": request.client_software_name, "software_version": request.client_software_version})
            return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST, api_keys=[])
        # Tagged fields (features) keep their defaults, so the codec leaves them off the wire.
        return ApiVersionsResponse(error_code=0, api_keys=self._api_keys)

    # ------------------------------------------------------------------ FindCoordinator
    def find_coordinator(self, request, version: int, ctx: RequestContext) -> FindCoordinatorResponse:
        if version >= 4:
            entries = []
            for key in request.coordinator_keys:
                code, message = self._coordinator_key_error(request.key_type, version)
                owner = None if code else self._as_seen(self._coordinator_of(key), ctx)
                if code or owner is None:
                    if not code:
                        code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available."
                    entries.append(FindCoordinatorResponse.Coordinator(
                        key=key, node_id=-1, host="", port=-1, error_code=code, error_message=message))
                else:
                    entries.append(FindCoordinatorResponse.Coordinator(
                        key=key, node_id=owner.node_id, host=owner.host, port=owner.port, error_code=0,
                        error_message=""))  # Kafka's: an empty message, not null
            return FindCoordinatorResponse(coordinators=entries)
        code, message = self._coordinator_key_error(request.key_type, version)
        owner = None if code else self._as_seen(self._coordinator_of(request.key), ctx)
        if code or owner is None:
            if not code:
                code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available."
            return FindCoordinatorResponse(error_code=code, error_message=message, node_id=-1, host="", port=-1)
        # v1-3: Kafka writes the error's message even on success, which is "NONE".
        return FindCoordinatorResponse(error_code=0, error_message="NONE", node_id=owner.node_id, host=owner.host,
                                       port=owner.port)

    @property
    def _registry_owner(self) -> Node | None:
        """The node keeping the topic registry (its offsets partition's owner): controller and topic leader."""
        if self._registry_everywhere:
            return self.ownership.local
        return self.ownership.owner(TOPIC_REGISTRY_PARTITION)

    @property
    def _keeps_registry(self) -> bool:
        return self._registry_owner == self.ownership.local

    async def group_overview(self, request, version: int, ctx: RequestContext) -> GroupOverviewResponse:
        """GroupOverview (Cohort's private API 10003): a page of this node's groups for the console's list, at
        most `group.overview.max.pages.per.second` per principal (faster ones wait, or are refused)."""
        wait = self._overview_rate.wait_for(ctx.principal, asyncio.get_running_loop().time())
        if wait is None:
            return GroupOverviewResponse(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, overview=b"",
                                         error_message="too many GroupOverview pages: ask again in a second")
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            document = self._overview.page(request.after or "", request.limit, request.search,
                                           ctx.group_visible, ctx.topic_visible)
        except ValueError as exc:
            return GroupOverviewResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc), overview=b"")
        return GroupOverviewResponse(error_code=0, error_message=None, overview=json.dumps(document).encode())

    def _coordinator_of(self, group_id: str) -> Node | None:
        """The node that owns `group_id`'s offsets partition (Kafka: the leader of that partition)."""
        return self.ownership.owner(self.groups.partition_for(group_id))

    @staticmethod
    def _coordinator_key_error(key_type: int, version: int) -> tuple[int, str | None]:
        if key_type == KEY_TYPE_GROUP:
            return 0, None
        if key_type == KEY_TYPE_TRANSACTION:
            # Kafka answers this when no transaction coordinator is available;
            # Cohort never has one.
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "Cohort coordinates consumer groups only; it has no transaction coordinator."
        if key_type == KEY_TYPE_SHARE and version >= 6:
            # Kafka's answer while share groups (KIP-932) are disabled; Cohort has none.
            return ErrorCode.INVALID_REQUEST, "Share groups (KIP-932) are not supported by Cohort."
        return ErrorCode.INVALID_REQUEST, f"Unknown coordinator key type {key_type}."

    # ------------------------------------------------------------------ ConsumerGroupHeartbeat
    def consumer_group_heartbeat(self, request, version: int, ctx: RequestContext):
        """The group coordinator's answer; a worker that does not keep the topic registry first
        refreshes its mirror of it (at most once a second), so subscriptions resolve there too."""
        if self._keeps_registry or asyncio.get_running_loop().time() < self._registry_mirror_due:
            return self.groups.consumer_group_heartbeat(request, version, ctx)
        return answer_of(self._consumer_group_heartbeat_after_mirroring(request, version, ctx))

    async def _consumer_group_heartbeat_after_mirroring(self, request, version: int, ctx: RequestContext):
        if self._registry_mirroring is None:
            self._registry_mirroring = asyncio.get_running_loop().create_task(self._mirror_registry())
        await asyncio.shield(self._registry_mirroring)
        answer = self.groups.consumer_group_heartbeat(request, version, ctx)
        return await answer if type(answer) is PendingAnswer else answer

    async def _mirror_registry(self) -> None:
        """Copy the registry owner's topics (all-topics Metadata) and their reported end offsets into this
        worker's registry, in memory."""
        try:
            owner = self._registry_owner
            if owner is None:
                return
            response = await self.peers.metadata(owner, MetadataRequest(topics=None), 12)
            present = {t.name: t for t in response.topics if t.error_code == 0 and t.name}
            for name, t in present.items():
                known = self.topics.get(name)
                if known is None or known.topic_id != t.topic_id or known.partitions != len(t.partitions):
                    self.topics.apply(TopicRecord(name, t.topic_id, len(t.partitions)))
            for topic in list(self.topics):
                if topic.name not in present:
                    self.topics.apply(TopicTombstone(topic.name))
            if present:
                described = await self.peers.metadata(owner, DescribeEndOffsetsRequest(topics=sorted(present)), 0)
                for t in described.topics:
                    topic = self.topics.get(t.name)
                    for p in t.partitions if topic is not None and t.error_code == 0 else ():
                        if p.end_offset >= 0:
                            self.topics.apply(EndOffsetRecord(t.name, p.partition_index, topic.topic_id,
                                                              p.end_offset, p.reported_ms))
            self._registry_mirror_due = asyncio.get_running_loop().time() + REGISTRY_MIRROR_S
            if self._mirror_failing:
                self._mirror_failing = False
                log.info("mirroring the topic registry again")
        except Exception as exc:  # noqa: BLE001 - the heartbeat is answered from the mirror as it is
            # once per outage at INFO: the periodic mirror retries every second while the owner is down
            log.log(logging.DEBUG if self._mirror_failing else logging.INFO,
                    "cannot mirror the topic registry for consumer groups: %s", exc)
            self._mirror_failing = True
        finally:
            self._registry_mirroring = None

    def start_registry_mirror(self) -> None:
        """A `--workers` worker without the topic registry keeps its mirror fresh (every REGISTRY_MIRROR_S),
        so its groups' lag and health see the reported end offsets."""
        if self._registry_everywhere or not self.peers or self._mirror_task is not None:
            return
        self._mirror_task = asyncio.get_running_loop().create_task(self._mirror_registry_forever(),
                                                                   name="cohort-registry-mirror")

    async def _mirror_registry_forever(self) -> None:
        while True:
            if not self._keeps_registry:
                if self._registry_mirroring is None:
                    self._registry_mirroring = asyncio.get_running_loop().create_task(self._mirror_registry())
                await asyncio.shield(self._registry_mirroring)
            await asyncio.sleep(REGISTRY_MIRROR_S)

    async def close(self) -> None:
        """Stop the registry mirror and close the links to the other workers."""
        if self._mirror_task is not None:
            self._mirror_task.cancel()
            await asyncio.gather(self._mirror_task, return_exceptions=True)
            self._mirror_task = None
        await self.peers.close()

    # ------------------------------------------------------------------ Metadata
    async def metadata(self, request, version: int, ctx: RequestContext) -> MetadataResponse:
        if not self._keeps_registry:
            return await self._metadata_from_registry_owner(request, version, ctx)
        include_ops = version >= 8 and request.include_topic_authorized_operations
        requested = request.topics
        if version < 12 and requested and any(t.name is None or (t.topic_id or ZERO_UUID) != ZERO_UUID
                                              for t in requested):
            return self._invalid_metadata_request(requested)
        if requested is None or (version == 0 and not requested):
            entries = [self._topic_metadata(t, version, include_ops) for t in self.topics]
        else:
            allow_create = self.config.auto_create_topics_enable and (version < 4 or request.allow_auto_topic_creation)
            entries = []
            seen: set = set()
            for wanted in requested:
                topic_id = getattr(wanted, "topic_id", ZERO_UUID) or ZERO_UUID
                key = topic_id if topic_id != ZERO_UUID else wanted.name
                if key in seen:
                    continue
                seen.add(key)
                entries.append(await self._requested_topic(wanted.name, topic_id, allow_create, version, include_ops))
        return self._metadata_response(version, request, entries, ctx)

    def _as_seen(self, node: Node | None, ctx: RequestContext) -> Node | None:
        """`node` with the address a client of `ctx`'s listener reaches it by (each node has one per listener)."""
        if node is None or not ctx.listener:
            return node
        if node != self.ownership.local:
            return node.on_listener(ctx.listener)
        address = self._advertised(ctx.listener)
        return Node(node.node_id, address.host, address.port)

    def _metadata_response(self, version: int, request, entries: list, ctx: RequestContext) -> MetadataResponse:
        nodes = [self._as_seen(n, ctx) for n in self.ownership.nodes()]
        return MetadataResponse(
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port, rack=None)
                     for n in nodes],
            cluster_id=self.cluster_id,
            controller_id=self._registry_owner.node_id if self._registry_owner is not None else -1,
            topics=entries,
            cluster_authorized_operations=(
                CLUSTER_AUTHORIZED_OPERATIONS
                if 8 <= version <= 10 and request.include_cluster_authorized_operations else INT32_MIN),
        )

    async def _metadata_from_registry_owner(self, request, version: int, ctx: RequestContext) -> MetadataResponse:
        """Forward to the worker that keeps the topic registry.

        While it is down, the topics it last reported are listed with leaderless partitions
        (LEADER_NOT_AVAILABLE, leader -1), as Kafka lists the partitions of a dead leader: a client
        keeps its topics and retries, rather than seeing them vanish.
        """
        owner = self._registry_owner
        try:
            if owner is None:
                raise ConnectionError("the topic registry has no owner now")
            response = await self.peers.metadata(owner, request, version)
        except Exception as exc:  # noqa: BLE001 - any failure to reach it means the same to the client
            log.info("cannot reach node %s for the topic registry: %s", owner.node_id if owner else "-", exc)
        else:
            self._remember_topics(request, response)
            # The owner answered the worker link, which sees the first listener: the brokers as the
            # client's listener reaches them.
            response.brokers = self._metadata_response(version, request, [], ctx).brokers
            return response
        entry = MetadataResponse.MetadataResponseTopic
        if request.topics is None or (version == 0 and not request.topics):
            wanted = [(name, None) for name in sorted(self._known_topics)]
        else:
            wanted = [(t.name, getattr(t, "topic_id", None) or ZERO_UUID) for t in request.topics]
        entries = []
        for name, topic_id in wanted:
            known = self._known_topics.get(name) if name is not None else None
            if known is None:
                entries.append(entry(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name,
                                     topic_id=topic_id or ZERO_UUID, is_internal=False, partitions=[]))
                continue
            entries.append(entry(error_code=0, name=name, topic_id=known[0], is_internal=False, partitions=[
                entry.MetadataResponsePartition(error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=i,
                                                leader_id=-1, leader_epoch=-1, replica_nodes=[], isr_nodes=[],
                                                offline_replicas=[])
                for i in range(known[1])]))
        return self._metadata_response(version, request, entries, ctx)

    def topic_exists(self, name: str) -> bool:
        """Whether `name` is a topic as far as this node knows (a worker without the registry: as its owner
        last said)."""
        if self._keeps_registry:
            return self.topics.get(name) is not None
        return name in self._known_topics

    def topic_name_by_id(self, topic_id) -> str | None:
        if self._keeps_registry:
            topic = self.topics.get_by_id(topic_id)
            return topic.name if topic is not None else None
        return next((name for name, (known_id, _) in self._known_topics.items() if known_id == topic_id), None)

    async def learn_topics(self, names: list[str]) -> None:
        """A worker without the registry: ask its owner about topics it has not heard of (so authorization
        tells an existing topic from one a Metadata request would create)."""
        owner = self._registry_owner
        unknown = [n for n in names if n not in self._known_topics]
        if self._keeps_registry or owner is None or not unknown:
            return
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in unknown],
                                  allow_auto_topic_creation=False)
        try:
            response = await self.peers.metadata(owner, request, _LEARN_TOPICS_VERSION)
        except Exception as exc:  # noqa: BLE001 - unreachable: authorize with what is known
            log.info("cannot ask node %s about topics: %s", owner.node_id, exc)
            return
        self._remember_topics(request, response)

    def _remember_topics(self, request, response: MetadataResponse) -> None:
        """Keep what the registry's owner said about topics, to answer with while it is down."""
        if request.topics is None:
            self._known_topics.clear()
        for t in response.topics:
            if t.name is None:
                continue
            if t.error_code == 0:
                self._known_topics[t.name] = (t.topic_id or ZERO_UUID, len(t.partitions))
            elif t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._known_topics.pop(t.name, None)

    @staticmethod
    def _invalid_metadata_request(requested) -> MetadataResponse:
        """Kafka's answer when a v10/v11 request names a topic by id (or not at all): ids came in v12.

        Kafka refuses the whole request: every requested topic gets INVALID_REQUEST, with the
        empty string for a missing name (the response field is not nullable before v12).
        """
        return MetadataResponse(brokers=[], cluster_id=None, controller_id=-1, topics=[
            MetadataResponse.MetadataResponseTopic(
                error_code=ErrorCode.INVALID_REQUEST, name=t.name if t.name is not None else "",
                topic_id=t.topic_id or ZERO_UUID, is_internal=False, partitions=[])
            for t in requested])

    async def _requested_topic(self, name: str | None, topic_id: uuid.UUID, allow_create: bool, version: int,
                               include_ops: bool):
        entry = MetadataResponse.MetadataResponseTopic
        if name is None and topic_id == ZERO_UUID:  # v12+: neither an id nor a name
            return entry(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id, partitions=[])
        if topic_id != ZERO_UUID:
            topic = self.topics.get_by_id(topic_id)
            if topic is None:
                return entry(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id, partitions=[])
            return self._topic_metadata(topic, version, include_ops)
        topic = self.topics.get(name)
        if topic is not None:
            return self._topic_metadata(topic, version, include_ops)
        if topic_name_problem(name) is not None:
            return entry(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name, partitions=[])
        if not allow_create or name in RESERVED_TOPIC_NAMES:
            return entry(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, partitions=[])
        try:
            result = await self.topics.ensure(name, self.config.num_partitions)
        except StorageError as exc:
            log.warning("auto-creating topic %s failed: %s", name, exc)
            return entry(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name, partitions=[])
        if isinstance(result, TopicRefusal):
            return entry(error_code=result.error_code, name=name, partitions=[])
        return self._topic_metadata(result, version, include_ops)

    def _topic_metadata(self, topic: Topic, version: int, include_ops: bool):
        return MetadataResponse.MetadataResponseTopic(
            error_code=0,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=False,
            partitions=self._partitions(topic.partitions),
            topic_authorized_operations=TOPIC_AUTHORIZED_OPERATIONS if include_ops else INT32_MIN,
        )

    def _partitions(self, count: int) -> list:
        """The partition list of a topic with `count` partitions (shared: they are all alike)."""
        node = self.ownership.local.node_id  # only the registry's owner answers with topics
        partitions = self._partition_lists.get(count)
        if partitions is None:
            partitions = [
                MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
                    error_code=0, partition_index=i, leader_id=node, leader_epoch=LEADER_EPOCH,
                    replica_nodes=[node], isr_nodes=[node], offline_replicas=[])
                for i in range(count)
            ]
            if len(self._partition_lists) > 64:
                self._partition_lists.clear()
            self._partition_lists[count] = partitions
        return partitions

    # ------------------------------------------------------------------ ListOffsets
    async def list_offsets(self, request, version: int, ctx: RequestContext) -> ListOffsetsResponse:
        if not self._keeps_registry:
            return self._list_offsets_elsewhere(request, version, ctx)
        latest = [(t.name, p.partition_index) for t in request.topics for p in t.partitions
                  if p.timestamp == LATEST_TIMESTAMP]
        high_watermark = await self._end_offsets(latest, ctx)
        high_watermark = self._reported_end_first(high_watermark)
        topic_entries = []
        for wanted in request.topics:
            topic = self.topics.get(wanted.name)
            partitions = []
            for p in wanted.partitions:
                index = p.partition_index
                if topic is None or not 0 <= index < topic.partitions:
                    partitions.append(ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                        partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        old_style_offsets=[], timestamp=-1, offset=-1, leader_epoch=-1))
                    continue
                offset, at = self._offset_for_timestamp(p.timestamp, wanted.name, index, high_watermark)
                if version == 0:
                    old_style = [] if offset < 0 or p.max_num_offsets < 1 else [offset]
                    partitions.append(ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                        partition_index=index, error_code=0, old_style_offsets=old_style))
                else:
                    partitions.append(ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                        partition_index=index, error_code=0, timestamp=at, offset=offset,
                        leader_epoch=LEADER_EPOCH if offset >= 0 else -1))
            topic_entries.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=wanted.name, partitions=partitions))
        return ListOffsetsResponse(topics=topic_entries)

    async def _end_offsets(self, latest: list[tuple[str, int]], ctx: RequestContext) -> Callable[[str, int], int]:
        """What ListOffsets(latest) answers per topic partition: the one place its value comes from.

        The highest offset any group committed: this node's groups, and what the other nodes reported.
        A peer's request (client id `PEER_CLIENT_ID`) is answered from this node's own groups alone, so a
        question never travels on. A `--workers` registry owner asks every worker over the loopback link
        before answering; a cluster node answers at once from what its peers last reported and refreshes
        that behind the answer (within a second, as Fetch does): with every node keeping the registry,
        asking on the request path made each node wait on all the others.
        """
        local = self.groups.high_watermark
        if ctx.client_id == PEER_CLIENT_ID or not latest or not self.peers:
            return local
        if self._registry_everywhere:
            self.peers.refresh_soon(latest)
            known = self.peers.known
            return lambda topic, partition: max(local(topic, partition), known(topic, partition))
        reported = await self.peers.latest(latest)
        return lambda topic, partition: max(local(topic, partition), reported.get((topic, partition), 0))

    def _list_offsets_elsewhere(self, request, version: int, ctx: RequestContext) -> ListOffsetsResponse:
        """A worker that leads no topic partition: its own high watermarks for a peer, else Kafka's refusal."""
        peer = ctx.client_id == PEER_CLIENT_ID
        topic_entries = []
        for wanted in request.topics:
            partitions = []
            for p in wanted.partitions:
                entry = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
                if peer and version >= 1:
                    partitions.append(entry(partition_index=p.partition_index, error_code=0, timestamp=-1,
                                            offset=self.groups.high_watermark(wanted.name, p.partition_index),
                                            leader_epoch=LEADER_EPOCH))
                else:
                    partitions.append(entry(partition_index=p.partition_index,
                                            error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, old_style_offsets=[],
                                            timestamp=-1, offset=-1, leader_epoch=-1))
            topic_entries.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=wanted.name, partitions=partitions))
        return ListOffsetsResponse(topics=topic_entries)

    def _reported_end_first(self, committed_high: Callable[[str, int], int]) -> Callable[[str, int], int]:
        """A partition's log end: the end offset its source reported, else `committed_high` (the highest
        offset committed for it)."""
        reported = self.topics.end_offset

        def log_end(topic: str, partition: int) -> int:
            end = reported(topic, partition)
            return committed_high(topic, partition) if end is None else end
        return log_end

    def _offset_for_timestamp(self, timestamp: int, topic: str, partition: int,
                              high_watermark: Callable[[str, int], int]) -> tuple[int, int]:
        """(offset, timestamp) ListOffsets answers for a partition with no records (-1 = not found); a time T:
        the earliest end reported at or after T, with that report's time, else "not found" (as Kafka answers a
        time after its last record)."""
        if timestamp == LATEST_TIMESTAMP:
            return high_watermark(topic, partition), -1
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return 0, -1
        if timestamp >= 0:
            found = self.topics.end_offset_at(topic, partition, timestamp)
            return (-1, -1) if found is None else found
        return -1, -1  # the max-timestamp query or the latest tiered offset: no record in a log without records

    # ------------------------------------------------------------------ Fetch
    async def fetch(self, request, version: int, ctx: RequestContext) -> FetchResponse:
        if version >= 7 and request.session_epoch not in (FETCH_SESSION_FINAL_EPOCH, FETCH_SESSION_INITIAL_EPOCH):
            # An incremental fetch on a session this server never created.
            return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
        has_partitions = any(t.partitions for t in request.topics)
        if request.min_bytes > 0 and request.max_wait_ms > 0 and has_partitions:
            # No records will ever arrive, so the wait always runs to its end.
            wait_ms = min(request.max_wait_ms, self.config.fetch_max_wait_cap_ms)
            await self.fetch_waits.wait(wait_ms / 1000, ctx)
        high_watermark = self.groups.high_watermark
        if self.peers:
            self.peers.refresh_soon((t.topic, p.partition) for t in request.topics for p in t.partitions
                                    if t.topic)
            local, known = high_watermark, self.peers.known

            def high_watermark(topic: str, partition: int) -> int:
                return max(local(topic, partition), known(topic, partition))
        high_watermark = self._reported_end_first(high_watermark)
        by_id = version >= 13
        aborted = [] if version >= 4 and request.isolation_level == READ_COMMITTED else None
        responses = []
        for wanted in request.topics:
            if by_id:
                topic = self.topics.get_by_id(wanted.topic_id)
                unknown = ErrorCode.UNKNOWN_TOPIC_ID
            else:
                topic = self.topics.get(wanted.topic)
                unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            partitions = []
            for p in wanted.partitions:
                index = p.partition
                if not self._keeps_registry:
                    partitions.append(FetchResponse.FetchableTopicResponse.PartitionData(
                        partition_index=index, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, high_watermark=-1,
                        last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, records=b""))
                elif topic is None:
                    partitions.append(FetchResponse.FetchableTopicResponse.PartitionData(
                        partition_index=index, error_code=unknown, high_watermark=-1, last_stable_offset=-1,
                        log_start_offset=-1, aborted_transactions=None, records=b""))
                elif not 0 <= index < topic.partitions:
                    partitions.append(FetchResponse.FetchableTopicResponse.PartitionData(
                        partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, high_watermark=-1,
                        last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, records=b""))
                else:
                    hw = high_watermark(topic.name, index)
                    partitions.append(FetchResponse.FetchableTopicResponse.PartitionData(
                        partition_index=index, error_code=0, high_watermark=hw, last_stable_offset=hw,
                        log_start_offset=0, aborted_transactions=aborted, records=b""))
            responses.append(FetchResponse.FetchableTopicResponse(
                topic=wanted.topic if not by_id else "", topic_id=wanted.topic_id if by_id else ZERO_UUID,
                partitions=partitions))
        # session_id 0: no session was created, so the client keeps sending full fetches.
        return FetchResponse(error_code=0, session_id=0, responses=responses)

    # ------------------------------------------------------------------ CreateTopics
    async def create_topics(self, request, version: int, ctx: RequestContext) -> CreateTopicsResponse:
        counts: dict[str, int] = {}
        for t in request.topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        results = []
        for t in request.topics:
            result = CreateTopicsResponse.CreatableTopicResult(name=t.name)
            if counts[t.name] > 1:
                _refuse(result, TopicRefusal(ErrorCode.INVALID_REQUEST,
                                             f"Create topics request contains topic '{t.name}' more than once."))
                results.append(result)
                continue
            if self._keeps_registry:
                partitions, refusal = self._requested_layout(t)
            else:
                partitions, refusal = 0, self._not_controller()
            if refusal is None:
                refusal = self.topics.check_new_topic(t.name, partitions)
            if refusal is None and not request.validate_only:
                try:
                    created = await self.topics.create(t.name, partitions)
                except StorageError as exc:
                    created = TopicRefusal(ErrorCode.NOT_CONTROLLER, f"Could not persist the topic: {exc}")
                if isinstance(created, TopicRefusal):
                    refusal = created
                else:
                    result.topic_id = created.topic_id
            if refusal is not None:
                _refuse(result, refusal)
            else:
                result.num_partitions = partitions
                result.replication_factor = 1
                result.configs = []
            results.append(result)
        return CreateTopicsResponse(topics=results)

    def _not_controller(self) -> TopicRefusal:
        owner = self._registry_owner
        return TopicRefusal(ErrorCode.NOT_CONTROLLER, "This is not the controller" + (
            f"; node {owner.node_id} is." if owner is not None else "."))

    def _requested_layout(self, t) -> tuple[int, TopicRefusal | None]:
        """Partition count of a CreatableTopic, or why its layout is refused."""
        node = self.ownership.local.node_id
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                return 0, TopicRefusal(ErrorCode.INVALID_REQUEST,
                                       "Both numPartitions or replicationFactor and replicasAssignments were set. "
                                       "Both cannot be used at the same time.")
            indexes = sorted(a.partition_index for a in t.assignments)
            if indexes != list(range(len(indexes))):
                return 0, TopicRefusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       "Partitions should be numbered consecutively from 0.")
            for a in t.assignments:
                if a.broker_ids != [node]:
                    return 0, TopicRefusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                           f"Partition {a.partition_index} must be assigned to broker {node}, "
                                           f"the only broker.")
            return len(indexes), None
        rf = t.replication_factor
        if rf == 0 or rf < -1:
            return 0, TopicRefusal(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        if rf > 1:
            return 0, TopicRefusal(ErrorCode.INVALID_REPLICATION_FACTOR,
                                   f"Unable to replicate the partition {rf} time(s): only 1 broker is registered.")
        partitions = self.config.num_partitions if t.num_partitions == -1 else t.num_partitions
        return partitions, TopicRegistry.check_partition_count(partitions)

    # ------------------------------------------------------------------ DeleteTopics
    async def delete_topics(self, request, version: int, ctx: RequestContext) -> DeleteTopicsResponse:
        if version >= 6:
            wanted = [(t.name, t.topic_id or ZERO_UUID) for t in request.topics]
        else:
            wanted = [(name, ZERO_UUID) for name in request.topic_names]
        seen: dict[object, int] = {}
        for name, topic_id in wanted:
            key = topic_id if topic_id != ZERO_UUID else name
            seen[key] = seen.get(key, 0) + 1
        results = []
        for name, topic_id in wanted:
            result = DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=topic_id, error_code=0)
            results.append(result)
            key = topic_id if topic_id != ZERO_UUID else name
            if seen[key] > 1:
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = "Duplicate topic in the request."
                continue
            if not self._keeps_registry:
                if ctx.client_id == PEER_CLIENT_ID:  # the registry's owner deleted it: forget its watermarks
                    self.groups.forget_topic(name)
                    continue
                refusal = self._not_controller()
                result.error_code, result.error_message = refusal.error_code, refusal.message
                continue
            if topic_id != ZERO_UUID:
                topic = self.topics.get_by_id(topic_id)
                if topic is None:
                    result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                    result.error_message = f"Topic id {topic_id} does not exist."
                    continue
                name = result.name = topic.name
            try:
                outcome = await self.topics.delete(name)
            except StorageError as exc:
                outcome = TopicRefusal(ErrorCode.NOT_CONTROLLER, f"Could not persist the deletion: {exc}")
            if isinstance(outcome, TopicRefusal):
                result.error_code = outcome.error_code
                result.error_message = outcome.message
            else:
                result.topic_id = outcome.topic_id
                self.groups.forget_topic(outcome.name)
                await self.peers.forget_topic(outcome.name)
        return DeleteTopicsResponse(responses=results)

    # ------------------------------------------------------------------ CreatePartitions
    async def create_partitions(self, request, version: int, ctx: RequestContext) -> CreatePartitionsResponse:
        counts: dict[str, int] = {}
        for t in request.topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        node = self.ownership.local.node_id
        results = []
        for t in request.topics:
            result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name, error_code=0)
            results.append(result)
            if counts[t.name] > 1:
                refusal = TopicRefusal(ErrorCode.INVALID_REQUEST, f"Topic '{t.name}' appears more than once.")
            elif not self._keeps_registry:
                refusal = self._not_controller()
            else:
                refusal = self.topics.check_new_partition_count(t.name, t.count)
            if refusal is None and t.assignments is not None:
                topic = self.topics.get(t.name)
                added = t.count - topic.partitions
                if len(t.assignments) != added:
                    refusal = TopicRefusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                           f"Increasing the number of partitions by {added} but "
                                           f"{len(t.assignments)} assignments provided.")
                elif any(a.broker_ids != [node] for a in t.assignments):
                    refusal = TopicRefusal(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                           f"New partitions must be assigned to broker {node}, the only broker.")
            if refusal is None and not request.validate_only:
                try:
                    outcome = await self.topics.set_partition_count(t.name, t.count)
                except StorageError as exc:
                    outcome = TopicRefusal(ErrorCode.NOT_CONTROLLER, f"Could not persist the change: {exc}")
                if isinstance(outcome, TopicRefusal):
                    refusal = outcome
            if refusal is not None:
                result.error_code = refusal.error_code
                result.error_message = refusal.message
        return CreatePartitionsResponse(results=results)


def _refuse(result, refusal: TopicRefusal) -> None:
    result.error_code = refusal.error_code
    result.error_message = refusal.message
