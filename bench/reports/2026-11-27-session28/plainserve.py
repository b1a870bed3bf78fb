"""plainserve.py main|base PORT [--heap] [--metrics] [--stub] [--time-handler] [--gcstats] [--gcsites] [--nogc] [--calls]: the node alone on a real port (no Daemon, no logging set-up); --calls counts Python and C calls per request (sys.setprofile), printed on SIGTERM."""
import asyncio, sys, tempfile, os
which, port = sys.argv[1], int(sys.argv[2])
from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.metrics import CoordinatorMetrics
if which == "main":
    from cohort.coordinator.node import CoordinatorServer
else:
    from cohort.coordinator.server import CoordinatorServer

async def main():
    d = tempfile.mkdtemp()
    cfg = CoordinatorConfig(data_dir=d, listeners=f"127.0.0.1:{port}")
    server = CoordinatorServer(cfg, metrics=CoordinatorMetrics() if "--metrics" in sys.argv else None)
    await server.start()
    if "--stub" in sys.argv:
        from cohort.protocol.messages import OffsetFetchResponse as R
        resp = R(throttle_time_ms=0, topics=[R.OffsetFetchResponseTopic(name="bench-topic", partitions=[
            R.OffsetFetchResponseTopic.OffsetFetchResponsePartition(partition_index=0, committed_offset=1000,
            committed_leader_epoch=-1, metadata="", error_code=0)])], error_code=0)
        route = server.handlers.routes[9]
        server.handlers.routes[9] = type(route)(lambda req, version, ctx: resp, False)
    if "--nogc" in sys.argv:
        import gc, signal, collections
        gc.collect()
        base_types = collections.Counter(type(o).__name__ for o in gc.get_objects())
        gc.disable()
        def report_objs(*_):
            print("gen0 count", gc.get_count(), flush=True)
            now = collections.Counter(type(o).__name__ for o in gc.get_objects())
            print("grown:", (now - base_types).most_common(12), flush=True)
            gc.collect()
            now = collections.Counter(type(o).__name__ for o in gc.get_objects())
            print("grown after collect:", (now - base_types).most_common(12), flush=True)
            os._exit(0)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, report_objs)
    if "--heap" in sys.argv:
        import gc
        if which == "main":
            from cohort.coordinator.heap import HeapKeeper
            HeapKeeper().start()
            if os.environ.get("GEN0"):
                import gc
                gc.set_threshold(int(os.environ["GEN0"]), 10, 10)
        else:
            from cohort.coordinator.daemon import GC_THRESHOLDS
            gc.collect(); gc.freeze(); gc.set_threshold(*GC_THRESHOLDS)
    if "--time-handler" in sys.argv:
        import time, signal
        route = server.handlers.routes[9]
        acc = [0.0, 0]
        h = route[0]
        pc = time.perf_counter
        def timed(req, version, ctx):
            t0 = pc()
            r = h(req, version, ctx)
            acc[0] += pc() - t0
            acc[1] += 1
            return r
        async def timed_async(req, version, ctx):
            t0 = pc()
            r = await h(req, version, ctx)
            acc[0] += pc() - t0
            acc[1] += 1
            return r
        server.handlers.routes[9] = type(route)(timed_async if route[1] else timed, route[1])
        def report(*_):
            print(f"handler {acc[0] / max(acc[1], 1) * 1e6:.3f} us/call over {acc[1]}", flush=True)
            os._exit(0)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, report)
    if "--gcsites" in sys.argv:
        import gc, signal, collections
        sites = collections.Counter()
        def cbs(phase, info):
            if phase == "start" and info["generation"] == 0:
                f = sys._getframe(1)
                names = []
                while f is not None and len(names) < 6:
                    names.append(f.f_code.co_name)
                    f = f.f_back
                sites["<".join(names)] += 1
        gc.callbacks.insert(0, cbs)
        def report_sites(*_):
            for k, v in sites.most_common(15):
                print(v, k, flush=True)
            os._exit(0)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, report_sites)
    if "--gcstats" in sys.argv:
        import gc, time, signal
        pc = time.perf_counter
        st = {"t0": 0.0, "n": [0, 0, 0], "t": [0.0, 0.0, 0.0], "c": [0, 0, 0]}
        def cb(phase, info):
            if phase == "start":
                st["t0"] = pc()
            else:
                g = info["generation"]
                st["n"][g] += 1
                st["t"][g] += pc() - st["t0"]
                st["c"][g] += info["collected"]
        gc.callbacks.insert(0, cb)
        def report(*_):
            print("gc collections", st["n"], "ms", [round(x * 1000, 1) for x in st["t"]], "collected", st["c"], flush=True)
            os._exit(0)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, report)
    if "--calls" in sys.argv:
        # Python calls per request (sys.setprofile counts every call; slow, but exact): printed on SIGTERM.
        import signal, collections
        calls = collections.Counter()
        def prof(frame, event, arg):
            if event == "call":
                c = frame.f_code
                calls[f"{c.co_name} ({c.co_filename.rsplit('/', 1)[-1]})"] += 1
            elif event == "c_call":
                calls[f"[c] {getattr(arg, '__qualname__', arg)}"] += 1
        sys.setprofile(prof)
        def report_calls(*_):
            sys.setprofile(None)
            n = max(v for k, v in calls.items() if k.startswith("decode_request ("))
            print(f"requests {n}; Python calls per request {sum(v for k, v in calls.items() if not k.startswith('[c]')) / n:.1f}, C calls {sum(v for k, v in calls.items() if k.startswith('[c]')) / n:.1f}", flush=True)
            for k, v in calls.most_common(400):
                print(f"{v / n:7.3f} {k}", flush=True)
            os._exit(0)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, report_calls)
    await asyncio.Event().wait()
import uvloop
uvloop.install()
asyncio.run(main())
