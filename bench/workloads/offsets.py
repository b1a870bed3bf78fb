"""`commit` and `fetch`: committed-offset throughput and latency, closed loop.

commit variants
  simple-1p / simple-10p   OffsetCommit with generation −1 and no member (the
                           "simple" commit of admin tools and Spark), 1 or 10
                           partitions per request, spread over G groups.
  member-1p / member-10p   commits by the one member of each of G groups, with
                           its generation and member id (fenced commits).
  connections-N            simple-1p at N connections (throughput vs connections).
fetch variants
  fetch-1p / fetch-10p     OffsetFetch of 1 or 10 partitions of one topic.
  fetch-all                OffsetFetch with topics = null (every committed topic).

Every committed offset is the request's sequence number (patched into the
pre-encoded template), so commits are never byte-identical repeats.
"""
from __future__ import annotations

import asyncio
import time

from cohort.protocol.messages import FindCoordinatorRequest, OffsetCommitRequest, OffsetFetchRequest

from bench.closed_loop import ClosedLoopOutcome, run_closed_loop
from bench.members import BenchMember, ProtocolVersions, form_groups, keep_alive
from bench.stats import Result
from bench.targets import BENCH_TOPIC, Target, wait_until_serving
from bench.wire import SEQUENCE_SENTINEL, KafkaSession, RequestTemplate
from bench.workloads.profile import Profile

COMMIT_VERSION = 2   # the first load measurement: OffsetCommit v2
# Members of fixture groups ask for short timeouts: Tansu 0.6 holds every join
# phase for half the session timeout instead of completing it when all members
# have joined. A keep-alive task heartbeats them while the load runs.
FIXTURE_SESSION_TIMEOUT_MS = 6000
FIXTURE_REBALANCE_TIMEOUT_MS = 3000
FETCH_VERSION = 5    # last version before flexible encoding; has "all topics" (v2+)

_Topic = OffsetCommitRequest.OffsetCommitRequestTopic
_Partition = _Topic.OffsetCommitRequestPartition


def simple_commit(group_id: str, partitions: int, offset: int = SEQUENCE_SENTINEL) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=-1, member_id="", topics=[
        _Topic(name=BENCH_TOPIC, partitions=[_Partition(partition_index=p, committed_offset=offset,
                                                        committed_metadata="") for p in range(partitions)])])


def fetch_request(group_id: str, partitions: int | None) -> OffsetFetchRequest:
    if partitions is None:
        return OffsetFetchRequest(group_id=group_id, topics=None)
    return OffsetFetchRequest(group_id=group_id, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
        name=BENCH_TOPIC, partition_indexes=list(range(partitions)))])


def group_name(run_tag: str, i: int) -> str:
    return f"bench-{run_tag}-{i}"


def outcome_result(workload: str, variant: str, target: Target, outcome: ClosedLoopOutcome, params: dict,
                   extra: dict | None = None) -> Result:
    return Result(workload=workload, variant=variant, target=target.name, params=params,
                  operations=outcome.operations, duration_s=round(outcome.duration_s, 3),
                  throughput_per_s=round(outcome.throughput, 1), latency_ms=outcome.latencies.summary(),
                  errors=outcome.errors, server=_usage(outcome.server), generator=_usage(outcome.generator),
                  extra=extra or {}, target_info=target.describe())


def _usage(usage) -> dict:
    return {k: getattr(usage, k) for k in usage.__slots__}


async def group_coordinators(session: KafkaSession, groups: list[str]) -> list[tuple[str, int]]:
    """Each group's coordinator (FindCoordinator): the target itself, unless it is several brokers
    (`cohort serve --workers N`)."""
    version = session.pick_version(FindCoordinatorRequest.API_KEY, 2)
    answers = await asyncio.gather(*(session.request(FindCoordinatorRequest(key=g, key_type=0), version)
                                     for g in groups))
    for answer in answers:
        if answer.error_code:
            raise RuntimeError(f"FindCoordinator failed with error {answer.error_code}")
    return [(a.host, a.port) for a in answers]


async def coordinator_routes(target: Target, session: KafkaSession, templates, groups: list[str]):
    """The templates by the broker coordinating their group; None when every group is on the target."""
    routes: dict[tuple[str, int], list] = {}
    for template, broker in zip(templates, await group_coordinators(session, groups)):
        routes.setdefault(broker, []).append(template)
    return None if list(routes) == [(target.host, target.port)] else routes


async def _closed_loop(target: Target, templates, profile: Profile, connections: int | None = None,
                       routes=None):
    return await run_closed_loop(target, templates, connections=connections or profile.connections,
                                 depth=profile.depth, duration_s=profile.duration_s, max_ops=profile.max_ops,
                                 warmup_s=profile.warmup_s, routes=routes)


def _selected(profile: Profile, variant: str) -> bool:
    return not profile.variants or any(variant.startswith(v) for v in profile.variants)


async def run_commit(target: Target, profile: Profile) -> list[Result]:
    await wait_until_serving(target)
    tag = f"c{int(time.time() * 1000) % 10**8}"
    session = await KafkaSession.open(target.host, target.port)
    version = session.pick_version(OffsetCommitRequest.API_KEY, COMMIT_VERSION)
    results = []
    try:
        for partitions in (1, 10):
            variant = f"simple-{partitions}p"
            if not _selected(profile, variant):
                continue
            groups = [group_name(tag, g) for g in range(profile.groups)]
            templates = [RequestTemplate(simple_commit(g, partitions), version) for g in groups]
            routes = await coordinator_routes(target, session, templates, groups)
            outcome = await _closed_loop(target, templates, profile, routes=routes)
            results.append(outcome_result("commit", variant, target, outcome, _params(profile, version, partitions),
                                          {"offsets_per_s": round(outcome.throughput * partitions, 1)}))
        member_variants = [p for p in (1, 10) if _selected(profile, f"member-{p}p")]
        if member_variants:
            versions = ProtocolVersions.negotiate(session)
            members = await asyncio.gather(*(BenchMember.open(
                target.host, target.port, group_name(tag + "m", g), versions, session_timeout_ms=FIXTURE_SESSION_TIMEOUT_MS,
                rebalance_timeout_ms=FIXTURE_REBALANCE_TIMEOUT_MS) for g in range(profile.groups)))
            await form_groups(members, timeout_s=60)
            for partitions in member_variants:
                templates = [RequestTemplate(m.commit_request(partitions, SEQUENCE_SENTINEL), version)
                             for m in members]
                async with keep_alive(members, interval_s=1.0) as disturbed:
                    outcome = await _closed_loop(target, templates, profile)
                if disturbed:
                    outcome.errors["MEMBER_DISTURBED"] = len(disturbed)
                results.append(outcome_result("commit", f"member-{partitions}p", target, outcome,
                                              _params(profile, version, partitions),
                                              {"offsets_per_s": round(outcome.throughput * partitions, 1)}))
            await asyncio.gather(*(m.leave() for m in members))
            await asyncio.gather(*(m.close() for m in members))
        for connections in profile.connection_sweep:
            variant = f"connections-{connections}"
            if not _selected(profile, variant):
                continue
            templates = [RequestTemplate(simple_commit(group_name(tag + "s", g), 1), version)
                         for g in range(max(profile.groups, connections))]
            outcome = await _closed_loop(target, templates, profile, connections=connections)
            params = _params(profile, version, 1)
            params["connections"] = connections
            results.append(outcome_result("commit", variant, target, outcome, params))
    finally:
        await session.close()
    return results


def _params(profile: Profile, version: int, partitions: int | None) -> dict:
    return {"api_version": version, "partitions_per_request": partitions, "groups": profile.groups,
            "connections": profile.connections, "in_flight_per_connection": profile.depth,
            "duration_s": profile.duration_s, "warmup_s": profile.warmup_s}


async def commit_fixture_offsets(target: Target, session: KafkaSession, groups: list[str], partitions: int,
                                 version: int) -> None:
    """One simple commit of `partitions` partitions per group, so fetches find offsets."""
    brokers = await group_coordinators(session, groups)
    sessions = {b: session if b == (target.host, target.port) else await KafkaSession.open(*b)
                for b in set(brokers)}
    try:
        responses = await asyncio.gather(*(sessions[b].request(simple_commit(g, partitions, 1000 + i), version)
                                           for i, (g, b) in enumerate(zip(groups, brokers))))
    finally:
        for other in sessions.values():
            if other is not session:
                await other.close()
    for response in responses:
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code:
                    raise RuntimeError(f"fixture commit failed with error {p.error_code}")


async def run_fetch(target: Target, profile: Profile) -> list[Result]:
    await wait_until_serving(target)
    tag = f"f{int(time.time() * 1000) % 10**8}"
    session = await KafkaSession.open(target.host, target.port)
    commit_version = session.pick_version(OffsetCommitRequest.API_KEY, COMMIT_VERSION)
    version = session.pick_version(OffsetFetchRequest.API_KEY, FETCH_VERSION)
    groups = [group_name(tag, g) for g in range(profile.groups)]
    results = []
    try:
        await commit_fixture_offsets(target, session, groups, 10, commit_version)
        for variant, partitions in (("fetch-1p", 1), ("fetch-10p", 10), ("fetch-all", None)):
            if not _selected(profile, variant):
                continue
            templates = [RequestTemplate(fetch_request(g, partitions), version) for g in groups]
            routes = await coordinator_routes(target, session, templates, groups)
            outcome = await _closed_loop(target, templates, profile, routes=routes)
            results.append(outcome_result("fetch", variant, target, outcome,
                                          _params(profile, version, partitions)))
    finally:
        await session.close()
    return results
