"""inflight_objects.py main|base: GC-tracked objects a durable commit keeps alive while its round is in flight.

Feeds 32 OffsetCommit frames to fake-transport connections with the collector off, then compares the set of
tracked objects before and after (types counted), before the round completes.
"""
import asyncio, collections, gc, sys, tempfile
sys.argv += ["commit"]
import runpy
which = sys.argv[1]
from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.metrics import CoordinatorMetrics
from cohort.protocol.framing import encode_request
from cohort.protocol.messages import OffsetCommitRequest
if which == "main":
    from cohort.coordinator.node import CoordinatorServer
else:
    from cohort.coordinator.server import CoordinatorServer
_T = OffsetCommitRequest.OffsetCommitRequestTopic
_P = _T.OffsetCommitRequestPartition

class Transport:
    def __init__(self): self.n = 0
    def write(self, b): self.n += 1
    def writelines(self, b): self.n += 1
    def get_extra_info(self, k, d=None): return ("127.0.0.1", 1) if k == "peername" else d
    def pause_reading(self): pass
    def resume_reading(self): pass
    def is_closing(self): return False
    def close(self): pass

async def fifty_rounds(conns, frame):
    """50 rounds of 8 pipelined commits on each connection, each round answered before the next."""
    for r in range(50):
        ns = [t.n for _, t in conns]
        for c, (conn, t) in enumerate(conns):
            conn.data_received(b"".join(frame(c * 8 + k, 1000 * r + k) for k in range(8)))
        for _ in range(2000):
            await asyncio.sleep(0)
            if all(t.n > n for (_, t), n in zip(conns, ns)): break


async def main():
    d = tempfile.mkdtemp()
    server = CoordinatorServer(CoordinatorConfig(data_dir=d, listeners="127.0.0.1:0"), metrics=CoordinatorMetrics())
    await server.start()
    make = server._listeners[0][1]._factory if which == "main" else server._listener._factory
    conns = []
    for c in range(4):
        conn = make("127.0.0.1:1"); t = Transport(); conn.connection_made(t); conns.append((conn, t))
    def frame(g, i):
        return encode_request(OffsetCommitRequest(group_id=f"g-{g}", generation_id_or_member_epoch=-1, member_id="", topics=[
            _T(name="bench-topic", partitions=[_P(partition_index=0, committed_offset=i, committed_metadata="")])]), 2, i, "bench")
    # warm up
    for r in range(3):
        for c, (conn, t) in enumerate(conns):
            conn.data_received(b"".join(frame(c * 8 + k, r) for k in range(8)))
        for _ in range(200):
            await asyncio.sleep(0.001)
            if all(t.n for _, t in conns): break
    gc.collect(); gc.disable()
    before = collections.Counter(type(o).__name__ for o in gc.get_objects())
    for c, (conn, t) in enumerate(conns):
        conn.data_received(b"".join(frame(c * 8 + k, 100 + k) for k in range(8)))
    after = collections.Counter(type(o).__name__ for o in gc.get_objects())
    diff = after - before
    print(which, "tracked objects alive per in-flight commit:", round(sum(diff.values()) / 32, 1))
    for k, v in diff.most_common(25):
        print(f"   {v / 32:5.2f} {k}")
    for _ in range(200):
        await asyncio.sleep(0.001)
    # steady state: 50 complete rounds of 32 commits, collector off; what is still alive afterwards, and the gen0 count
    gc.collect()
    before = collections.Counter(type(o).__name__ for o in gc.get_objects())
    c0 = gc.get_count()[0]
    await fifty_rounds(conns, frame)
    for _ in range(50):
        await asyncio.sleep(0.001)
    c1 = gc.get_count()[0]
    diff = collections.Counter(type(o).__name__ for o in gc.get_objects()) - before
    print(which, "gen0 count grew by", c1 - c0, "over 1600 commits; objects still alive:", sum(diff.values()))
    # the same with the collector on (CPython's thresholds): how many young collections
    gc.enable()
    collections_seen = [0]
    def cb(phase, info):
        if phase == "stop" and info["generation"] == 0:
            collections_seen[0] += 1
    gc.callbacks.append(cb)
    await fifty_rounds(conns, frame)
    print(which, "gen0 collections with the collector on, 1600 commits:", collections_seen[0])
    # the young count through 5 rounds (collector off, a ballast so that frees never hit its floor of 0)
    gc.disable()
    gc.collect()
    ballast = [[] for _ in range(100000)]
    trace = []
    for r in range(5):
        ns = [t.n for _, t in conns]
        trace.append(("start", gc.get_count()[0]))
        for c, (conn, t) in enumerate(conns):
            conn.data_received(b"".join(frame(c * 8 + k, 1000 * r + k) for k in range(8)))
        trace.append(("fed", gc.get_count()[0]))
        for _ in range(2000):
            await asyncio.sleep(0)
            trace.append(("turn", gc.get_count()[0]))
            if all(t.n > n for (_, t), n in zip(conns, ns)): break
    prev, out = None, []
    for k, v in trace:
        if prev is not None and (v != prev or k != "turn"):
            out.append(f"{k}:{v - prev:+d}")
        prev = v
    print(which, "young count through 5 rounds:", " ".join(out))
    del ballast
    gc.enable()
    await asyncio.sleep(0.2)
    await server.stop()
import uvloop; uvloop.install(); asyncio.run(main())
