"""`CoordinatorServer`: one Cohort node, its listener and the life of what it serves.

Life cycle (driven by `cohort.coordinator.process.daemon` or by tests)::

    server = CoordinatorServer(config, metrics=metrics)
    await server.start()   # state "loading": open the store, load the owned partitions, then serve; "ready"
    ...                    # server.port is the bound port (useful with listeners=127.0.0.1:0)
    await server.stop()    # "stopping": stop accepting, finish in-flight requests, hand the partitions over,
                           # close the store

The node wires the `Store` (the local offsets log unless one is given), the `Ownership` (this node
owns every partition unless one is given), the group coordinator, the topic registry and the
request handlers together; the coordinator talks to the store only through the `Store` interface
and loads and unloads partitions as the ownership says, and owns the set of open connections
(`cohort.coordinator.server.connection` does everything within one). Node-wide limits
from the config: ``max.connections`` and ``max.connections.per.ip`` (a slot
from accept to close, `ConnectionQuotas`; more are refused at accept),
``connections.authentication.timeout.ms`` (an SSL/SASL connection not signed in
by then is closed),
``connections.max.idle.ms`` (a connection with nothing in flight and no bytes
for that long is closed), ``socket.request.read.timeout.ms`` (a request must
arrive whole within that long of its first byte: a client trickling bytes
cannot hold a connection, or the request-bytes budget, forever) and
``queued.max.request.bytes`` (the `RequestBytesBudget` every connection shares).
The connections also share one `RebalancePacer`: JoinGroup and SyncGroup
requests start within a slice of each loop turn, so a huge group's rebalance
does not hold up everyone else's requests.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

from cohort.coordinator.config import WORKER_LINK_LISTENER, ConfigError, CoordinatorConfig, Endpoint, HostPort
from cohort.coordinator.server.connection import Connection, ListenerSecurity, RebalancePacer, RequestBytesBudget
from cohort.coordinator.server.connection_quotas import ConnectionQuotas, ConnectionSlot, resolve_overrides
from cohort.coordinator.contracts.answers import PendingAnswer
from cohort.coordinator.groups.coordinator import GroupCoordinator
from cohort.coordinator.server.handlers import RequestHandlers
from cohort.coordinator.server.listener import Listener
from cohort.coordinator.log import OffsetsLog
from cohort.coordinator.server.peer_events import PeerEvents
from cohort.coordinator.metrics import LogPartitionStats
from cohort.coordinator.groups.reports.history import HISTORY_KEY_PREFIXES
from cohort.coordinator.contracts.ownership import Node, Ownership
from cohort.coordinator.records.types import (EndOffsetRecord, EndOffsetTombstone, Record, TopicRecord, TopicTombstone,
                                              decode_record)
from cohort.coordinator.security import admin_apis
from cohort.coordinator.security.authorization import RequestAuthorization
from cohort.coordinator.security.authorizer import Authorizer
from cohort.coordinator.security.oauthbearer import JwtValidator
from cohort.coordinator.security.password_checks import PasswordChecks
from cohort.coordinator.security.registry import SECURITY_RECORD_TYPES, SecurityRegistry
from cohort.coordinator.security.worker_sync import WorkerSecurity
from cohort.coordinator.server.peers import PeerLink
from cohort.coordinator.security.tls import server_context
from cohort.coordinator.server.static_ownership import TOPIC_REGISTRY_PARTITION, StaticOwnership
from cohort.coordinator.contracts.store import Store
from cohort.coordinator.server.topics import END_OFFSET_HISTORY_KEY_PREFIXES, RegistryRecord, TopicRegistry
from cohort.protocol.messages import (
    AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest,
    DescribeUserScramCredentialsRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
)
from cohort.coordinator.log.file_modes import make_private_dir, private_opener

log = logging.getLogger("cohort.coordinator.server.node")
# The workers' link: its peers (the other workers, each with a few connections) sign in within milliseconds,
# so anything else on it is held briefly and counted: at most this many sockets, each signed in this fast.
LINK_MAX_CONNECTIONS = 64
LINK_SIGN_IN_S = 2.0

# The credentials and ACLs live in the topic registry's offsets-log partition.
SECURITY_PARTITION = TOPIC_REGISTRY_PARTITION
META_PROPERTIES = "meta.properties"


class CoordinatorServer:
    """One Cohort node: the offsets log, the group coordinator, the topic registry and the listener."""

    def __init__(self, config: CoordinatorConfig, metrics: Any = None, *, store: Store | None = None,
                 ownership: Ownership | None = None, listen_sockets: list | None = None,
                 peer_link: PeerLink | None = None, worker_security: WorkerSecurity | None = None) -> None:
        """`store`: where offsets partitions live (default: the local offsets log in `data.dir`, built at
        start); `ownership`: which partitions this node coordinates (default: all of them);
        `listen_sockets`: the Kafka port of each listener already bound (a `--workers` supervisor binds its workers' ports);
        `peer_link`, `worker_security`: a `--workers` worker's link to the others and its share of
        worker 0's credentials and ACLs."""
        self._listen_sockets = listen_sockets
        self.peer_link = peer_link
        self.worker_security = worker_security
        self.config = config
        self.metrics = metrics
        self.state = "loading"
        self.port: int | None = None
        self.cluster_id: str | None = None
        self.store: Store | None = store
        self.ownership: Ownership | None = ownership
        self.groups: GroupCoordinator | None = None
        self.topics: TopicRegistry | None = None
        self.handlers: RequestHandlers | None = None
        self.cluster = None  # cluster mode (`--cluster`): the etcd connection, store and ownership
        self._handing_over: asyncio.Future | None = None  # cluster mode's shutdown hand-over, once started
        self._listener: Listener | None = None  # the first one (clients' main port)
        self._listeners: list[tuple[Endpoint, Listener]] = []
        self.ports: dict[str, int] = {}  # bound port per listener name
        self.security = SecurityRegistry(self._persist_security_records,
                                         Authorizer(config.super_user_principals,
                                                    config.allow_everyone_if_no_acl_found))
        if worker_security is not None:
            worker_security.attach(self.security)
        self.oauthbearer = None  # checks OAUTHBEARER tokens, when a SASL listener offers that mechanism
        self.password_checks = PasswordChecks()  # SASL/PLAIN checks: off the loop, throttled per address
        self._connections: set[Connection] = set()
        # Suspended request handlers (a task, or the future a commit waits on): connections add and discard
        # them (a set, not methods: a commit does both), `stop` lets them finish or cancels them.
        self.inflight: set[PendingAnswer] = set()  # the answers connections wait for (shutdown waits, then cancels)
        self._idle_task: asyncio.Task | None = None
        self.peer_events = PeerEvents(config.log_aggregation_interval_ms / 1000)  # clients' mistakes, aggregated
        self.quotas = ConnectionQuotas(config.max_connections, config.max_connections_per_ip)  # (overrides at bind)
        self.request_budget = RequestBytesBudget(config.queued_max_request_bytes)
        self.rebalance_pacer = RebalancePacer()

    # ------------------------------------------------------------------ life cycle
    async def bind(self) -> None:
        """Bind the Kafka listener without accepting: clients are refused until the log is loaded.

        Separate from `start` so the daemon can fail on a bad address or a taken port before it
        touches the data dir.
        """
        config = self.config
        endpoints = config.endpoints
        protocols = {e.name: config.security_protocol(e.name) for e in endpoints}
        tls = {protocol: server_context(config, protocol) for protocol in set(protocols.values())
               if protocol.endswith("SSL")}
        if "OAUTHBEARER" in config.enabled_mechanisms and any(p.startswith("SASL") for p in protocols.values()):
            try:
                self.oauthbearer = JwtValidator(
                    config.sasl_oauthbearer_jwks_endpoint_url,
                    tuple(a for a in config.sasl_oauthbearer_expected_audience.split(",") if a),
                    config.sasl_oauthbearer_expected_issuer, config.sasl_oauthbearer_sub_claim_name,
                    config.sasl_oauthbearer_clock_skew_seconds)
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise ConfigError(f"cannot read sasl.oauthbearer.jwks.endpoint.url: {reason}") from None
        try:
            overrides = await asyncio.get_running_loop().run_in_executor(
                None, resolve_overrides, config.max_connections_per_ip_overrides)
        except OSError as exc:
            raise ConfigError(f"invalid max.connections.per.ip.overrides: cannot resolve a host: {exc}") from None
        self.quotas = ConnectionQuotas(config.max_connections, config.max_connections_per_ip, overrides)
        try:
            for index, endpoint in enumerate(endpoints):
                protocol = protocols[endpoint.name]
                security = ListenerSecurity(endpoint.name, protocol, tls.get(protocol),
                                            config.enabled_mechanisms if protocol.startswith("SASL") else ())
                listener = Listener(endpoint.host, endpoint.port,
                                    lambda peer, slot, security=security: Connection(self, peer, security, slot),
                                    backlog=1024, ssl_context=security.ssl_context, admit=self._admit_socket,
                                    handshake_timeout_s=config.connections_authentication_timeout_ms / 1000,
                                    handshake_failed=self._handshake_failed,
                                    log_interval_s=config.log_aggregation_interval_ms / 1000)
                if self._listen_sockets is not None:
                    listener.adopt([self._listen_sockets[index]])  # a worker: the supervisor bound its ports
                else:
                    await listener.bind()
                self._listeners.append((endpoint, listener))
                self.ports[endpoint.name] = listener.port
            link = self.peer_link
            if link is not None and link.listen_socket is not None:
                security = ListenerSecurity(WORKER_LINK_LISTENER, "SASL_PLAINTEXT", None, ("PLAIN",), credentials=link,
                                            reauthenticates=False)
                # (the workers' own link is not a client listener: counted apart, within a bound of its own)
                self.link_quotas = ConnectionQuotas(LINK_MAX_CONNECTIONS, LINK_MAX_CONNECTIONS)
                listener = Listener("127.0.0.1", 0,
                                    lambda peer, slot, security=security: Connection(self, peer, security, slot),
                                    backlog=1024, admit=self._admit_link_socket,
                                    log_interval_s=config.log_aggregation_interval_ms / 1000)
                listener.adopt([link.listen_socket])
                self._listeners.append((Endpoint(WORKER_LINK_LISTENER, "127.0.0.1", listener.port), listener))
                self.ports[WORKER_LINK_LISTENER] = listener.port
        except OSError:
            await self.unbind()
            raise
        self._listener = self._listeners[0][1]
        self.port = self._listener.port

    def failed_partitions(self) -> dict[int, str]:
        """Offsets partitions that failed to load, with why (their groups answer NOT_COORDINATOR)."""
        return self.groups.partitions.failed_partitions() if self.groups is not None else {}

    async def unbind(self) -> None:
        """Release the port of a server that never started (the daemon could not take the data dir)."""
        for _, listener in self._listeners:
            listener.close()
        self._listeners = []
        self._listener = None

    async def start(self) -> None:
        """Load the owned partitions (state "loading"), then serve (state "ready"); binds first if `bind` was not called."""
        config = self.config
        started = time.perf_counter()
        if self._listener is None:
            await self.bind()
        if config.cluster is not None:
            await self._open_cluster()
        else:
            self._open_local_log()
        self.topics = TopicRegistry(self.cluster.persist_topics if self.cluster else self._persist_topic_records,
                                    index_retention_ms=config.offsets_history_retention_ms)
        self.groups = GroupCoordinator(config, self.store, other_records=self._replay_other_record,
                                       metrics=self.metrics)
        self.groups.watch_topics(self.topics)
        if self.cluster is not None:  # another node may load a partition this one cannot
            self.groups.partitions.load_retry_delays = self.cluster.load_retry_delays
        await self.store.open()
        if self.cluster is not None:
            await self.cluster.watch_topics(self.topics)
            await self.cluster.watch_security(self.security)
        loading = time.perf_counter()
        await self.ownership.start(self.groups.partitions)
        await self.groups.partitions.wait_loaded()
        failed = self.groups.partitions.failed_partitions()
        owned = len(list(self.ownership.owned()))
        log.info("offsets log loaded: %d partitions, %d live records in %.0f ms%s", owned - len(failed),
                 self.groups.partitions.loaded_records, (time.perf_counter() - loading) * 1000,
                 f", {len(failed)} partitions failed" if failed else "")
        if failed:
            # The partitions that loaded serve normally; the groups of the
            # failed ones answer NOT_COORDINATOR until an operator repairs them.
            log.error("offsets log failed to load: %s", "; ".join(f"partition {p}: {why}"
                                                               for p, why in sorted(failed.items())))
        await self._index_reported_ends(failed)
        self.groups.start_retention()
        self.handlers = RequestHandlers(config, self.topics, self.groups, self.cluster_id, self.advertised_address,
                                        self.ownership, registry_everywhere=self.cluster is not None,
                                        extra_handlers=self._security_handlers(), guard=self._authorization(),
                                        peer_link=self.peer_link)
        if self.worker_security is not None:
            self.worker_security.loaded()
            await self._wait_for_security_state()
        if self.metrics is not None:
            self.metrics.watch_groups(self._groups_by_state, self._member_count)
            self.metrics.watch_offsets(lambda: len(self.groups.offsets))
            self.metrics.watch_log(self._log_partition_stats)
            self.metrics.watch_failed_partitions(self.failed_partitions)
            self.metrics.watch_group_health(self.groups.reports.health_of_groups)
        host = config.listen_address.host
        loop = asyncio.get_running_loop()
        for _, listener in self._listeners:
            listener.start_serving()
        self._idle_task = loop.create_task(self._close_idle_connections(), name="cohort-idle-connections")
        self.handlers.start_registry_mirror()
        self.state = "ready"
        log.info("listening", extra={"address": f"{host}:{self.port}", "advertised": str(self.advertised_address()),
                                     "listeners": ",".join(f"{e.name}://{HostPort(e.host, self.ports[e.name])}"
                                                           for e, _ in self._listeners),
                                     "authorizer": config.authorizer_class_name or "none",
                                     "acls": len(self.security.authorizer),
                                     "scram_credentials": len(self.security.credentials),
                                     "cluster_id": self.cluster_id, "topics": len(self.topics),
                                     "start_ms": round((time.perf_counter() - started) * 1000)})

    async def _wait_for_security_state(self) -> None:
        """A worker other than 0 serves no client before it holds worker 0's credentials and ACLs."""
        while not self.worker_security.has_state.is_set():
            try:
                await asyncio.wait_for(self.worker_security.has_state.wait(), 10)
            except asyncio.TimeoutError:
                log.warning("still waiting for worker 0's credentials and ACLs before serving")

    async def _open_cluster(self) -> None:
        """Cluster mode: records in etcd, partitions owned through etcd leases, no data dir."""
        from cohort.coordinator.cluster.node import ClusterNode

        self.cluster = ClusterNode(self.config, self.local_node(), metrics=self.metrics)
        self.cluster_id = await self.cluster.connect()
        self.store, self.ownership = self.cluster.store, self.cluster.ownership

    def _open_local_log(self) -> None:
        config = self.config
        data_dir = Path(config.data_dir)
        make_private_dir(data_dir, tighten=True)
        self.cluster_id = load_cluster_id(data_dir)
        if self.store is None:
            self.store = OffsetsLog(
                data_dir,
                num_partitions=config.offsets_topic_num_partitions,
                segment_bytes=config.offsets_topic_segment_bytes,
                segment_ms=config.offsets_topic_segment_ms,
                flush_policy=config.offsets_flush_policy,
                delete_retention_ms=config.delete_retention_ms,
                history_retention_ms=config.offsets_history_retention_ms,
                history_key_prefixes=HISTORY_KEY_PREFIXES + END_OFFSET_HISTORY_KEY_PREFIXES,
                cleaner_backoff_ms=config.log_cleaner_backoff_ms,
                metrics=self.metrics,
                partitions=(),  # loaded one by one as the ownership hands them over
            )
        if self.ownership is None:
            self.ownership = StaticOwnership.single_node(self.local_node(), config.offsets_topic_num_partitions)

    async def stop(self) -> None:
        """Stop accepting, answer what is in flight, then flush and close the offsets log."""
        if self.state == "stopping":
            return
        self.state = "stopping"
        for _, listener in self._listeners:
            listener.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
        for conn in list(self._connections):
            conn.stop_reading()
        # Parked requests are answered now rather than at their timeouts:
        # Fetch waits end, JoinGroup/SyncGroup get NOT_COORDINATOR (clients
        # then look for the coordinator again).
        if self.handlers is not None:
            self.handlers.fetch_waits.release_all()
        if self.groups is not None:
            self.groups.shutdown()
            if self.cluster is not None:
                # Other nodes take the partitions over now, not after the requests in flight: one waiting on
                # etcd or a peer would hold every group of this node. An append already queued still
                # finishes before its partition is let go; later ones answer NOT_COORDINATOR.
                self._handing_over = asyncio.ensure_future(self.ownership.stop())
        # In-flight requests finish (queued ones start as those before them
        # end), within half the shutdown budget; whatever is left is cancelled.
        deadline = time.monotonic() + max(0.1, self.config.shutdown_timeout_ms / 2000)
        while self.inflight and time.monotonic() < deadline:
            await self._wait_inflight(deadline - time.monotonic())
        if self.inflight:
            for answer in list(self.inflight):
                answer.cancel()
            await self._wait_inflight(1.0)
        for conn in list(self._connections):
            conn.close("shutdown")
        self.password_checks.close()
        self.peer_events.flush()
        await self._close_storage()
        log.info("stopped")

    async def _close_storage(self) -> None:
        if self.groups is not None and self.state != "stopping":
            self.groups.shutdown()
        if self.handlers is not None:
            await self.handlers.close()
        if self._handing_over is not None:
            await self._handing_over
        elif self.ownership is not None and self.groups is not None:
            await self.ownership.stop()  # every owned partition handed over: its appends finish, then released
            await self.groups.partitions.wait_loaded()
        if self.store is not None:
            await self.store.close()
        if self.cluster is not None:
            await self.cluster.close()

    async def __aenter__(self) -> "CoordinatorServer":
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()

    # ------------------------------------------------------------------ wiring
    def advertised_address(self, listener: str | None = None) -> HostPort:
        """What Metadata and FindCoordinator tell clients of `listener` (default: the first) to connect to."""
        names = [e.name for e in self.config.endpoints]
        name = listener if listener in names else names[0]  # the worker link answers as the first listener
        address = self.config.advertised_endpoint(name)
        if address.port == 0 and name in self.ports:
            return HostPort(address.host, self.ports[name])
        return address

    def local_node(self) -> Node:
        """This node as clients see it: its first listener's advertised address, and every listener's."""
        first = self.advertised_address()
        return Node(self.config.node_id, first.host, first.port, tuple(
            (e.name, *self.advertised_address(e.name)) for e in self.config.endpoints))

    def _security_handlers(self) -> dict:
        apis = admin_apis.SecurityAdminApis(self.security, authorizer_enabled=bool(self.config.authorizer_class_name))
        return {
            SaslHandshakeRequest: admin_apis.sasl_handshake_when_authenticated,
            SaslAuthenticateRequest: admin_apis.sasl_authenticate_when_authenticated,
            DescribeAclsRequest: apis.describe_acls,
            CreateAclsRequest: apis.create_acls,
            DeleteAclsRequest: apis.delete_acls,
            DescribeUserScramCredentialsRequest: apis.describe_user_scram_credentials,
            AlterUserScramCredentialsRequest: apis.alter_user_scram_credentials,
        }

    def _authorization(self):
        """The authorization guard of every handler, or None when no authorizer is configured."""
        if not self.config.authorizer_class_name:
            return None
        # The handlers are made with the guard: these look them up when a request comes.
        return RequestAuthorization(self.security.authorizer, lambda name: self.handlers.topic_exists(name),
                                    lambda topic_id: self.handlers.topic_name_by_id(topic_id), self.metrics,
                                    learn_topics=lambda names: self.handlers.learn_topics(names)).guard

    async def _persist_security_records(self, records: list[Record]) -> None:
        assert self.groups is not None
        await self.groups.partitions.persist(SECURITY_PARTITION, records)

    async def _persist_topic_records(self, records: list[RegistryRecord]) -> None:
        assert self.groups is not None
        await self.groups.partitions.persist(TOPIC_REGISTRY_PARTITION, records)

    async def _index_reported_ends(self, failed: dict[int, str]) -> None:
        """When each end offset was reported (ListOffsets by timestamp), from every report the log still
        holds: the load replays only each partition's latest. Cluster mode's etcd keeps only the latest, so
        there the index starts at the node's start."""
        history = getattr(self.store, "history", None)
        if history is None or TOPIC_REGISTRY_PARTITION in failed \
                or TOPIC_REGISTRY_PARTITION not in set(self.ownership.owned()):
            return
        kept = await history(TOPIC_REGISTRY_PARTITION, END_OFFSET_HISTORY_KEY_PREFIXES)
        self.topics.index_reports(decode_record(key, value) for _, key, value in kept if value is not None)

    def _replay_other_record(self, record: Record) -> None:
        if isinstance(record, (TopicRecord, TopicTombstone, EndOffsetRecord, EndOffsetTombstone)):
            assert self.topics is not None
            self.topics.apply(record)
        elif isinstance(record, SECURITY_RECORD_TYPES):
            self.security.apply(record)
        else:
            log.warning("ignoring an unexpected record type in the offsets log: %s", type(record).__name__)

    def _groups_by_state(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        if self.groups is not None:
            for group in [*self.groups.groups(), *self.groups.consumer_groups()]:
                name = str(group.state)
                counts[name] = counts.get(name, 0) + 1
        return counts

    def _log_partition_stats(self) -> list[LogPartitionStats]:
        """Size and segment count of every offsets partition (read when Prometheus scrapes)."""
        stats = []
        segments_of = getattr(self.store, "segments", None)  # a store with local files (the offsets log)
        if segments_of is not None:
            # A node reports the partitions it owns (with --workers, the others are another worker's).
            owned = self.ownership.owned() if self.ownership is not None else range(self.store.num_partitions)
            for partition in owned:
                segments = segments_of(partition)
                size = 0
                for path in segments:
                    try:
                        size += path.stat().st_size
                    except OSError:  # compacted away between listing and stat
                        pass
                stats.append(LogPartitionStats(partition, size, len(segments)))
        return stats

    def _member_count(self) -> int:
        if self.groups is None:
            return 0
        return sum(len(g.members) for g in [*self.groups.groups(), *self.groups.consumer_groups()])

    # ------------------------------------------------------------------ connections
    def _admit_socket(self, peer: str) -> ConnectionSlot | None:
        """At accept: a slot within max.connections and max.connections.per.ip, or None (the socket is closed)."""
        host = peer.rpartition(":")[0]
        slot = self.quotas.acquire(host)
        if type(slot) is ConnectionSlot:
            return slot
        self.peer_events.note(log, logging.WARNING, "refusing connections: limit reached", peer, limit=slot)
        if self.metrics is not None:
            self.metrics.connection_closed("limit")
        return None

    def _admit_link_socket(self, peer: str) -> ConnectionSlot | None:
        """At accept on the workers' link: a slot within LINK_MAX_CONNECTIONS, or None (the socket is closed)."""
        slot = self.link_quotas.acquire(peer.rpartition(":")[0])
        if type(slot) is ConnectionSlot:
            return slot
        self.peer_events.note(log, logging.WARNING, "refusing connections on the workers' link: limit reached", peer,
                              limit=LINK_MAX_CONNECTIONS)
        return None

    def _handshake_failed(self, peer: str, exc: BaseException) -> None:
        reason = "timed out" if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) else str(exc) or type(exc).__name__
        self.peer_events.note(log, logging.INFO, "TLS handshake failed", peer, error=reason)

    def admit(self, conn: "Connection") -> bool:
        """Whether a new connection (already within the connection limits) may be served: the node is ready."""
        if self.state != "ready":
            return False
        self._connections.add(conn)
        if self.metrics is not None:
            self.metrics.connection_accepted()
        return True

    def forget(self, conn: "Connection", reason: str) -> None:
        """A connection closed, for `reason` (the label of its metric)."""
        if conn in self._connections:
            self._connections.discard(conn)
            if self.metrics is not None:
                self.metrics.connection_closed(reason)

    async def _wait_inflight(self, timeout: float) -> None:
        """Wait (at most `timeout` s) until the request handlers suspended now have ended."""
        if self.inflight and timeout > 0:
            await asyncio.wait([answer.source for answer in self.inflight], timeout=timeout)

    def hurry_appends(self) -> None:
        """Start syncing queued appends now, if the store can (the local log's `hurry`)."""
        hurry = getattr(self.store, "hurry", None)
        if hurry is not None:
            hurry()

    async def _close_idle_connections(self) -> None:
        idle_s = self.config.connections_max_idle_ms / 1000
        read_s = self.config.socket_request_read_timeout_ms / 1000
        authentication_s = self.config.connections_authentication_timeout_ms / 1000
        link_s = LINK_SIGN_IN_S if WORKER_LINK_LISTENER in self.ports else float("inf")
        interval = min(max(min(idle_s, read_s, authentication_s, link_s) / 4, 0.05), 30.0)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            deadline = now - idle_s
            read_deadline = now - read_s
            authentication_deadline = now - authentication_s
            link_deadline = now - link_s
            for conn in list(self._connections):
                if conn.unauthenticated and conn.security.name == WORKER_LINK_LISTENER \
                        and conn.accepted_at < link_deadline:
                    self.peer_events.note(log, logging.INFO, "closing connection: not signed in on the workers' "
                                          "link in time", conn.peer)
                    conn.close("authentication_timeout")
                elif conn.unauthenticated and conn.accepted_at < authentication_deadline:
                    self.peer_events.note(log, logging.INFO, "closing connection: not authenticated within "
                                          "connections.authentication.timeout.ms", conn.peer)
                    conn.close("authentication_timeout")
                elif conn.request_started is not None and conn.request_started < read_deadline:
                    log.warning("closing connection: a request did not arrive whole within "
                                "socket.request.read.timeout.ms", extra={
                                    "peer": conn.peer, "received_bytes": conn.reader.buffered,
                                    "timeout_ms": self.config.socket_request_read_timeout_ms})
                    conn.close("request_read_timeout")
                elif not conn.pending and conn.last_active < deadline:
                    log.info("closing idle connection", extra={"peer": conn.peer, "idle_ms": round(
                        (now - conn.last_active) * 1000)})
                    conn.close("idle")


def load_cluster_id(data_dir: Path) -> str:
    """This node's cluster id, created once and kept in ``meta.properties`` (Kafka's file and format).

    A Kafka cluster id is a random UUID in URL-safe base64 without padding
    (22 characters). It must stay stable: clients compare it across Metadata
    responses.
    """
    path = data_dir / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    if text is not None:
        for line in text.splitlines():
            name, sep, value = line.partition("=")
            if sep and name.strip() == "cluster.id" and value.strip():
                return value.strip()
        raise ValueError(f"{path} has no cluster.id line; remove the file to generate a new cluster id")
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8", opener=private_opener) as f:
        f.write(f"# Written by Cohort on first start; the cluster id must not change.\nversion=1\ncluster.id={cluster_id}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    log.info("new cluster id", extra={"cluster_id": cluster_id})
    return cluster_id
