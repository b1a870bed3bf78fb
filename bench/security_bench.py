"""Commit throughput over TLS and SASL_SSL against PLAINTEXT, on one server in one run.

    python -m bench.security_bench [--rounds 3] [--duration 8] [--workers 1] [--out DIR]

One `cohort serve` with three listeners on loopback -- PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512, a
user made with `cohort users add --data-dir` before the start) -- and a certificate made here with
`openssl`. Each round runs the simple-1p commit load (OffsetCommit v2, generation -1, G groups, C
connections x D in flight) through each listener in turn, the order rotating from round to round so
drift on a shared machine does not favour one protocol. Connections are opened (TLS handshake, SASL
exchange) before the measured window, so the numbers are steady-state cost per request. The report
gives each protocol's median over the rounds, the ratio of medians to PLAINTEXT and the median of the
per-round ratios (each protocol against the PLAINTEXT run of the same round, which saw about the same
machine load); on a shared machine use many short rounds and read the paired ratios.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cohort.client.security import ClientSecurity
from cohort.protocol.messages import OffsetCommitRequest

from bench.closed_loop import run_closed_loop
from bench.targets import CohortServer, Target, cohort_executable, free_port, wait_until_serving
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.security_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds per protocol and round")
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="write results.json here")
    args = parser.parse_args(argv)
    install_uvloop()
    results = asyncio.run(measure(args))
    text = json.dumps(results, indent=2)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
