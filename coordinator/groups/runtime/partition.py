"""`PartitionRuntime`: the offsets partitions this node coordinates, and every write to them (Kafka's
`CoordinatorRuntime`).

A partition's life is the shared lifecycle (`cohort.coordinator.contracts.partition_lifecycle`), and
`states` is the node's one tracker of it, the store's (an ownership that claims moves it to CLAIMING
first): `acquired(p, epoch)` moves it to LOADING, reads its live records from the `Store` and hands them
to the shard (`replay_chunk`); the store moves it to LOADED once the last chunk was taken (or to FAILED:
loaded again after each of `load_retry_delays`, then let go so that the ownership gives it up); `lost(p)`
moves it to RELEASING, has the shard forget its groups and offsets and releases it in the store, which
moves it to UNOWNED; `close()` moves every partition to CLOSED at shutdown. A served partition its store
fails (its disk, a fenced write) is unloaded like a lost one. Partitions load one after another, in the
order they were acquired (replay is CPU-bound). `error(p)` is what a request for a group of p answers: NONE
only while p is LOADED and the serving deadline has not passed.

The write gate: every write of the node is a `CoordinatorResult` (records + how to answer) handed to
`write(p, result)`, the only caller of `Store.append`. It returns the `PendingAnswer` that the result's
`then(state, error)` makes once the records are durable and replayed into the shard (`replay_durable`, the
load's replay), or with the error Kafka's group coordinator maps a failed append to (`map_write_error`),
nothing replayed. For the local log's `DurableFuture` that happens in the very loop turn the append
settles. Appends of one partition finish in order; `wait_for_writes` waits for those already started
(OffsetFetch's RequireStable).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Callable

from cohort.coordinator.contracts.answers import PendingAnswer
from cohort.coordinator.contracts.partition_lifecycle import OWNED_STATES, PartitionLifecycle, PartitionStates
from cohort.coordinator.contracts.store import LogLoadError, StorageError, Store
from cohort.coordinator.log.durable_future import DurableFuture
from cohort.coordinator.groups.runtime.result import CoordinatorResult
from cohort.coordinator.groups.slices import (
    LARGE_REQUEST_PARTITIONS,
    MEMBERS_ENCODED_ON_LOOP,
    PARTITIONS_PER_SLICE,
    next_turn,
)
from cohort.coordinator.records.types import (
    GroupMetadataRecord,
    Record,
    encode_group_metadata_in_slices,
    encode_record,
)
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.coordinator")
E = ErrorCode
L = PartitionLifecycle

# What a failed coordinator write is reported as: Kafka's group coordinator maps the log's
# append errors this way (`GroupCoordinatorService`, `GroupMetadataManager.storeGroup` before it).
_WRITE_ERROR_MAP = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.INVALID_FETCH_SIZE: E.UNKNOWN_SERVER_ERROR,
    E.NETWORK_EXCEPTION: E.COORDINATOR_LOAD_IN_PROGRESS,
}


def map_write_error(code: int) -> int:
    """Kafka's mapping of a storage error to what the client is told."""
    return _WRITE_ERROR_MAP.get(code, code)


def _raise_write_error(partition: int, error: int) -> None:
    if error:
        raise StorageError(f"append to offsets partition {partition} failed", ErrorCode(error))


def _needs_slices(result: CoordinatorResult) -> bool:
    """Too much to encode in one loop turn: a big group's GroupMetadata record, or a huge group's tombstones."""
    records = result.records
    if result.encoded:
        return False
    if len(records) > LARGE_REQUEST_PARTITIONS:
        return True
    for record in records:
        if type(record) is GroupMetadataRecord and len(record.members) > MEMBERS_ENCODED_ON_LOOP:
            return True
    return False


async def _encode_in_slices(records: list[Record]) -> list[tuple[bytes, bytes | None]]:
    encoded = []
    for start in range(0, len(records), PARTITIONS_PER_SLICE):
        for record in records[start:start + PARTITIONS_PER_SLICE]:
            if type(record) is GroupMetadataRecord and len(record.members) > MEMBERS_ENCODED_ON_LOOP:
                slices = encode_group_metadata_in_slices(record, MEMBERS_ENCODED_ON_LOOP)
                try:
                    while True:
                        next(slices)
                        await next_turn()
                except StopIteration as done:
                    encoded.append(done.value)
            else:
                encoded.append(encode_record(record))
        await next_turn()
    return encoded


class PartitionRuntime:
    """Load, replay and release of this node's offsets partitions, and the appends to them."""

    __slots__ = ("_store", "_build_shard", "shards", "metrics", "_num_partitions", "states", "loaded", "_why_failed",
                 "serving_deadline", "_tasks", "_releases", "_load_turn", "loaded_records", "_writes_started",
                 "_writes_finished", "_write_waiters", "_group_writes", "load_retry_delays", "_load_attempts")

    def __init__(self, store: Store, num_partitions: int, build_shard: Callable[[int], object] | None,
                 metrics=None) -> None:
        """`build_shard(partition)` makes the shard a partition's records are replayed into when it starts to
        load (`replay_chunk(records, loaded_groups)`, `loaded(loaded_groups)`, `replay_durable(records)`,
        `unload()`); None: a tool's runtime, which only writes."""
        self._store = store
        # Seconds before each new attempt of a failed load; once they are spent the partition is let go
        # (RELEASING, then UNOWNED) so that its ownership gives it up. Empty: a failed partition stays
        # FAILED (a node that owns a fixed share: nobody else could load it).
        self.load_retry_delays: tuple[float, ...] = ()
        self._load_attempts: dict[int, int] = {}  # failed loads of each partition since it was acquired
        self._build_shard = build_shard
        # Each partition's shard while it is loading or served here (Kafka's CoordinatorContext.coordinator):
        # made when its load starts, dropped (`unload`) when it fails or goes.
        self.shards: list = [None] * num_partitions
        self.metrics = metrics
        self._num_partitions = num_partitions
        self.states: PartitionStates = store.states  # the node's one tracker (the store reads it on every append)
        self.loaded = self.states.loaded  # the served partitions (a live set: `p in runtime.loaded`)
        self._why_failed: dict[int, str] = {}
        # Past this (monotonic) the ownership's lease may have lapsed (see `serve_until`).
        self.serving_deadline = math.inf
        self._tasks: dict[int, asyncio.Task] = {}  # each partition's load or release under way
        self._releases: dict[int, asyncio.Task] = {}  # each partition's release under way (`released` waits)
        self._load_turn: asyncio.Lock | None = None
        self.loaded_records = 0  # live records replayed from the store since start (the load summary)
        # Per partition: appends started / finished, and RequireStable fetches waiting for a count.
        # The log completes a partition's appends in order, so "finished >= n" means the first n are done.
        self._writes_started: dict[int, int] = {}
        self._writes_finished: dict[int, int] = {}
        self._write_waiters: dict[int, list[tuple[int, asyncio.Future]]] = {}
        self._group_writes: dict[str, asyncio.Future] = {}  # a big group's record write in progress
        self.states.watch(self._moved)

    def _moved(self, partition: int, old: PartitionLifecycle, new: PartitionLifecycle) -> None:
        """The store failed a served partition (its disk, a write fenced by another owner): no longer served,
        its groups are unloaded (parked requests answered NOT_COORDINATOR, timers stopped) like a lost one's."""
        if old is L.LOADED and new is L.FAILED:
            why = self._store.partition_error(partition)
            self._why_failed[partition] = str(why) if why is not None else "its store failed it"
            self._drop_shard(partition)

    def _new_shard(self, partition: int):
        """A fresh shard for `partition`, whose load starts now (what an earlier attempt replayed is gone)."""
        self._drop_shard(partition)
        shard = self.shards[partition] = self._build_shard(partition)
        return shard

    def _drop_shard(self, partition: int) -> None:
        """`partition` is no longer served here: its shard unloads its groups and is dropped with all it held."""
        shard = self.shards[partition]
        if shard is not None:
            self.shards[partition] = None
            shard.unload()

    # -- what a request is answered -----------------------------------------------------------
    def serves(self, partition: int) -> bool:
        """`partition` is loaded here and the ownership's lease still holds: its groups are answered now
        (`error` says why not; the hottest paths test `loaded` and `serving_deadline` themselves, a call
        less per request)."""
        return partition in self.loaded and time.monotonic() < self.serving_deadline

    def error(self, partition: int) -> int:
        """NONE if `partition` is served now, else what its groups' requests answer."""
        if partition in self.loaded and time.monotonic() < self.serving_deadline:  # (`serves`, inline)
            return E.NONE
        state = self.states[partition]
        if state is L.CLOSED:
            return E.COORDINATOR_NOT_AVAILABLE
        if time.monotonic() >= self.serving_deadline:
            return E.NOT_COORDINATOR
        if state is L.LOADED:
            return E.NONE
        if state is L.LOADING:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NOT_COORDINATOR

    def serve_until(self, deadline: float) -> None:
        """Past `deadline` (monotonic) the ownership's lease may have lapsed: every group answers
        NOT_COORDINATOR, checked on each request (a request read before the ownership's own timer
        runs, e.g. by a node resumed after a pause, must not be answered as coordinator)."""
        self.serving_deadline = deadline

    def close(self) -> None:
        """Shutdown: every partition CLOSED, every request answers COORDINATOR_NOT_AVAILABLE from now on (the
        ownership's `lost` still releases what this node held)."""
        for partition in range(self._num_partitions):
            self.states.move(partition, L.CLOSED)

    @property
    def closed(self) -> bool:
        return bool(self.states.in_state[L.CLOSED])

    def partition_states(self) -> dict[int, str]:
        """Each offsets partition this node owns and its load state: "loaded", "loading" or "failed"."""
        return {p: s.value for p, s in self.states.items() if s in OWNED_STATES}

    def failed_partitions(self) -> dict[int, str]:
        """Owned partitions that could not be loaded, with why (their groups answer NOT_COORDINATOR), and
        those whose load failed and is being tried again."""
        failed = {p: self._why_failed.get(p, "") for p in self.states.partitions(L.FAILED)}
        failed.update((p, f"{why} (loading it again)") for p, why in self._why_failed.items()
                      if self.states[p] is L.LOADING)
        return failed

    # -- the Ownership listener ---------------------------------------------------------------
    def acquired(self, partition: int, epoch: int) -> None:
        """This node now coordinates `partition`: load it from the store (its groups wait meanwhile)."""
        state = self.states[partition]
        if state is L.LOADED or state is L.LOADING or state is L.CLOSED:
            return
        self._load_attempts.pop(partition, None)
        if state is L.FAILED and (retry := self._tasks.get(partition)) is not None:
            retry.cancel()  # acquired again: load now
        releasing = self._tasks.get(partition) if state is L.RELEASING else None
        if releasing is None:
            self.states.move(partition, L.LOADING)
        task = asyncio.get_running_loop().create_task(self._load_partition(partition, epoch, releasing),
                                                      name=f"load-offsets-partition-{partition}")
        self._track(partition, task)

    def lost(self, partition: int) -> None:
        """Another node coordinates `partition` now: the shard forgets its groups and offsets (answering
        their parked requests NOT_COORDINATOR) and the store releases it (its accepted appends finish)."""
        state = self.states[partition]
        if state is L.UNOWNED or state is L.RELEASING:
            return
        loading = self._tasks.get(partition)
        if loading is not None:
            loading.cancel()
        self._let_go(partition, loading)

    def _let_go(self, partition: int, loading: asyncio.Task | None) -> None:
        if self.states[partition] is not L.CLOSED:  # (closed: released all the same, and stays closed)
            self.states.move(partition, L.RELEASING)
        self._why_failed.pop(partition, None)
        self._load_attempts.pop(partition, None)
        self._drop_shard(partition)
        release = asyncio.get_running_loop().create_task(self._release(partition, loading),
                                                         name=f"release-offsets-partition-{partition}")
        self._track(partition, release)
        self._releases[partition] = release
        release.add_done_callback(lambda _: self._releases.pop(partition, None)
                                  if self._releases.get(partition) is release else None)

    async def released(self, partition: int) -> None:
        """Wait until `partition`'s release under way (if any) has finished: its accepted appends are done and
        the store let it go (the ownership waits for it before it hands the partition over)."""
        release = self._releases.get(partition)
        if release is not None:
            await asyncio.shield(release)

    def _track(self, partition: int, task: asyncio.Task) -> None:
        self._tasks[partition] = task
        task.add_done_callback(lambda _: self._tasks.pop(partition, None) if self._tasks.get(partition) is task
                               else None)

    async def _release(self, partition: int, loading: asyncio.Task | None) -> None:
        if loading is not None:
            await asyncio.gather(loading, return_exceptions=True)
        try:
            await self._store.release(partition)  # (moves it to UNOWNED)
        except Exception as exc:  # noqa: BLE001 - the partition is gone from this node either way
            log.error("offsets partition %d: release failed: %s", partition, exc)
        finally:
            if self.states[partition] is L.RELEASING:  # (the store failed or was cancelled)
                self.states.move(partition, L.UNOWNED)

    async def wait_loaded(self) -> None:
        """Wait until every load and release started so far has finished."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            await asyncio.sleep(0)  # let their done callbacks forget them (gather may not yield)

    async def _load_partition(self, partition: int, epoch: int, releasing: asyncio.Task | None) -> None:
        if releasing is not None:  # acquired again while its release was still under way
            await asyncio.wait([releasing])  # (not gather: cancelling this load must not cancel the release)
            if self.states[partition] is not L.UNOWNED:
                return  # closed meanwhile
            self.states.move(partition, L.LOADING)
        # One at a time: replay is CPU-bound, so loading 50 partitions at once would only hold 50 of
        # them in memory together (and the topic registry's partition 0 would not come first).
        if self._load_turn is None:
            self._load_turn = asyncio.Lock()
        async with self._load_turn:
            await self._load_partition_now(partition, epoch)

    async def _load_partition_now(self, partition: int, epoch: int) -> None:
        started = time.perf_counter()
        loaded_groups: set[str] = set()
        count = 0
        shard = self._new_shard(partition)
        try:
            async for chunk in self._store.load(partition, epoch):
                count += len(chunk)
                shard.replay_chunk(chunk, loaded_groups)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - damage, lost ownership, a record that cannot be replayed
            why = exc.errors.get(partition, exc) if isinstance(exc, LogLoadError) else exc
            self._load_failed(partition, epoch, str(why))
            return
        if self.states[partition] is not L.LOADED:
            return  # released or closed meanwhile (the store moved it on): never served
        self._load_attempts.pop(partition, None)
        self._why_failed.pop(partition, None)
        self.replayed(partition, loaded_groups, count, started)

    def _load_failed(self, partition: int, epoch: int, why: str) -> None:
        """FAILED; loaded again after the next delay of `load_retry_delays`, let go once they are spent."""
        if self.states[partition] is not L.LOADING and self.states[partition] is not L.FAILED:
            return  # released meanwhile (FAILED: the store moved it there)
        self.failed(partition, why)
        self._drop_shard(partition)  # what the failed load replayed is not served; a next load starts afresh
        attempts = self._load_attempts[partition] = self._load_attempts.get(partition, 0) + 1
        if attempts <= len(self.load_retry_delays):
            delay = self.load_retry_delays[attempts - 1]
            log.error("offsets partition %d failed to load (attempt %d): %s; loading it again in %gs",
                      partition, attempts, why, delay)
            retry = asyncio.get_running_loop().create_task(self._load_again(partition, epoch, delay),
                                                           name=f"reload-offsets-partition-{partition}")
            self._track(partition, retry)
        elif self.load_retry_delays:
            log.error("offsets partition %d failed to load %d times (last: %s); letting it go so that another "
                      "node may load it", partition, attempts, why)
            self._let_go(partition, None)
        else:
            log.error("offsets partition %d failed to load: %s", partition, why)

    async def _load_again(self, partition: int, epoch: int, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.states[partition] is not L.FAILED:
            return
        self.states.move(partition, L.LOADING)  # (still reported failed, with why, until it loads)
        async with self._load_turn:
            await self._load_partition_now(partition, epoch)

    def failed(self, partition: int, why: str) -> None:
        """`partition` could not be loaded: its groups answer NOT_COORDINATOR until it is acquired again."""
        self._why_failed[partition] = why
        self.states.move(partition, L.FAILED)

    def replayed(self, partition: int, loaded_groups: set[str], records: int, started: float) -> None:
        """`partition`'s records are all replayed and it is LOADED: its groups' timers start."""
        self.loaded_records += records
        self.shards[partition].loaded(loaded_groups)
        if self.metrics is not None:
            self.metrics.partition_loaded(partition, time.perf_counter() - started, records)

    def load_records(self, partition: int, records: list[tuple[bytes, bytes]]) -> None:
        """Replay a partition's live records handed over at once (tools and tests; the store's path is
        `acquired`): each key once, in no particular order, commits column-wise (`decode_for_load`)."""
        started = time.perf_counter()
        loaded_groups: set[str] = set()
        if self.states[partition] is not L.LOADED:
            self.states.move(partition, L.LOADING)
        shard = self.shards[partition] or self._new_shard(partition)
        try:
            shard.replay_chunk(records, loaded_groups)
        except Exception as exc:
            self.failed(partition, str(exc))
            self._drop_shard(partition)
            raise
        self.states.move(partition, L.LOADED)
        self.replayed(partition, loaded_groups, len(records), started)

    async def load_all(self) -> None:
        """Open the store and load every partition (a single node without an `Ownership`).

        Raises `LogLoadError` if some partitions failed: those answer NOT_COORDINATOR, the rest
        serve normally.
        """
        await self._store.open()
        for p in range(self._num_partitions):
            self.acquired(p, 0)
        await self.wait_loaded()
        failed = self.failed_partitions()
        if failed:
            raise LogLoadError({p: RuntimeError(why) for p, why in failed.items()})

    # -- the write gate ------------------------------------------------------------------------
    def write(self, partition: int, result: CoordinatorResult, order_key: str | None = None) -> PendingAnswer:
        """The one write path (Kafka's `CoordinatorRuntime.scheduleWriteOperation`): append `result`'s
        records to `partition`, and once they are durable replay them into the shard (the load's `replay`,
        when `result.replay`) and answer `result.then(state, error)` (`error`: NONE, or the mapped write
        error; nothing is replayed then). The local log's `DurableFuture` runs it in the very loop turn
        the append settles (a done-callback would answer a turn later).

        Records too many to encode in one loop turn (a big group's GroupMetadata, a huge group's
        tombstones) are encoded a slice per turn; later writes with the same `order_key` (a group id)
        wait for them, so a group's records reach the log in the order they were made.
        """
        if order_key is None and result.encoded:  # (a commit: the shortest way)
            return self._append(partition, result.records, result)
        previous = self._group_writes.get(order_key) if order_key is not None else None
        if previous is None and not _needs_slices(result):
            records = result.records
            if not result.encoded:
                try:
                    records = [encode_record(r) for r in records]
                except (ValueError, TypeError) as exc:
                    log.error("cannot encode records for offsets partition %d: %s", partition, exc)
                    return self._refused(result, E.UNKNOWN_SERVER_ERROR)
            return self._append(partition, records, result)
        answer = PendingAnswer()
        task = asyncio.ensure_future(self._write_in_slices(partition, result, previous, answer))
        answer.source = task
        if order_key is not None:
            self._group_writes[order_key] = task

            def forget(done: asyncio.Future) -> None:
                if self._group_writes.get(order_key) is done:
                    del self._group_writes[order_key]

            task.add_done_callback(forget)
        return answer

    async def persist(self, partition: int, records: list[Record]) -> None:
        """`write` for a registry that applies its own records once durable (credentials and ACLs, the topic
        registry): returns once durable, raises `StorageError` (the mapped error) when the append failed."""
        answer = self.write(partition, CoordinatorResult(records, _raise_write_error, partition, replay=False))
        await answer

    def _refused(self, result: CoordinatorResult, error: int) -> PendingAnswer:
        answer = PendingAnswer()
        self._answer(answer, result, error)
        return answer

    async def _write_in_slices(self, partition: int, result: CoordinatorResult, previous: asyncio.Future | None,
                               answer: PendingAnswer) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            encoded = result.records if result.encoded else await _encode_in_slices(result.records)
        except (ValueError, TypeError) as exc:
            log.error("cannot encode records for offsets partition %d: %s", partition, exc)
            self._answer(answer, result, E.UNKNOWN_SERVER_ERROR)
            return
        try:
            answer.settle_with(await self._append(partition, encoded, result))
        except BaseException as exc:  # noqa: BLE001 - reported by the subscriber; CancelledError: never answered
            answer.fail(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    def _append(self, partition: int, encoded: list[tuple[bytes, bytes | None]],
                result: CoordinatorResult) -> PendingAnswer:
        """The only call of `Store.append`: the answer follows the append's future."""
        self._writes_started[partition] = self._writes_started.get(partition, 0) + 1
        durable = self._store.append(partition, encoded)
        answer = PendingAnswer(durable)
        written = functools.partial(self._written, answer, result, partition)
        if durable.done():
            written(durable)
        elif type(durable) is DurableFuture:
            durable.continuation = written
        else:
            durable.add_done_callback(written)
        return answer

    def _written(self, answer: PendingAnswer, result: CoordinatorResult, partition: int,
                 durable: asyncio.Future) -> None:
        self.write_finished(partition)
        if durable.cancelled():
            answer.fail(asyncio.CancelledError())  # shutdown: never answered
            return
        exc = durable.exception()
        error = E.NONE
        if exc is not None:
            if not isinstance(exc, StorageError):
                answer.fail(exc)
                return
            log.warning("offsets partition %d: append failed: %s", partition, exc)
            error = map_write_error(exc.error_code)
        elif (shard := self.shards[partition]) is None:
            if self._build_shard is not None:
                # Durable, but the partition's shard was dropped meanwhile (lost, failed): as Kafka fails the
                # writes pending when it unloads a partition, the client asks the partition's new coordinator.
                error = E.NOT_COORDINATOR
        elif result.replay:
            try:
                shard.replay_durable(result.records)
            except Exception as exc:  # noqa: BLE001 - reported by the subscriber (the connection logs it)
                log.exception("offsets partition %d: replaying durable records failed", partition)
                answer.fail(exc)
                return
        self._answer(answer, result, error)

    @staticmethod
    def _answer(answer: PendingAnswer, result: CoordinatorResult, error: int) -> None:
        then = result.then
        if then is None:
            answer.settle(error)
            return
        state = result.state
        try:
            response = then(result if state is None else state, error)
        except Exception as exc:  # noqa: BLE001 - reported by the subscriber (the connection logs it)
            answer.fail(exc)
            return
        if type(response) is PendingAnswer:  # (one to encode off the loop)
            answer.settle_with(response)
        else:
            answer.settle(response)

    def write_finished(self, partition: int) -> None:
        """An append ended (durable or failed): RequireStable fetches waiting for it may go on."""
        finished = self._writes_finished[partition] = self._writes_finished.get(partition, 0) + 1
        waiters = self._write_waiters.get(partition) if self._write_waiters else None
        if waiters:
            still = []
            for target, waiter in waiters:
                if finished >= target:
                    if not waiter.done():
                        waiter.set_result(None)
                else:
                    still.append((target, waiter))
            if still:
                self._write_waiters[partition] = still
            else:
                del self._write_waiters[partition]  # (an empty map: appends skip this look-up)

    def writes_in_flight(self) -> int:
        """Appends started and not yet finished, over all partitions."""
        return sum(n - self._writes_finished.get(p, 0) for p, n in self._writes_started.items())

    def writes_pending(self, partition: int) -> bool:
        return self._writes_finished.get(partition, 0) < self._writes_started.get(partition, 0)

    async def wait_for_writes(self, partition: int | None = None) -> None:
        """Wait until the appends already started (on one partition, or all) have finished."""
        for p in (list(self._writes_started) if partition is None else [partition]):
            target = self._writes_started.get(p, 0)
            if self._writes_finished.get(p, 0) >= target:
                continue
            waiter = asyncio.get_running_loop().create_future()
            self._write_waiters.setdefault(p, []).append((target, waiter))
            await waiter

