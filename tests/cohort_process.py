"""The one launcher of the real ``cohort`` console script, for every test that runs it as a process.

`CohortServer` starts ``cohort serve`` on ephemeral Kafka and metrics ports with its own data dir and
waits, bounded in time, until ``/health`` answers 200; `run_cohort` runs any other sub-command. The
coordinator, client and Spark tests all import it from here (``tests/conftest.py`` puts this folder
on the import path).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from cohort.protocol.compiled import PURE_PYTHON_ENV

COHORT = Path(sys.executable).with_name("cohort")


def cohort_command(*args: str) -> list[str]:
    if COHORT.exists():
        return [str(COHORT), *args]
    return [sys.executable, "-m", "cohort.coordinator.cli.main", *args]


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without any COHORT_* setting leaking in (the pure-Python switch is kept:
    a pure run of the tests runs pure servers)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_") or k == PURE_PYTHON_ENV}
    env.update(extra)
    return env


def run_cohort(*args: str, env: dict[str, str] | None = None, timeout: float = 30,
               input: str | None = None) -> subprocess.CompletedProcess:
    """`cohort ARGS`; `input` is its stdin (None: no stdin at all)."""
    return subprocess.run(
        cohort_command(*args), env=env or clean_env(), capture_output=True, text=True, timeout=timeout,
        input=input, stdin=subprocess.DEVNULL if input is None else None,
    )


def add_scram_users(data_dir: Path, users: dict[str, str], mechanism: str = "SCRAM-SHA-512") -> None:
    """`cohort users add` of each user with its password (from a file beside `data_dir`) into an offline data dir."""
    for user, password in users.items():
        secret = Path(data_dir).parent / f"{user}.password"
        secret.write_text(password + "\n")
        done = run_cohort("users", "add", user, "--mechanism", mechanism, "--password-file", str(secret),
                          "--data-dir", str(data_dir))
        assert done.returncode == 0, done.stderr
        assert password not in done.stdout + done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int, taken: "list[int] | tuple[int, ...]" = ()) -> list[int]:
    """`count` free ports, distinct from each other and from `taken` (the kernel may hand the same
    ephemeral port out twice once it is closed)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports and port not in taken:
            ports.append(port)
    return ports


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class CohortServer:
    """A ``cohort serve`` subprocess on ephemeral ports with its own data dir."""

    reserved_ports: tuple[int, ...] = ()  # ports a subclass took for itself before this runs

    def __init__(self, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port, self.metrics_port = free_ports(2, taken=self.reserved_ports)
        self.args = [
            "serve", "--listen", f"127.0.0.1:{self.port}", "--metrics", f"127.0.0.1:{self.metrics_port}",
            "--data-dir", str(data_dir), "--group.initial.rebalance.delay.ms", "0", *extra,
        ]
        self.env = env or clean_env()
        self.stderr_path = data_dir.parent / f"cohort-{self.port}.stderr"
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def given_ports(self) -> tuple[int, ...]:
        """Every port this server was given (a test adding a listener picks one outside them)."""
        return (self.port, self.metrics_port, *self.reserved_ports)

    def start(self, timeout: float = 30) -> "CohortServer":
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> "CohortServer":
        """Start the process without waiting for it to become ready."""
        self._stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(
            cohort_command(*self.args), env=self.env, stdout=subprocess.DEVNULL, stderr=self._stderr
        )
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"cohort serve exited {self.process.returncode}: {self.stderr()}")
            try:
                status, _ = http_get(f"http://127.0.0.1:{self.metrics_port}/health", timeout=1)
            except OSError:
                status = None
            if status == 200:
                return
            time.sleep(0.05)
        raise AssertionError(f"cohort serve not ready in {timeout}s: {self.stderr()}")

    def scrape(self) -> str:
        status, body = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        assert status == 200
        return body

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._stderr.close()

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text()
        except OSError:
            return ""

    def output(self) -> str:
        """The end of the server's log, for an assertion message."""
        return self.stderr()[-4000:]

    def stop(self) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                return self.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
                raise
        self._stderr.close()
        return self.process.returncode


def metric_value(exposition: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
