"""The legacy baseline: consumer offsets stored in ZooKeeper, the pre-0.8.2 way.

Kafka's old consumers committed an offset as one ZooKeeper `setData` per
partition on `/consumers/[group]/offsets/[topic]/[partition]` (the value is
the offset as decimal text). The `commit` workload against a ZooKeeper target
does exactly that: a commit of P partitions is P `setData` requests.

The paths are created with kazoo (the Python ZooKeeper client) before the
clock starts, and the committed values are read back with kazoo afterwards.
The load itself uses the same generator as the Kafka workloads: pre-encoded
`setData` frames (ZooKeeper's jute encoding) pipelined on a few sessions,
because kazoo's per-call overhead would make the client, not ZooKeeper, the
thing being measured. Like the durable Cohort runs, ZooKeeper fsyncs its
transaction log before answering (forceSync=yes, its default).
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import Counter, deque

from bench.closed_loop import DRAIN_GRACE_S
from bench.stats import GeneratorClock, LatencyRecorder, ProcessSampler, Result, generator_gc_paused
from bench.targets import BENCH_TOPIC, Target, TargetError
from bench.wire import LoadRun
from bench.workloads.offsets import _usage, group_name
from bench.workloads.profile import Profile

_INT32 = struct.Struct(">i")
logging.getLogger("kazoo").setLevel(logging.ERROR)  # it logs every closed session as a warning
_SET_DATA = 5
_OFFSET_WIDTH = 20  # offsets are written as fixed-width decimal text so the frame can be patched in place
SESSION_TIMEOUT_MS = 30000

# ZooKeeper's KeeperException codes (org.apache.zookeeper.KeeperException.Code).
ZK_ERRORS = {-1: "SYSTEMERROR", -2: "RUNTIMEINCONSISTENCY", -3: "DATAINCONSISTENCY", -4: "CONNECTIONLOSS",
             -5: "MARSHALLINGERROR", -6: "UNIMPLEMENTED", -7: "OPERATIONTIMEOUT", -8: "BADARGUMENTS",
             -100: "APIERROR", -101: "NONODE", -102: "NOAUTH", -103: "BADVERSION", -110: "NODEEXISTS",
             -112: "SESSIONEXPIRED", -118: "SESSIONMOVED"}


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"/consumers/{group}/offsets/{topic}/{partition}"


def _ustring(text: str) -> bytes:
    data = text.encode()
    return _INT32.pack(len(data)) + data


def connect_request() -> bytes:
    """ConnectRequest: protocol version, last zxid seen, timeout, session id, password, read-only."""
    body = struct.pack(">iqiq", 0, 0, SESSION_TIMEOUT_MS, 0) + _INT32.pack(16) + bytes(16) + b"\x00"
    return _INT32.pack(len(body)) + body


class ZkCommitTemplate:
    """One commit = `setData` frames for each partition, pre-encoded; offset text patched per send."""

    __slots__ = ("frames", "data_positions", "partitions")

    def __init__(self, group: str, partitions: int) -> None:
        self.partitions = partitions
        frames = bytearray()
        positions = []
        for p in range(partitions):
            body = bytearray(_INT32.pack(0) + _INT32.pack(_SET_DATA) + _ustring(offset_path(group, BENCH_TOPIC, p)))
            body += _INT32.pack(_OFFSET_WIDTH)
            positions.append(len(frames) + 4 + len(body))
            body += b"0" * _OFFSET_WIDTH + _INT32.pack(-1)  # version -1: unconditional set
            frames += _INT32.pack(len(body)) + body
        self.frames = bytes(frames)
        self.data_positions = tuple(positions)

    def render(self, first_xid: int, sequence: int) -> bytearray:
        buf = bytearray(self.frames)
        text = b"%020d" % sequence
        pos_frame = 0
        for i, pos in enumerate(self.data_positions):
            _INT32.pack_into(buf, pos_frame + 4, first_xid + i)
            buf[pos:pos + _OFFSET_WIDTH] = text
            pos_frame = pos + _OFFSET_WIDTH + 4
        return buf


class ZkPipelinedConnection(asyncio.Protocol):
    """A ZooKeeper session keeping `depth` commits (each `partitions` setData calls) in flight."""

    def __init__(self, run: LoadRun, templates: list[ZkCommitTemplate], depth: int) -> None:
        self.run = run
        self.templates = templates
        self.depth = depth
        self.pending: deque = deque()
        self._buffer = bytearray()
        self._xid = 0
        self._sequence = 0
        self.connected = asyncio.get_running_loop().create_future()
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(connect_request())

    def connection_lost(self, exc) -> None:
        if not self.connected.done():
            self.connected.set_exception(ConnectionError(f"ZooKeeper closed the session: {exc}"))
        if self.pending:
            self.run.fail(ConnectionError(f"ZooKeeper closed a session with requests in flight ({exc})"))

    def start(self) -> None:
        now = time.perf_counter()
        out = [self._issue() for _ in range(self.depth) if self.run.may_issue(now)]
        if out:
            self.transport.write(b"".join(out))

    def _issue(self) -> bytearray:
        template = self.templates[self.run.issued % len(self.templates)]  # rotation shared by all sessions
        self.run.issued += 1
        first = self._xid + 1
        self._xid += template.partitions
        self._sequence += 1
        self.pending.append([time.perf_counter_ns(), first, template.partitions])
        return template.render(first, self._sequence)

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        pos = 0
        n = len(buf)
        run = self.run
        out = []
        now_ns = time.perf_counter_ns()
        now = now_ns / 1e9
        measuring = now >= run.measure_from
        while n - pos >= 4:
            size = _INT32.unpack_from(buf, pos)[0]
            end = pos + 4 + size
            if end > n:
                break
            body = bytes(buf[pos + 4:end])
            pos = end
            if not self.connected.done():
                self.connected.set_result(None)
                continue
            xid, _zxid, err = struct.unpack_from(">iqi", body, 0)
            if xid < 0:
                continue  # ping (-2) or watch notification (-1)
            entry = self.pending[0]
            if xid != entry[1]:  # a session answers in request order
                run.errors["CORRELATION_MISMATCH"] += 1
            if err and measuring:
                run.errors[f"ZK_{ZK_ERRORS.get(err, err)}"] += 1
            entry[2] -= 1
            entry[1] += 1
            if entry[2]:
                continue
            self.pending.popleft()
            if measuring:
                run.completed += 1
                run.latencies.add(now_ns - entry[0])
            if run.may_issue(now):
                out.append(self._issue())
        if pos:
            del buf[:pos]
        if out:
            self.transport.write(b"".join(out))
        if run.stopping and not self.pending:
            run.connection_drained()


def _kazoo_client(target: Target):
    """A started kazoo client; a ZooKeeper that does not answer is a TargetError like any other target's."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError
    client = KazooClient(hosts=target.address, timeout=30)
    try:
        client.start(timeout=30)
    except KazooTimeoutError:
        client.close()
        raise TargetError(f"ZooKeeper at {target.address} did not accept a session within 30 s") from None
    return client


def create_paths(target: Target, groups: list[str], partitions: int) -> None:
    """Create every offset node (kazoo), as the old consumer did on its first commit."""
    client = _kazoo_client(target)
    try:
        for group in groups:
            for p in range(partitions):
                client.ensure_path(offset_path(group, BENCH_TOPIC, p))
    finally:
        client.stop()
        client.close()


def read_offsets(target: Target, groups: list[str], partitions: int) -> list[int]:
    """The committed values, read back with kazoo to prove the writes landed."""
    client = _kazoo_client(target)
    try:
        return [int(client.get(offset_path(g, BENCH_TOPIC, p))[0] or b"0") for g in groups for p in range(partitions)]
    finally:
        client.stop()
        client.close()


async def run_zookeeper_commit(target: Target, profile: Profile, *, connections: int | None = None,
                               partitions_list: tuple[int, ...] = (1, 10)) -> list[Result]:
    tag = f"z{int(time.time() * 1000) % 10**8}"
    groups = [group_name(tag, g) for g in range(profile.groups)]
    await asyncio.to_thread(create_paths, target, groups, 10)
    results = []
    selected = [p for p in partitions_list if not profile.variants
                or any(f"simple-{p}p".startswith(v) for v in profile.variants)]
    sweep = [c for c in profile.connection_sweep if not profile.variants
             or any(f"connections-{c}".startswith(v) for v in profile.variants)]
    runs = [(f"simple-{p}p", p, connections or profile.connections) for p in selected]
    runs += [(f"connections-{c}", 1, c) for c in sweep]
    for variant, partitions, conns in runs:
        templates = [ZkCommitTemplate(g, partitions) for g in groups]
        run = LoadRun(max_ops=profile.max_ops, duration_s=profile.duration_s, warmup_s=profile.warmup_s)
        run.latencies = LatencyRecorder()
        loop = asyncio.get_running_loop()
        for i in range(conns):
            _, conn = await loop.create_connection(
                lambda: ZkPipelinedConnection(run, templates, profile.depth),
                target.host, target.port)
            await asyncio.wait_for(conn.connected, 30)
            run.connections.append(conn)
        sampler = ProcessSampler(target.pid)
        with generator_gc_paused():
            clock = GeneratorClock()
            run.begin()
            sampler.start()
            for conn in run.connections:
                conn.start()
            try:
                await asyncio.wait_for(asyncio.shield(run.done),
                                       profile.warmup_s + profile.duration_s + DRAIN_GRACE_S)
            except asyncio.TimeoutError:
                run.errors["TIMEOUT"] += sum(len(c.pending) for c in run.connections)
                run.measured_end = time.perf_counter()
            server = await sampler.stop()
            generator = clock.usage()
        for conn in run.connections:
            conn.transport.close()
        measured = max(run.measured_end - run.measure_from, 1e-9)
        committed = await asyncio.to_thread(read_offsets, target, groups, partitions)
        errors = Counter(run.errors)
        if run.completed and not any(committed):
            errors["NOTHING_COMMITTED"] += 1
        results.append(Result(
            workload="commit", variant=variant, target=target.name, params={
                "api": "ZooKeeper setData per partition", "partitions_per_request": partitions,
                "groups": profile.groups, "connections": conns, "in_flight_per_connection": profile.depth,
                "duration_s": profile.duration_s, "warmup_s": profile.warmup_s},
            operations=run.completed, duration_s=round(measured, 3),
            throughput_per_s=round(run.completed / measured, 1), latency_ms=run.latencies.summary(),
            errors=dict(errors), server=_usage(server), generator=_usage(generator),
            extra={"offsets_per_s": round(run.completed * partitions / measured, 1),
                   "max_committed_offset": max(committed) if committed else None},
            target_info=target.describe()))
    return results
