"""The connection to etcd: the few v3 calls cluster mode makes, with one error type and bounded time.

Built on `etcd3aio` (asyncio gRPC). Reads, watches and lease grants use one channel that round-robins
over every endpoint given. Transactions and lease refreshes go through one channel per endpoint, chosen
here: the raft leader's when it is one of ours (a follower would forward the proposal to the leader,
which costs etcd ~15 % more CPU per transaction and a hop, measured with `bench.etcd_txn_bench`; the leader
is looked up again every few seconds), else the next endpoint in turn. An endpoint whose call failed or
passed its deadline is avoided for a while (5 s, doubling while it keeps failing, up to 30 s): gRPC
keeps a stalled member's connection READY, so round-robin alone would keep sending a third of the calls
into it. Every call has a deadline and is tried once: a transaction whose outcome is unknown is the
caller's to settle (the store checks it through another endpoint), never silently retried here. Any
failure to reach a quorum (member down, no leader, timeout) becomes `EtcdUnavailable`; callers map it
to Kafka's retriable errors.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc
from etcd3aio import Etcd3Client, EtcdError
from etcd3aio.connections import ConnectionManager
from etcd3aio._protobuf import Compare, PutRequest, RequestOp, TxnRequest
from etcd3aio.kv import KVService

log = logging.getLogger("cohort.cluster")

# etcd's defaults (`--max-txn-ops`, `--max-request-bytes`): a transaction carries at most this many
# operations per branch, and the whole request at most this many bytes.
ETCD_MAX_TXN_OPS = 128
ETCD_MAX_REQUEST_BYTES = 1536 * 1024
LEADER_RECHECK_S = 5.0
AVOID_FAILED_ENDPOINT_S = 5.0  # first time an endpoint fails; doubles while it keeps failing
AVOID_FAILED_ENDPOINT_MAX_S = 30.0
# gRPC keepalive pings: a subchannel whose member stopped answering (stalled, paused, its link cut
# without a reset) is closed after one unanswered ping, and its calls go to the other members. etcd
# refuses pings more often than its --grpc-keepalive-min-time (default 5 s) with GOAWAY.
GRPC_KEEPALIVE_TIME_MS = 5000
GRPC_KEEPALIVE_TIMEOUT_MS = 1000


class EtcdUnavailable(Exception):
    """etcd did not answer (in time): no quorum, no leader, every endpoint down."""


class EtcdRequestTooLarge(Exception):
    """etcd refused a request over its `--max-request-bytes`."""


class EtcdNoSpace(EtcdUnavailable):
    """etcd refused a write because its NOSPACE alarm is raised (the backend reached `--quota-backend-bytes`).

    Reads, deletes and lease keepalives still work; writes fail until an operator frees space and
    disarms the alarm (docs/cluster-operations.md).
    """


NO_SPACE_DETAILS = "database space exceeded"


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """What one etcd member says of itself (its Status call needs no quorum)."""

    endpoint: str
    member_id: int = 0
    leader_id: int = 0  # 0: the member knows no leader
    raft_term: int = 0
    db_size: int = 0
    db_size_in_use: int = 0
    db_size_quota: int = 0  # 0: the member does not report it (etcd < 3.5)
    alarms: tuple[str, ...] = ()  # e.g. "NOSPACE", as the member's Status lists them
    error: str = ""  # why it did not answer ("" when it did)


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


def prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with `prefix`."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def _channel(endpoints: list[str]) -> Etcd3Client:
    """An etcd3aio client (one gRPC channel, round-robin over `endpoints`) that tries each call once
    and pings each connection (see GRPC_KEEPALIVE_TIME_MS)."""
    client = Etcd3Client(endpoints, rpc_max_attempts=1)
    # etcd3aio 0.3.0 takes its keepalive timings only here (pinned in pyproject.toml)
    client._manager = ConnectionManager(endpoints, keepalive_time_ms=GRPC_KEEPALIVE_TIME_MS,
                                        keepalive_timeout_ms=GRPC_KEEPALIVE_TIMEOUT_MS)
    return client


def _kv(pb) -> KeyValue:
    return KeyValue(pb.key, pb.value, pb.create_revision, pb.mod_revision, pb.lease)


class EtcdClient:
    """The gRPC channels to the etcd cluster (every member, and the leader for transactions), shared by the
    store and the ownership of a node."""

    def __init__(self, endpoints: Sequence[str], timeout_s: float = 5.0) -> None:
        self.endpoints = list(endpoints)
        self.timeout_s = timeout_s
        self._client = _channel(self.endpoints)
        self._members = {endpoint: _channel([endpoint]) for endpoint in self.endpoints}
        self._connected = False
        self._leader: str | None = None  # the leader's endpoint, when it is one of ours
        self._leader_checked = float("-inf")
        self._leader_lookup: asyncio.Task | None = None
        self.no_space = False  # etcd refused the last write it answered with NOSPACE
        self.raft_term = 0  # the highest raft term a lease grant or refresh was answered in
        self._turn = 0
        self._avoid_until: dict[str, float] = {}  # endpoint -> monotonic time until which it is avoided
        self._failures: dict[str, int] = {}  # endpoint -> calls failed in a row

    async def connect(self) -> None:
        if not self._connected:
            await self._client.connect()
            for member in self._members.values():
                await member.connect()
            self._connected = True

    async def close(self) -> None:
        if self._connected:
            self._connected = False
            lookup, self._leader_lookup = self._leader_lookup, None
            if lookup is not None:
                # Waited for: left running, it would call a closed channel's services (None by then).
                lookup.cancel()
                await asyncio.wait([lookup])
            for member in self._members.values():
                with contextlib.suppress(Exception):
                    await member.close()
            await self._client.close()

    def _pick(self) -> str:
        """The endpoint for the next transaction or lease refresh (see the module docstring)."""
        self._check_leader()
        now = time.monotonic()
        avoid = self._avoid_until
        if self._leader is not None and avoid.get(self._leader, 0.0) <= now:
            return self._leader
        count = len(self.endpoints)
        for step in range(count):
            endpoint = self.endpoints[(self._turn + step) % count]
            if avoid.get(endpoint, 0.0) <= now:
                self._turn = (self._turn + step + 1) % count
                return endpoint
        # all avoided: the one that failed fewest times in a row (a stalled member keeps failing; the
        # others may only have lacked a leader for a moment), then the one avoided longest ago
        return min(self.endpoints, key=lambda e: (self._failures.get(e, 0), avoid.get(e, 0.0)))

    def _succeeded(self, endpoint: str) -> None:
        if self._failures.get(endpoint):
            self._failures[endpoint] = 0
            self._avoid_until.pop(endpoint, None)

    def _failed(self, endpoint: str) -> None:
        failures = self._failures[endpoint] = self._failures.get(endpoint, 0) + 1
        self._avoid_until[endpoint] = time.monotonic() + min(AVOID_FAILED_ENDPOINT_MAX_S,
                                                             AVOID_FAILED_ENDPOINT_S * 2 ** (failures - 1))
        if endpoint == self._leader:
            self._leader = None  # it died, stalled or moved: other endpoints until the next lookup

    async def _call(self, what: str, coro):
        try:
            return await asyncio.wait_for(coro, self.timeout_s)
        except (TimeoutError, asyncio.TimeoutError) as exc:
            raise EtcdUnavailable(f"etcd {what}: no answer within {self.timeout_s:g}s") from exc
        except grpc.aio.AioRpcError as exc:
            details = exc.details() or ""
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT and "too large" in details:
                raise EtcdRequestTooLarge(f"etcd {what}: {details}") from exc
            self._check_no_space(details)
            raise EtcdUnavailable(f"etcd {what}: {self._reason(exc)}") from exc
        except EtcdError as exc:
            cause = exc.__cause__
            if isinstance(cause, grpc.aio.AioRpcError) and "too large" in (cause.details() or ""):
                raise EtcdRequestTooLarge(f"etcd {what}: {cause.details()}") from exc
            details = (cause.details() or "") if isinstance(cause, grpc.aio.AioRpcError) else ""
            self._check_no_space(f"{exc} {details}")
            reason = self._reason(cause) if isinstance(cause, grpc.aio.AioRpcError) else str(exc).splitlines()[0]
            raise EtcdUnavailable(f"etcd {what}: {reason}") from exc

    def _reason(self, exc: grpc.aio.AioRpcError) -> str:
        """One short line for a failed call: gRPC's details of an unreachable endpoint are a paragraph of
        transport errors, which reached the CLI's users verbatim."""
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return f"no etcd member answers at {','.join(self.endpoints)} (is etcd running?)"
        details = (exc.details() or "").splitlines()
        return f"{exc.code().name} {details[0][:200] if details else ''}".rstrip()

    def _check_no_space(self, details: str) -> None:
        """Raise `EtcdNoSpace` for etcd's NOSPACE refusal; the first one is logged (and counted in metrics)."""
        if NO_SPACE_DETAILS not in details:
            return
        if not self.no_space:
            self.no_space = True
            log.error("etcd refuses writes: NOSPACE alarm (database reached its quota). Nothing acknowledged "
                      "is lost; commits and claims fail until an operator compacts, defragments and disarms "
                      "(docs/cluster-operations.md)")
        raise EtcdNoSpace(f"etcd: NOSPACE alarm, {details}")

    def _accepted_a_write(self) -> None:
        if self.no_space:
            self.no_space = False
            log.info("etcd accepts writes again (NOSPACE alarm cleared)")

    # --- key-value -------------------------------------------------------------------------------

    async def range(self, key: bytes, range_end: bytes = b"", *, limit: int = 0,
                    revision: int = 0, keys_only: bool = False) -> tuple[list[KeyValue], bool, int]:
        """(key-values in key order, more follow, revision read at)."""
        response = await self._call("range", self._client.kv.get(
            key, range_end or None, revision=revision, limit=limit, keys_only=keys_only))
        return [_kv(kv) for kv in response.kvs], response.more, response.header.revision

    async def range_prefix(self, prefix: bytes, *, page_size: int = 1000, revision: int = 0,
                           keys_only: bool = False) -> AsyncIterator[list[KeyValue]]:
        """Every key under `prefix`, page by page, all read at one revision (a consistent snapshot)."""
        start, end = prefix, prefix_end(prefix)
        while True:
            page, more, read_at = await self.range(start, end, limit=page_size, revision=revision,
                                                   keys_only=keys_only)
            revision = revision or read_at
            if page:
                yield page
            if not more or not page:
                return
            start = page[-1].key + b"\0"

    async def txn(self, compare: Sequence, success: Sequence, failure: Sequence = ()) -> tuple[bool, int, list]:
        """(compare held, revision of the transaction, the branch's responses). A member that cannot be
        connected to is skipped at once (the transaction was never sent); any other failure is the
        caller's to settle.

        The hot call of cluster mode (every commit round is one), so it goes straight to the generated
        gRPC stub with gRPC's own deadline: etcd3aio's wrapper would add an `asyncio.timeout`, a retry
        loop (off here anyway) and, with `_call`'s `wait_for`, a task per call. Same semantics: one
        attempt, bounded by `timeout_s`, every failure `EtcdUnavailable` (or `EtcdRequestTooLarge`).
        """
        request = TxnRequest(compare=compare, success=success, failure=failure)
        for _ in self.endpoints:
            endpoint = self._pick()
            member = self._members[endpoint]
            connected = member._channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY
            try:
                # etcd3aio 0.3.0's KVService keeps the stub as `_stub` (pinned in pyproject.toml)
                response = await member.kv._stub.Txn(request, timeout=self.timeout_s)
            except grpc.aio.AioRpcError as exc:
                details = exc.details() or ""
                if exc.code() == grpc.StatusCode.INVALID_ARGUMENT and "too large" in details:
                    raise EtcdRequestTooLarge(f"etcd txn: {details}") from exc
                if NO_SPACE_DETAILS in details:
                    self._succeeded(endpoint)  # the member answered: its channel is fine
                    self._check_no_space(details)
                self._failed(endpoint)
                if exc.code() == grpc.StatusCode.UNAVAILABLE and not connected:
                    continue  # no connection to send it on (a member down): certainly not sent, next member
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise EtcdUnavailable(f"etcd txn at {endpoint}: no answer within {self.timeout_s:g}s") from exc
                raise EtcdUnavailable(f"etcd txn at {endpoint}: {self._reason(exc)}") from exc
            except (grpc.RpcError, grpc.aio.BaseError) as exc:  # e.g. the channel closed under the call
                self._failed(endpoint)
                raise EtcdUnavailable(f"etcd txn at {endpoint}: {type(exc).__name__}") from exc
            self._succeeded(endpoint)
            if self.no_space and any(op.HasField("request_put") for op in success):
                self._accepted_a_write()
            return response.succeeded, response.header.revision, list(response.responses)
        raise EtcdUnavailable(f"etcd txn: no etcd member answers at {','.join(self.endpoints)} (is etcd running?)")

    # --- the leader's channel ---------------------------------------------------------------------

    @property
    def leader_endpoint(self) -> str | None:
        """The endpoint transactions go to directly, None while they go to the others in turn."""
        return self._leader

    def _check_leader(self) -> None:
        now = time.monotonic()
        if now - self._leader_checked >= LEADER_RECHECK_S and self._connected and (
                self._leader_lookup is None or self._leader_lookup.done()):
            self._leader_checked = now
            self._leader_lookup = asyncio.get_running_loop().create_task(self._look_up_leader(),
                                                                         name="etcd-leader-lookup")

    async def _look_up_leader(self) -> None:
        try:
            status = await self._call("status", self._client.maintenance.status())
            if not self._connected:
                return
            members = await self._call("member list", self._client.cluster.member_list())
        except EtcdUnavailable:
            return
        urls = next((list(m.clientURLs) for m in members.members if m.ID == status.leader), [])
        endpoint = next((e for e in self.endpoints if any(u.rstrip("/").endswith("//" + e) for u in urls)), None)
        if endpoint != self._leader and self._connected:
            self._leader = endpoint
            log.debug("etcd transactions go to the leader at %s", endpoint)

    # --- members ---------------------------------------------------------------------------------

    async def member_statuses(self, timeout_s: float = 1.0) -> list[MemberStatus]:
        """Each endpoint's own Status, asked at once over a channel of its own (answers without a quorum)."""
        return list(await asyncio.gather(*(self._member_status(e, timeout_s) for e in self.endpoints)))

    @staticmethod
    async def _member_status(endpoint: str, timeout_s: float) -> MemberStatus:
        client = Etcd3Client([endpoint], rpc_max_attempts=1)
        try:
            await client.connect()
            status = await asyncio.wait_for(client.maintenance.status(), timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            return MemberStatus(endpoint, error=f"no answer within {timeout_s:g}s")
        except (EtcdError, grpc.RpcError, grpc.aio.BaseError, OSError) as exc:
            return MemberStatus(endpoint, error=str(exc) or type(exc).__name__)
        finally:
            with contextlib.suppress(Exception):
                await client.close()
        alarms = tuple(sorted({error.rpartition("alarm:")[2].strip() or error for error in status.errors}))
        return MemberStatus(endpoint, status.header.member_id, status.leader, status.raftTerm, status.dbSize,
                            status.dbSizeInUse, getattr(status, "dbSizeQuota", 0), alarms)

    # --- leases ----------------------------------------------------------------------------------

    async def grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: (id, TTL etcd granted in seconds)."""
        response = await self._call("lease grant", self._client.lease.grant(ttl_s))
        self.raft_term = max(self.raft_term, response.header.raft_term)
        return response.ID, response.TTL

    async def keepalive_once(self, lease_id: int, timeout_s: float | None = None) -> int:
        """Refresh `lease_id` once, through the endpoint transactions use; the TTL it has now (<= 0: the
        lease is gone)."""
        endpoint = self._pick()
        try:
            return await self._keepalive_at(endpoint, lease_id, timeout_s or self.timeout_s)
        except EtcdUnavailable:
            self._failed(endpoint)
            raise

    async def keepalive_anywhere(self, lease_id: int, timeout_s: float | None = None) -> int:
        """Refresh `lease_id` through every endpoint at once; the first answer. For a refresh that
        failed once: it reaches whichever member answers (during an election none may, for a while),
        and a member that does not answer here is not avoided for it (it may only lack a leader)."""
        calls = [asyncio.ensure_future(self._keepalive_at(e, lease_id, timeout_s or self.timeout_s))
                 for e in self.endpoints]
        try:
            for call in asyncio.as_completed(calls):
                with contextlib.suppress(EtcdUnavailable):
                    return await call
            raise EtcdUnavailable("etcd lease keepalive: no member answered")
        finally:
            for call in calls:
                call.cancel()

    async def _keepalive_at(self, endpoint: str, lease_id: int, timeout_s: float) -> int:
        stream = self._members[endpoint].lease.keep_alive(lease_id)

        async def first_answer() -> int:
            async for response in stream:
                self.raft_term = max(self.raft_term, response.header.raft_term)
                return response.TTL
            return 0

        try:
            ttl = await asyncio.wait_for(first_answer(), timeout_s)
        except Exception as exc:  # a deadline, a gRPC error, a stream closed under the call
            raise EtcdUnavailable(f"etcd lease keepalive at {endpoint}: {exc!r}") from exc
        finally:
            stream.cancel()
        self._succeeded(endpoint)
        return ttl

    async def time_to_live(self, lease_id: int) -> int:
        response = await self._call("lease ttl", self._client.lease.time_to_live(lease_id))
        return response.TTL

    async def revoke(self, lease_id: int) -> None:
        await self._call("lease revoke", self._client.lease.revoke(lease_id))

    # --- watches ---------------------------------------------------------------------------------

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> AsyncIterator[list]:
        """Event batches under `prefix` from `start_revision` on (etcd3aio reconnects on failover).

        Each event has `.type` (0 put, 1 delete) and `.kv`. Ends by raising `EtcdUnavailable` when
        the stream fails for good; the caller resynchronises from a fresh read.
        """
        try:
            async for response in self._client.watch.watch(prefix, prefix_end(prefix), start_revision):
                if response.canceled or response.compact_revision:
                    raise EtcdUnavailable(f"etcd watch of {prefix!r} cancelled: {response.cancel_reason}")
                if response.events:
                    yield [(event.type, _kv(event.kv)) for event in response.events]
        except grpc.aio.AioRpcError as exc:
            raise EtcdUnavailable(f"etcd watch: {exc.code().name}") from exc


# Building blocks of a transaction (etcd's Compare and RequestOp messages).
compare_create_revision = KVService.txn_compare_create_revision
compare_value = KVService.txn_compare_value
op_put = KVService.txn_op_put
op_delete = KVService.txn_op_delete
op_range = KVService.txn_op_get


def compare_mod_revision(key: bytes, revision: int) -> Compare:
    """`key` was last written at `revision` (0: the key does not exist)."""
    return Compare(result=Compare.EQUAL, target=Compare.MOD, key=key, mod_revision=revision)


def compare_lease(key: bytes, lease_id: int) -> Compare:
    """`key` is held by lease `lease_id` (0: by none, or the key does not exist)."""
    return Compare(result=Compare.EQUAL, target=Compare.LEASE, key=key, lease=lease_id)


def op_put_bytes(key: bytes, value: bytes) -> RequestOp:
    """`op_put` for a key and value that are bytes already, without its conversions (one per commit)."""
    return RequestOp(request_put=PutRequest(key=key, value=value))


def op_revisions(key: bytes):
    """A range operation for `key` that returns its revisions, not its value."""
    op = op_range(key)
    op.request_range.keys_only = True
    return op


def op_count(prefix: bytes, revision: int = 0):
    """A range operation that only counts the keys under `prefix`."""
    op = op_range(prefix, range_end=prefix_end(prefix), revision=revision)
    op.request_range.count_only = True
    return op
