"""How long one big request from a principal with no ACLs holds the server, and what a signed-in client's
Metadata waits meanwhile.

    python -m bench.refused_requests [--rounds 3] [--mb 8] [--baseline-cohort /work/base/.venv/bin/cohort]

One `cohort serve` per build (this checkout's, and with `--baseline-cohort` another installation's) with a
SASL_PLAINTEXT listener (SCRAM-SHA-512), the ACL authorizer and a super user. Users made with `cohort users
add --data-dir` before the start: the super user (the probe) and `nobody`, who has no ACL. Each round, for
each request kind -- ReportEndOffsets (one topic, ~`--mb` MB of partitions), ListOffsets and OffsetCommit of
the same size -- a separate process signed in as `nobody` sends one such request (encoded before the window
opens) while the probe sends Metadata every 5 ms, one at a time. The figures per kind: the probe's max and
p99 round trip in the window (the loop's stall shows as the max), the refused request's own answer time and
answer size (0: the server closed the connection instead). Builds and kinds run in an order that rotates from round to round; the report gives medians
over the rounds.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cohort.client.security import ClientSecurity
from cohort.protocol.framing import encode_request
from cohort.protocol.messages import (
    ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, ReportEndOffsetsRequest,
)

from bench.stats import LatencyRecorder
from bench.targets import CohortServer, Target, cohort_executable, free_port, wait_until_serving
from bench.wire import KafkaSession

USERS = {"admin": "admin-bench-secret", "nobody": "nobody-bench-secret"}
KINDS = ("ReportEndOffsets", "ListOffsets", "OffsetCommit")
PROBE_INTERVAL_S = 0.005


def big_request(kind: str, megabytes: float):
    """(request, version) of about `megabytes` MB: one topic with as many partitions as fit."""
    size = int(megabytes * 1_000_000)
    if kind == "ReportEndOffsets":
        T = ReportEndOffsetsRequest.ReportedTopic
        return ReportEndOffsetsRequest(topics=[T(name="t", partitions=[
            T.ReportedPartition(partition_index=p, end_offset=(1 << 63) - 1) for p in range(size // 12)])]), 0
    if kind == "ListOffsets":
        T = ListOffsetsRequest.ListOffsetsTopic
        return ListOffsetsRequest(replica_id=-1, topics=[T(name="t", partitions=[
            T.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in range(size // 16)])]), 7
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name="t", partitions=[T.OffsetCommitRequestPartition(partition_index=p, committed_offset=1,
                                                               committed_metadata="") for p in range(size // 22)])]), 8


def _attacker(port: int, kind: str, megabytes: float, ready, go, results) -> None:
    """A process signed in as `nobody`: sends one big request when told, reports its answer's time and size."""
    async def run() -> None:
        request, version = big_request(kind, megabytes)
        session = await KafkaSession.open("127.0.0.1", port, security=ClientSecurity(
            "SASL_PLAINTEXT", "SCRAM-SHA-512", "nobody", USERS["nobody"]))
        frame = encode_request(request, version, correlation_id=1 << 30, client_id="bench-refused")
        reader, writer = session._reader, session._writer
        session._reader_task.cancel()
        ready.set()
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        began = time.perf_counter()
        try:
            writer.write(frame)
            size = int.from_bytes(await reader.readexactly(4), "big")
            await reader.readexactly(size)
        except (ConnectionError, asyncio.IncompleteReadError):
            size = 0  # the server closed the connection instead of answering
        results.put({"request_bytes": len(frame), "answer_bytes": size,
                     "answer_ms": round((time.perf_counter() - began) * 1000, 1)})
        writer.close()
    try:
        asyncio.run(run())
    except BaseException as exc:  # noqa: BLE001 - reported to the measuring process, which must not wait in vain
        results.put({"error": repr(exc)})
        raise


async def _probe_until(session: KafkaSession, done) -> dict:
    recorder = LatencyRecorder()
    while not done():
        began = time.perf_counter_ns()
        await session.request(MetadataRequest(topics=[]), 1, timeout=60)
        recorder.add(time.perf_counter_ns() - began)
        await asyncio.sleep(PROBE_INTERVAL_S)
    summary = recorder.summary()
    return {k: round(summary[k], 2) for k in ("p50", "p99", "max")} | {"samples": summary["count"]}


async def measure_one(port: int, session: KafkaSession, kind: str, megabytes: float, context) -> dict:
    ready, go, results = context.Event(), context.Event(), context.Queue()
    attacker = context.Process(target=_attacker, args=(port, kind, megabytes, ready, go, results))
    attacker.start()
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, ready.wait, 300), "the attacker did not get ready"
    go.set()
    answer: dict = {}
    finished = loop.run_in_executor(None, results.get, True, 300)
    finished.add_done_callback(lambda f: answer.update(f.result()) if not f.exception() else None)
    probe = await _probe_until(session, finished.done)
    await finished
    await loop.run_in_executor(None, attacker.join, 30)
    return {**probe, **answer}


def add_users(data_dir: Path, executable: list[str], directory: Path) -> None:
    for user, password in USERS.items():
        secret = directory / f"{user}.password"
        secret.write_text(password + "\n")
        subprocess.run([*executable, "users", "add", user, "--mechanism", "SCRAM-SHA-512", "--password-file",
                        str(secret), "--data-dir", str(data_dir)], check=True, capture_output=True, timeout=120)


async def measure(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="cohort-refused-bench-"))
    builds: dict[str, list[str]] = {"this": cohort_executable()}
    if args.baseline_cohort:
        builds["baseline"] = [args.baseline_cohort]
    servers, sessions, ports = {}, {}, {}
    rounds: dict[str, dict[str, list[dict]]] = {name: {kind: [] for kind in KINDS} for name in builds}
    context = multiprocessing.get_context("spawn")
    try:
        for index, (name, executable) in enumerate(builds.items()):
            data_dir = work / f"data-{index}"
            add_users(data_dir, executable, work)
            ports[name] = port = free_port()
            settings = {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                        "authorizer.class.name": "acl", "super.users": "User:admin"}
            servers[name] = CohortServer(data_dir=data_dir, settings=settings, port=port, executable=executable)
            await wait_until_serving(Target(name, "127.0.0.1", port, pid=servers[name].pid))
            sessions[name] = await KafkaSession.open("127.0.0.1", port, security=ClientSecurity(
                "SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", USERS["admin"]))
        names = list(builds)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                for kind in KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]:
                    entry = await measure_one(ports[name], sessions[name], kind, args.mb, context)
                    rounds[name][kind].append(entry)
                    print(f"round {r + 1} {name:9s} {kind:17s} probe max {entry['max']:8.1f} ms p99 {entry['p99']:8.1f} "
                          f"ms; answer {entry.get('answer_ms')} ms, {entry.get('answer_bytes')} bytes", file=sys.stderr)
        for session in sessions.values():
            await session.close()
    finally:
        for server in servers.values():
            server.close()
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: {kind: {key: statistics.median(e[key] for e in entries)
                             for key in ("max", "p99", "answer_ms", "answer_bytes") if all(key in e for e in entries)}
                      for kind, entries in by_kind.items()} for name, by_kind in rounds.items()}
    return {"megabytes": args.mb, "rounds": rounds, "medians": medians}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=float, default=8.0, help="size of each refused request (MB)")
    parser.add_argument("--baseline-cohort", default=None, help="another installation's cohort executable")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args))
    text = json.dumps(result["medians"], indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
