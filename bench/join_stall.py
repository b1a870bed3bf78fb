"""Does a huge group's join or expiry stall everyone else? (hardening issue, items 4 and 5)

    python bench/join_stall.py --members 2500 5000 10000
    python bench/join_stall.py --members --commit-partitions 100000 --fetch-partitions 1000000

A separate process commits one offset every 20 ms (its own group, its own connection) and
records each commit's latency while, in this process:
* **join**: `--members` members join one group (each on its own connection, JoinGroup with the
  MEMBER_ID_REQUIRED round trip, then SyncGroup), until the group is Stable;
* **expiry**: they all stop heartbeating at once and their sessions expire, until the group is Empty;
* **commit** (with `--commit-partitions`): one OffsetCommit of that many partitions;
* **fetch** (with `--fetch-partitions`): one group commits that many partitions, then another
  connection fetches all of its offsets at once (OffsetFetch with topics=null).
Reported per phase: the committer's p50 / p99 / p99.9 / max latency (ms) and the phase's duration.
The target (issue): a 10 k-member join and expiry never delay the committer by more than 50 ms (p99.9).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.members import BenchMember, ProtocolVersions, describe_state  # noqa: E402
from bench.targets import CohortServer  # noqa: E402
from bench.wire import KafkaSession  # noqa: E402
from cohort.protocol.messages import ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest  # noqa: E402

SESSION_MS = 6000
COMMITTER = r"""
import socket, struct, sys, time
sys.path.insert(0, sys.argv[4])
from cohort.protocol.framing import FrameReader, encode_request
from cohort.protocol.messages import OffsetCommitRequest
host, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
T = OffsetCommitRequest.OffsetCommitRequestTopic
s = socket.create_connection((host, port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
reader = FrameReader(); rows = []; i = 0
with open(out, "w") as f:
    while True:
        i += 1
        req = OffsetCommitRequest(group_id="bystander", generation_id_or_member_epoch=-1, member_id="", topics=[
            T(name="t", partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=i, committed_metadata="")])])
        t0 = time.time(); s.sendall(encode_request(req, 2, i, "bystander"))
        got = []
        while not got:
            data = s.recv(65536)
            if not data: sys.exit(0)
            got = reader.feed(data)
        t1 = time.time()
        f.write(f"{t0:.6f} {(t1 - t0) * 1000:.3f}\n"); f.flush()
        time.sleep(max(0.0, 0.02 - (time.time() - t0)))
"""


def percentiles(latencies: list[float]) -> dict:
    if not latencies:
        return {"commits": 0}
    xs = sorted(latencies)

    def q(p: float) -> float:
        return round(xs[min(len(xs) - 1, int(p * len(xs)))], 1)

    return {"commits": len(xs), "p50_ms": q(0.5), "p99_ms": q(0.99), "p999_ms": q(0.999), "max_ms": round(xs[-1], 1)}


def in_window(rows: list[tuple[float, float]], start: float, end: float) -> list[float]:
    # A commit sent before the window but answered inside it was delayed by the window too.
    return [ms for t, ms in rows if t + ms / 1000 >= start and t <= end]


async def join_and_expire(host: str, port: int, n: int) -> dict:
    probe = await KafkaSession.open(host, port)
    versions = ProtocolVersions.negotiate(probe)
    members = []
    for i in range(0, n, 500):
        members += await asyncio.gather(*(BenchMember.open(host, port, "big", versions, session_timeout_ms=SESSION_MS,
                                                           rebalance_timeout_ms=120000)
                                          for _ in range(i, min(n, i + 500))))
    phases = {}
    start = time.time()

    async def member_life(m: BenchMember) -> None:
        await m.join_and_sync(time.monotonic() + 300)

    await asyncio.gather(*(member_life(m) for m in members))
    phases["join"] = (start, time.time())  # every member holds an assignment of one generation
    start = time.time()  # nobody heartbeats from here: every session expires
    deadline = time.monotonic() + SESSION_MS / 1000 * 4 + 60
    # ListGroups, not DescribeGroups: describing 10 000 members is itself a stall worth measuring apart.
    while time.monotonic() < deadline and await group_state(probe, "big") != "Empty":
        await asyncio.sleep(0.05)
    phases["expiry"] = (start, time.time())
    state, count = await describe_state(probe, "big", versions.describe)
    assert (state, count) == ("Empty", 0), (state, count)
    for m in members:
        await m.close()
    await probe.close()
    return phases


async def group_state(session: KafkaSession, group_id: str) -> str:
    response = await session.request(ListGroupsRequest(states_filter=[]), 4)
    return next((g.group_state for g in response.groups if g.group_id == group_id), "Dead")


def huge_commit(group: str, first: int, last: int) -> OffsetCommitRequest:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name="t", partitions=[T.OffsetCommitRequestPartition(partition_index=p, committed_offset=p,
                                                               committed_metadata="") for p in range(first, last)])])


async def commit_at_once(host: str, port: int, partitions: int) -> dict:
    session = await KafkaSession.open(host, port)
    request = huge_commit("wide", 0, partitions)
    start = time.time()
    response = await session.request(request, 2, timeout=300)
    end = time.time()
    assert all(p.error_code == 0 for t in response.topics for p in t.partitions)
    await session.close()
    return {"commit": (start, end)}


async def fetch_everything(host: str, port: int, partitions: int) -> dict:
    session = await KafkaSession.open(host, port)
    for first in range(0, partitions, 50_000):
        await session.request(huge_commit("huge", first, min(partitions, first + 50_000)), 2, timeout=300)
    start = time.time()
    response = await session.request(OffsetFetchRequest(group_id="huge", topics=None), 7, timeout=300)
    end = time.time()
    assert sum(len(t.partitions) for t in response.topics) == partitions
    await session.close()
    return {"fetch": (start, end)}


def run(args, scenario: str, size: int) -> dict:
    settings = {"group.min.session.timeout.ms": 1000, "log-level": "WARNING", "max.connections": 30000}
    with CohortServer(settings=settings) as server:
        out = Path(tempfile.mkstemp(prefix="committer-")[1])
        committer = subprocess.Popen([sys.executable, "-c", COMMITTER, server.host, str(server.port), str(out),
                                      str(Path(__file__).resolve().parent.parent)])
        try:
            time.sleep(1.0)  # the committer's warm-up rows come before every window
            if scenario == "members":
                phases = asyncio.run(join_and_expire(server.host, server.port, size))
            elif scenario == "commit":
                phases = asyncio.run(commit_at_once(server.host, server.port, size))
            else:
                phases = asyncio.run(fetch_everything(server.host, server.port, size))
        finally:
            committer.terminate()
            committer.wait(10)
        rows = [(float(a), float(b)) for a, b in (line.split() for line in out.read_text().splitlines() if line)]
        out.unlink()
    return {name: {"seconds": round(end - start, 2), **percentiles(in_window(rows, start, end))}
            for name, (start, end) in phases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, nargs="*", default=[2500, 5000, 10000])
    parser.add_argument("--fetch-partitions", type=int, nargs="*", default=[])
    parser.add_argument("--commit-partitions", type=int, nargs="*", default=[])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    for n in args.members:
        for r in range(args.runs):
            row = {"members": n, "run": r, **run(args, "members", n)}
            print(json.dumps(row), flush=True)
            results.append(row)
    for n in args.commit_partitions:
        for r in range(args.runs):
            row = {"commit_partitions": n, "run": r, **run(args, "commit", n)}
            print(json.dumps(row), flush=True)
            results.append(row)
    for n in args.fetch_partitions:
        for r in range(args.runs):
            row = {"fetch_partitions": n, "run": r, **run(args, "fetch", n)}
            print(json.dumps(row), flush=True)
            results.append(row)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
