"""The console under attack: descriptors held by dribbling connections, Kafka latency beside them, and a
correct sign-in's latency while another address guesses passwords; this build against a baseline.

    python -m bench.console_bounds [--rounds 3] [--baseline /work/base/.venv/bin/cohort] [--out FILE]

Each round runs both builds (the order alternates), a fresh `cohort serve` each time:

* dribble: the server under RLIMIT_NOFILE = 400, its console on loopback. 500 connections from 50 loopback
  addresses (127.0.0.x, 10 each) send part of a request's header and one byte a second on; any the server
  closes is opened again at once, so 500 are always trying. After 2 s the server's open descriptors are
  counted (/proc/PID/fd; the figure is the count beyond the quiet server's); then for 8 s a Kafka probe opens a new connection 20 times a second and sends
  ApiVersions (3 s timeout; a timeout counts as 3 s and as a failure): the figure is the p99 of connect +
  round trip. The server's log size is kept too.
* sign-in: a SASL_PLAINTEXT listener with PLAIN, five users. One address (127.0.0.3) sends wrong passwords
  for `admin` 10 times a second, open loop (a new connection each); after 3 s, four users sign in with
  their correct password from other addresses (127.0.0.2, .4), 1.5 s apart: the figure is their latency
  (and whether they got 200).

Medians over the rounds are printed and written as JSON.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import resource
import select
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.targets import free_port

DESCRIPTOR_LIMIT = 400
DRIBBLERS = 500
SOURCES = 50
PARTIAL_HEADER = b"GET /api/groups HTTP/1.1\r\nHost: 127.0.0.1\r\n"
PROBE_TIMEOUT_S = 3.0
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret",
         "dave": "dave-secret"}


def this_cohort() -> str:
    return str(Path(sys.executable).with_name("cohort"))


class Served:
    """One `cohort serve` of the given executable with a console; stopped on exit."""

    def __init__(self, cohort: str, *extra: str, descriptor_limit: int | None = None, users: bool = False) -> None:
        self.cohort = cohort
        self.dir = Path(tempfile.mkdtemp(prefix="cohort-console-bench-"))
        self.port, self.metrics, self.console, self.sasl = (free_port() for _ in range(4))
        data = self.dir / "data"
        if users:
            for user, password in USERS.items():
                secret = self.dir / f"{user}.pw"
                secret.write_text(password + "\n")
                subprocess.run([cohort, "users", "add", user, "--mechanism", "SCRAM-SHA-256", "--password-file",
                                str(secret), "--data-dir", str(data)], check=True, capture_output=True)
        args = [cohort, "serve", "--data-dir", str(data), "--metrics", f"127.0.0.1:{self.metrics}",
                "--console.listen", f"127.0.0.1:{self.console}", *extra]
        if users:
            args += ["--listeners", f"PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl}",
                     "--sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256", "--console.allow.insecure.sign.in", "true"]
        else:
            args += ["--listen", f"127.0.0.1:{self.port}"]
        self.log = self.dir / "stderr"

        def limit() -> None:
            if descriptor_limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (descriptor_limit, descriptor_limit))

        self._log_file = open(self.log, "w")
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self._log_file, preexec_fn=limit)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{cohort} serve exited: {self.log.read_text()[-2000:]}")
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.metrics, timeout=1)
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    time.sleep(1.0)  # (the offsets log's files are all open by then)
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._log_file.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Dribblers(threading.Thread):
    """`DRIBBLERS` connections always trying: partial header, a byte a second, reopened when closed."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stopping = threading.Event()
        self.socks: list[socket.socket | None] = [None] * DRIBBLERS
        self.reopened = 0

    def _open(self, index: int) -> socket.socket | None:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.bind((f"127.0.0.{10 + index % SOURCES}", 0))
            sock.connect_ex(("127.0.0.1", self.port))
        except OSError:
            sock.close()
            return None
        return sock

    def run(self) -> None:
        sent_header: set[int] = set()
        while not self.stopping.is_set():
            for index, sock in enumerate(self.socks):
                if sock is None:
                    self.socks[index] = self._open(index)
                    sent_header.discard(index)
                    continue
                try:
                    readable, _, _ = select.select([sock], [], [], 0)
                    if readable and sock.recv(4096) == b"":
                        raise ConnectionResetError
                    sock.send(b"X" if index in sent_header else PARTIAL_HEADER)
                    sent_header.add(index)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    sock.close()
                    self.socks[index] = None
                    self.reopened += 1
            self.stopping.wait(1.0)

    def finish(self) -> None:
        self.stopping.set()
        self.join(30)
        for sock in self.socks:
            if sock is not None:
                sock.close()


def api_versions_probe(port: int, correlation: int) -> tuple[float, bool]:
    """(seconds, answered) for a new connection and one ApiVersions v0 round trip."""
    client_id = b"console-bench"
    body = struct.pack(">hhih", 18, 0, correlation, len(client_id)) + client_id
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT_S) as sock:
            sock.settimeout(max(0.01, PROBE_TIMEOUT_S - (time.monotonic() - started)))
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = b""
            while len(head) < 4:
                chunk = sock.recv(4 - len(head))
                if not chunk:
                    raise ConnectionResetError
                head += chunk
            size = struct.unpack(">i", head)[0]
            got = 0
            while got < size:
                chunk = sock.recv(size - got)
                if not chunk:
                    raise ConnectionResetError
                got += len(chunk)
        return time.monotonic() - started, True
    except OSError:
        return PROBE_TIMEOUT_S, False


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def dribble_round(cohort: str) -> dict:
    with Served(cohort, descriptor_limit=DESCRIPTOR_LIMIT) as served:
        quiet = served.descriptors()
        dribblers = Dribblers(served.console)
        dribblers.start()
        try:
            time.sleep(2.0)
            held = served.descriptors()
            timings, failures = [], 0
            end = time.monotonic() + 8.0
            count = 0
            while time.monotonic() < end:
                count += 1
                seconds, answered = api_versions_probe(served.port, count)
                timings.append(seconds)
                failures += not answered
                time.sleep(max(0.0, 0.05 - seconds))
        finally:
            dribblers.finish()
        return {"descriptors_quiet": quiet, "descriptors_held": held - quiet, "kafka_p99_ms": p99(timings) * 1000,
                "kafka_p50_ms": statistics.median(timings) * 1000, "kafka_probes": len(timings),
                "kafka_failures": failures, "log_bytes": served.log.stat().st_size}


def sign_in(console: int, source: str, user: str, password: str) -> tuple[int, float]:
    connection = http.client.HTTPConnection("127.0.0.1", console, timeout=30, source_address=(source, 0))
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    started = time.monotonic()
    try:
        connection.request("GET", "/api/groups", headers={"Authorization": f"Basic {token}"})
        response = connection.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    except OSError:
        return 0, time.monotonic() - started
    finally:
        connection.close()


def sign_in_round(cohort: str) -> dict:
    with Served(cohort, users=True) as served:
        stopping = threading.Event()
        statuses: list[int] = []

        def guess(count: int) -> None:
            statuses.append(sign_in(served.console, "127.0.0.3", "admin", f"guess-{count}")[0])

        def guesser() -> None:
            started, count = time.monotonic(), 0
            while not stopping.is_set():
                count += 1
                threading.Thread(target=guess, args=(count,), daemon=True).start()
                stopping.wait(max(0.0, started + count / 10 - time.monotonic()))

        thread = threading.Thread(target=guesser, daemon=True)
        thread.start()
        try:
            time.sleep(3.0)
            results = []
            for user, source in (("alice", "127.0.0.2"), ("bob", "127.0.0.4"), ("carol", "127.0.0.2"),
                                 ("admin", "127.0.0.4")):
                results.append(sign_in(served.console, source, user, USERS[user]))
                time.sleep(1.5)
        finally:
            stopping.set()
            thread.join(30)
        latencies = [seconds * 1000 for _, seconds in results]
        return {"sign_in_ms_median": statistics.median(latencies), "sign_in_ms_max": max(latencies),
                "sign_in_statuses": [status for status, _ in results],
                "guesses_answered": {str(s): statuses.count(s) for s in sorted(set(statuses))}}


def median_of(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="/work/base/.venv/bin/cohort")
    parser.add_argument("--out", default="bench/results/console-bounds.json")
    args = parser.parse_args(argv)
    builds = {"this": this_cohort(), "baseline": args.baseline}
    rounds: dict[str, list[dict]] = {name: [] for name in builds}
    for number in range(args.rounds):
        order = list(builds) if number % 2 == 0 else list(reversed(builds))
        for name in order:
            result = dribble_round(builds[name])
            result.update(sign_in_round(builds[name]))
            rounds[name].append(result)
            print(f"round {number + 1} {name}: {json.dumps(result)}", flush=True)
    summary = {}
    for name, results in rounds.items():
        summary[name] = {key: median_of(results, key) for key in (
            "descriptors_quiet", "descriptors_held", "kafka_p50_ms", "kafka_p99_ms", "kafka_failures", "log_bytes",
            "sign_in_ms_median", "sign_in_ms_max")}
    for key in ("descriptors_held", "kafka_p99_ms", "sign_in_ms_median", "sign_in_ms_max"):
        base = summary["baseline"][key]
        summary.setdefault("ratio_this_to_baseline", {})[key] = summary["this"][key] / base if base else None
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(["python -m bench.console_bounds", *(argv or sys.argv[1:])]),
                               "builds": builds, "rounds": rounds, "medians": summary}, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
