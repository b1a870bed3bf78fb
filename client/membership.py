"""Consumer-group membership with Kafka's classic protocol (JoinGroup / SyncGroup / Heartbeat).

Theory of operation. A `GroupMember` owns one background task that walks this
state machine (Kafka's client-side MemberState):

    UNJOINED ──join──▶ PREPARING_REBALANCE ──JoinGroup ok──▶ COMPLETING_REBALANCE
        ▲                     ▲                                     │ SyncGroup ok
        │                     └──── rejoin needed ◀──────────── STABLE (heartbeating)
        └── member id / generation reset                            │
                                        LEAVING ──▶ CLOSED ◀────────┘ close()
    any state ──fatal error──▶ FAILED

- Join: JoinGroup with the subscription encoded for every configured assignor
  (Kafka's ConsumerProtocolSubscription, preference order). A dynamic member's
  first join gets MEMBER_ID_REQUIRED with its id and joins again at once.
- The member the coordinator names leader fetches metadata, runs the chosen
  assignor over every member's subscription, and sends the assignments in
  SyncGroup; followers send none.
- Heartbeats run in their own task every `heartbeat_interval_ms`, from a
  completed SyncGroup until the next JoinGroup, so slow rebalance callbacks
  don't cost the session; that task only reports, the member task acts. Rejoin
  rules are Kafka's: REBALANCE_IN_PROGRESS → rejoin keeping member id and generation;
  ILLEGAL_GENERATION → forget the generation, rejoin; UNKNOWN_MEMBER_ID →
  forget member id and generation, rejoin; FENCED_INSTANCE_ID → fatal;
  coordinator moved or unreachable → rediscover and keep heartbeating.
- Rebalance callbacks are awaited in the member's task. Eager assignors revoke
  everything before joining; cooperative ones (all assignors support
  COOPERATIVE) revoke only what the new assignment takes away, then rejoin so
  the partition can reach its new owner. When the member id or generation is
  reset, owned partitions are *lost* (someone else may already own them).
- Static membership: with `group_instance_id` the member skips
  MEMBER_ID_REQUIRED, and by default does not send LeaveGroup on close, so a
  restart within the session timeout takes its place without a rebalance.
"""
from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cohort.client.assignors import PartitionAssignor, RebalanceProtocol, Subscription, assignor_named
from cohort.client.cluster import COORDINATOR_MOVED, Cluster
from cohort.client.errors import (
    ClientError,
    FencedInstanceIdError,
    KafkaConnectionError,
    KafkaError,
    RebalanceInProgressError,
    UnsupportedApi,
    kafka_error,
)
from cohort.client.offsets import CommitFence, OffsetAndMetadata, as_offsets, commit_offsets, fetch_offsets
from cohort.client.topic_partition import TopicPartition, flatten_partitions, partitions_by_topic
from cohort.protocol.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from cohort.protocol.errors import ErrorCode, ProtocolError
from cohort.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
UNREACHABLE = -999  # heartbeat outcome: no answer from the coordinator (not a Kafka error code)
# JoinGroup/SyncGroup can be held for a whole rebalance timeout; allow that plus this margin.
JOIN_RESPONSE_MARGIN_MS = 5000


class MemberState(enum.Enum):
    UNJOINED = "Unjoined"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    LEAVING = "Leaving"
    CLOSED = "Closed"
    FAILED = "Failed"


class RebalanceListener:
    """Override what you need; every callback may be a coroutine, and is awaited before the rebalance goes on."""

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        """Called before giving partitions up: commit their offsets here."""

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        """Called with the partitions this member gained (cooperative) or all of them (eager)."""

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        """Called when this member was fenced: the partitions may already belong to others; don't commit."""
        await self.on_partitions_revoked(lost)


@dataclass(slots=True, frozen=True)
class Generation:
    generation_id: int = -1
    member_id: str = ""
    protocol_name: str | None = None


NO_GENERATION = Generation()


async def _stop(task: asyncio.Task | None) -> None:
    """Cancel `task` and wait for it to end.

    Cancels again until it does: on Python 3.11 `asyncio.wait_for` can swallow a
    cancellation that races with its inner future completing.
    """
    while task is not None and not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=1.0)
    if task is not None and not task.cancelled() and task.exception() is not None:
        log.debug("task %s ended with %r", task.get_name(), task.exception())


async def call_listener(group_id: str, callback, partitions: frozenset[TopicPartition]) -> None:
    """Run a rebalance callback (plain or coroutine); a failing one is logged, never wedges the member."""
    try:
        result = callback(partitions)
        if inspect.isawaitable(result):
            await result
    except Exception:  # noqa: BLE001 - a failing callback must not wedge the group
        log.exception("group %s: rebalance callback %s failed", group_id, getattr(callback, "__name__", callback))


class _Rejoin(Exception):
    """Internal: abandon the current join/heartbeat cycle and join again."""


class GroupMember:
    """One member of a consumer group: join, assign (as leader), heartbeat, commit, leave."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] | Cluster,
        group_id: str,
        topics: Iterable[str],
        *,
        assignors: Sequence[str | PartitionAssignor] = ("range",),
        group_instance_id: str | None = None,
        client_id: str = "cohort-client",
        session_timeout_ms: int = 45000,
        rebalance_timeout_ms: int = 300000,
        heartbeat_interval_ms: int = 3000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        allow_auto_create_topics: bool = True,
        listener: RebalanceListener | None = None,
    ) -> None:
        if not group_id:
            raise ValueError("group_id must be a non-empty string")
        self.cluster = (
            bootstrap
            if isinstance(bootstrap, Cluster)
            else Cluster(bootstrap, client_id=client_id, retry_backoff_ms=retry_backoff_ms)
        )
        self.group_id = group_id
        self.topics = frozenset(topics)
        self.assignors = [assignor_named(a) if isinstance(a, str) else a for a in assignors]
        if not self.assignors:
            raise ValueError("at least one partition assignor is needed")
        self.rebalance_protocol = (
            RebalanceProtocol.COOPERATIVE
            if all(RebalanceProtocol.COOPERATIVE in a.supported_protocols for a in self.assignors)
            else RebalanceProtocol.EAGER
        )
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.allow_auto_create_topics = allow_auto_create_topics
        self.listener = listener or RebalanceListener()

        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        self.member_id = ""
        self.leader_id: str | None = None
        self.owned: frozenset[TopicPartition] = frozenset()
        self.rebalances = 0  # completed SyncGroups
        self.error: BaseException | None = None
        # What the sticky assignor remembers across eager rebalances.
        self._previous_assignment: list[TopicPartition] = []
        self._previous_generation = -1
        self._rejoin_reason: str | None = "initial join"
        self._wakeup = asyncio.Event()
        self._heartbeating = False  # True from a completed SyncGroup until the next JoinGroup
        self._heartbeat_outcome: tuple[Generation, int] | None = None
        self._last_heartbeat_ok = time.monotonic()
        self._stable = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._backoff = self.cluster.backoff()
        self._assigned_counts: dict[str, int] = {}
        self._metadata_checked = 0.0

    def __repr__(self) -> str:
        return f"GroupMember({self.group_id!r}, {self.member_id or '-'}, {self.state.value}, gen {self.generation.generation_id})"

    # ------------------------------------------------------------ public API

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member owns now."""
        return self.owned

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.leader_id == self.member_id

    async def start(self, *, wait: bool = True, timeout: float | None = 60.0) -> frozenset[TopicPartition]:
        """Start the membership task; by default wait (bounded) for the first assignment."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"member-{self.group_id}")
        if wait:
            return await self.wait_for_assignment(timeout)
        return self.owned

    async def wait_for_assignment(self, timeout: float | None = 60.0) -> frozenset[TopicPartition]:
        """Wait until the member is STABLE (has a current assignment) and return it."""
        stable = asyncio.ensure_future(self._stable.wait())
        watchers = [stable] + ([self._task] if self._task is not None else [])
        try:
            done, _ = await asyncio.wait(watchers, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stable.cancel()
        if self.error is not None:
            raise self.error
        if not self._stable.is_set():
            if self._task is not None and self._task.done():
                raise ClientError(f"member of group {self.group_id!r} is {self.state.value}")
            raise asyncio.TimeoutError(f"group {self.group_id!r}: no assignment within {timeout} s")
        return self.owned

    def request_rejoin(self, reason: str) -> None:
        """Ask for a rebalance at the next opportunity (e.g. after changing the subscription)."""
        if self._rejoin_reason is None:
            self._rejoin_reason = reason
        self._stable.clear()
        self._wakeup.set()

    def subscribe(self, topics: Iterable[str]) -> None:
        """Change the subscription; a rebalance follows."""
        topics = frozenset(topics)
        if topics != self.topics:
            self.topics = topics
            self.request_rejoin("subscription changed")

    async def commit(self, offsets: Mapping, *, timeout_ms: int | None = None) -> None:
        """Commit offsets fenced by this member's generation.

        `offsets` maps (topic, partition) to an offset, (offset, metadata) or
        `OffsetAndMetadata`. Raises `IllegalGenerationError` /
        `UnknownMemberIdError` / `FencedInstanceIdError` (all
        `CommitFailedError`) when the group has moved on, and
        `RebalanceInProgressError` while it is rebalancing.
        """
        generation = self.generation
        if generation.generation_id < 0 or not generation.member_id:
            if self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
                raise RebalanceInProgressError(
                    ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.group_id!r} is rebalancing; commit after it"
                )
            raise kafka_error(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member of group {self.group_id!r} has no generation to commit in"
            )
        fence = CommitFence(generation.generation_id, generation.member_id, self.group_instance_id)
        try:
            await commit_offsets(self.cluster, self.group_id, as_offsets(offsets), fence, timeout_ms=timeout_ms)
        except KafkaError as exc:
            # Fenced in the generation we still believe in: rejoin (REBALANCE_IN_PROGRESS needs
            # nothing, the heartbeat will see it).
            fenced = exc.code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID)
            if fenced and self.generation == generation:
                self.request_rejoin(f"commit refused: {exc.name}")
            raise

    def commit_async(self, offsets: Mapping, *, timeout_ms: int | None = None) -> asyncio.Task:
        """Start a commit and return its task; await it (or add a done callback) to see the outcome."""
        offsets = as_offsets(offsets)
        return asyncio.get_running_loop().create_task(self.commit(offsets, timeout_ms=timeout_ms))

    async def committed(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """This group's committed offsets for `partitions` (default: the owned ones)."""
        wanted = self.owned if partitions is None else partitions
        return await fetch_offsets(self.cluster, self.group_id, wanted)

    async def close(self, *, leave: bool | None = None, reason: str = "the consumer is being closed") -> None:
        """Stop: revoke the partitions, leave the group (default: dynamic members only), close sockets."""
        if leave is None:
            leave = self.group_instance_id is None
        task, self._task = self._task, None
        await _stop(task)
        try:
            if self.state not in (MemberState.FAILED, MemberState.CLOSED) and self.owned:
                await self._give_up_partitions(lost=self.generation.generation_id < 0)
            if leave and self.member_id and self.state is not MemberState.CLOSED:
                self.state = MemberState.LEAVING
                try:
                    await asyncio.wait_for(self._leave(reason), self.cluster.request_timeout_ms / 1000)
                except (ClientError, asyncio.TimeoutError) as exc:
                    log.warning("group %s: LeaveGroup failed: %s", self.group_id, exc)
        finally:
            self.state = MemberState.CLOSED
            self._stable.clear()
            await self.cluster.close()

    async def abort(self) -> None:
        """Stop at once without LeaveGroup or callbacks, as if the process died (tests, crash drills)."""
        task, self._task = self._task, None
        await _stop(task)
        self.state = MemberState.CLOSED
        self._stable.clear()
        await self.cluster.close()

    # ------------------------------------------------------------ the member task

    async def _run(self) -> None:
        heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_loop(), name=f"heartbeat-{self.group_id}")
        try:
            while True:
                if self._rejoin_reason is not None:
                    await self._join_and_sync()
                await self._wait_until_rejoin_needed()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - surfaced to every waiter, logged once
            log.error("group %s: member failed: %s", self.group_id, exc)
            self.error = exc
            self.state = MemberState.FAILED
            self._stable.clear()
        finally:
            await _stop(heartbeat)

    async def _join_and_sync(self) -> None:
        """Run rebalances until one completes with a usable assignment."""
        while True:
            reason, self._rejoin_reason = self._rejoin_reason or "rejoin", None
            self._stable.clear()
            await self._prepare_join()  # heartbeats go on meanwhile: callbacks may be slow
            self.state = MemberState.PREPARING_REBALANCE
            self._heartbeating = False  # a member waiting in JoinGroup/SyncGroup needs none
            try:
                join = await self._join_group(reason)
                self.state = MemberState.COMPLETING_REBALANCE
                assignment = await self._sync_group(join)
                self._heartbeat_outcome = None
                self._heartbeating = True
            except _Rejoin as again:
                self._rejoin_reason = str(again) or "rejoin"
                continue
            except KafkaConnectionError as exc:  # e.g. the leader's metadata request
                await self._coordinator_lost(exc)
                self._rejoin_reason = "connection lost during the rebalance"
                continue
            await self._apply_assignment(assignment)
            if self._rejoin_reason is None:
                self.state = MemberState.STABLE
                self._backoff.reset()
                self._stable.set()
                return

    async def _prepare_join(self) -> None:
        if self.rebalance_protocol is RebalanceProtocol.EAGER:
            if self.owned:
                await self._give_up_partitions(lost=self.generation.generation_id < 0)
        else:
            # Cooperative: only partitions of topics we no longer subscribe to are given up now.
            dropped = frozenset(tp for tp in self.owned if tp.topic not in self.topics)
            if dropped:
                self.owned -= dropped
                await self._call(self.listener.on_partitions_revoked, dropped)

    async def _give_up_partitions(self, *, lost: bool) -> None:
        owned, self.owned = self.owned, frozenset()
        if owned:
            await self._call(self.listener.on_partitions_lost if lost else self.listener.on_partitions_revoked, owned)

    async def _call(self, callback, partitions: frozenset[TopicPartition]) -> None:
        await call_listener(self.group_id, callback, partitions)

    # ------------------------------------------------------------ JoinGroup

    def _subscription_metadata(self, assignor: PartitionAssignor) -> bytes:
        cooperative = self.rebalance_protocol is RebalanceProtocol.COOPERATIVE
        topics = sorted(self.topics)
        owned = sorted(self.owned) if cooperative else []
        Sub = ConsumerProtocolSubscription
        subscription = Sub(
            topics=topics,
            user_data=assignor.subscription_user_data(topics, self._previous_assignment, self._previous_generation),
            owned_partitions=[
                Sub.TopicPartition(topic=t, partitions=ps) for t, ps in partitions_by_topic(owned).items()
            ],
            generation_id=self.generation.generation_id if cooperative else -1,
        )
        # Cooperative members need OwnedPartitions (v1) and GenerationId (v2); eager ones
        # send v0, which every client library reads.
        return encode_subscription(subscription, 2 if cooperative else 0)

    async def _join_group(self, reason: str):
        """JoinGroup until it succeeds or must be retried as a whole; returns the response."""
        while True:
            conn = await self._coordinator()
            version = conn.version_for(JoinGroupRequest.API_KEY)
            if self.group_instance_id is not None and version < 5:
                raise UnsupportedApi(f"broker {conn.address} cannot do static membership (JoinGroup < v5)")
            Protocol = JoinGroupRequest.JoinGroupRequestProtocol
            request = JoinGroupRequest(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=[Protocol(name=a.name, metadata=self._subscription_metadata(a)) for a in self.assignors],
                reason=reason,
            )
            log.debug("group %s: JoinGroup (%s) as %r", self.group_id, reason, self.member_id)
            try:
                response = await conn.request(
                    request, version, timeout_ms=self.rebalance_timeout_ms + JOIN_RESPONSE_MARGIN_MS
                )
            except KafkaConnectionError as exc:
                await self._coordinator_lost(exc)
                continue
            error = response.error_code
            if error == ErrorCode.NONE:
                self.member_id = response.member_id
                self.generation = Generation(response.generation_id, response.member_id, response.protocol_name)
                self.leader_id = response.leader
                return response
            if error == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = response.member_id  # KIP-394: join again at once with this id
                continue
            if error == ErrorCode.UNKNOWN_MEMBER_ID:
                await self._reset(member_id=True, why="JoinGroup: UNKNOWN_MEMBER_ID")
            elif error == ErrorCode.ILLEGAL_GENERATION:
                await self._reset(member_id=False, why="JoinGroup: ILLEGAL_GENERATION")
            elif error in COORDINATOR_MOVED:
                self.cluster.forget_coordinator(self.group_id)
            elif error == ErrorCode.FENCED_INSTANCE_ID:
                raise FencedInstanceIdError(
                    error, f"group {self.group_id!r}: another member took group.instance.id {self.group_instance_id!r}"
                )
            elif error not in (ErrorCode.REBALANCE_IN_PROGRESS,) and not kafka_error(error).retriable:
                raise kafka_error(error, f"JoinGroup for group {self.group_id!r}")
            await asyncio.sleep(self._backoff.next_delay())

    # ------------------------------------------------------------ SyncGroup

    async def _sync_group(self, join) -> list[TopicPartition]:
        assignments = []
        if self.is_leader and not getattr(join, "skip_assignment", False):
            assignments = await self._lead(join)
        SyncAssignment = SyncGroupRequest.SyncGroupRequestAssignment
        conn = await self._coordinator()
        request = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=self.generation.protocol_name,
            assignments=[SyncAssignment(member_id=m, assignment=a) for m, a in assignments],
        )
        try:
            response = await conn.request(request, timeout_ms=self.rebalance_timeout_ms + JOIN_RESPONSE_MARGIN_MS)
        except KafkaConnectionError as exc:
            await self._coordinator_lost(exc)
            raise _Rejoin("SyncGroup failed: coordinator unreachable") from None
        error = response.error_code
        if error == ErrorCode.NONE:
            if not response.assignment:
                return []
            try:
                decoded = decode_assignment(response.assignment)
            except ProtocolError as exc:
                raise ClientError(f"group {self.group_id!r}: undecodable assignment from the leader: {exc}") from None
            return flatten_partitions((t.topic, t.partitions) for t in decoded.assigned_partitions)
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            raise _Rejoin("SyncGroup: REBALANCE_IN_PROGRESS")
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            await self._reset(member_id=True, why="SyncGroup: UNKNOWN_MEMBER_ID")
            raise _Rejoin("SyncGroup: UNKNOWN_MEMBER_ID")
        if error == ErrorCode.ILLEGAL_GENERATION:
            await self._reset(member_id=False, why="SyncGroup: ILLEGAL_GENERATION")
            raise _Rejoin("SyncGroup: ILLEGAL_GENERATION")
        if error in COORDINATOR_MOVED:
            self.cluster.forget_coordinator(self.group_id)
            raise _Rejoin("SyncGroup: coordinator moved")
        if error == ErrorCode.FENCED_INSTANCE_ID:
            raise FencedInstanceIdError(
                error, f"group {self.group_id!r}: another member took group.instance.id {self.group_instance_id!r}"
            )
        if kafka_error(error).retriable:
            await asyncio.sleep(self._backoff.next_delay())
            raise _Rejoin(f"SyncGroup: {kafka_error(error).name}")
        raise kafka_error(error, f"SyncGroup for group {self.group_id!r}")

    async def _lead(self, join) -> list[tuple[str, bytes]]:
        """Run the group's chosen assignor over every member's subscription."""
        name = join.protocol_name
        assignor = next((a for a in self.assignors if a.name == name), None)
        if assignor is None:
            raise ClientError(f"group {self.group_id!r} chose assignor {name!r}, which this member does not have")
        subscriptions: dict[str, Subscription] = {}
        versions = []
        for member in join.members:
            try:
                sub = decode_subscription(member.metadata)
                versions.append(int.from_bytes(bytes(member.metadata[:2]), "big", signed=True))
            except ProtocolError as exc:
                log.warning("group %s: member %s sent an unreadable subscription (%s); it gets nothing",
                            self.group_id, member.member_id, exc)
                subscriptions[member.member_id] = Subscription(topics=(), group_instance_id=member.group_instance_id)
                continue
            subscriptions[member.member_id] = Subscription(
                topics=tuple(sub.topics),
                user_data=sub.user_data,
                owned_partitions=tuple(flatten_partitions((tp.topic, tp.partitions) for tp in sub.owned_partitions or [])),
                generation_id=sub.generation_id if sub.generation_id is not None else -1,
                rack_id=getattr(sub, "rack_id", None),
                group_instance_id=member.group_instance_id,
            )
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        meta = await self.cluster.metadata(topics, allow_auto_topic_creation=self.allow_auto_create_topics)
        partitions_per_topic = {
            name: len(info.partitions) for name, info in meta.topics.items() if info.error_code == 0 and info.partitions
        }
        self._assigned_counts = {t: partitions_per_topic.get(t, 0) for t in topics}
        self._metadata_checked = time.monotonic()
        result = assignor.assign(partitions_per_topic, subscriptions)
        # Encode in a version every member can read: the lowest subscription version seen.
        version = max(0, min(versions + [3]))
        Assignment = ConsumerProtocolAssignment
        encoded = []
        for member_id in subscriptions:
            parts = result.get(member_id, [])
            assignment = Assignment(
                assigned_partitions=[
                    Assignment.TopicPartition(topic=t, partitions=ps) for t, ps in partitions_by_topic(parts).items()
                ],
                user_data=None,
            )
            encoded.append((member_id, encode_assignment(assignment, version)))
        log.info("group %s: leader %s assigned %d partitions with %s (generation %d)", self.group_id,
                 self.member_id, sum(len(p) for p in result.values()), name, self.generation.generation_id)
        return encoded

    async def _apply_assignment(self, assigned_list: list[TopicPartition]) -> None:
        assigned = frozenset(assigned_list)
        self.rebalances += 1
        self._previous_assignment = sorted(assigned)
        self._previous_generation = self.generation.generation_id
        if self.rebalance_protocol is RebalanceProtocol.COOPERATIVE:
            revoked = self.owned - assigned
            added = assigned - self.owned
            if revoked:
                await self._call(self.listener.on_partitions_revoked, revoked)
            self.owned = assigned
            await self._call(self.listener.on_partitions_assigned, added)
            if revoked:
                # KIP-429: the revoked partitions reach their new owner in a follow-up rebalance.
                self._rejoin_reason = f"revoked {len(revoked)} partitions in a cooperative rebalance"
        else:
            self.owned = assigned
            await self._call(self.listener.on_partitions_assigned, assigned)
        unsubscribed = {tp.topic for tp in assigned} - self.topics
        if unsubscribed and self._rejoin_reason is None:
            self._rejoin_reason = f"assigned topics not subscribed to: {sorted(unsubscribed)}"
        log.info("group %s: member %s generation %d owns %d partitions", self.group_id, self.member_id,
                 self.generation.generation_id, len(self.owned))

    # ------------------------------------------------------------ heartbeat

    async def _heartbeat_loop(self) -> None:
        """Heartbeat every `heartbeat_interval_ms` while in a generation, in its own task.

        Separate from the member task so that slow rebalance callbacks don't
        starve the session (a top cause of rebalance storms). It only reports:
        the member task decides what an error means, so group state keeps one owner.
        """
        while True:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            generation = self.generation
            if not self._heartbeating or generation.generation_id < 0 or not generation.member_id:
                continue
            error = await self._heartbeat_once(generation)
            if error is None:
                self._last_heartbeat_ok = time.monotonic()
            elif self.generation == generation:
                self._heartbeat_outcome = (generation, error)
                self._wakeup.set()

    async def _wait_until_rejoin_needed(self) -> None:
        while self._rejoin_reason is None:
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), self.heartbeat_interval_ms / 1000)
            except asyncio.TimeoutError:
                pass
            outcome, self._heartbeat_outcome = self._heartbeat_outcome, None
            if outcome is not None and outcome[0] == self.generation:
                await self._on_heartbeat_error(outcome[1])
            elif self._rejoin_reason is None:
                await self._check_metadata()

    async def _on_heartbeat_error(self, error: int) -> None:
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            self._rejoin_reason = "the group is rebalancing"
        elif error == ErrorCode.ILLEGAL_GENERATION:
            await self._reset(member_id=False, why="Heartbeat: ILLEGAL_GENERATION")
        elif error == ErrorCode.UNKNOWN_MEMBER_ID:
            await self._reset(member_id=True, why="Heartbeat: UNKNOWN_MEMBER_ID")
        elif error == ErrorCode.FENCED_INSTANCE_ID:
            raise FencedInstanceIdError(
                error, f"group {self.group_id!r}: another member took group.instance.id {self.group_instance_id!r}"
            )
        elif error in COORDINATOR_MOVED or error == UNREACHABLE or kafka_error(error).retriable:
            if time.monotonic() - self._last_heartbeat_ok > self.session_timeout_ms / 1000:
                log.warning("group %s: no heartbeat for a whole session timeout; the coordinator has "
                            "probably removed this member", self.group_id)
        else:
            raise kafka_error(error, f"Heartbeat for group {self.group_id!r}")

    async def _heartbeat_once(self, generation: Generation) -> int | None:
        """One Heartbeat for `generation`; None on success, else the error code (UNREACHABLE: no answer)."""
        try:
            conn = await self._coordinator()
            request = HeartbeatRequest(
                group_id=self.group_id,
                generation_id=generation.generation_id,
                member_id=generation.member_id,
                group_instance_id=self.group_instance_id,
            )
            response = await conn.request(request)
        except (KafkaConnectionError, KafkaError) as exc:
            if isinstance(exc, KafkaError) and not exc.retriable:
                return exc.code
            await self._coordinator_lost(exc)
            return UNREACHABLE
        if response.error_code in COORDINATOR_MOVED:
            self.cluster.forget_coordinator(self.group_id)
        return None if response.error_code == ErrorCode.NONE else response.error_code

    async def _check_metadata(self) -> None:
        """The leader rejoins when a subscribed topic's partition count changed (new partitions need owners)."""
        if not self.is_leader or time.monotonic() - self._metadata_checked < self.metadata_max_age_ms / 1000:
            return
        self._metadata_checked = time.monotonic()
        try:
            meta = await self.cluster.metadata(sorted(self._assigned_counts))
        except ClientError as exc:
            log.debug("group %s: metadata refresh failed: %s", self.group_id, exc)
            return
        counts = {t: len(i.partitions) if i.error_code == 0 else 0 for t, i in meta.topics.items()}
        if any(counts.get(t, 0) != n for t, n in self._assigned_counts.items()):
            self._rejoin_reason = "partition count of a subscribed topic changed"

    # ------------------------------------------------------------ helpers

    async def _coordinator(self):
        """The coordinator connection, retrying discovery with backoff for as long as the member runs.

        A member outlives coordinator outages, as Kafka consumers do; only
        non-retriable errors (e.g. authorization) stop it. `close()` ends the wait.
        """
        warned = False
        while True:
            try:
                return await self.cluster.coordinator_connection(self.group_id)
            except (KafkaConnectionError, KafkaError) as exc:
                if not exc.retriable:
                    raise
                if not warned:
                    warned = True
                    log.warning("group %s: coordinator unavailable (%s); retrying", self.group_id, exc)
                await asyncio.sleep(self._backoff.next_delay())

    async def _coordinator_lost(self, exc: Exception) -> None:
        log.info("group %s: coordinator unavailable (%s); rediscovering", self.group_id, exc)
        self.cluster.forget_coordinator(self.group_id)
        await asyncio.sleep(self._backoff.next_delay())

    async def _reset(self, *, member_id: bool, why: str) -> None:
        """Forget the generation (and the member id): our partitions are lost, then rejoin."""
        log.info("group %s: %s; resetting %s and rejoining", self.group_id, why,
                 "member id and generation" if member_id else "generation")
        if member_id:
            self.member_id = ""
        self.generation = NO_GENERATION
        self._heartbeating = False
        if self.owned:
            await self._give_up_partitions(lost=True)
        self._rejoin_reason = why

    async def _leave(self, reason: str) -> None:
        conn = await self.cluster.coordinator_connection(self.group_id)
        version = conn.version_for(LeaveGroupRequest.API_KEY)
        if version >= 3:
            Identity = LeaveGroupRequest.MemberIdentity
            request = LeaveGroupRequest(
                group_id=self.group_id,
                members=[Identity(member_id=self.member_id, group_instance_id=self.group_instance_id, reason=reason)],
            )
        else:
            request = LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id)
        response = await conn.request(request, version)
        errors = [response.error_code] + [m.error_code for m in getattr(response, "members", None) or []]
        bad = [e for e in errors if e != ErrorCode.NONE]
        if bad:
            raise kafka_error(bad[0], f"LeaveGroup from group {self.group_id!r}")
        log.info("group %s: member %s left (%s)", self.group_id, self.member_id, reason)
        self.member_id = ""
        self.generation = NO_GENERATION
