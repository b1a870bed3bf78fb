"""What GroupOverview's first page costs the Kafka loop: Metadata round trips while a client asks for it ~31
times a second, on a node with many groups.

    python -m bench.overview_load [--groups 100000] [--rate 31] [--rounds 3] [--duration 8]
                                  [--baseline-cohort /work/base/.venv/bin/cohort]

One `cohort serve` per build (this checkout's, and with `--baseline-cohort` another installation's),
PLAINTEXT, no authorizer; `--groups` groups each commit one offset (OffsetCommit v2, pipelined) before the
measurement. Each round measures each build quiet (a Metadata every 5 ms, one at a time) and under load (the
same probe while another connection sends GroupOverview first pages, `limit` 500, at `--rate` a second, open
loop). Builds and modes rotate from round to round; the report gives the medians over the rounds of the
probe's p50/p99/max and of the pages' own round trips.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from cohort.protocol.messages import GroupOverviewRequest, MetadataRequest

from bench.stats import LatencyRecorder
from bench.targets import CohortServer, Target, cohort_executable, wait_until_serving
from bench.wire import KafkaSession
from bench.workloads.offsets import COMMIT_VERSION, simple_commit

PROBE_INTERVAL_S = 0.005
MODES = ("quiet", "overview")


async def make_groups(port: int, count: int) -> None:
    sessions = [await KafkaSession.open("127.0.0.1", port) for _ in range(4)]
    in_flight = 256

    async def commit(i: int) -> None:
        await sessions[i % 4].request(simple_commit(f"bench-overview-{i:07d}", 1, 1), COMMIT_VERSION, timeout=120)
    for start in range(0, count, in_flight):
        await asyncio.gather(*(commit(i) for i in range(start, min(count, start + in_flight))))
    for session in sessions:
        await session.close()


async def probe(session: KafkaSession, duration_s: float) -> dict:
    recorder = LatencyRecorder()
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        began = time.perf_counter_ns()
        await session.request(MetadataRequest(topics=[]), 1, timeout=60)
        recorder.add(time.perf_counter_ns() - began)
        await asyncio.sleep(PROBE_INTERVAL_S)
    summary = recorder.summary()
    return {k: round(summary[k], 2) for k in ("p50", "p99", "max")}


async def overview_load(session: KafkaSession, rate: float, duration_s: float) -> dict:
    """First pages at `rate` a second (open loop) for `duration_s`; their round trips."""
    recorder = LatencyRecorder()
    refused = 0

    async def one() -> None:
        nonlocal refused
        began = time.perf_counter_ns()
        try:
            answer = await session.request(GroupOverviewRequest(after="", limit=500, search=None), 0, timeout=60)
        except TimeoutError:  # (a node that cannot keep up: counted as a minute)
            recorder.add(60_000_000_000)
            return
        recorder.add(time.perf_counter_ns() - began)
        refused += answer.error_code != 0
    tasks = []
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < duration_s:
        tasks.append(asyncio.ensure_future(one()))
        n += 1
        await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
    await asyncio.gather(*tasks)
    summary = recorder.summary()
    return {"page_p50": round(summary["p50"], 2), "page_p99": round(summary["p99"], 2), "pages": n,
            "refused": refused}


async def measure(args) -> dict:
    builds = {"this": cohort_executable()}
    if args.baseline_cohort:
        builds["baseline"] = [args.baseline_cohort]
    servers, probes, pages = {}, {}, {}
    rounds = {name: {mode: [] for mode in MODES} for name in builds}
    try:
        for name, executable in builds.items():
            servers[name] = server = CohortServer(executable=executable)
            await wait_until_serving(Target(name, "127.0.0.1", server.port, pid=server.pid))
            began = time.monotonic()
            await make_groups(server.port, args.groups)
            print(f"{name}: {args.groups} groups in {time.monotonic() - began:.0f} s", file=sys.stderr)
            probes[name] = await KafkaSession.open("127.0.0.1", server.port)
            pages[name] = await KafkaSession.open("127.0.0.1", server.port, negotiate=False)
        names = list(builds)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                    if mode == "quiet":
                        entry = await probe(probes[name], args.duration)
                    else:
                        measured, load = await asyncio.gather(probe(probes[name], args.duration),
                                                              overview_load(pages[name], args.rate, args.duration))
                        entry = {**measured, **load}
                    rounds[name][mode].append(entry)
                    print(f"round {r + 1} {name:9s} {mode:9s} {entry}", file=sys.stderr)
    finally:
        for server in servers.values():
            server.close()
    medians = {name: {mode: {key: statistics.median(e[key] for e in entries) for key in entries[0]}
                      for mode, entries in by_mode.items()} for name, by_mode in rounds.items()}
    return {"groups": args.groups, "rate": args.rate, "rounds": rounds, "medians": medians}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=31.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--baseline-cohort", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args))
    print(json.dumps(result["medians"], indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
