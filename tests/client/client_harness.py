"""Helpers for the client tests: `cohort serve` and `cohort` CLI subprocesses.

The server runs on an ephemeral port with a tmp data dir, no initial
rebalance delay and a 1 s minimum session timeout so membership tests can use
short sessions. Readiness is the shared launcher's: ``/health`` answers 200, bounded in time.
(A uniquely named module rather than `conftest`, which several test
directories have: `from conftest import …` could pick another directory's.)
"""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from cohort_process import CohortServer, clean_env, cohort_command, free_port

__all__ = ["CohortServe", "TEST_SERVER_FLAGS", "clean_env", "cohort_command", "free_port", "port_accepts", "run_cli"]

# Short sessions for the membership tests (the launcher already sets no initial rebalance delay).
TEST_SERVER_FLAGS = ("--group.min.session.timeout.ms", "1000")


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class CohortServe(CohortServer):
    """`cohort serve` (the shared launcher) with the client tests' flags; `.bootstrap` is its address."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        super().__init__(data_dir, *TEST_SERVER_FLAGS, *extra)


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
