"""Where a server's CPU goes, by thread: `/proc/PID/task/*/stat` before and after a load, grouped by
thread name (digits folded, so Kafka's eight request handlers are one line).

    python -m bench.thread_cpu --target kafka-flush --workload commit --variants simple-1p

starts the target, runs the workload once (as `bench run` would) and prints each thread group's share of
the server's CPU and its CPU per operation. For the JVM this is the profile that needs no agent: Kafka
names its threads after their job (request handlers, network threads, the group coordinator's event
processors, the log cleaner and flusher …). The same works for Cohort (one asyncio thread, its fsync
thread) and any other server the suite starts.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

from bench.stats import _descendants
from bench.targets import set_priority, start_target
from bench.wire import install_uvloop
from bench.workloads import WORKLOADS, Profile, workload_function

_TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of each live thread of `pid` and of its child processes (Cohort's fsync
    helper, `--workers`), keyed by thread name with digits folded (Linux keeps 15 characters of a name)."""
    out: dict[str, float] = defaultdict(float)
    for process in (pid, *_descendants(pid)):
        try:
            tasks = list(Path(f"/proc/{process}/task").iterdir())
        except OSError:
            continue  # the process ended
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue  # the thread ended
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            label = re.sub(r"\d+", "N", name) + ("" if process == pid else " (child process)")
            out[label] += (int(fields[11]) + int(fields[12])) / _TICKS
    return dict(out)


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after if after[name] - before.get(name, 0.0) > 0}


def table(spent: dict[str, float], operations: int) -> str:
    total = sum(spent.values()) or 1.0
    lines = [f"{'thread':60} {'CPU s':>8} {'share':>6} {'µs/op':>8}"]
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        lines.append(f"{name[:60]:60} {seconds:8.2f} {seconds / total:6.1%} {seconds / max(operations, 1) * 1e6:8.1f}")
    lines.append(f"{'all threads':60} {total:8.2f} {1:6.0%} {total / max(operations, 1) * 1e6:8.1f}")
    return "\n".join(lines)


async def _measure(spec: str, workload: str, profile: Profile) -> tuple[dict[str, float], int]:
    target = await asyncio.to_thread(start_target, spec)
    try:
        before = thread_cpu(target.pid)
        results = await workload_function(workload)(target, profile)
        after = thread_cpu(target.pid)
    finally:
        await asyncio.to_thread(target.close)
    return delta(before, after), sum(r.operations for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.thread_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="kafka")
    parser.add_argument("--workload", default="commit", choices=WORKLOADS)
    parser.add_argument("--variants", default="simple-1p")
    parser.add_argument("--nice", type=int)
    parser.add_argument("--set", action="append", metavar="NAME=VALUE", default=[],
                        help="a profile setting, e.g. --set duration_s=20 (numbers only)")
    args = parser.parse_args(argv)
    if args.nice is not None:
        set_priority(args.nice)
    overrides = {"variants": tuple(v for v in args.variants.split(",") if v)}
    for item in args.set:
        name, _, text = item.partition("=")
        overrides[name] = float(text) if "." in text else int(text)
    install_uvloop()
    spent, operations = asyncio.run(_measure(args.target, args.workload, Profile().with_overrides(**overrides)))
    print(f"{args.target}, {args.workload} {args.variants}: {operations:,} operations")
    print(table(spent, operations))
    return 0


if __name__ == "__main__":
    sys.exit(main())
