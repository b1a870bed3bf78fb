"""`EtcdStore`: the `Store` of cluster mode: records in etcd, every write fenced by the ownership epoch.

Why fenced transactions: a node that lost `owner/<p>` (paused past its lease, cut off, slow) may
still believe it owns p. Each write for p is one etcd transaction guarded by "`owner/<p>` still has
the create revision I won it with"; when the guard fails nothing of it is applied and the appends in
it raise NOT_COORDINATOR. A commit is acknowledged only after etcd answered the transaction, i.e.
after a quorum has it.

Group commit, as on the local log: appends for a partition queue while the previous round is in
flight; the next round writes everything queued (the latest value per key) as one transaction, split
into several when it exceeds etcd's per-request limits (128 operations, 1.5 MiB). A round is answered
as a whole: if any part fails, every append of the round fails (parts already applied hold only
values the clients asked for, so a retry is harmless).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from cohort.coordinator.cluster import keys
from cohort.coordinator.cluster.etcd import (
    ETCD_MAX_REQUEST_BYTES,
    ETCD_MAX_TXN_OPS,
    EtcdClient,
    EtcdRequestTooLarge,
    EtcdUnavailable,
    compare_create_revision,
    prefix_end,
    op_delete,
    op_put,
)
from cohort.coordinator.log import StorageError
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.cluster")

Record = tuple[bytes, bytes | None]

# Room left in a request for the compare, the protobuf framing and etcd's own raft envelope.
_REQUEST_MARGIN_BYTES = 64 * 1024
_OP_OVERHEAD_BYTES = 16


@dataclass(slots=True)
class StoreStats:
    """What the metrics module exports: transactions, their latency, fenced and failed writes."""

    transactions: int = 0
    transaction_seconds: float = 0.0
    fenced_writes: int = 0
    etcd_errors: int = 0


@dataclass(slots=True)
class _Partition:
    epoch: int
    queue: list[tuple[Sequence[Record], asyncio.Future]] = field(default_factory=list)
    round: asyncio.Task | None = None
    releasing: bool = False


class EtcdStore:
    """Records of the owned offsets partitions, kept in etcd (see the module docstring)."""

    def __init__(self, etcd: EtcdClient, num_partitions: int = 50, *, page_size: int = 1000,
                 max_txn_ops: int = ETCD_MAX_TXN_OPS, max_request_bytes: int = ETCD_MAX_REQUEST_BYTES) -> None:
        self.etcd = etcd
        self.num_partitions = num_partitions
        self.page_size = page_size
        self.max_txn_ops = max_txn_ops
        self.max_txn_bytes = max(4096, max_request_bytes - _REQUEST_MARGIN_BYTES)
        self.stats = StoreStats()
        self.on_fenced = lambda partition: None  # set by the ownership: drop the partition at once
        self.on_loaded = lambda partition, epoch: None  # set by the ownership: publish the load state
        self._partitions: dict[int, _Partition] = {}

    async def open(self) -> None:
        await self.etcd.connect()

    async def close(self) -> None:
        for partition in list(self._partitions):
            await self.release(partition)

    async def load(self, partition: int, epoch: int) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """Partition `partition`'s records, read page by page at one revision, after it was won at `epoch`.

        Every write of an earlier owner that etcd accepted happened before the claim (later ones
        fail their guard), so a snapshot taken after the claim has all of them.
        """
        state = self._partitions[partition] = _Partition(epoch)
        try:
            owner, _, revision = await self._retrying(partition, state, lambda: self.etcd.range(keys.owner_key(partition)))
            if not owner or owner[0].create_revision != epoch:
                raise StorageError(f"partition {partition}: epoch {epoch} is no longer the owner's",
                                   ErrorCode.NOT_COORDINATOR)
            for prefix in keys.partition_prefixes(partition):
                start, end = prefix, prefix_end(prefix)
                while True:
                    page, more, _ = await self._retrying(partition, state, lambda: self.etcd.range(
                        start, end, limit=self.page_size, revision=revision))
                    if page:
                        yield [(keys.record_key(kv.key), kv.value) for kv in page]
                    if not more or not page:
                        break
                    start = page[-1].key + b"\0"
            self.on_loaded(partition, epoch)  # the caller replayed every page by the time we resume here
        except StorageError:
            if self._partitions.get(partition) is state:
                del self._partitions[partition]
            raise

    async def _retrying(self, partition: int, state: _Partition, read):
        """A read of the load, tried again while etcd is unreachable and the partition is still ours."""
        while True:
            try:
                return await read()
            except EtcdUnavailable as exc:
                self.stats.etcd_errors += 1
                if "compacted" in str(exc):
                    raise StorageError(f"partition {partition}: {exc}", ErrorCode.COORDINATOR_NOT_AVAILABLE) from exc
                if state.releasing or self._partitions.get(partition) is not state:
                    raise StorageError(f"partition {partition}: released while loading",
                                       ErrorCode.NOT_COORDINATOR) from exc
                log.info("partition %d: load waits for etcd (%s)", partition, exc)
                await asyncio.sleep(0.5)

    async def append(self, partition: int, records: Sequence[Record]) -> None:
        state = self._partitions.get(partition)
        if state is None or state.releasing:
            raise StorageError(f"partition {partition} is not owned here", ErrorCode.NOT_COORDINATOR)
        if not records:
            return
        done = asyncio.get_running_loop().create_future()
        state.queue.append((records, done))
        if state.round is None:
            state.round = asyncio.create_task(self._rounds(partition, state), name=f"etcd-round-{partition}")
        await done

    async def release(self, partition: int) -> None:
        """Appends already queued finish (or fail); later ones raise NOT_COORDINATOR."""
        state = self._partitions.get(partition)
        if state is None:
            return
        state.releasing = True
        if state.round is not None:
            await asyncio.shield(state.round)
        if self._partitions.get(partition) is state:
            del self._partitions[partition]

    async def _rounds(self, partition: int, state: _Partition) -> None:
        try:
            while state.queue:
                batch, state.queue = state.queue, []
                try:
                    await self._write(partition, state.epoch, [r for records, _ in batch for r in records])
                except StorageError as exc:
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    if exc.error_code == ErrorCode.NOT_COORDINATOR:
                        self._fenced(partition, state)
                except BaseException as exc:  # cancelled at shutdown: nothing acknowledged
                    error = StorageError(f"partition {partition}: write aborted ({exc!r})", ErrorCode.NOT_COORDINATOR)
                    for _, done in batch + state.queue:
                        if not done.done():
                            done.set_exception(error)
                    raise
                else:
                    for _, done in batch:
                        if not done.done():
                            done.set_result(None)
        finally:
            state.round = None

    def _fenced(self, partition: int, state: _Partition) -> None:
        """Another node owns the partition now: refuse what is queued and every later append."""
        state.releasing = True
        error = StorageError(f"partition {partition}: ownership moved to another node", ErrorCode.NOT_COORDINATOR)
        for _, done in state.queue:
            if not done.done():
                done.set_exception(error)
        state.queue = []
        if self._partitions.get(partition) is state:
            del self._partitions[partition]
        self.on_fenced(partition)

    def transactions_for(self, records: Sequence[Record]) -> list[list]:
        """The round's operations (the latest value per key, in first-seen order) cut at etcd's limits."""
        latest: dict[bytes, bytes | None] = {}
        for record_key, value in records:
            latest[record_key] = value
        return self._split(latest)

    def _split(self, latest: dict[bytes, bytes | None]) -> list[list]:
        txns: list[list] = []
        ops: list = []
        size = 0
        for record_key, value in latest.items():
            op_size = len(record_key) * 2 + 32 + (len(value) if value is not None else 0) + _OP_OVERHEAD_BYTES
            if ops and (len(ops) >= self.max_txn_ops or size + op_size > self.max_txn_bytes):
                txns.append(ops)
                ops, size = [], 0
            ops.append((record_key, value))
            size += op_size
        if ops:
            txns.append(ops)
        return txns

    async def _write(self, partition: int, epoch: int, records: Sequence[Record]) -> None:
        guard = [compare_create_revision(keys.owner_key(partition), epoch)]
        for part in self.transactions_for(records):
            success = [
                op_put(keys.etcd_key(partition, k), v) if v is not None else op_delete(keys.etcd_key(partition, k))
                for k, v in part
            ]
            started = time.perf_counter()
            try:
                held, _, _ = await self.etcd.txn(guard, success)
            except EtcdRequestTooLarge as exc:
                self.stats.etcd_errors += 1
                raise StorageError(f"partition {partition}: {exc}", ErrorCode.MESSAGE_TOO_LARGE) from exc
            except EtcdUnavailable as exc:
                self.stats.etcd_errors += 1
                raise StorageError(f"partition {partition}: {exc}", ErrorCode.REQUEST_TIMED_OUT) from exc
            finally:
                self.stats.transactions += 1
                self.stats.transaction_seconds += time.perf_counter() - started
            if not held:
                self.stats.fenced_writes += 1
                log.warning("partition %d: write refused, owner/%d is no longer ours (epoch %d)",
                            partition, partition, epoch)
                raise StorageError(f"partition {partition}: fenced (epoch {epoch} is stale)", ErrorCode.NOT_COORDINATOR)
