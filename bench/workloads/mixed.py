"""`mixed`: a realistic fleet for a fixed time; latency percentiles under that background.

Every member (own connection) heartbeats every `mixed_heartbeat_s` and commits
its position every `mixed_commit_s` (member commits, fenced by generation).
Every `mixed_churn_every_s` one member leaves its group and a new member
joins a random group, so some group is always rebalancing: its members learn
it from a heartbeat or commit (REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION),
rejoin and sync, as consumers do. Those answers are the protocol working, so
they are counted as `rebalance_signals`, not errors; the time a member spends
rejoining is reported as the `rejoin` latency.

The first heartbeat interval is an unrecorded warm-up (it overlaps the server
finishing the fleet's formation, the join-storm workload's subject), and the
churn starts after it. After the measured window members keep heartbeating,
unrecorded, until every rejoin begun inside the window is answered: a rejoin
waits for the rest of its group, and a group whose members had stopped would
hold it for the whole rebalance timeout, a tail the server did not cause.
"""
from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

from cohort.protocol.errors import ErrorCode

from bench.members import REJOIN_CODES, BenchMember, MemberError, ProtocolVersions
from bench.stats import GeneratorClock, LatencyRecorder, ProcessSampler, Result, count_errors, generator_gc_paused, LoopLagProbe
from bench.targets import Target, wait_until_serving
from bench.wire import KafkaSession, code_name
from bench.workloads.heartbeat import REBALANCE_TIMEOUT_MS, SESSION_TIMEOUT_MS, close_fleet, open_fleet
from bench.workloads.offsets import _usage
from bench.workloads.profile import Profile


async def run_mixed(target: Target, profile: Profile) -> list[Result]:
    await wait_until_serving(target)
    control = await KafkaSession.open(target.host, target.port)
    versions = ProtocolVersions.negotiate(control)
    await control.close()
    tag = f"m{int(time.time() * 1000) % 10**8}"
    groups = [f"bench-{tag}-{g}" for g in range(profile.mixed_groups)]
    fleet = await open_fleet(target, versions, profile.mixed_members, profile.mixed_groups, tag)
    latencies = {"heartbeat": LatencyRecorder(), "commit": LatencyRecorder(), "rejoin": LatencyRecorder()}
    errors: Counter = Counter()
    error_examples: dict[str, str] = {}  # the first message of each error counted (what broke, for the report)
    signals: Counter = Counter()
    rng = random.Random(7)
    duration = profile.mixed_duration_s
    sampler = ProcessSampler(target.pid)
    warm_up = profile.mixed_heartbeat_s
    t0 = time.perf_counter() + warm_up
    end = t0 + duration
    t0_ns, end_ns = int(t0 * 1e9), int(end * 1e9)  # perf_counter() and perf_counter_ns() share a clock
    rejoin_deadline = time.monotonic() + warm_up + duration + REBALANCE_TIMEOUT_MS / 1000 + 30
    tasks: dict[int, asyncio.Task] = {}
    offsets = [0]
    rejoining = 0  # rejoins in flight; members keep beating past `end` until it is 0

    def record(api: str, sent: int) -> None:
        if t0_ns <= sent < end_ns:
            latencies[api].add(time.perf_counter_ns() - sent)

    async def rejoin(member: BenchMember) -> None:
        nonlocal rejoining
        sent = time.perf_counter_ns()
        rejoining += 1
        try:
            await member.join_and_sync(rejoin_deadline)
        finally:
            rejoining -= 1
        record("rejoin", sent)

    async def react(member: BenchMember, code: int, api: str) -> None:
        if code == ErrorCode.NONE:
            return
        counted = time.perf_counter() < end
        if code in REJOIN_CODES:
            if counted:
                signals[f"{api}:{code_name(code)}"] += 1
            await rejoin(member)
        else:
            if counted:
                errors[f"{api}:{code_name(code)}"] += 1
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                member.member_id = ""
                await rejoin(member)

    def failed(exc: BaseException) -> None:
        errors[type(exc).__name__] += 1
        error_examples.setdefault(type(exc).__name__, str(exc))

    async def life(member: BenchMember) -> None:
        try:
            await _life(member)
        except (ConnectionError, asyncio.TimeoutError, MemberError) as exc:
            failed(exc)  # counted, and this member stops; the fleet goes on

    async def _life(member: BenchMember) -> None:
        hb_due = time.perf_counter() + rng.random() * profile.mixed_heartbeat_s
        commit_due = time.perf_counter() + rng.random() * profile.mixed_commit_s
        while True:
            due = min(hb_due, commit_due)
            if due >= end:
                if not rejoining:
                    return
                due = commit_due = hb_due  # past the window: heartbeats only, while rejoins wait
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            sent = time.perf_counter_ns()
            if hb_due <= commit_due:
                hb_due += profile.mixed_heartbeat_s
                code = await member.heartbeat()
                record("heartbeat", sent)
                await react(member, code, "Heartbeat")
            else:
                commit_due += profile.mixed_commit_s
                offsets[0] += 1
                response = await member.session.request(member.commit_request(1, offsets[0]),
                                                        member.versions.commit)
                record("commit", sent)
                codes = [p.error_code for t in response.topics for p in t.partitions if p.error_code]
                await react(member, codes[0] if codes else 0, "OffsetCommit")

    def start(member: BenchMember) -> None:
        tasks[id(member)] = asyncio.get_running_loop().create_task(life(member))

    joins = leaves = 0
    lag = LoopLagProbe()
    clock = GeneratorClock()
    paused = generator_gc_paused()
    paused.__enter__()
    for member in fleet:
        start(member)
    try:
        await asyncio.sleep(max(t0 - time.perf_counter(), 0))
        sampler.start()
        clock = GeneratorClock()
        lag.start()
        while time.perf_counter() + profile.mixed_churn_every_s < end:
            await asyncio.sleep(profile.mixed_churn_every_s)
            leaver = rng.choice(fleet)
            fleet.remove(leaver)
            tasks.pop(id(leaver)).cancel()
            code = await leaver.leave()
            if code:
                errors[f"LeaveGroup:{code_name(code)}"] += 1
            await leaver.close()
            leaves += 1
            newcomer = await BenchMember.open(target.host, target.port, rng.choice(groups), versions,
                                              session_timeout_ms=SESSION_TIMEOUT_MS,
                                              rebalance_timeout_ms=REBALANCE_TIMEOUT_MS)
            fleet.append(newcomer)
            joins += 1

            async def arrive(m: BenchMember = newcomer) -> None:
                try:
                    await rejoin(m)
                except (ConnectionError, asyncio.TimeoutError, MemberError) as exc:
                    failed(exc)
                    return
                await life(m)

            tasks[id(newcomer)] = asyncio.get_running_loop().create_task(arrive())
        outcomes = await asyncio.gather(*tasks.values(), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                failed(outcome)
    finally:
        paused.__exit__(None, None, None)
        loop_lag = await lag.stop()
        for task in tasks.values():
            task.cancel()
        elapsed = min(time.perf_counter(), end) - t0
        server = await sampler.stop()
        generator = clock.usage()
        await close_fleet(fleet)
    combined = LatencyRecorder()
    combined.extend(latencies["heartbeat"])
    combined.extend(latencies["commit"])
    per_api = {}
    for name, recorder in latencies.items():
        summary = recorder.summary()
        summary.pop("cdf")
        per_api[name] = summary
    operations = len(combined)
    return [Result(workload="mixed", variant="fleet", target=target.name, params={
        "members": profile.mixed_members, "groups": profile.mixed_groups, "duration_s": duration,
        "heartbeat_interval_s": profile.mixed_heartbeat_s, "warm_up_s": warm_up, "commit_interval_s": profile.mixed_commit_s,
        "churn_every_s": profile.mixed_churn_every_s, "session_timeout_ms": SESSION_TIMEOUT_MS,
        "versions": {"heartbeat": versions.heartbeat, "commit": versions.commit, "join": versions.join}},
        operations=operations, duration_s=round(elapsed, 3), throughput_per_s=round(operations / elapsed, 1),
        latency_ms=combined.summary(), errors=count_errors(errors), server=_usage(server),
        generator=_usage(generator), extra={"per_api_ms": per_api, "rebalance_signals": count_errors(signals),
                                            "joins": joins, "leaves": leaves, "error_examples": error_examples,
                                            "generator_loop_lag_ms": loop_lag}, target_info=target.describe())]
