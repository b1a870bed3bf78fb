"""Commit throughput over TLS and SASL_SSL against PLAINTEXT; a signed-in client's latency under a flood of
wrong SASL/PLAIN guesses.

    python -m bench.security_bench [--rounds 3] [--duration 8] [--workers 1] [--out DIR]
    python -m bench.security_bench --plain-flood [--rate 120] [--rounds 3] [--duration 8] [--baseline REF]

One `cohort serve` with three listeners on loopback -- PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512, a
user made with `cohort users add --data-dir` before the start) -- and a certificate made here with
`openssl`. Each round runs the simple-1p commit load (OffsetCommit v2, generation -1, G groups, C
connections x D in flight) through each listener in turn, the order rotating from round to round so
drift on a shared machine does not favour one protocol. Connections are opened (TLS handshake, SASL
exchange) before the measured window, so the numbers are steady-state cost per request. The report
gives each protocol's median over the rounds, the ratio of medians to PLAINTEXT and the median of the
per-round ratios (each protocol against the PLAINTEXT run of the same round, which saw about the same
machine load); on a shared machine use many short rounds and read the paired ratios.

``--plain-flood``: one `cohort serve` with a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-512; the user's
credential at the default 8192 iterations, so each PLAIN check is a PBKDF2-SHA-512 of 8192 rounds). A
client signed in over PLAIN sends Metadata every 5 ms, one at a time, and its round trips are the figure.
Each round measures it quiet, then under `--rate` wrong guesses a second from another process (open
loop: a new connection per guess, SaslHandshake, SaslAuthenticate with a wrong password, half of them for
a user that does not exist; that process runs at nice 10, as its CPU would be another machine's),
spread over as many loopback source addresses (127.0.0.x) as guesses per
second so that no address goes beyond its throttle (every guess costs a PBKDF2), and under the same rate
from one address (the throttle's case); the order rotates from round to round. The report gives each
mode's median over the rounds of p50/p99/max. `--baseline REF` also runs a server of git revision REF
(exported to a temporary directory) for the whole measurement, and each round measures both builds, in an
order that rotates, so both see the same drift of the machine's load.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cohort.client.security import ClientSecurity
from cohort.protocol.messages import (
    MetadataRequest, OffsetCommitRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
)

from bench.closed_loop import run_closed_loop
from bench.targets import CohortServer, Target, cohort_executable, free_port, wait_until_serving
from bench.stats import LatencyRecorder
from bench.wire import KafkaSession, RequestTemplate, install_uvloop
from bench.workloads.offsets import COMMIT_VERSION, group_name, simple_commit

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret-password"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1: (server key + certificate PEM, certificate PEM to trust)."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out",
                    "cert.pem", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   cwd=directory, check=True, capture_output=True, timeout=60)
    keystore = directory / "server.pem"
    keystore.write_text((directory / "key.pem").read_text() + (directory / "cert.pem").read_text())
    return keystore, directory / "cert.pem"


def add_user(data_dir: Path, directory: Path) -> None:
    secret = directory / "password"
    secret.write_text(PASSWORD + "\n")
    subprocess.run([*cohort_executable(), "users", "add", USER, "--mechanism", "SCRAM-SHA-512", "--password-file",
                    str(secret), "--data-dir", str(data_dir)], check=True, capture_output=True, timeout=60)


def client_security(protocol: str, trusted: Path) -> ClientSecurity | None:
    if protocol == "PLAINTEXT":
        return None
    context = ssl.create_default_context(cafile=str(trusted))
    if protocol == "SSL":
        return ClientSecurity("SSL", ssl_context=context)
    return ClientSecurity("SASL_SSL", "SCRAM-SHA-512", USER, PASSWORD, context)


async def measure(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="cohort-security-bench-"))
    keystore, trusted = make_certificate(work)
    data_dir = work / "data"
    add_user(data_dir, work)
    ports = {"PLAINTEXT": free_port(), "SSL": free_port(), "SASL_SSL": free_port()}
    settings = {"listeners": ",".join(f"{p}://127.0.0.1:{ports[p]}" for p in PROTOCOLS),
                "ssl.keystore.location": keystore, "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    server = CohortServer(data_dir=data_dir, settings=settings, port=ports["PLAINTEXT"])
    try:
        targets = {}
        for protocol in PROTOCOLS:
            targets[protocol] = Target(protocol, "127.0.0.1", ports[protocol], pid=server.pid,
                                       security=client_security(protocol, trusted))
        await wait_until_serving(targets["PLAINTEXT"])
        session = await KafkaSession.open("127.0.0.1", ports["PLAINTEXT"])
        version = session.pick_version(OffsetCommitRequest.API_KEY, COMMIT_VERSION)
        await session.close()
        tag = f"s{int(time.time() * 1000) % 10**8}"
        templates = [RequestTemplate(simple_commit(group_name(tag, g), 1), version) for g in range(args.groups)]
        rounds: dict[str, list[dict]] = {p: [] for p in PROTOCOLS}
        for r in range(args.rounds):
            order = PROTOCOLS[r % len(PROTOCOLS):] + PROTOCOLS[:r % len(PROTOCOLS)]
            for protocol in order:
                outcome = await run_closed_loop(targets[protocol], templates, connections=args.connections,
                                                depth=args.depth, duration_s=args.duration, max_ops=5_000_000,
                                                warmup_s=1.0)
                latency = outcome.latencies.summary()
                rounds[protocol].append({"round": r + 1, "commits_per_s": round(outcome.throughput, 1),
                                         "p50_ms": latency["p50"], "p99_ms": latency["p99"],
                                         "errors": outcome.errors,
                                         "server_cpu_s": outcome.server.cpu_seconds})
                print(f"round {r + 1} {protocol:10s} {outcome.throughput:10.0f} commits/s", file=sys.stderr)
    finally:
        server.close()
    medians = {p: statistics.median(x["commits_per_s"] for x in rounds[p]) for p in PROTOCOLS}
    # Paired: each round's ratio to that round's PLAINTEXT run, which saw about the same machine load.
    paired = {p: statistics.median(x["commits_per_s"] / max(base["commits_per_s"], 1e-9)
                                   for x, base in zip(rounds[p], rounds["PLAINTEXT"])) for p in PROTOCOLS}
    return {"params": {"rounds": args.rounds, "duration_s": args.duration, "warmup_s": 1.0, "groups": args.groups,
                       "connections": args.connections, "in_flight_per_connection": args.depth,
                       "offsets_commit_version": version,
                       "flush_policy": "always", "sasl_mechanism": "SCRAM-SHA-512"},
            "rounds": rounds, "median_commits_per_s": medians,
            "ratio_to_plaintext": {p: round(medians[p] / medians["PLAINTEXT"], 3) for p in PROTOCOLS},
            "median_paired_ratio_to_plaintext": {p: round(paired[p], 3) for p in PROTOCOLS},
            "loadavg_end": Path("/proc/loadavg").read_text().split()[:3]}


FLOOD_MODES = ("quiet", "flood_spread", "flood_one_address")
PROBE_INTERVAL_S = 0.005


async def _one_guess(port: int, source: str, user: str, outcome: dict) -> None:
    writer = None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 10)
        session = KafkaSession(reader, writer)
        try:
            await session.request(SaslHandshakeRequest(mechanism="PLAIN"), 1, timeout=30)
            answer = await session.request(SaslAuthenticateRequest(
                auth_bytes=b"\x00" + user.encode() + b"\x00wrong-guess"), 1, timeout=30)
            outcome["refused" if answer.error_code == 58 else "other"] += 1
        finally:
            await session.close()
    except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
        outcome["errors"] += 1
        kind = type(exc).__name__
        outcome["error_kinds"][kind] = outcome["error_kinds"].get(kind, 0) + 1


async def _flood(port: int, rate: float, duration_s: float, addresses: int) -> dict:
    """Open-loop wrong guesses at `rate` a second for `duration_s`, from `addresses` loopback addresses."""
    outcome = {"started": 0, "refused": 0, "other": 0, "errors": 0, "error_kinds": {}}
    tasks = set()
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() - start < duration_s:
        n = outcome["started"]
        outcome["started"] += 1
        source = f"127.0.0.{2 + n % addresses}"
        task = loop.create_task(_one_guess(port, source, USER if n % 2 else "nobody", outcome))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        await asyncio.sleep(max(0.0, start + outcome["started"] / rate - loop.time()))
    if tasks:
        await asyncio.wait(tasks, timeout=30)
    return outcome


def _flood_process(port: int, rate: float, duration_s: float, addresses: int, results) -> None:
    # The guesser's own CPU would be on another machine: here it yields to the server and the probe.
    os.nice(10)
    results.put(asyncio.run(_flood(port, rate, duration_s, addresses)))


async def _probe(session: KafkaSession, duration_s: float) -> dict:
    """A signed-in client's Metadata round trips, one at a time, every PROBE_INTERVAL_S."""
    recorder = LatencyRecorder()
    loop = asyncio.get_running_loop()
    end = loop.time() + duration_s
    while loop.time() < end:
        began = time.perf_counter_ns()
        await session.request(MetadataRequest(topics=[]), 1, timeout=30)
        recorder.add(time.perf_counter_ns() - began)
        await asyncio.sleep(PROBE_INTERVAL_S)
    summary = recorder.summary()
    return {k: round(summary[k], 3) for k in ("p50", "p99", "max")} | {"samples": summary["count"]}


def _baseline_executable(ref: str, work: Path) -> list[str]:
    """`cohort` of git revision `ref`, exported next to the bench's files (its own package tree)."""
    tree = work / "baseline" / "cohort"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[1]), "archive", ref],
                             check=True, capture_output=True, timeout=60).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True, timeout=60)
    return ["env", f"PYTHONPATH={tree.parent}", sys.executable, "-m", "cohort.coordinator.cli.main"]


async def _measure_one(port: int, session: KafkaSession, mode: str, r: int, args, context) -> dict:
    """One window of `mode` against the server on `port`, probed through `session`."""
    flood = None
    results = context.Queue()
    if mode != "quiet":
        addresses = max(1, int(args.rate)) if mode == "flood_spread" else 1
        flood = context.Process(target=_flood_process,
                                args=(port, args.rate, args.duration + 1.0, addresses, results))
        flood.start()
        await asyncio.sleep(1.0)  # the flood reaches its rate before the window opens
    latency = await _probe(session, args.duration)
    entry = {"round": r + 1, **latency}
    if flood is not None:
        entry["guesses"] = await asyncio.get_running_loop().run_in_executor(None, results.get, True, 90)
        flood.join(30)
    return entry


async def measure_flood(args) -> dict:
    """Every build's server runs for the whole measurement; each round measures every build in every mode,
    builds and modes in an order that rotates from round to round (the machine's load drifts)."""
    work = Path(tempfile.mkdtemp(prefix="cohort-flood-bench-"))
    seed = work / "seed"
    add_user(seed, work)
    builds: dict[str, list[str] | None] = {"this": None}
    if args.baseline:
        builds[f"baseline {args.baseline}"] = _baseline_executable(args.baseline, work)
    servers, sessions, ports = {}, {}, {}
    rounds: dict[str, dict[str, list[dict]]] = {name: {mode: [] for mode in FLOOD_MODES} for name in builds}
    try:
        for index, (name, executable) in enumerate(builds.items()):
            data_dir = work / f"data-{index}"
            shutil.copytree(seed, data_dir)
            ports[name] = port = free_port()
            settings = {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}
            servers[name] = CohortServer(data_dir=data_dir, settings=settings, port=port, executable=executable)
            await wait_until_serving(Target(name, "127.0.0.1", port, pid=servers[name].pid))
            sessions[name] = await KafkaSession.open("127.0.0.1", port,
                                                     security=ClientSecurity("SASL_PLAINTEXT", "PLAIN", USER, PASSWORD))
            await _probe(sessions[name], 1.0)  # warm-up
        context = multiprocessing.get_context("spawn")
        names = list(builds)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                for mode in FLOOD_MODES[r % len(FLOOD_MODES):] + FLOOD_MODES[:r % len(FLOOD_MODES)]:
                    entry = await _measure_one(ports[name], sessions[name], mode, r, args, context)
                    rounds[name][mode].append(entry)
                    print(f"round {r + 1} {name:18s} {mode:18s} p50 {entry['p50']:.2f} ms p99 {entry['p99']:.2f} ms "
                          f"max {entry['max']:.1f} ms {entry.get('guesses', '')}", file=sys.stderr)
        for session in sessions.values():
            await session.close()
    finally:
        for server in servers.values():
            server.close()
    results = {name: {"rounds": rounds[name],
                      "median_ms": {mode: {k: round(statistics.median(x[k] for x in rounds[name][mode]), 3)
                                           for k in ("p50", "p99", "max")} for mode in FLOOD_MODES}}
               for name in builds}
    return {"params": {"rounds": args.rounds, "duration_s": args.duration, "guesses_per_s": args.rate,
                       "probe": f"Metadata v1, one at a time, every {PROBE_INTERVAL_S * 1000:.0f} ms",
                       "credential": "SCRAM-SHA-512, 8192 iterations", "cpus": os.cpu_count(),
                       "guesser": "another process at nice 10"},
            "builds": results, "loadavg_end": Path("/proc/loadavg").read_text().split()[:3]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.security_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds per protocol and round")
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="write results.json here")
    parser.add_argument("--plain-flood", action="store_true",
                        help="a signed-in client's latency, quiet and under wrong SASL/PLAIN guesses")
    parser.add_argument("--rate", type=float, default=120.0, help="--plain-flood: wrong guesses a second")
    parser.add_argument("--baseline", default=None, help="--plain-flood: also measure this git revision")
    args = parser.parse_args(argv)
    install_uvloop()
    results = asyncio.run(measure_flood(args) if args.plain_flood else measure(args))
    text = json.dumps(results, indent=2)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
