"""`heartbeat`: a fleet of members heartbeating at their interval, and heartbeats at maximum rate.

fleet      N members in M groups (e.g. 5 000 in 500), each on its own connection
           as a consumer is, heartbeating every `interval` with a random phase,
           for a fixed time. The number that matters is latency (p99) at that
           steady, realistic rate, not throughput. The first interval (every
           member's first heartbeat) is a warm-up and is not recorded: it
           overlaps the server finishing the fleet's formation (group writes,
           the generator's and the server's clean-up of the join storm), which
           is the join-storm workload's subject, not this one's.
max-rate   the same members' heartbeats, pre-encoded, closed loop on a few
           pipelined connections: how many heartbeats a second the server can
           take.
"""
from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

from cohort.protocol.errors import ErrorCode

from bench.closed_loop import run_closed_loop
from bench.members import BenchMember, ProtocolVersions, form_groups
from bench.stats import GeneratorClock, LatencyRecorder, ProcessSampler, Result, count_errors, generator_gc_paused, LoopLagProbe
from bench.targets import Target, wait_until_serving
from bench.wire import KafkaSession, RequestTemplate, code_name
from bench.workloads.offsets import _usage, outcome_result
from bench.workloads.profile import Profile

SESSION_TIMEOUT_MS = 10000
REBALANCE_TIMEOUT_MS = 10000


async def open_fleet(target: Target, versions: ProtocolVersions, members: int, groups: int, tag: str,
                     *, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                     rebalance_timeout_ms: int = REBALANCE_TIMEOUT_MS) -> list[BenchMember]:
    """`members` members spread evenly over `groups` groups, each with its own connection, settled."""
    fleet: list[BenchMember] = []
    for start in range(0, members, 500):  # open connections in waves, not 5 000 SYNs at once
        fleet += await asyncio.gather(*(BenchMember.open(
            target.host, target.port, f"bench-{tag}-{i % groups}", versions, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms) for i in range(start, min(members, start + 500))))
    await form_groups(fleet, timeout_s=120 + members / 50)
    return fleet


async def close_fleet(fleet: list[BenchMember]) -> None:
    await asyncio.gather(*(m.leave() for m in fleet), return_exceptions=True)
    await asyncio.gather(*(m.close() for m in fleet), return_exceptions=True)


async def run_heartbeat(target: Target, profile: Profile) -> list[Result]:
    await wait_until_serving(target)
    control = await KafkaSession.open(target.host, target.port)
    versions = ProtocolVersions.negotiate(control)
    await control.close()
    tag = f"h{int(time.time() * 1000) % 10**8}"
    started = time.perf_counter()
    fleet = await open_fleet(target, versions, profile.heartbeat_members, profile.heartbeat_groups, tag)
    formed_s = time.perf_counter() - started
    results = []
    try:
        if not profile.variants or "fleet" in profile.variants:
            results.append(await _fleet(target, profile, fleet, versions, formed_s))
        if not profile.variants or "max-rate" in profile.variants:
            templates = [RequestTemplate(m.heartbeat_request(), versions.heartbeat) for m in fleet]
            outcome = await run_closed_loop(target, templates, connections=profile.connections,
                                            depth=profile.depth, duration_s=profile.duration_s,
                                            max_ops=profile.max_ops, warmup_s=profile.warmup_s)
            results.append(outcome_result("heartbeat", "max-rate", target, outcome, {
                "api_version": versions.heartbeat, "members": len(fleet), "groups": profile.heartbeat_groups,
                "connections": profile.connections, "in_flight_per_connection": profile.depth,
                "duration_s": profile.duration_s}))
    finally:
        await close_fleet(fleet)
    return results


async def _fleet(target: Target, profile: Profile, fleet: list[BenchMember], versions: ProtocolVersions,
                 formed_s: float) -> Result:
    interval = profile.heartbeat_interval_s
    duration = profile.heartbeat_duration_s
    latencies = LatencyRecorder()
    errors: Counter = Counter()
    late = 0
    sampler = ProcessSampler(target.pid)
    warm_up_end = time.perf_counter() + interval
    t0 = warm_up_end
    end = t0 + duration

    async def beat(member: BenchMember) -> None:
        nonlocal late
        due = warm_up_end - interval + random.random() * interval
        while True:
            now = time.perf_counter()
            if due >= end:
                return
            if due > now:
                await asyncio.sleep(due - now)
            elif now - due > interval / 2 and due >= t0:
                late += 1  # the generator could not keep the schedule
            sent = time.perf_counter_ns()
            try:
                code = await member.heartbeat()
            except (ConnectionError, asyncio.TimeoutError) as exc:
                errors[type(exc).__name__] += 1
                return
            if due >= t0:
                latencies.add(time.perf_counter_ns() - sent)
            if code != ErrorCode.NONE:
                errors[code_name(code)] += 1
            due += interval

    lag = LoopLagProbe()
    with generator_gc_paused():
        tasks = [asyncio.ensure_future(beat(m)) for m in fleet]
        await asyncio.sleep(max(t0 - time.perf_counter(), 0))
        sampler.start()
        clock = GeneratorClock()
        lag.start()
        await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    loop_lag = await lag.stop()
    server = await sampler.stop()
    generator = clock.usage()
    return Result(workload="heartbeat", variant="fleet", target=target.name, params={
        "api_version": versions.heartbeat, "members": len(fleet), "groups": profile.heartbeat_groups,
        "connections": len(fleet), "interval_s": interval, "warm_up_s": interval, "duration_s": duration,
        "session_timeout_ms": SESSION_TIMEOUT_MS}, operations=len(latencies), duration_s=round(elapsed, 3),
        throughput_per_s=round(len(latencies) / elapsed, 1), latency_ms=latencies.summary(),
        errors=count_errors(errors), server=_usage(server), generator=_usage(generator),
        extra={"fleet_formed_s": round(formed_s, 3), "late_heartbeats": late,
                                   "generator_loop_lag_ms": loop_lag}, target_info=target.describe())
