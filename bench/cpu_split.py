"""A request's server CPU by mode and process: user and kernel CPU per operation, syscalls per operation,
operations per fsync (docs/compiled-path.md, "What bounds a request's CPU").

    python -m bench.cpu_split --workload commit --variants simple-1p [--target cohort|cohort-never|canned|tansu]
    python -m bench.cpu_split --workload fetch --variants fetch-1p --set warmup_s=0 --strace strace.txt

Runs one closed-loop workload of `python -m bench` and, over the window of the bench's own server-CPU
figure, reads from /proc for each process of the target (the server, its fsync helpers): utime and
stime, time on a CPU and time runnable but waiting for one (`schedstat`), the read- and write-class
syscalls the kernel counted (`io`: read/write/pwrite on files and sockets, not send/recv; no tracing,
so no slowdown) and context switches; for a Cohort target also its journal fsyncs (from its metrics).
With `--strace`, `strace -f -c` is attached to every process of the target for that window, for the
counts by syscall name. strace slows the server, which makes its batches larger: read its counts
next to the /proc ones, and never its times. Per-operation figures divide by the operations in the
window at the measured throughput, as the bench's CPU per operation does.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import bench.cli as cli
import bench.closed_loop as closed_loop
from bench.cli import _profile, run_workload
from bench.stats import _CLOCK_TICKS, ProcessSampler, _descendants, _stat_fields
from bench.wire import install_uvloop

COUNTERS = ("utime_s", "stime_s", "oncpu_s", "runqueue_s", "syscr", "syscw", "voluntary_switches",
            "involuntary_switches")
_FSYNC_METRICS = ("cohort_log_flush_batch_records_count", "cohort_log_flush_batch_records_sum",
                  "cohort_log_fsync_duration_seconds_sum")


def process_counters(pid: int) -> dict:
    """The `COUNTERS` of one process, all its threads together."""
    stat = _stat_fields(pid)
    counters = dict.fromkeys(COUNTERS, 0)
    counters["utime_s"] = int(stat[11]) / _CLOCK_TICKS
    counters["stime_s"] = int(stat[12]) / _CLOCK_TICKS
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("syscr", "syscw"):
            counters[name] = int(value)
    for task in Path(f"/proc/{pid}/task").iterdir():  # (schedstat and status are per thread)
        try:
            oncpu, waiting, _ = (task / "schedstat").read_text().split()
            counters["oncpu_s"] += int(oncpu) / 1e9
            counters["runqueue_s"] += int(waiting) / 1e9
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    counters["voluntary_switches"] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    counters["involuntary_switches"] += int(line.split()[1])
        except OSError:
            continue
    return counters


def fsync_metrics(target) -> dict:
    """A Cohort target's journal fsyncs so far and the records they made durable ({} for other targets)."""
    address = (getattr(target, "settings", None) or {}).get("metrics")
    if not address:
        return {}
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    found = {}
    for line in text.splitlines():
        name = line.split(" ", 1)[0].split("{", 1)[0]
        if name in _FSYNC_METRICS:
            found[name] = float(line.rsplit(" ", 1)[1])
    return found


class SplitSampler(ProcessSampler):
    """The bench's sampler, also keeping every process's counters at start and stop (and running strace)."""

    last: "SplitSampler | None" = None
    target = None
    strace_to: Path | None = None

    def start(self) -> None:
        SplitSampler.last = self
        root = self.pid if isinstance(self.pid, int) else self.pid[0]
        self.pids = [root, *_descendants(root)]
        self.strace = None
        if self.strace_to is not None:
            command = ["strace", "-f", "-c", "-o", str(self.strace_to)]
            for pid in self.pids:
                command += ["-p", str(pid)]
            self.strace = subprocess.Popen(command, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # attached before the load starts
        self.before = {pid: process_counters(pid) for pid in self.pids}
        self.fsyncs_before = fsync_metrics(self.target)
        super().start()

    async def stop(self):
        self.after = {}
        for pid in self.pids:
            try:
                self.after[pid] = process_counters(pid)
            except OSError:
                continue
        self.fsyncs_after = fsync_metrics(self.target)
        usage = await super().stop()
        if self.strace is not None:
            self.strace.send_signal(signal.SIGINT)
            await asyncio.to_thread(self.strace.wait, 30)
        return usage


def split(sampler: SplitSampler, operations: float) -> dict:
    """Per-operation counters of each process (the first is the server, the others its helpers) and in all."""
    rows = {}
    total = dict.fromkeys(COUNTERS, 0.0)
    for i, pid in enumerate(p for p in sampler.pids if p in sampler.after):
        row = {k: (sampler.after[pid][k] - sampler.before[pid][k]) / operations for k in COUNTERS}
        rows[f"{'server' if i == 0 else 'helper'} {pid}"] = row
        for k in COUNTERS:
            total[k] += row[k]
    rows["all"] = total
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_split", description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cohort", help="as `python -m bench run --target`")
    parser.add_argument("--workload", default="commit")
    parser.add_argument("--variants", default="", help="one variant, e.g. simple-1p, fetch-1p, max-rate")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE", help="a profile setting, as in the bench")
    parser.add_argument("--strace", type=Path, help="also count syscalls by name (strace -f -c) into this file")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    args.quick = False
    profile = _profile(args)
    SplitSampler.strace_to = args.strace
    closed_loop.ProcessSampler = SplitSampler
    start_target = cli.start_target

    def keep_target(*a, **k):
        SplitSampler.target = start_target(*a, **k)
        return SplitSampler.target

    cli.start_target = keep_target
    install_uvloop()
    results = asyncio.run(run_workload(args.target, args.workload, profile))
    sampler = SplitSampler.last
    if not results or sampler is None:
        print("the workload produced no closed-loop result", file=sys.stderr)
        return 1
    result = results[-1]
    operations = result.throughput_per_s * (sampler._t_end - sampler._t_start)
    rows = split(sampler, operations)
    report = {"workload": result.workload, "variant": result.variant, "target": result.target,
              "throughput_per_s": result.throughput_per_s, "operations_in_window": round(operations),
              "per_operation": rows}
    print(f"{result.workload} {result.variant} → {result.target}: {result.throughput_per_s:.0f}/s")
    print(f"{'process':14} {'user µs':>8} {'kernel µs':>10} {'on-CPU µs':>10} {'run-queue µs':>13} "
          f"{'syscr':>7} {'syscw':>7} {'vcsw':>7} {'ivcsw':>7}   (per operation)")
    for name, row in rows.items():
        print(f"{name:14} {row['utime_s'] * 1e6:8.2f} {row['stime_s'] * 1e6:10.2f} {row['oncpu_s'] * 1e6:10.2f} "
              f"{row['runqueue_s'] * 1e6:13.2f} {row['syscr']:7.3f} {row['syscw']:7.3f} "
              f"{row['voluntary_switches']:7.3f} {row['involuntary_switches']:7.3f}")
    fsyncs = {k: sampler.fsyncs_after[k] - sampler.fsyncs_before.get(k, 0) for k in sampler.fsyncs_after}
    count = fsyncs.get("cohort_log_flush_batch_records_count")
    if count:
        report["records_per_fsync"] = fsyncs["cohort_log_flush_batch_records_sum"] / count
        report["fsync_ms_mean"] = fsyncs["cohort_log_fsync_duration_seconds_sum"] / count * 1e3
        print(f"journal fsyncs: {count:.0f}, {report['records_per_fsync']:.1f} records each, "
              f"{report['fsync_ms_mean']:.2f} ms each (as the helper timed its fdatasync)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
