"""handler_micro.py main|base: CPU per call of the OffsetFetch and OffsetCommit handlers alone (no connection layer)."""
import asyncio, sys, tempfile, time
from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.metrics import CoordinatorMetrics
from cohort.protocol.messages import OffsetFetchRequest, OffsetCommitRequest
which = sys.argv[1]
if which == "main":
    from cohort.coordinator.node import CoordinatorServer
else:
    from cohort.coordinator.server import CoordinatorServer
_T = OffsetCommitRequest.OffsetCommitRequestTopic
_P = _T.OffsetCommitRequestPartition

def run_sync(handler, is_async, req, v, ctx):
    if is_async:
        coro = handler(req, v, ctx)
        try:
            coro.send(None)
        except StopIteration as s:
            return s.value
        raise RuntimeError("suspended")
    return handler(req, v, ctx)

async def main():
    from cohort.coordinator.handlers import RequestContext
    d = tempfile.mkdtemp()
    server = CoordinatorServer(CoordinatorConfig(data_dir=d, listeners="127.0.0.1:0"), metrics=CoordinatorMetrics())
    await server.start()
    ctx = RequestContext("bench", "/127.0.0.1")
    handler, is_async = server.handlers.routes[9]
    chandler, c_async = server.handlers.routes[8]
    groups = [f"bench-g-{i}" for i in range(64)]
    for g in groups:
        r = chandler(OffsetCommitRequest(group_id=g, generation_id_or_member_epoch=-1, member_id="", topics=[
            _T(name="bench-topic", partitions=[_P(partition_index=p, committed_offset=1000, committed_metadata="") for p in range(10)])]), 2, ctx)
        if c_async:
            await r
        elif hasattr(r, "future"):
            await r.future
    reqs = [OffsetFetchRequest(group_id=g, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="bench-topic", partition_indexes=[0])]) for g in groups]
    from cohort.protocol.framing import encode_request, decode_request
    frames = [encode_request(r, 5, i, "bench") for i, r in enumerate(reqs)]
    for rep in range(4):
        N = 100000
        fresh = [decode_request(frames[i & 63][4:])[1] for i in range(N)]
        t0 = time.process_time()
        for i in range(N):
            run_sync(handler, is_async, fresh[i], 5, ctx)
        dt = time.process_time() - t0
        if rep: print(f"{which} fetch handler: {dt / N * 1e6:.3f} us/call")
    await server.stop()
import uvloop; uvloop.install(); asyncio.run(main())
