"""`restart`: how fast a server loads its offsets log, and what a committed offset costs in RAM.

For each log size N:
1. A server (Cohort with flush policy `never`, Kafka with its defaults, to fill fast; loading reads
   the same bytes either way) receives N offset-commit records over the wire: K distinct
   offsets (groups × 100 topics × 10 partitions, ~1 000 partitions per
   request), committed N / K times with increasing values.
2. It is stopped (SIGTERM: Kafka shuts down cleanly) and started again on the same data dir. The
   clock runs from the moment the process is spawned until every group answers
   OffsetFetch with its last committed offset (COORDINATOR_LOAD_IN_PROGRESS and, while Kafka's
   broker is still starting, NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE answers are retried):
   "time to serve all groups".
3. RSS of the restarted server, minus the RSS of a server started on an empty
   data dir, divided by K: bytes per committed offset held.

Needs a server the suite starts (it owns the data dir): Cohort or Kafka (`bench/kafka_broker.py`).
"""
from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import time
from pathlib import Path

from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import OffsetCommitRequest, OffsetFetchRequest

from bench.closed_loop import run_closed_loop
from bench.stats import Result, read_cpu_seconds, read_rss_bytes
from bench.targets import CohortServer, Target, TargetError
from bench.wire import SEQUENCE_SENTINEL, KafkaSession, RequestTemplate
from bench.workloads.offsets import _usage
from bench.workloads.profile import Profile

TOPICS_PER_GROUP = 100
PARTITIONS_PER_TOPIC = 10
SETTLE_S = 1.0  # let the restarted server drop load-time garbage before reading RSS

_Topic = OffsetCommitRequest.OffsetCommitRequestTopic
_Partition = _Topic.OffsetCommitRequestPartition


def layout(distinct_offsets: int) -> tuple[int, int]:
    """(groups, topics per group) holding `distinct_offsets` offsets of 10 partitions per topic."""
    topics = max(1, min(TOPICS_PER_GROUP, distinct_offsets // PARTITIONS_PER_TOPIC))
    groups = max(1, distinct_offsets // (topics * PARTITIONS_PER_TOPIC))
    return groups, topics


def fill_request(group: str, topics: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        _Topic(name=f"bench-t{t}", partitions=[
            _Partition(partition_index=p, committed_offset=SEQUENCE_SENTINEL, committed_metadata="")
            for p in range(PARTITIONS_PER_TOPIC)]) for t in range(topics)])


class _CohortServers:
    """Cohort servers of the target's executable and settings (`compare --b cohort=PATH` measures that checkout)."""

    def __init__(self, target: CohortServer) -> None:
        self.name = "cohort"
        self.settings = {k: v for k, v in target.settings.items() if k not in ("offsets.flush.policy", "metrics")}
        self.executable = target.executable

    async def baseline_rss(self, data_dir: Path) -> int:
        """RSS of a server started on an empty data dir."""
        with await asyncio.to_thread(CohortServer, data_dir=data_dir, settings=self.settings,
                                     executable=self.executable) as empty:
            await asyncio.sleep(SETTLE_S)
            return read_rss_bytes(empty.pid)

    def filler(self, data_dir: Path, topics: int) -> Target:
        return CohortServer(data_dir=data_dir, settings={**self.settings, "offsets.flush.policy": "never"},
                            executable=self.executable)

    def restarted(self, data_dir: Path) -> Target:
        return CohortServer(data_dir=data_dir, settings={**self.settings, "log-level": "INFO"}, ready_timeout_s=600,
                            executable=self.executable)


class _KafkaServers:
    """Kafka brokers with the target's settings; the filler with Kafka's defaults (no flush per append)."""

    def __init__(self, target) -> None:
        self.target = target
        self.name = target.name
        self.settings = {k: v for k, v in target.settings.items() if k != "log.flush.interval.messages"}
        self.target_settings = target.settings

    async def baseline_rss(self, data_dir: Path) -> int:
        """RSS of the target itself: a broker the suite just started on an empty log dir (a JVM takes seconds
        to start; one fewer keeps the workload short)."""
        await asyncio.sleep(SETTLE_S)
        return read_rss_bytes(self.target.pid)

    def filler(self, data_dir: Path, topics: int) -> Target:
        from bench.kafka_broker import KafkaBroker
        return KafkaBroker(data_dir=data_dir, settings=self.settings, name=self.name,
                           topics={f"bench-t{t}": PARTITIONS_PER_TOPIC for t in range(topics)})

    def restarted(self, data_dir: Path) -> Target:
        from bench.kafka_broker import KafkaBroker
        return KafkaBroker(data_dir=data_dir, settings=self.target_settings, name=self.name, wait_until_serving=False,
                           ready_timeout_s=600)


def _servers(target: Target):
    if isinstance(target, CohortServer):
        return _CohortServers(target)
    if target.name.startswith("kafka") and hasattr(target, "data_dir"):
        return _KafkaServers(target)
    raise TargetError("the restart workload needs a Cohort or Kafka the suite starts itself (it owns the data dir)")


async def run_restart(target: Target, profile: Profile) -> list[Result]:
    # The server the suite started is only used for its settings and executable; this workload runs its own.
    servers = _servers(target)
    results = []
    for records in profile.restart_records:
        results += await _one_size(records, min(profile.restart_offsets, records), servers,
                                   max(1, profile.restart_repeats))
    return results


async def _one_size(records: int, distinct: int, servers, repeats: int) -> list[Result]:
    groups, topics = layout(distinct)
    distinct = groups * topics * PARTITIONS_PER_TOPIC
    passes = max(1, round(records / distinct))
    records = passes * distinct
    workdir = Path(tempfile.mkdtemp(prefix="cohort-restart-"))
    data_dir = workdir / "data"
    try:
        baseline_rss = await servers.baseline_rss(workdir / "empty")

        fill_started = time.perf_counter()
        with await asyncio.to_thread(servers.filler, data_dir, topics) as filler:
            group_ids = [f"bench-restart-{g}" for g in range(groups)]
            session = await KafkaSession.open(filler.host, filler.port)
            version = session.pick_version(OffsetCommitRequest.API_KEY, 2)
            await session.close()
            templates = [RequestTemplate(fill_request(g, topics), version) for g in group_ids]
            fill = await run_closed_loop(filler, templates, connections=4, depth=4, duration_s=3600,
                                         max_ops=groups * passes)
            if fill.errors or fill.operations != groups * passes:
                raise RuntimeError(f"filling the log failed: {fill.operations} of {groups * passes} requests, "
                                   f"errors {fill.errors}")
        fill_s = time.perf_counter() - fill_started
        log_bytes = sum(f.stat().st_size for f in data_dir.rglob("*.log"))

        runs = []
        for repeat in range(repeats):
            runs.append(await _restart(data_dir, servers, group_ids, topics) + (repeat + 1,))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    params = dict(records=records, distinct=distinct, groups=groups, topics=topics, baseline_rss=baseline_rss,
                  fill_s=fill_s, log_bytes=log_bytes)
    return [_result(*run, target=servers.name, fill_policy=fill_policy(servers), **params) for run in runs]


def fill_policy(servers) -> str:
    return "never" if isinstance(servers, _CohortServers) else "Kafka defaults (page cache)"


async def _restart(data_dir: Path, servers, group_ids: list[str], topics: int) -> tuple:
    """Start a server on the filled log; (listening s, serving s, CPU s until then, RSS, its load log lines,
    command, info)."""
    spawned = time.perf_counter()
    with await asyncio.to_thread(servers.restarted, data_dir) as restarted:
        listening_s = time.perf_counter() - spawned
        await _verify_all_groups(restarted, group_ids, topics)
        serving_s = time.perf_counter() - spawned
        cpu_s = read_cpu_seconds(restarted.pid)  # start-up and load, until every group served
        await asyncio.sleep(SETTLE_S)
        rss = read_rss_bytes(restarted.pid)
        load_log = _load_lines(restarted.log_path)
        return listening_s, serving_s, cpu_s, rss, load_log, " ".join(restarted.command), restarted.describe()


def _result(listening_s: float, serving_s: float, cpu_s: float, rss: int, load_log: list[str], command: str, info: dict,
            repeat: int, *, target: str, fill_policy: str, records: int, distinct: int, groups: int, topics: int,
            baseline_rss: int, fill_s: float, log_bytes: int) -> Result:
    per_offset = (rss - baseline_rss) / distinct
    reported = _reported_load(load_log)
    return Result(workload="restart", variant=f"records-{records}", target=target, params={
        "records": records, "distinct_offsets": distinct, "groups": groups, "topics_per_group": topics,
        "partitions_per_topic": PARTITIONS_PER_TOPIC, "fill_flush_policy": fill_policy},
        operations=records, duration_s=round(serving_s, 3), throughput_per_s=round(records / serving_s, 1),
        server={"rss_end_bytes": rss, "rss_baseline_bytes": baseline_rss, "cpu_seconds": round(cpu_s, 3)},
        extra={"time_to_listen_s": round(listening_s, 3), "time_to_serve_all_groups_s": round(serving_s, 3),
               "load_records_per_s": round(records / serving_s, 1), "rss_bytes_per_offset": round(per_offset, 1),
               "log_bytes": log_bytes, "fill_s": round(fill_s, 2), "server_load_log": load_log,
               "restart": repeat, **reported},
        target_info={**info, "command": command})


async def _verify_all_groups(target: Target, group_ids: list[str], topics: int, timeout_s: float = 600) -> None:
    """Every group answers with its last offset; retried while its partition is loading."""
    deadline = time.monotonic() + timeout_s
    session = await _connect(target, deadline)
    try:
        version = session.pick_version(OffsetFetchRequest.API_KEY, 5)
        pending = list(group_ids)
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} groups not served after {timeout_s:.0f} s")
            responses = await asyncio.gather(*(session.request(OffsetFetchRequest(group_id=g, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=f"bench-t{topics - 1}", partition_indexes=[0])]),
                version) for g in pending))
            still = []
            for g, response in zip(pending, responses):
                if response.error_code in _NOT_YET:
                    still.append(g)
                    continue
                if response.error_code:
                    raise RuntimeError(f"OffsetFetch for {g} failed with {ErrorCode(response.error_code).name}")
                offset = response.topics[0].partitions[0].committed_offset
                if offset < 0:
                    raise RuntimeError(f"group {g} lost its offsets across the restart")
            pending = still
            if pending:
                await asyncio.sleep(0.01)
    finally:
        await session.close()


# Answers of a server still loading (Cohort, Kafka) or whose broker is still starting (Kafka).
_NOT_YET = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


async def _connect(target: Target, deadline: float) -> KafkaSession:
    """A session once the server answers ApiVersions (Kafka accepts connections before it does)."""
    while True:
        try:
            return await asyncio.wait_for(KafkaSession.open(target.host, target.port), 5)
        except (OSError, asyncio.TimeoutError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.01)


_LOAD_LINE = re.compile(r"load|replay|records", re.IGNORECASE)
_LOAD_TOTAL = re.compile(r"(\d+) (?:live )?records(?:, \d+ live keys)? in (\d+(?:\.\d+)?) ?ms")


def _reported_load(lines: list[str]) -> dict:
    """The server's own total ("... N records in M ms"): log replay alone, without process start-up."""
    for line in reversed(lines):
        match = _LOAD_TOTAL.search(line)
        if match:
            records, ms = int(match.group(1)), float(match.group(2))
            return {"server_reported_load_ms": ms,
                    "server_reported_records_per_s": round(records / (ms / 1000), 1) if ms else None}
    return {}


def _load_lines(path: Path, limit: int = 5) -> list[str]:
    """The server's own log lines about loading (last few), for the report."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if _LOAD_LINE.search(line)]
    except OSError:
        return []
    return lines[-limit:]
