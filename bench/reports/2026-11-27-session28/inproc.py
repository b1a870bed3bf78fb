"""Server CPU per request, in one process: the real node (store, engine, handlers, connection layer), a fake
transport instead of sockets, a closed loop of pipelined requests.

    python inproc.py main|base commit|fetch|heartbeat [--seconds 4]

`main` needs a venv of the current core (cohort.coordinator.node), `base` one of the pre-redesign core
(cohort.coordinator.server). INPROC_SET=name=int,... sets config fields. Prints CPU microseconds per request (process time, fsync thread included),
three times. No sockets, no load generator sharing the CPU: differences are the server's own code.
"""
import asyncio, os, struct, sys, tempfile, time
from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.metrics import CoordinatorMetrics
from cohort.protocol.framing import encode_request
from cohort.protocol.messages import (OffsetCommitRequest, OffsetFetchRequest, HeartbeatRequest, JoinGroupRequest,
                                      SyncGroupRequest)
from cohort.protocol.framing import decode_response

which, workload = sys.argv[1], sys.argv[2]
SECONDS = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 4.0
if which == "main":
    from cohort.coordinator.node import CoordinatorServer
else:
    from cohort.coordinator.server import CoordinatorServer

CONNECTIONS, DEPTH, GROUPS = 4, 8, 64
TOPIC = "bench-topic"
_T = OffsetCommitRequest.OffsetCommitRequestTopic
_P = _T.OffsetCommitRequestPartition


class Transport:
    def __init__(self):
        self.waiter = None
        self.frames = 0
        self.buf = b""
        self.last = []
    def _count(self, b):
        buf = self.buf + bytes(b)
        i = 0
        while len(buf) - i >= 4:
            (n,) = struct.unpack_from(">i", buf, i)
            if len(buf) - i - 4 < n:
                break
            self.last.append(buf[i:i + 4 + n])
            if len(self.last) > 4:
                del self.last[0]
            i += 4 + n
            self.frames += 1
        self.buf = buf[i:]
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
    writes = 0
    def write(self, b):
        Transport.writes += 1; self._count(b)
    def writelines(self, bs):
        Transport.writes += 1
        for b in bs: self._count(b)
    def get_extra_info(self, k, d=None): return ("127.0.0.1", 1) if k == "peername" else d
    pauses = 0
    def pause_reading(self): Transport.pauses += 1
    def resume_reading(self): pass
    def is_closing(self): return False
    def close(self): pass
    def abort(self): pass
    def set_write_buffer_limits(self, *a, **k): pass
    def get_write_buffer_size(self): return 0


def factory(server):
    if which == "main":
        return server._listeners[0][1]._factory
    return server._listener._factory


THRASH = bytearray(int(os.environ.get("THRASH_KB", "0")) * 1024)
def thrash():
    if THRASH:
        THRASH[::64] = bytes(len(THRASH) // 64 + (1 if len(THRASH) % 64 else 0))


async def roundtrip(conn, t, frames):
    want = t.frames + len(frames)
    thrash()
    conn.data_received(b"".join(frames))
    while t.frames < want:
        t.waiter = asyncio.get_running_loop().create_future()
        await asyncio.wait_for(t.waiter, 10)
    return t.last[-1]


async def main():
    d = tempfile.mkdtemp(dir=os.environ.get("INPROC_DIR", "/tmp"))
    extra = dict(kv.split("=", 1) for kv in os.environ.get("INPROC_SET", "").split(",") if kv)  # e.g. offsets_history_retention_ms=0
    cfg = CoordinatorConfig(data_dir=d, listeners="127.0.0.1:0", group_initial_rebalance_delay_ms=0,
                            **{k: int(v) for k, v in extra.items()})
    server = CoordinatorServer(cfg, metrics=CoordinatorMetrics())
    await server.start()
    make = factory(server)
    if "--heap" in sys.argv:
        import gc
        if which == "main":
            from cohort.coordinator.heap import HeapKeeper
            HeapKeeper().start()
        else:
            from cohort.coordinator.daemon import GC_THRESHOLDS
            gc.collect(); gc.freeze(); gc.set_threshold(*GC_THRESHOLDS)
    conns = []
    for c in range(CONNECTIONS):
        conn = make("127.0.0.1:1")
        t = Transport()
        conn.connection_made(t)
        conns.append((conn, t))
    groups = [f"bench-g-{i}" for i in range(GROUPS)]
    corr = [0]
    def enc(req, v):
        corr[0] += 1
        return encode_request(req, v, corr[0] & 0x7fffffff, "bench")
    # fixture offsets: 10 partitions per group
    for g in groups:
        conn, t = conns[0]
        await roundtrip(conn, t, [enc(OffsetCommitRequest(group_id=g, generation_id_or_member_epoch=-1, member_id="",
            topics=[_T(name=TOPIC, partitions=[_P(partition_index=p, committed_offset=1000, committed_metadata="")
                                               for p in range(10)])]), 2)])
    if workload == "commit":
        reqs = [(OffsetCommitRequest(group_id=g, generation_id_or_member_epoch=-1, member_id="", topics=[
            _T(name=TOPIC, partitions=[_P(partition_index=0, committed_offset=5, committed_metadata="")])]), 2) for g in groups]
    elif workload == "fetch":
        reqs = [(OffsetFetchRequest(group_id=g, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
            name=TOPIC, partition_indexes=[0])]), 5) for g in groups]
    else:
        reqs = []
        conn, t = conns[0]
        for g in groups:
            P = JoinGroupRequest.JoinGroupRequestProtocol
            join = JoinGroupRequest(group_id=g, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="",
                                    group_instance_id=None, protocol_type="consumer",
                                    protocols=[P(name="range", metadata=b"\x00\x00\x00\x00\x00\x00\x00\x00")])
            raw = await roundtrip(conn, t, [enc(join, 4)])
            _, resp = decode_response(JoinGroupRequest.API_KEY, 4, raw[4:])
            join.member_id = resp.member_id
            raw = await roundtrip(conn, t, [enc(join, 4)])
            _, resp = decode_response(JoinGroupRequest.API_KEY, 4, raw[4:])
            A = SyncGroupRequest.SyncGroupRequestAssignment
            sync = SyncGroupRequest(group_id=g, generation_id=resp.generation_id, member_id=resp.member_id,
                                    group_instance_id=None, assignments=[A(member_id=resp.member_id, assignment=b"")])
            await roundtrip(conn, t, [enc(sync, 3)])
            reqs.append((HeartbeatRequest(group_id=g, generation_id=resp.generation_id, member_id=resp.member_id,
                                          group_instance_id=None), 3))
    batches = []
    for c in range(CONNECTIONS):
        batches.append([enc(*reqs[(c * DEPTH + i) % len(reqs)]) for i in range(DEPTH)])
    async def driver(c, stop_at):
        conn, t = conns[c]
        n = 0
        while time.monotonic() < stop_at:
            await roundtrip(conn, t, batches[c])
            n += DEPTH
        return n
    total = 0
    for rep in range(4):
        t0, c0 = time.monotonic(), time.process_time()
        counts = await asyncio.gather(*(driver(c, time.monotonic() + SECONDS) for c in range(CONNECTIONS)))
        n = sum(counts)
        total += n
        cpu = time.process_time() - c0
        wall = time.monotonic() - t0
        if rep:
            print(f"{which} {workload}: {cpu / n * 1e6:.2f} us cpu/request, {n / wall:.0f} req/s, {Transport.writes / n:.3f} writes/request, {Transport.pauses / n:.3f} pauses/request", flush=True)
        Transport.pauses = 0
        Transport.writes = 0
    print("LAST", [f.hex() for f in conns[0][1].last[-2:]])
    print("TOTAL", total, flush=True)
    await server.stop()

import uvloop
uvloop.install()
asyncio.run(main())
