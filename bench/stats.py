"""What one benchmark measurement produced, and the probes that measure it.

A `Result` is the unit every workload returns and every report reads: how many
operations, how fast, the latency distribution, errors by Kafka error name, and
what the server and the load generator spent (CPU and RSS sampled from /proc),
with the exact command and versions so a reader can reproduce the number.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import sys
import time
from array import array
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# How many points of the sorted latency distribution a result keeps for CDF charts.
CDF_POINTS = 200


class LatencyRecorder:
    """Latencies in nanoseconds, appended on the hot path and summarised once."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        self.samples = array("q")

    def add(self, nanoseconds: int) -> None:
        self.samples.append(nanoseconds)

    def extend(self, other: "LatencyRecorder") -> None:
        self.samples.extend(other.samples)

    def __len__(self) -> int:
        return len(self.samples)

    def summary(self) -> dict:
        """Percentiles in milliseconds plus a down-sampled CDF (quantile → ms)."""
        data = sorted(self.samples)
        n = len(data)
        if n == 0:
            return {"count": 0, "p50": None, "p90": None, "p99": None, "p999": None, "max": None,
                    "mean": None, "cdf": []}

        def pct(q: float) -> float:
            return data[min(n - 1, int(q * n))] / 1e6

        step = max(1, n // CDF_POINTS)
        cdf = [[round(i / n, 5), data[i] / 1e6] for i in range(0, n, step)]
        cdf.append([1.0, data[-1] / 1e6])
        return {"count": n, "p50": pct(0.50), "p90": pct(0.90), "p99": pct(0.99), "p999": pct(0.999),
                "max": data[-1] / 1e6, "mean": sum(data) / n / 1e6, "cdf": cdf}


@dataclass(slots=True)
class ProcessUsage:
    cpu_seconds: float | None = None
    cpu_percent: float | None = None  # of one core, averaged over the measurement
    rss_peak_bytes: int | None = None
    rss_mean_bytes: int | None = None
    rss_end_bytes: int | None = None


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()


def _descendants(pid: int) -> list[int]:
    """Every live process under `pid` (a server's fsync helpers, `--workers` processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def read_cpu_seconds(pid: int) -> float:
    """utime + stime of a process and every live process under it (all their threads), from /proc.

    A server is its process tree: helpers and workers do part of its work.
    """
    fields = _stat_fields(pid)
    total = int(fields[11]) + int(fields[12])
    for child in _descendants(pid):
        try:
            f = _stat_fields(child)
        except OSError:
            continue
        total += int(f[11]) + int(f[12])
    return total / _CLOCK_TICKS


def read_rss_bytes(pid: int) -> int:
    """Resident set size from /proc/<pid>/statm (pages × page size): the main process only (helpers
    share most of their pages with nothing the server needs, and summing trees would count shared
    libraries N times)."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE_SIZE


def _cpu_of(pids: int | tuple[int, ...]) -> float:
    return sum(read_cpu_seconds(p) for p in pids) if isinstance(pids, tuple) else read_cpu_seconds(pids)


def _rss_of(pids: int | tuple[int, ...]) -> int:
    return sum(read_rss_bytes(p) for p in pids) if isinstance(pids, tuple) else read_rss_bytes(pids)


class ProcessSampler:
    """Samples a server's CPU and RSS while a measurement runs.

    Runs as an asyncio task in the load generator's loop; 4 reads a second
    cost nothing next to the load. A vanished process ends sampling quietly:
    the workload reports the failure, not the sampler.
    """

    def __init__(self, pid: int | list[int] | None, interval_s: float = 0.25) -> None:
        # several pids (a cluster: etcd members and nodes) are summed: CPU and RSS of them all
        self.pid = pid if not isinstance(pid, list) else (tuple(pid) or None)
        self.interval_s = interval_s
        self._rss: list[int] = []
        self._cpu_start = 0.0
        self._cpu_end = 0.0
        self._t_start = 0.0
        self._t_end = 0.0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._t_start = time.perf_counter()
        if self.pid is None:
            return
        try:
            self._cpu_start = _cpu_of(self.pid)
            self._rss.append(_rss_of(self.pid))
        except OSError:
            self.pid = None
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self._rss.append(_rss_of(self.pid))
            except OSError:
                return

    async def stop(self) -> ProcessUsage:
        self._t_end = time.perf_counter()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self.pid is None:
            return ProcessUsage()
        try:
            self._cpu_end = _cpu_of(self.pid)
            self._rss.append(_rss_of(self.pid))
        except OSError:
            return ProcessUsage()
        wall = max(self._t_end - self._t_start, 1e-9)
        cpu = self._cpu_end - self._cpu_start
        return ProcessUsage(cpu_seconds=round(cpu, 3), cpu_percent=round(100 * cpu / wall, 1),
                            rss_peak_bytes=max(self._rss), rss_mean_bytes=int(sum(self._rss) / len(self._rss)),
                            rss_end_bytes=self._rss[-1])


@contextlib.contextmanager
def generator_gc_paused():
    """No cyclic GC in the load generator while it measures.

    With thousands of connections (each a transport, a reader, futures) a
    full collection stops the generator's event loop for hundreds of
    milliseconds, which shows up as server latency. Objects that exist before
    the measurement are frozen out of collection, and collection is off until
    the measurement ends; the runs are bounded, so garbage stays bounded.
    """
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()


class LoopLagProbe:
    """How late the generator's own event loop wakes up (10 ms ticks).

    Latency a workload records includes this lag; reporting it lets a reader
    tell server latency from a busy generator.
    """

    TICK_S = 0.01

    def __init__(self) -> None:
        self.lags = LatencyRecorder()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            before = time.perf_counter_ns()
            await asyncio.sleep(self.TICK_S)
            self.lags.add(max(0, time.perf_counter_ns() - before - int(self.TICK_S * 1e9)))

    async def stop(self) -> dict:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        summary = self.lags.summary()
        return {k: summary[k] for k in ("p50", "p99", "max")}


class GeneratorClock:
    """The load generator's own CPU use, so a reader can tell whether it was the bottleneck."""

    def __init__(self) -> None:
        self._cpu = time.process_time()
        self._wall = time.perf_counter()

    def usage(self) -> ProcessUsage:
        cpu = time.process_time() - self._cpu
        wall = max(time.perf_counter() - self._wall, 1e-9)
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return ProcessUsage(cpu_seconds=round(cpu, 3), cpu_percent=round(100 * cpu / wall, 1),
                            rss_peak_bytes=peak_kib * 1024)


@dataclass(slots=True)
class Result:
    """One workload variant measured against one target."""

    workload: str
    variant: str
    target: str                      # "cohort", "tansu", "zookeeper" or host:port
    params: dict = field(default_factory=dict)
    operations: int = 0
    duration_s: float = 0.0
    throughput_per_s: float = 0.0
    latency_ms: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)       # error name → count
    server: dict = field(default_factory=dict)       # ProcessUsage as a dict
    generator: dict = field(default_factory=dict)    # ProcessUsage as a dict
    extra: dict = field(default_factory=dict)        # workload-specific numbers
    target_info: dict = field(default_factory=dict)  # address, version, command
    command: str = ""
    versions: dict = field(default_factory=dict)
    started_at: str = ""

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def count_errors(counter: Counter) -> dict:
    return {name: n for name, n in sorted(counter.items()) if n}


def invocation() -> str:
    """The command line that started this process, for reproduction."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(os.path.join("bench", "__main__.py")):
        argv[0:1] = ["-m", "bench"]
    elif argv and argv[0].endswith(os.path.join("bench", "report.py")):
        argv[0:1] = ["-m", "bench.report"]
    return " ".join(["python", *argv])
