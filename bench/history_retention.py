"""Commit throughput and disk growth with the offset history on and off, in the same run.

    python -m bench.history_retention [--rounds 3] [--duration 10] [--out DIR]

Each round starts a fresh ``cohort serve`` per setting (``offsets.history.retention.ms`` 86400000, the
default, and 0), alternating which goes first, drives the same closed-loop load of simple one-partition
commits over 64 groups (the `commit` workload's simple-1p), then lets the cleaner run and measures the
data dir: with the history on, compaction keeps every commit of the window (plus one source record per
commit request); off, it keeps the latest per key. Writes ``report.md`` and ``results.json`` to --out.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from cohort.protocol.messages import OffsetCommitRequest

from bench.cli import machine
from bench.closed_loop import run_closed_loop
from bench.targets import REPO, CohortServer, wait_until_serving
from bench.wire import KafkaSession, RequestTemplate
from bench.workloads.offsets import COMMIT_VERSION, group_name, simple_commit

SETTINGS = {"on (24 h)": 86_400_000, "off (0)": 0}
SEGMENT_BYTES = 1024 * 1024  # small enough that the run rolls and compacts segments
GROUPS, CONNECTIONS, DEPTH = 64, 4, 8


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.suffix == ".log")


async def one_run(retention_ms: int, duration_s: float) -> dict:
    server = CohortServer(settings={"offsets.history.retention.ms": retention_ms,
                                    "offsets.topic.segment.bytes": SEGMENT_BYTES, "log.cleaner.backoff.ms": 500})
    try:
        await wait_until_serving(server)
        session = await KafkaSession.open(server.host, server.port)
        try:
            version = session.pick_version(OffsetCommitRequest.API_KEY, COMMIT_VERSION)
            tag = f"h{int(time.time() * 1000) % 10**8}"
            templates = [RequestTemplate(simple_commit(group_name(tag, g), 1), version) for g in range(GROUPS)]
            outcome = await run_closed_loop(server, templates, connections=CONNECTIONS, depth=DEPTH,
                                            duration_s=duration_s, max_ops=10_000_000, warmup_s=1.0)
        finally:
            await session.close()
        before = dir_bytes(server.data_dir)
        await asyncio.sleep(3.0)  # the cleaner (every 0.5 s) compacts the rolled segments
        after = dir_bytes(server.data_dir)
        commits = outcome.operations
        return {"retention_ms": retention_ms, "commits_per_s": round(outcome.throughput, 1),
                "p99_ms": outcome.latencies.summary()["p99"], "commits": commits, "segment_bytes_after_load": before,
                "segment_bytes_after_compaction": after, "bytes_per_commit": round(after / max(commits, 1), 1),
                "errors": outcome.errors}
    finally:
        server.close()


async def main(rounds: int, duration_s: float, out: Path) -> None:
    results = []
    for r in range(rounds):
        order = list(SETTINGS.items()) if r % 2 == 0 else list(reversed(SETTINGS.items()))
        for name, retention in order:
            result = await one_run(retention, duration_s)
            result.update(round=r + 1, setting=name)
            results.append(result)
            print(json.dumps(result), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"machine": machine(), "results": results}, indent=2) + "\n")
    lines = ["| round | history | commits/s | p99 ms | commits | .log bytes after load | after compaction | bytes/commit |",
             "|---|---|---|---|---|---|---|---|"]
    for x in results:
        lines.append(f"| {x['round']} | {x['setting']} | {x['commits_per_s']:.0f} | {x['p99_ms']} | {x['commits']} | "
                     f"{x['segment_bytes_after_load']} | {x['segment_bytes_after_compaction']} | {x['bytes_per_commit']} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / f"history-{int(time.time())}")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.duration, args.out))
