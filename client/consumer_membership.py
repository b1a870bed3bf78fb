"""Consumer-group membership with KIP-848's protocol (ConsumerGroupHeartbeat).

Theory of operation. The coordinator computes the assignment; a member only
heartbeats and reconciles. One background task loops:

    JOINING (epoch 0) ──answer──▶ RECONCILING ──owned == assigned──▶ STABLE
        ▲                              ▲  new assignment in an answer  │
        └── FENCED_MEMBER_EPOCH /      └───────────────────────────────┘
            UNKNOWN_MEMBER_ID: partitions lost, join again with epoch 0
    close() ──▶ LEAVING (epoch -1, or -2 for a static member) ──▶ CLOSED
    any state ──fatal error──▶ FAILED

- Every heartbeat carries the member epoch and the partitions it owns now, so
  the coordinator sees a revocation as soon as it is done; an answer with an
  `Assignment` is the member's new assignment: partitions that left it are
  revoked first (callback awaited), then the new ones are added, then the next
  heartbeat goes at once to acknowledge. Topics arrive as ids; names come from
  Metadata (v10+ carries ids).
- Member ids are made by the client (KIP-1082, heartbeat v1) and kept for the
  member's life; against a v0-only coordinator the coordinator makes one.
- Commits are fenced by the member epoch (OffsetCommit v9: STALE_MEMBER_EPOCH
  when the group has moved on).

`ConsumerGroupMember` has the same public surface as the classic
`GroupMember` (start, wait_for_assignment, assignment, commit, committed,
close, abort), so callers choose a protocol and keep their code.
"""
from __future__ import annotations

import asyncio
import base64
import enum
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence

from cohort.client.cluster import COORDINATOR_MOVED, Cluster
from cohort.client.errors import ClientError, KafkaConnectionError, KafkaError, UnsupportedApi, kafka_error
from cohort.client.membership import RebalanceListener, _stop, call_listener
from cohort.client.offsets import CommitFence, OffsetAndMetadata, as_offsets, commit_offsets, fetch_offsets
from cohort.client.topic_partition import TopicPartition
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import ConsumerGroupHeartbeatRequest

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
_Owned = ConsumerGroupHeartbeatRequest.HeartbeatOwnedTopicPartitions


class ConsumerMemberState(enum.Enum):
    JOINING = "Joining"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    LEAVING = "Leaving"
    CLOSED = "Closed"
    FAILED = "Failed"


def new_member_id() -> str:
    """A random member id as Kafka's clients make them (KIP-1082): a UUID in 22 URL-safe base64 characters."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerGroupMember:
    """One member of a KIP-848 consumer group: heartbeat, reconcile, commit with the member epoch, leave."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] | Cluster,
        group_id: str,
        topics: Iterable[str] = (),
        *,
        topic_regex: str | None = None,
        server_assignor: str | None = None,
        group_instance_id: str | None = None,
        rack_id: str | None = None,
        client_id: str = "cohort-client",
        rebalance_timeout_ms: int = 300000,
        retry_backoff_ms: int = 100,
        listener: RebalanceListener | None = None,
    ) -> None:
        if not group_id:
            raise ValueError("group_id must be a non-empty string")
        self.cluster = bootstrap if isinstance(bootstrap, Cluster) else Cluster(
            bootstrap, client_id=client_id, retry_backoff_ms=retry_backoff_ms)
        self.group_id = group_id
        self.topics = frozenset(topics)
        self.topic_regex = topic_regex
        if not self.topics and not topic_regex:
            raise ValueError("subscribe to topic names or to a regular expression")
        self.server_assignor = server_assignor
        self.group_instance_id = group_instance_id
        self.rack_id = rack_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.listener = listener or RebalanceListener()

        self.state = ConsumerMemberState.JOINING
        self.member_id = new_member_id()
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = 5000
        self.owned: frozenset[TopicPartition] = frozenset()
        self.error: BaseException | None = None
        self._assigned: dict[uuid.UUID, list[int]] | None = None  # the last assignment not yet reconciled
        self._topic_names: dict[uuid.UUID, str] = {}
        self._stable = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._backoff = self.cluster.backoff()

    def __repr__(self) -> str:
        return f"ConsumerGroupMember({self.group_id!r}, {self.member_id}, {self.state.value}, epoch {self.member_epoch})"

    # ------------------------------------------------------------ public API

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        return self.owned

    async def start(self, *, wait: bool = True, timeout: float | None = 60.0) -> frozenset[TopicPartition]:
        """Start heartbeating; by default wait (bounded) until the first assignment is reconciled."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"consumer-member-{self.group_id}")
        if wait:
            return await self.wait_for_assignment(timeout)
        return self.owned

    async def wait_for_assignment(self, timeout: float | None = 60.0) -> frozenset[TopicPartition]:
        """Wait until the member owns exactly its latest assignment and return it."""
        stable = asyncio.ensure_future(self._stable.wait())
        watchers = [stable] + ([self._task] if self._task is not None else [])
        try:
            await asyncio.wait(watchers, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stable.cancel()
        if self.error is not None:
            raise self.error
        if not self._stable.is_set():
            raise asyncio.TimeoutError(f"group {self.group_id!r}: no reconciled assignment within {timeout} s")
        return self.owned

    async def commit(self, offsets: Mapping, *, timeout_ms: int | None = None) -> None:
        """Commit offsets fenced by the member epoch (STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID when fenced)."""
        if self.member_epoch <= 0:
            raise kafka_error(ErrorCode.UNKNOWN_MEMBER_ID, f"member of group {self.group_id!r} has not joined yet")
        fence = CommitFence(self.member_epoch, self.member_id, self.group_instance_id)
        await commit_offsets(self.cluster, self.group_id, as_offsets(offsets), fence, timeout_ms=timeout_ms)

    async def committed(self, partitions: Iterable[TopicPartition] | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata]:
        return await fetch_offsets(self.cluster, self.group_id, self.owned if partitions is None else partitions)

    async def close(self, *, leave: bool = True) -> None:
        """Revoke the partitions and leave (epoch -1; a static member -2, keeping its place for a while)."""
        if self.state is ConsumerMemberState.CLOSED:
            return
        task, self._task = self._task, None
        await _stop(task)
        try:
            if self.state is not ConsumerMemberState.FAILED and self.owned:
                owned, self.owned = self.owned, frozenset()
                await self._call(self.listener.on_partitions_revoked, owned)
            if leave and self.member_epoch > 0 and self.state is not ConsumerMemberState.FAILED:
                self.state = ConsumerMemberState.LEAVING
                epoch = LEAVE_EPOCH if self.group_instance_id is None else STATIC_LEAVE_EPOCH
                try:
                    await asyncio.wait_for(self._heartbeat(epoch), self.cluster.request_timeout_ms / 1000)
                    self.member_epoch = JOIN_EPOCH
                except (ClientError, asyncio.TimeoutError) as exc:
                    log.warning("group %s: leaving failed: %s", self.group_id, exc)
        finally:
            self.state = ConsumerMemberState.CLOSED
            self._stable.clear()
            await self.cluster.close()

    async def abort(self) -> None:
        """Stop at once without leaving, as if the process died (tests, crash drills)."""
        task, self._task = self._task, None
        await _stop(task)
        self.state = ConsumerMemberState.CLOSED
        self._stable.clear()
        await self.cluster.close()

    # ------------------------------------------------------------ the member task

    async def _run(self) -> None:
        try:
            while True:
                response = await self._heartbeat(self.member_epoch)
                if response is not None:
                    await self._on_answer(response)
                if self._assigned is not None:
                    continue  # acknowledge a reconciliation at once
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), self.heartbeat_interval_ms / 1000)
                except asyncio.TimeoutError:
                    pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - surfaced to every waiter, logged once
            log.error("group %s: member failed: %s", self.group_id, exc)
            self.error = exc
            self.state = ConsumerMemberState.FAILED
            self._stable.clear()

    async def _heartbeat(self, epoch: int):
        """One ConsumerGroupHeartbeat; the response, or None when the coordinator could not be reached."""
        try:
            conn = await self.cluster.coordinator_connection(self.group_id)
        except (KafkaConnectionError, KafkaError) as exc:
            if isinstance(exc, KafkaError) and not exc.retriable:
                raise
            await self._coordinator_lost(exc)
            return None
        version = conn.version_for(ConsumerGroupHeartbeatRequest.API_KEY)  # UnsupportedApi if not spoken
        if self.topic_regex is not None and version < 1:
            raise UnsupportedApi(f"broker {conn.address} cannot subscribe by regex (ConsumerGroupHeartbeat < v1)")
        joining = epoch == JOIN_EPOCH
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id="" if joining and version == 0 and self.state is ConsumerMemberState.JOINING else self.member_id,
            member_epoch=epoch,
            instance_id=self.group_instance_id,
            rack_id=self.rack_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            subscribed_topic_names=sorted(self.topics) if self.topics or version == 0 else None,
            subscribed_topic_regex=self.topic_regex if version >= 1 else None,
            server_assignor=self.server_assignor,
            topic_partitions=self._owned_by_topic_id() if epoch >= 0 else None,
        )
        try:
            return await conn.request(request, version)
        except KafkaConnectionError as exc:
            await self._coordinator_lost(exc)
            return None

    async def _on_answer(self, response) -> None:
        error = response.error_code
        if error == ErrorCode.NONE:
            self._backoff.reset()
            if response.member_id:
                self.member_id = response.member_id
            self.member_epoch = response.member_epoch
            self.heartbeat_interval_ms = response.heartbeat_interval_ms or self.heartbeat_interval_ms
            if response.assignment is not None:
                self._assigned = {tp.topic_id: list(tp.partitions) for tp in response.assignment.topic_partitions}
            if self._assigned is not None:
                await self._reconcile()
            elif self.state is ConsumerMemberState.JOINING:
                self.state = ConsumerMemberState.RECONCILING
            return
        if error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            log.info("group %s: member %s fenced (%s); its partitions are lost, joining again", self.group_id,
                     self.member_id, ErrorCode(error).name)
            self.member_epoch = JOIN_EPOCH
            self.state = ConsumerMemberState.JOINING
            self._stable.clear()
            self._assigned = None
            if self.owned:
                lost, self.owned = self.owned, frozenset()
                await self._call(self.listener.on_partitions_lost, lost)
            return
        if error in COORDINATOR_MOVED:
            self.cluster.forget_coordinator(self.group_id)
        elif not kafka_error(error).retriable:
            raise kafka_error(error, f"ConsumerGroupHeartbeat for group {self.group_id!r}: "
                                     f"{response.error_message or ErrorCode(error).name}")
        await asyncio.sleep(self._backoff.next_delay())

    async def _reconcile(self) -> None:
        """Move towards the last assignment: revoke what left it first, then take what is new."""
        assigned = self._assigned or {}
        if any(topic_id not in self._topic_names for topic_id in assigned):
            meta = await self.cluster.metadata(None)
            self._topic_names.update({uuid.UUID(info.topic_id): name for name, info in meta.topics.items()
                                      if info.topic_id})
        target = frozenset(TopicPartition(self._topic_names[topic_id], p)
                           for topic_id, parts in assigned.items() if topic_id in self._topic_names for p in parts)
        revoked = self.owned - target
        if revoked:
            self.owned -= revoked
            await self._call(self.listener.on_partitions_revoked, revoked)
        added = target - self.owned
        self.owned = target
        if added:
            await self._call(self.listener.on_partitions_assigned, added)
        if len(target) == sum(len(p) for p in assigned.values()):
            self._assigned = None
            self.state = ConsumerMemberState.STABLE
            self._stable.set()
            log.info("group %s: member %s epoch %d owns %d partitions", self.group_id, self.member_id,
                     self.member_epoch, len(self.owned))
        else:
            self.state = ConsumerMemberState.RECONCILING  # topics we cannot name yet: ask metadata again next time
            await asyncio.sleep(self._backoff.next_delay())

    def _owned_by_topic_id(self) -> list:
        ids = {name: topic_id for topic_id, name in self._topic_names.items()}
        by_topic: dict[str, list[int]] = {}
        for tp in self.owned:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return [_Owned(topic_id=ids[t], partitions=sorted(ps)) for t, ps in sorted(by_topic.items()) if t in ids]

    async def _call(self, callback, partitions: frozenset[TopicPartition]) -> None:
        await call_listener(self.group_id, callback, partitions)

    async def _coordinator_lost(self, exc: Exception) -> None:
        log.info("group %s: coordinator unavailable (%s); rediscovering", self.group_id, exc)
        self.cluster.forget_coordinator(self.group_id)
        await asyncio.sleep(self._backoff.next_delay())
