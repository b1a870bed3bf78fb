"""`EtcdStore`: the `Store` of cluster mode: records in etcd, every write fenced by the ownership epoch.

Why fenced transactions: a node that lost `owner/<p>` (paused past its lease, cut off, slow) may
still believe it owns p. Each write for p is one etcd transaction guarded by "`owner/<p>` still has
the create revision I won it with"; when the guard fails nothing of it is applied and the appends in
it raise NOT_COORDINATOR. A commit is acknowledged only after etcd answered the transaction, i.e.
after a quorum has it.

Why a write fence too: the epoch guard does not stop this node's own late transactions. A transaction
T1 held on a stalled link past its deadline may still reach etcd later, and its epoch guard still
holds; applied on top of a newer, acknowledged round T2 it would roll T2 back. So every write for p
also compares the mod revision of `w/<p>` with the one this node last saw, and `w/<p>` is written only
when that must fence something: at each load, and when a write's outcome is in doubt. The cases:

* T1's deadline passes (its outcome is unknown, not failed). Before p's next round, the store writes
  `w/<p>` under T1's guards, through another endpoint, retried until the lease's local deadline. Held:
  T1 compared the older revision of `w/<p>`, so it can never apply from now on; the same transaction
  reads the revisions of T1's keys (not their values, which may be large). etcd applies T1 whole or not
  at all, and nothing but T1 can have written p's keys since the last write this node knows was applied:
  T1 was applied exactly when a key it puts (a create is a put of an absent key) carries a later
  revision; a T1 of deletes only counts as applied when its keys are gone (etcd then holds what it
  asked for). Applied, it is acknowledged; if not, it is sent again. Only then is T2 sent: T2 can never
  be overwritten by T1.
* An earlier check of ours landed late (the check's own deadline passed): `w/<p>` carries its token;
  T1 can no longer apply, and the check is written once more to read T1's keys at a known point.
* `w/<p>` moved and no check of ours explains it (an earlier load's write of it, or a check of that
  load, landed late): this round is refused and p is given up and loaded again, never answered as done.
* The lease's local deadline passes before the check is answered, or etcd refuses it (NOSPACE): p is
  given up; its load writes `w/<p>` first (the snapshot is read at that revision), so a write still in
  flight either landed before and is loaded, or never applies.
* A guard fails because `owner/<p>` is no longer ours: fenced, NOT_COORDINATOR.

Why not a compare on each written key's own mod revision: it costs no put either, but it does not stop
T1 from landing later on keys no newer round touched (so a doubtful outcome needs a fencing write all
the same), it needs the last revision of every key in memory, and it doubles the compares of a
transaction (etcd limits compares like operations). One compare per partition fences the same writes.
Why not write `w/<p>` in every transaction: each put of it is one more revision in etcd's history,
about 60 bytes per partition per transaction (docs/cluster-operations.md).

Group commit, as on the local log: appends for a partition queue while its previous round is in
flight; its next round is everything queued (the latest value per key). Why rounds of several
partitions share one transaction (one guard pair per partition, all must hold): etcd's cost is per
transaction, not per key, so a node writes its queued rounds of every partition together, up to
etcd's per-request limits (128 operations, 1.5 MiB), with a few transactions in flight at once but
never two for the same partition (that keeps each partition's writes in order). When a guard fails
nothing of the transaction is applied and each partition's round is written alone to find out which
partition moved. A round over the limits on its own is split into several transactions; it is
answered as a whole: if any part fails, every append of the round fails (parts already applied hold
only values the clients asked for, so a retry is harmless).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from cohort.coordinator.cluster import keys, values
from cohort.coordinator.cluster.etcd import (
    ETCD_MAX_REQUEST_BYTES,
    ETCD_MAX_TXN_OPS,
    EtcdClient,
    EtcdNoSpace,
    EtcdRequestTooLarge,
    EtcdUnavailable,
    KeyValue,
    compare_create_revision,
    compare_mod_revision,
    op_delete,
    op_put_bytes,
    op_range,
    op_revisions,
    prefix_end,
)
from cohort.coordinator.contracts.partition_lifecycle import OWNED_STATES, PartitionLifecycle, PartitionStates
from cohort.coordinator.contracts.store import StorageError
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.cluster")

Record = tuple[bytes, bytes | None]

# Room left in a request for the compare, the protobuf framing and etcd's own raft envelope.
_REQUEST_MARGIN_BYTES = 64 * 1024
_OP_OVERHEAD_BYTES = 16
WRITE_ATTEMPTS = 3  # sends of one write whose deadlines passed unapplied, before its appends fail


class EtcdCompacted(Exception):
    """etcd compacted its history past the revision a load reads at."""


@dataclass(slots=True)
class StoreStats:
    """What the metrics module exports: transactions, their latency, fenced and failed writes."""

    transactions: int = 0
    transaction_seconds: float = 0.0
    fenced_writes: int = 0
    etcd_errors: int = 0


L = PartitionLifecycle


@dataclass(slots=True, eq=False)  # by identity: a partition loaded again gets a new one
class _Partition:
    """What fences one load's writes and what they wait on; where the partition is in its life is the
    node's tracker (`EtcdStore.states`)."""

    epoch: int
    fence: int = 0  # mod revision of w/<p> after this node last wrote it (what every write compares)
    written: int = 0  # a revision at or after every write of p this node knows as applied
    queue: list[tuple[Sequence[Record], asyncio.Future]] = field(default_factory=list)
    writing: bool = False  # a transaction with this partition's records is in flight
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # set: nothing queued, nothing in flight


@dataclass(slots=True)
class _Round:
    """One partition's share of a transaction: the latest value per key, and who waits for it."""

    partition: int
    state: _Partition
    latest: dict[bytes, bytes | None]
    waiters: list[asyncio.Future]


class EtcdStore:
    """Records of the owned offsets partitions, kept in etcd (see the module docstring)."""

    def __init__(self, etcd: EtcdClient, num_partitions: int = 50, *, page_size: int = 1000,
                 max_txn_ops: int = ETCD_MAX_TXN_OPS, max_request_bytes: int = ETCD_MAX_REQUEST_BYTES,
                 max_in_flight: int = 4, slow_txn_s: float = 0.1) -> None:
        self.etcd = etcd
        self.num_partitions = num_partitions
        self.page_size = page_size
        self.max_txn_ops = max_txn_ops
        self.max_txn_bytes = max(4096, max_request_bytes - _REQUEST_MARGIN_BYTES)
        self.stats = StoreStats()
        self.on_fenced = lambda partition: None  # set by the ownership: drop the partition at once
        # set by the ownership: a write's outcome stayed unknown, or w/<p> moved under us: load p again
        self.on_stale = lambda partition: None
        self.serving_until = lambda: math.inf  # set by the ownership: the lease's local deadline (monotonic)
        self.outcome_retry_s = 0.1
        self._tokens = (b"%s-%d" % (os.urandom(6).hex().encode(), n) for n in itertools.count())
        # One transaction in flight carries what every partition queued meanwhile (etcd's cost is per
        # transaction); another starts beside it, over other partitions, only while the ones in flight
        # are slower than `slow_txn_s` (a stalled member), up to `max_in_flight`.
        self.max_in_flight = max_in_flight
        self.slow_txn_s = slow_txn_s
        self._flights: list[float] = []  # start times (monotonic) of the transactions in flight
        self._slow_check: asyncio.TimerHandle | None = None
        self._partitions: dict[int, _Partition] = {}  # the current load of each partition held here
        # The node's one tracker of its partitions (the partition runtime and the ownership read and move it
        # too). The store moves a partition to LOADING when a tool loads it on its own, to LOADED once its
        # load's last chunk was taken, to FAILED when the load fails or a write finds the partition is not
        # this node's to write any more (fenced, or its write fence moved), and to UNOWNED once its release
        # finished; it reads it on every append.
        self.states = PartitionStates(range(num_partitions))
        self._errors: dict[int, Exception] = {}  # why each FAILED partition failed
        self._waiting: dict[_Partition, int] = {}  # partitions with queued records (-> number), oldest first
        self._writing: set[int] = set()  # partitions with a transaction in flight
        self._writers: set[asyncio.Task] = set()

    async def open(self) -> None:
        await self.etcd.connect()

    async def close(self) -> None:
        if self._slow_check is not None:
            self._slow_check.cancel()
        for partition in list(self._partitions):
            await self.release(partition)

    async def load(self, partition: int, epoch: int) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """Partition `partition`'s records, read page by page at one revision, after it was won at `epoch`.

        Every write of an earlier owner that etcd accepted happened before the claim (later ones
        fail their guard), so a snapshot taken after the claim has all of them; the same holds for
        this node's own earlier writes once the load has rewritten `w/<p>`. The partition is LOADED once
        the last chunk was taken (the caller replays each before it asks for the next).
        """
        self.states.move(partition, L.LOADING)  # (the partition runtime moved it already)
        self._errors.pop(partition, None)
        state = self._partitions[partition] = _Partition(epoch)
        try:
            # Rewriting w/<p> first fences every transaction still in flight from an earlier load of
            # this epoch; the snapshot is read at that write's revision.
            held, revision, _ = await self._retrying(partition, state, lambda: self.etcd.txn(
                [_guard(partition, epoch)], [_fence_op(partition, next(self._tokens))]))
            if not held:
                raise StorageError(f"partition {partition}: epoch {epoch} is no longer the owner's",
                                   ErrorCode.NOT_COORDINATOR)
            state.fence = state.written = revision
            for prefix in keys.partition_prefixes(partition):
                start, end = prefix, prefix_end(prefix)
                while True:
                    try:
                        page, more, _ = await self._retrying(partition, state, lambda: self.etcd.range(
                            start, end, limit=self.page_size, revision=revision))
                    except EtcdCompacted:
                        page, more, revision = await self._read_on(partition, state, start, end)
                    if page:
                        yield [(keys.record_key(kv.key), values.from_etcd(kv.value)) for kv in page]
                    if not more or not page:
                        break
                    start = page[-1].key + b"\0"
            if self._partitions.get(partition) is state and self.states[partition] is L.LOADING:
                self.states.move(partition, L.LOADED)  # (not if released meanwhile)
        except StorageError as exc:
            if self._partitions.get(partition) is state:
                del self._partitions[partition]
                self._fail(partition, exc, L.LOADING)
            raise

    async def _read_on(self, partition: int, state: _Partition, start: bytes, end: bytes):
        """The load's next page after etcd compacted past the load's revision: read at the current revision,
        guarded by the epoch and this load's write fence. While both hold, nothing wrote p's keys since the
        fence (every writer of them compares it), so the newer snapshot holds what the older one did and the
        pages read so far stay valid. (page, more, the revision the rest is read at)."""
        read = op_range(start, range_end=end)
        read.request_range.limit = self.page_size
        held, revision, responses = await self._retrying(partition, state, lambda: self.etcd.txn(
            [_guard(partition, state.epoch), compare_mod_revision(keys.write_fence_key(partition), state.fence)],
            [read]))
        if not held:
            raise StorageError(f"partition {partition}: epoch {state.epoch} or its write fence moved while loading",
                               ErrorCode.NOT_COORDINATOR)
        log.info("partition %d: etcd compacted past the load's revision; the load reads on at revision %d",
                 partition, revision)
        found = responses[0].response_range
        page = [KeyValue(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.lease) for kv in found.kvs]
        return page, found.more, revision

    async def _retrying(self, partition: int, state: _Partition, read):
        """A read of the load, tried again while etcd is unreachable and the partition is still ours."""
        while True:
            try:
                return await read()
            except EtcdUnavailable as exc:
                self.stats.etcd_errors += 1
                if "compacted" in str(exc):
                    raise EtcdCompacted(str(exc)) from exc
                if self._partitions.get(partition) is not state or self.states[partition] is not L.LOADING:
                    raise StorageError(f"partition {partition}: released while loading",
                                       ErrorCode.NOT_COORDINATOR) from exc
                log.info("partition %d: load waits for etcd (%s)", partition, exc)
                await asyncio.sleep(0.5)

    def append(self, partition: int, records: Sequence[Record]) -> asyncio.Future:
        """A future done once `records` are in etcd (see `Store.append`)."""
        done = asyncio.get_running_loop().create_future()
        state = self._partitions.get(partition)
        if state is None or partition not in self.states.loaded:
            done.set_exception(self._refusal(partition))
        elif not records:
            done.set_result(None)
        else:
            state.queue.append((records, done))
            state.settled.clear()
            self._waiting[state] = partition
            self._start_rounds()
        return done

    def _refusal(self, partition: int) -> StorageError:
        """Why a partition that is not LOADED takes no append, as the Kafka error its client gets."""
        if self.states[partition] is L.LOADING:
            return StorageError(f"partition {partition} is loading", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return StorageError(f"partition {partition} is not owned here", ErrorCode.NOT_COORDINATOR)

    async def release(self, partition: int) -> None:
        """Appends already queued finish (or fail); later ones raise NOT_COORDINATOR. The partition runtime
        moved the tracker to RELEASING (or CLOSED) before; called on its own, the store moves it there."""
        if self.states[partition] in OWNED_STATES:
            self.states.move(partition, L.RELEASING)
        state = self._partitions.get(partition)
        if state is not None:
            while state.queue or state.writing:
                await asyncio.shield(state.settled.wait())
            if self._partitions.get(partition) is state:
                del self._partitions[partition]
        if self.states[partition] is L.RELEASING and partition not in self._partitions:  # (CLOSED stays)
            self.states.move(partition, L.UNOWNED)

    def partition_state(self, partition: int) -> PartitionLifecycle:
        """Where `partition` is in its lifecycle on this node."""
        return self.states[partition]

    def partition_error(self, partition: int) -> Exception | None:
        """Why the store failed `partition` (its load, or a write that found it is not this node's to write)."""
        return self._errors.get(partition)

    def _fail(self, partition: int, why: Exception, *came_from: PartitionLifecycle) -> None:
        """FAILED (from one of `came_from`: not if released meanwhile), with why."""
        if self.states[partition] in came_from:
            self._errors[partition] = why
            self.states.move(partition, L.FAILED)

    # --- rounds: queued records of several partitions in one transaction ---------------------------

    def _start_rounds(self) -> None:
        while self._waiting and len(self._flights) < self._flight_limit():
            rounds = self._next_rounds()
            if not rounds:
                return
            started = time.monotonic()
            self._flights.append(started)
            task = asyncio.get_running_loop().create_task(self._write_rounds(rounds, started), name="etcd-round")
            self._writers.add(task)
            task.add_done_callback(self._writers.discard)
        if self._waiting and self._slow_check is None and len(self._flights) < self.max_in_flight:
            self._slow_check = asyncio.get_running_loop().call_later(self.slow_txn_s, self._slow_checked)

    def _flight_limit(self) -> int:
        now = time.monotonic()
        return min(self.max_in_flight, 1 + sum(1 for started in self._flights if now - started >= self.slow_txn_s))

    def _slow_checked(self) -> None:
        self._slow_check = None
        self._start_rounds()

    def _next_rounds(self) -> list[_Round]:
        """The queued records of waiting partitions with nothing in flight, as many as fit one transaction
        (a partition whose round alone is over the limits goes alone and is split)."""
        rounds: list[_Round] = []
        ops = size = 0
        for state, partition in list(self._waiting.items()):
            if not state.queue:
                del self._waiting[state]
                continue
            if partition in self._writing:
                continue  # one transaction per partition at a time keeps its writes in order
            latest: dict[bytes, bytes | None] = {}
            for records, _ in state.queue:
                for record_key, value in records:
                    latest[record_key] = value
            round_bytes = sum(_op_bytes(k, v) for k, v in latest.items())
            # each round also carries two compares (etcd limits compares like operations)
            if rounds and (ops + len(latest) > self.max_txn_ops or 2 * (len(rounds) + 1) > self.max_txn_ops
                           or size + round_bytes > self.max_txn_bytes):
                break
            del self._waiting[state]
            rounds.append(_Round(partition, state, latest, [done for _, done in state.queue]))
            state.queue, state.writing = [], True
            self._writing.add(partition)
            ops, size = ops + len(latest), size + round_bytes
            if ops >= self.max_txn_ops:
                break
        return rounds

    async def _write_rounds(self, rounds: list[_Round], started: float) -> None:
        try:
            if len(rounds) > 1:
                guards = [g for r in rounds for g in _guards(r)]
                ops = [_op(r.partition, k, v) for r in rounds for k, v in r.latest.items()]
                try:
                    held, revision, _ = await self._txn(guards, ops)
                except StorageError as exc:
                    if exc.error_code != ErrorCode.REQUEST_TIMED_OUT:
                        for r in rounds:
                            self._finish(r, exc)
                        return
                    outcomes = await asyncio.gather(*(self._settle_or_write_again(r, exc) for r in rounds),
                                                    return_exceptions=True)
                    for r, outcome in zip(rounds, outcomes):
                        self._finish(r, outcome)
                    return
                if held:
                    for r in rounds:
                        r.state.written = revision
                        self._finish(r, None)
                    return
                # A guard failed and nothing was applied: each partition alone says which moved.
            outcomes = await asyncio.gather(*(self._write_alone(r) for r in rounds), return_exceptions=True)
            for r, outcome in zip(rounds, outcomes):
                self._finish(r, outcome)
        except BaseException as exc:  # cancelled at shutdown: nothing acknowledged
            for r in rounds:
                self._finish(r, StorageError(f"partition {r.partition}: write aborted ({exc!r})",
                                             ErrorCode.NOT_COORDINATOR), fenced=False)
            raise
        finally:
            self._flights.remove(started)
            self._start_rounds()

    def _finish(self, r: _Round, outcome: BaseException | None, *, fenced: bool = True) -> None:
        r.state.writing = False
        self._writing.discard(r.partition)
        for done in r.waiters:
            if not done.done():
                if outcome is None:
                    done.set_result(None)
                else:
                    done.set_exception(outcome)
        if fenced and isinstance(outcome, StorageError) and outcome.error_code == ErrorCode.NOT_COORDINATOR:
            self._fenced(r.partition, r.state)
        if not r.state.queue:
            r.state.settled.set()

    def _fenced(self, partition: int, state: _Partition) -> None:
        """Another node owns the partition now: refuse what is queued and every later append (FAILED at once,
        then the ownership has the partition runtime let it go)."""
        fenced = StorageError(f"partition {partition}: ownership moved to another node", ErrorCode.NOT_COORDINATOR)
        _refuse_queued(state, fenced)
        if self._partitions.get(partition) is state:
            del self._partitions[partition]
            self._fail(partition, fenced, L.LOADING, L.LOADED)
            self.on_fenced(partition)

    def _split(self, latest: dict[bytes, bytes | None]) -> list[list]:
        """One partition's round cut at etcd's limits (the latest value per key, in first-seen order), each
        part small enough for the check of its outcome (a put of w/<p> and a read of every key)."""
        txns: list[list] = []
        ops: list = []
        size = 0
        for record_key, value in latest.items():
            op_size = _op_bytes(record_key, value)
            if ops and (len(ops) + 1 >= self.max_txn_ops or size + op_size > self.max_txn_bytes):
                txns.append(ops)
                ops, size = [], 0
            ops.append((record_key, value))
            size += op_size
        if ops:
            txns.append(ops)
        return txns

    async def _write_alone(self, r: _Round) -> None:
        """One partition's round, split at etcd's limits; raises NOT_COORDINATOR when fenced.

        A part whose deadline passed and that was certainly not applied (it can never be now) is sent
        again, through another endpoint, up to `WRITE_ATTEMPTS` times in all.
        """
        for part in self._split(r.latest):
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                try:
                    held, revision, responses = await self._txn(
                        _guards(r), [_op(r.partition, k, v) for k, v in part], _why_refused(r.partition))
                except StorageError as exc:
                    if exc.error_code != ErrorCode.REQUEST_TIMED_OUT:
                        raise
                    if await self._settle_unknown(r, part, exc):
                        break
                    if attempt == WRITE_ATTEMPTS:
                        raise
                    continue
                if not held:
                    self._refused(r, responses)
                r.state.written = revision
                break

    async def _settle_or_write_again(self, r: _Round, unknown: StorageError) -> None:
        if not await self._settle_unknown(r, list(r.latest.items()), unknown):
            await self._write_alone(r)

    async def _settle_unknown(self, r: _Round, part: Sequence[Record], unknown: StorageError) -> bool:
        """Whether the write of `part` whose deadline passed was applied; when not, it can never be applied
        after this returns (see the module docstring). Raises when the partition moved or was given up."""
        etcd_keys = [keys.etcd_key(r.partition, record_key) for record_key, _ in part]
        resolving = set()
        while True:
            token = next(self._tokens)
            resolving.add(token)
            try:
                held, revision, responses = await self._txn(
                    _guards(r), [_fence_op(r.partition, token), *(op_revisions(key) for key in etcd_keys)],
                    _why_refused(r.partition))
            except StorageError as exc:
                # etcd refusing the check (NOSPACE) will not stop while the lease lives: give p up as at the
                # deadline (its reload rewrites w/<p> first, so the write in doubt can never land later)
                if exc.error_code != ErrorCode.REQUEST_TIMED_OUT or \
                        time.monotonic() + self.outcome_retry_s >= self.serving_until():
                    log.warning("partition %d: outcome of a write unknown until the lease's deadline; giving "
                                "the partition up", r.partition)
                    self._given_up(r)
                    raise unknown from exc
                await asyncio.sleep(self.outcome_retry_s)
                continue
            if held:  # the write in doubt compared the older w/<p>: it can never apply now
                applied = _applied(part, [response.response_range.kvs for response in responses[1:]],
                                   r.state.written)
                r.state.fence = r.state.written = revision
                if applied:
                    log.info("partition %d: a write past its deadline was applied", r.partition)
                return applied
            fence = responses[1].response_range.kvs if len(responses) > 1 else []
            if fence and _owner_epoch(responses) == r.state.epoch and fence[0].value in resolving:
                r.state.fence = fence[0].mod_revision  # an earlier check of ours landed late: check once more
                continue
            self._refused(r, responses)

    def _refused(self, r: _Round, responses: list) -> None:
        """A write's guards failed: another owner (fenced), or w/<p> moved without us (give p up)."""
        if _owner_epoch(responses) != r.state.epoch:
            self.stats.fenced_writes += 1
            log.warning("partition %d: write refused, owner/%d is no longer ours (epoch %d)",
                        r.partition, r.partition, r.state.epoch)
            raise StorageError(f"partition {r.partition}: fenced (epoch {r.state.epoch} is stale)",
                               ErrorCode.NOT_COORDINATOR)
        log.warning("partition %d: write refused, w/%d moved (an earlier fence of this node landed late); "
                    "loading the partition again", r.partition, r.partition)
        self._given_up(r)
        raise StorageError(f"partition {r.partition}: its write fence moved; loading it again",
                           ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def _given_up(self, r: _Round) -> None:
        """Stop serving `r.partition` from what this node holds; the ownership loads it again."""
        state = r.state
        if self._partitions.get(r.partition) is state and self.states[r.partition] is L.LOADED:
            stale = StorageError(f"partition {r.partition}: loading it again", ErrorCode.COORDINATOR_NOT_AVAILABLE)
            self._fail(r.partition, stale, L.LOADED)  # no append from now on; the ownership loads it again
            _refuse_queued(state, stale)
            self.on_stale(r.partition)

    async def _txn(self, guards: list, ops: list, failure: Sequence = ()) -> tuple[bool, int, list]:
        """One etcd transaction: (guards held, revision, responses). etcd failures become StorageErrors:
        REQUEST_TIMED_OUT when the outcome is unknown (a deadline, a broken connection), COORDINATOR_NOT_AVAILABLE
        when etcd refused it (NOSPACE)."""
        started = time.perf_counter()
        try:
            return await self.etcd.txn(guards, ops, failure)
        except EtcdRequestTooLarge as exc:
            self.stats.etcd_errors += 1
            raise StorageError(str(exc), ErrorCode.MESSAGE_TOO_LARGE) from exc
        except EtcdNoSpace as exc:  # etcd answered and refused it (quota reached): certainly not applied
            self.stats.etcd_errors += 1
            raise StorageError(str(exc), ErrorCode.COORDINATOR_NOT_AVAILABLE) from exc
        except EtcdUnavailable as exc:
            self.stats.etcd_errors += 1
            raise StorageError(str(exc), ErrorCode.REQUEST_TIMED_OUT) from exc
        finally:
            self.stats.transactions += 1
            self.stats.transaction_seconds += time.perf_counter() - started


def _op_bytes(record_key: bytes, value: bytes | None) -> int:
    return len(record_key) * 2 + 32 + (len(value) if value is not None else 0) + _OP_OVERHEAD_BYTES


def _guard(partition: int, epoch: int):
    return compare_create_revision(keys.owner_key(partition), epoch)


def _guards(r: _Round) -> list:
    """Still the owner at the round's epoch, and no fence of p written since the last one this node saw."""
    return [_guard(r.partition, r.state.epoch),
            compare_mod_revision(keys.write_fence_key(r.partition), r.state.fence)]


def _refuse_queued(state: _Partition, error: StorageError) -> None:
    """Fail every append still queued for the partition with `error`."""
    for _, done in state.queue:
        if not done.done():
            done.set_exception(error)
    state.queue = []


def _fence_op(partition: int, token: bytes):
    return op_put_bytes(keys.write_fence_key(partition), token)


def _why_refused(partition: int) -> list:
    """The failure branch of a partition's write: its owner key and its write fence."""
    return [op_range(keys.owner_key(partition)), op_range(keys.write_fence_key(partition))]


def _applied(part: Sequence[Record], found: list, written: int) -> bool:
    """Whether the write of `part` was applied, from what etcd holds of its keys (`found`, in order) once it
    can no longer apply. Only that write can have changed one of them after `written`: applied, every key
    it puts has its revision, every key it deletes is gone. A write of deletes only counts as applied
    when its keys are gone, whether or not it removed them (what etcd holds is then what it asked for)."""
    puts = [kvs for (_, value), kvs in zip(part, found) if value is not None]
    if puts:
        return bool(puts[0]) and puts[0][0].mod_revision > written
    return not any(found)


def _owner_epoch(responses: list) -> int:
    kvs = responses[0].response_range.kvs if responses else []
    return kvs[0].create_revision if kvs else 0


def _op(partition: int, record_key: bytes, value: bytes | None):
    key = keys.etcd_key(partition, record_key)
    return op_put_bytes(key, values.for_etcd(key, value)) if value is not None else op_delete(key)
