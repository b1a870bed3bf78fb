"""Does the web console's group list stall Kafka clients? (security issue, item 4)

    python -m bench.console_load [--groups 3300] [--list-clients 2] [--rounds 3] [--window 10]
                                 [--baseline-source DIR]

One `cohort serve` with the console, `--groups` groups (one committed offset each). A separate process
is one group member that heartbeats every 20 ms on its own connection and records each heartbeat's
latency. Each round has two windows, in alternating order: **quiet** (nobody asks the console) and
**listing** (`--list-clients` HTTP clients each GET `/api/groups` in a loop, as fast as answers come,
the way a few open tabs with a short refresh would). The HTTP clients run in a process of their own at
a lower CPU priority (nice 10): in use they are browsers on other machines, and on a small machine their
own CPU would otherwise be counted against the server. Reported: per window the heartbeat p50/p99/max,
the list requests answered, and the median over rounds of each window's p99.

`--baseline-source DIR` runs the same rounds against a second server started from the Python sources
in DIR (a checkout of an older revision, e.g. `git archive <rev> | tar -x -C DIR/cohort`), in the same
run, so both are measured on the same machine load.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.targets import CohortServer, free_port  # noqa: E402
from bench.wire import KafkaSession  # noqa: E402
from bench.workloads.offsets import simple_commit  # noqa: E402

PROBE = r"""
import asyncio, sys, time
sys.path.insert(0, sys.argv[4])
from bench.members import BenchMember, ProtocolVersions
from bench.wire import KafkaSession

async def main(host, port, out):
    probe = await KafkaSession.open(host, port)
    versions = ProtocolVersions.negotiate(probe)
    await probe.close()
    member = await BenchMember.open(host, port, "heartbeat-probe", versions, session_timeout_ms=30000)
    await member.join_and_sync(time.monotonic() + 60)
    with open(out, "w") as f:
        while True:
            t0 = time.time()
            code = await member.heartbeat()
            t1 = time.time()
            f.write(f"{t0:.6f} {(t1 - t0) * 1000:.3f} {code}\n"); f.flush()
            await asyncio.sleep(max(0.0, 0.02 - (time.time() - t0)))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def make_groups(host: str, port: int, count: int) -> None:
    session = await KafkaSession.open(host, port)
    version = session.pick_version(8, 2)
    for first in range(0, count, 200):
        await asyncio.gather(*(session.request(simple_commit(f"team-{i:05d}", 2, 1000 + i), version)
                               for i in range(first, min(count, first + 200))))
    await session.close()


LISTERS = r"""
import sys, threading, time, urllib.request
url, clients, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
stop = threading.Event(); answered = []
def loop():
    while not stop.is_set():
        with urllib.request.urlopen(url, timeout=120) as response:
            response.read()
        answered.append(1)
threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
for t in threads: t.start()
time.sleep(seconds); stop.set()
for t in threads: t.join(150)
print(len(answered))
"""


def window(url: str, list_clients: int, seconds: float) -> tuple[float, float, int]:
    start = time.time()
    if not list_clients:
        time.sleep(seconds)
        return start, time.time(), 0
    listers = subprocess.run([sys.executable, "-c", LISTERS, url, str(list_clients), str(seconds)],
                             preexec_fn=lambda: os.nice(10), capture_output=True, text=True, timeout=seconds + 200,
                             check=True)
    return start, start + seconds, int(listers.stdout)


def run_server(name: str, env: dict | None, args) -> list[dict]:
    console = free_port()
    settings = {"console.listen": f"127.0.0.1:{console}", "group.min.session.timeout.ms": 1000}
    executable = None if env is None else [sys.executable, "-m", "cohort.coordinator.cli.main"]
    saved = dict(os.environ)
    if env is not None:
        os.environ.update(env)
    try:
        server = CohortServer(settings=settings, executable=executable)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    rows = []
    with server:
        asyncio.run(make_groups(server.host, server.port, args.groups))
        out = Path(tempfile.mkstemp(prefix="heartbeats-")[1])
        probe = subprocess.Popen([sys.executable, "-c", PROBE, server.host, str(server.port), str(out),
                                  str(Path(__file__).resolve().parent.parent)])
        try:
            deadline = time.monotonic() + 60
            while not out.read_text().strip():
                assert time.monotonic() < deadline, "the heartbeat probe never joined"
                time.sleep(0.2)
            url = f"http://127.0.0.1:{console}/api/groups"
            urllib.request.urlopen(url, timeout=120).read()  # the console's client is connected
            time.sleep(1.0)
            for r in range(args.rounds):
                order = [("quiet", 0), ("listing", args.list_clients)]
                for label, clients in (order if r % 2 == 0 else order[::-1]):
                    start, end, answered = window(url, clients, args.window)
                    time.sleep(1.0)
                    lines = [line.split() for line in out.read_text().splitlines() if line]
                    latencies = [float(ms) for t, ms, _ in lines if start <= float(t) < end]
                    errors = sum(1 for t, _, code in lines if start <= float(t) < end and code != "0")
                    row = {"server": name, "round": r, "window": label, "list_clients": clients,
                           "list_answers": answered, "heartbeats": len(latencies), "errors": errors,
                           "p50_ms": round(percentile(latencies, 0.5), 2), "p99_ms": round(percentile(latencies, 0.99), 2),
                           "max_ms": round(max(latencies), 2)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            probe.terminate()
            probe.wait(10)
            out.unlink()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=3300)
    parser.add_argument("--list-clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--baseline-source", type=Path, help="a directory holding an older `cohort` package")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = run_server("this", None, args)
    if args.baseline_source:
        rows += run_server("baseline", {"PYTHONPATH": str(args.baseline_source)}, args)
    summary = {}
    for server in sorted({r["server"] for r in rows}):
        for label in ("quiet", "listing"):
            mine = [r for r in rows if r["server"] == server and r["window"] == label]
            summary[f"{server} {label}"] = {"median_p99_ms": statistics.median(r["p99_ms"] for r in mine),
                                            "p99s_ms": [r["p99_ms"] for r in mine],
                                            "list_answers": [r["list_answers"] for r in mine]}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
