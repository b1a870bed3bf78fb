"""Helpers for the client tests: `cohort serve` and `cohort` CLI subprocesses.

The server runs on an ephemeral port with a tmp data dir, no initial
rebalance delay and a 1 s minimum session timeout so membership tests can use
short sessions. Readiness is "the port accepts connections", bounded in time.
(A uniquely named module rather than `conftest`, which several test
directories have: `from conftest import …` could pick another directory's.)
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

COHORT = Path(sys.executable).with_name("cohort")

TEST_SERVER_FLAGS = (
    "--group.initial.rebalance.delay.ms", "0",
    "--group.min.session.timeout.ms", "1000",
)


def cohort_command(*args: str) -> list[str]:
    if COHORT.exists():
        return [str(COHORT), *args]
    return [sys.executable, "-m", "cohort.coordinator.cli", *args]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class CohortServe:
    """`cohort serve` in a subprocess; `.bootstrap` is its address."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.extra = extra
        self.log_path = data_dir.parent / f"cohort-serve-{self.port}.log"
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "CohortServe":
        args = cohort_command(
            "serve", "--listen", self.bootstrap, "--data-dir", str(self.data_dir),
            "--metrics", f"127.0.0.1:{free_port()}", *TEST_SERVER_FLAGS, *self.extra,
        )
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=clean_env())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"cohort serve exited with {self.process.returncode}:\n{self.output()}")
            if port_accepts(self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"cohort serve did not accept connections within {timeout} s:\n{self.output()}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()
        self.process = None


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the real `cohort` command and capture its output."""
    return subprocess.run(cohort_command(*args), capture_output=True, text=True, timeout=timeout, env=clean_env())


def assert_one_line_error(result: subprocess.CompletedProcess, exit_code: int, *fragments: str) -> str:
    """A failure is exactly one stderr line starting with 'Error:' (after any WARN lines), never a traceback."""
    assert result.returncode == exit_code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if not line.startswith("WARN:")]
    assert len(errors) == 1 and errors[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    return errors[0]
