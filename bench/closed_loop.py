"""Closed-loop throughput measurement: C connections × D requests in flight, bounded by count and time."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bench.stats import GeneratorClock, LatencyRecorder, ProcessSampler, ProcessUsage, generator_gc_paused
from bench.targets import Target
from bench.wire import LoadRun, PipelinedConnection, RequestTemplate, open_pipelined

# A stalled server must not hang the suite: after the deadline we wait this long for answers.
DRAIN_GRACE_S = 10.0


@dataclass(slots=True)
class ClosedLoopOutcome:
    operations: int
    duration_s: float
    latencies: LatencyRecorder
    errors: dict
    server: ProcessUsage
    generator: ProcessUsage

    @property
    def throughput(self) -> float:
        return self.operations / self.duration_s if self.duration_s > 0 else 0.0


async def run_closed_loop(target: Target, templates: list[RequestTemplate], *, connections: int, depth: int,
                          duration_s: float, max_ops: int, warmup_s: float = 0.0,
                          routes: dict[tuple[str, int], list[RequestTemplate]] | None = None) -> ClosedLoopOutcome:
    """Drive `templates` (one rotation shared by all connections) and measure.

    `routes` splits the templates by the broker that must receive them (a group's coordinator,
    when the target is several brokers: `cohort serve --workers N`); the connections are dealt
    round-robin over those brokers, each rotating its own broker's templates.

    Operations completing during the warm-up are not counted; throughput is
    measured operations over the time from the end of the warm-up to the last
    answer.
    """
    run = LoadRun(max_ops=max_ops, duration_s=duration_s, warmup_s=warmup_s)
    run.latencies = LatencyRecorder()
    routes = routes or {(target.host, target.port): templates}
    brokers = sorted(routes)
    for i in range(max(connections, len(brokers))):
        host, port = brokers[i % len(brokers)]
        own = routes[(host, port)]
        conn = await open_pipelined(host, port, lambda: PipelinedConnection(run, own, depth), target.security)
        run.connections.append(conn)
    sampler = ProcessSampler(target.sampled_pids)
    with generator_gc_paused():
        clock = GeneratorClock()
        run.begin()
        sampler.start()
        for conn in run.connections:
            conn.start()
        timeout = warmup_s + duration_s + DRAIN_GRACE_S
        try:
            await asyncio.wait_for(asyncio.shield(run.done), timeout)
        except asyncio.TimeoutError:
            stuck = sum(len(c.pending) for c in run.connections)
            run.errors["TIMEOUT"] += stuck
            run.measured_end = time.perf_counter()
        server = await sampler.stop()
        generator = clock.usage()
    for conn in run.connections:
        conn.transport.close()
    measured = max(run.measured_end - max(run.measure_from, run.started), 1e-9)
    return ClosedLoopOutcome(operations=run.completed, duration_s=measured, latencies=run.latencies,
                             errors=dict(run.errors), server=server, generator=generator)
