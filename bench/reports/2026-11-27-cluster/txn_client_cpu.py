"""Ad hoc, run from the repository root. CPU per etcd transaction in the client: etcd3aio's wrapper (old path) vs the direct stub (new)."""
import asyncio, time, sys
sys.path.insert(0, ".")  # run from the repository root
from bench.cluster import ClusterTarget
from cohort.coordinator.cluster.etcd import EtcdClient, compare_create_revision, op_put, op_put_bytes

async def main():
    target = ClusterTarget(nodes=0)
    try:
        c = EtcdClient(target.etcd_endpoints); await c.connect()
        guards = [compare_create_revision(b"owner/%d" % p, 0) for p in range(8)]
        async def old(i):
            ops = [op_put(b"o/%d/g%d" % (i % 8, k), b"x" * 60) for k in range(16)]
            r = await c._call("txn", c._client.kv.txn(guards, ops, ()))
        async def new(i):
            ops = [op_put_bytes(b"o/%d/g%d" % (i % 8, k), b"x" * 60) for k in range(16)]
            await c.txn(guards, ops)
        for name, fn in [("old", old), ("new", new)] * 3:
            n = 1500
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(n):
                await fn(i)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            print(f"{name}: {cpu / n * 1e6:.0f} us CPU/txn, {wall / n * 1e3:.2f} ms/txn", flush=True)
        await c.close()
    finally:
        target.close()

import uvloop
uvloop.run(main())
