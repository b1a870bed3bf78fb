"""What one worker of `cohort serve --workers N` asks the others, over the Kafka protocol itself.

Two things are not partitioned by group, so a worker cannot answer them alone:

* **the topic registry** lives in offsets partition 0; its owner answers Metadata for everybody (the
  others forward the request to it and return its answer unchanged, so every worker tells clients the
  same thing) and is the controller (CreateTopics & co. elsewhere get NOT_CONTROLLER, as on Kafka);
* **high watermarks** -- the highest offset any group committed for a topic partition -- come from the
  groups of every worker. The registry owner leads every topic partition; for ListOffsets(latest) it
  asks each peer for its own high watermarks, and Fetch reports the last values learned (refreshed in
  the background at most once a second). In cluster mode every node keeps the registry and answers
  ListOffsets(latest) the way Fetch does, from the last values learned (see `RequestHandlers._end_offsets`).

A peer's request carries the client id `PEER_CLIENT_ID`; a worker answers such a ListOffsets from its
own groups only (it never asks on), and such a DeleteTopics (sent once the registry owner deleted a
topic) by forgetting the topic's high watermarks, so a topic created again starts from 0 everywhere.

Workers reach each other over the worker link (`PeerLink`), not the clients' listener: every worker
also listens on a loopback port of its own (`WORKER_LINK_LISTENER`, bound by the supervisor like the Kafka
ports), where the only accepted login is SASL/PLAIN as `PEER_USER` with a secret the supervisor makes
at each start. So forwarding works whatever the clients' listener asks for (TLS, SASL, client
certificates), and a request on that listener is a worker's own: the authorization guard lets it through
(the forwarding worker already checked its client's request, and filters the answer for that client).
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cohort.client.connection import BrokerConnection
from cohort.client.errors import ClientError
from cohort.client.security import ClientSecurity
from cohort.coordinator.contracts.ownership import Node
from cohort.protocol.messages import DeleteTopicsRequest, ListOffsetsRequest

log = logging.getLogger("cohort.coordinator.server.peers")

PEER_CLIENT_ID = "cohort-worker"
PEER_REQUEST_TIMEOUT_MS = 5000
LATEST_TIMESTAMP = -1
_FETCH_REFRESH_S = 1.0

PEER_USER = "cohort-worker"
LINK_SECRET_ENV = "COHORT_WORKER_LINK_SECRET"  # how the supervisor hands the secret down (never argv)


@dataclass(frozen=True, slots=True)
class PeerLink:
    """How the workers of one supervisor reach each other: a loopback port each, one secret per start."""

    ports: dict[int, int]  # node id -> its loopback port
    secret: str = field(repr=False)
    listen_socket: socket.socket | None = None  # this worker's, already bound by the supervisor

    def client_security(self) -> ClientSecurity:
        return ClientSecurity("SASL_PLAINTEXT", "PLAIN", PEER_USER, self.secret)

    def check_plain(self, user: str, password: str) -> bool:
        """The worker link's only credential (duck-types `CredentialStore.check_plain` for its SASL/PLAIN)."""
        return hmac.compare_digest(f"{user}\0{password}".encode(), f"{PEER_USER}\0{self.secret}".encode())


class Peers:
    """Connections to the other workers, and the high watermarks they reported."""

    def __init__(self, peers: Callable[[], Iterable[Node]], link: PeerLink | None = None) -> None:
        """`peers()`: the other nodes serving now (asked each time: workers go down and come back);
        `link`: the worker link (else a peer is reached at its advertised address, in plaintext)."""
        self._peers = peers
        self._link = link
        self._connections: dict[int, BrokerConnection] = {}
        self._watermarks: dict[tuple[str, int], int] = {}
        self._refreshed_at: dict[tuple[str, int], float] = {}
        self._refreshing: set[tuple[str, int]] = set()
        self._tasks: set[asyncio.Task] = set()

    def __bool__(self) -> bool:
        return any(True for _ in self._peers())

    def _connection(self, node: Node) -> BrokerConnection:
        conn = self._connections.get(node.node_id)
        if conn is None:
            link = self._link
            host, port = ("127.0.0.1", link.ports[node.node_id]) if link is not None else (node.host, node.port)
            conn = self._connections[node.node_id] = BrokerConnection(
                host, port, client_id=PEER_CLIENT_ID, request_timeout_ms=PEER_REQUEST_TIMEOUT_MS,
                connect_timeout_ms=PEER_REQUEST_TIMEOUT_MS,
                security=link.client_security() if link is not None else None)
        return conn

    async def metadata(self, node: Node, request, version: int):
        """`node`'s answer to `request` (Metadata, or the registry's DescribeEndOffsets; raises ClientError
        when it cannot be reached)."""
        # A task of its own: handlers run without a current task, and wait_for may need one.
        return await asyncio.ensure_future(self._connection(node).request(request, version))

    # ------------------------------------------------------------------ high watermarks
    def known(self, topic: str, partition: int) -> int:
        """The highest high watermark a peer reported for this partition (0 if none)."""
        return self._watermarks.get((topic, partition), 0)

    async def latest(self, wanted: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Ask every peer now; the max of what they report and what they reported before."""
        wanted = list(dict.fromkeys(wanted))
        peers = list(self._peers())
        if wanted and peers:
            await asyncio.gather(*(asyncio.ensure_future(self._ask(node, wanted)) for node in peers))
        now = time.monotonic()
        for key in wanted:
            self._refreshed_at[key] = now
        return {key: self._watermarks.get(key, 0) for key in wanted}

    def refresh_soon(self, wanted: Iterable[tuple[str, int]]) -> None:
        """Refresh stale watermarks in the background (what Fetch reports catches up within a second)."""
        now = time.monotonic()
        stale = [key for key in wanted if key not in self._refreshing
                 and now - self._refreshed_at.get(key, 0.0) >= _FETCH_REFRESH_S]
        if not stale:
            return
        self._refreshing.update(stale)
        task = asyncio.ensure_future(self.latest(stale))
        self._tasks.add(task)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            self._refreshing.difference_update(stale)
            if not t.cancelled() and t.exception() is not None:
                log.debug("high watermark refresh failed: %s", t.exception())

        task.add_done_callback(done)

    async def forget_topic(self, topic: str) -> None:
        """A deleted topic: drop what peers reported for it and have every live peer forget it too."""
        for key in [k for k in self._watermarks if k[0] == topic]:
            del self._watermarks[key]
            self._refreshed_at.pop(key, None)
        peers = list(self._peers())
        if peers:
            await asyncio.gather(*(asyncio.ensure_future(self._tell_deleted(node, topic)) for node in peers))

    async def _tell_deleted(self, node: Node, topic: str) -> None:
        try:
            await self._connection(node).request(DeleteTopicsRequest(topic_names=[topic], timeout_ms=0), 5)
        except ClientError as exc:
            log.warning("worker %d was not told topic %s is deleted: %s", node.node_id, topic, exc)

    async def _ask(self, node: Node, wanted: list[tuple[str, int]]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in wanted:
            by_topic.setdefault(topic, []).append(partition)
        Topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            Topic(name=topic, partitions=[Topic.ListOffsetsPartition(partition_index=p, timestamp=LATEST_TIMESTAMP,
                                                                     max_num_offsets=1) for p in partitions])
            for topic, partitions in by_topic.items()])
        conn = self._connection(node)
        try:
            response = await conn.request(request)  # the highest version both know (>= 1: one offset each)
        except ClientError as exc:
            log.warning("worker %d did not report its high watermarks: %s", node.node_id, exc)
            return
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code == 0 and p.offset > 0:
                    key = (topic.name, p.partition_index)
                    if p.offset > self._watermarks.get(key, 0):
                        self._watermarks[key] = p.offset

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for conn in self._connections.values():
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - closing regardless
                log.debug("closing a peer connection failed", exc_info=True)
        self._connections.clear()
