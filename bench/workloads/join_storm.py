"""`join-storm`: N members join one empty group at once; then 10 % leave.

Each member has its own connection and speaks the protocol itself: JoinGroup
(MEMBER_ID_REQUIRED round trip), JoinGroup, SyncGroup (the leader sends a
round-robin assignment). Connections are opened and negotiated before the
clock starts; then every member sends its first JoinGroup in the same loop
iteration.

Reported (seconds from the first JoinGroup sent):
  join_phase_complete_s   first JoinGroup answer that ends the join phase;
                          with `group.initial.rebalance.delay.ms` this is
                          where the delay (and its extensions) ends
  all_assigned_s          every member holds its SyncGroup assignment
  stable_s                the leader's SyncGroup was answered: the group is Stable
  assigned_after_join_phase_s = all_assigned_s − join_phase_complete_s, the
                          coordinator's own work once the delay is over
and for the leave: time from the first LeaveGroup until every remaining member
holds a new assignment (members learn of the rebalance from their heartbeat,
as clients do).
"""
from __future__ import annotations

import asyncio
import random
import time

from cohort.protocol.errors import ErrorCode

from bench.members import BenchMember, MemberError, ProtocolVersions, describe_state
from bench.stats import GeneratorClock, ProcessSampler, Result, generator_gc_paused
from bench.targets import Target, wait_until_serving
from bench.wire import KafkaSession
from bench.workloads.offsets import _usage
from bench.workloads.profile import Profile

SESSION_TIMEOUT_MS = 10000
REBALANCE_TIMEOUT_MS = 30000
REJOIN_POLL_S = 0.05  # how often a remaining member heartbeats to notice the rebalance


def cohort_settings(profile: Profile) -> dict:
    """The server settings this workload is defined under."""
    return {"group.initial.rebalance.delay.ms": profile.storm_initial_delay_ms}


async def run_join_storm(target: Target, profile: Profile) -> list[Result]:
    await wait_until_serving(target)
    control = await KafkaSession.open(target.host, target.port)
    versions = ProtocolVersions.negotiate(control)
    try:
        results = []
        for size in profile.storm_sizes:
            try:
                results.append(await _storm(target, profile, control, versions, size))
            except (TimeoutError, ConnectionError, MemberError) as exc:
                # A server that cannot finish this size still gets its other sizes measured.
                results.append(Result(workload="join-storm", variant=f"members-{size}", target=target.name,
                                      params={"members": size}, errors={type(exc).__name__: 1},
                                      extra={"failure": f"{type(exc).__name__}: {exc}"},
                                      target_info=target.describe()))
        return results
    finally:
        await control.close()


async def _storm(target: Target, profile: Profile, control: KafkaSession, versions: ProtocolVersions,
                 size: int) -> Result:
    group = f"bench-storm{size}-{int(time.time() * 1000) % 10**8}"
    members: list[BenchMember] = []
    for start in range(0, size, 250):
        members += await asyncio.gather(*(BenchMember.open(
            target.host, target.port, group, versions, session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS) for _ in range(start, min(size, start + 250))))
    errors: dict[str, int] = {}
    sampler = ProcessSampler(target.pid)
    clock = GeneratorClock()
    sampler.start()
    timeout = REBALANCE_TIMEOUT_MS / 1000 + 60
    try:
        with generator_gc_paused():
            t0 = time.perf_counter()
            deadline = time.monotonic() + timeout
            await asyncio.wait_for(asyncio.gather(*(m.join_and_sync(deadline) for m in members)), timeout)
        all_assigned = max(m.assigned_at for m in members) - t0
        join_complete = min(m.first_join_response_at for m in members) - t0
        leader = next((m for m in members if m.leader and m.generation_id == max(x.generation_id for x in members)),
                      None)
        stable = (leader.assigned_at - t0) if leader else None
        state, count = await describe_state(control, group, versions.describe)
        if state != "Stable" or count != size:
            errors[f"DESCRIBED_{state.upper()}_{count}_MEMBERS"] = 1
        rejoins_storm = sum(m.rejoins for m in members)
        with generator_gc_paused():
            leave_s, rejoins_leave = await _leave_rebalance(members, profile.storm_leave_fraction, errors)
    finally:
        server = await sampler.stop()
        generator = clock.usage()
        await asyncio.gather(*(m.leave() for m in members if m.member_id), return_exceptions=True)
        await asyncio.gather(*(m.close() for m in members), return_exceptions=True)
    delay_ms = getattr(target, "settings", {}).get("group.initial.rebalance.delay.ms")  # a server the suite started
    delay_s = delay_ms / 1000 if delay_ms is not None else None
    return Result(workload="join-storm", variant=f"members-{size}", target=target.name, params={
        "members": size, "join_version": versions.join, "sync_version": versions.sync,
        "session_timeout_ms": SESSION_TIMEOUT_MS, "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
        "initial_rebalance_delay_ms_configured": delay_ms,
        "leave_fraction": profile.storm_leave_fraction},
        operations=size, duration_s=round(all_assigned, 4), throughput_per_s=round(size / all_assigned, 1),
        errors=errors, server=_usage(server), generator=_usage(generator), extra={
            "join_phase_complete_s": round(join_complete, 4), "all_assigned_s": round(all_assigned, 4),
            "stable_s": round(stable, 4) if stable is not None else None,
            "assigned_after_join_phase_s": round(all_assigned - join_complete, 4),
            "assigned_after_initial_delay_s": round(all_assigned - delay_s, 4) if delay_s is not None else None,
            "rejoins_during_storm": rejoins_storm, "leave_rebalance_s": round(leave_s, 4),
            "rejoins_during_leave": rejoins_leave}, target_info=target.describe())


async def _leave_rebalance(members: list[BenchMember], fraction: float, errors: dict) -> tuple[float, int]:
    """10 % of the members leave; the rest notice by heartbeat, rejoin and sync."""
    rng = random.Random(len(members))
    leaving = rng.sample(members, max(1, int(len(members) * fraction)))
    leaving_ids = {id(m) for m in leaving}
    staying = [m for m in members if id(m) not in leaving_ids]
    for m in staying:
        m.rejoins = 0
    t0 = time.perf_counter()
    codes = await asyncio.gather(*(m.leave() for m in leaving))
    for m in leaving:
        m.member_id = ""
    bad = [c for c in codes if c]
    if bad:
        errors["LEAVE_FAILED"] = len(bad)
    deadline = time.monotonic() + REBALANCE_TIMEOUT_MS / 1000 + 30

    async def notice_and_rejoin(m: BenchMember) -> None:
        while time.monotonic() < deadline:
            code = await m.heartbeat()
            if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                await m.join_and_sync(deadline)
                return
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                m.member_id = ""
                await m.join_and_sync(deadline)
                return
            if code != ErrorCode.NONE:
                errors[f"HEARTBEAT_{code}"] = errors.get(f"HEARTBEAT_{code}", 0) + 1
                return
            await asyncio.sleep(REJOIN_POLL_S)
        errors["NO_REBALANCE_SEEN"] = errors.get("NO_REBALANCE_SEEN", 0) + 1

    if staying:
        await asyncio.gather(*(notice_and_rejoin(m) for m in staying))
        elapsed = max(m.assigned_at for m in staying) - t0
    else:
        elapsed = time.perf_counter() - t0
    return elapsed, sum(m.rejoins for m in staying)
