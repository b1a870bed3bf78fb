"""A real 3-member etcd cluster on loopback ports, for the cluster-mode tests.

Each member is Debian's `etcd` binary (package `etcd-server`, installed by scripts/test) with its own
data dir under the test's temporary directory and its own client and peer ports. Every wait is a
bounded poll; `stop()` kills whatever is still running. Members can be killed, paused and restarted
to test leader loss and quorum loss.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from cohort_process import free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
MAX_TXN_OPS = 1024
MAX_REQUEST_BYTES = 4 * 1024 * 1024


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen | None = None
    _log: object = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text()[-3000:]
        except OSError:
            return ""

    def post(self, path: str, body: dict, timeout: float = 2.0) -> dict:
        """One call to etcd's v3 JSON gateway (the tests observe the cluster and act as its operator; never Cohort)."""
        request = urllib.request.Request(f"http://{self.endpoint}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())


class EtcdCluster:
    def __init__(self, base_dir: Path, size: int = 3, extra_args: tuple[str, ...] = ()) -> None:
        """`extra_args`: more etcd flags for every member (e.g. a small `--quota-backend-bytes`)."""
        self.extra_args = tuple(extra_args)
        self.base_dir = base_dir
        self.size = size
        self._choose_ports()

    def _choose_ports(self) -> None:
        self.members = [
            EtcdMember(f"m{i}", free_port(), free_port(), self.base_dir / f"m{i}", self.base_dir / f"m{i}.log")
            for i in range(self.size)
        ]
        self.token = f"cohort-test-{self.members[0].client_port}"

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def url(self) -> str:
        """The `--cluster` value for `cohort serve`."""
        return "etcd://" + ",".join(self.endpoints)

    def _command(self, member: EtcdMember) -> list[str]:
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        return [
            ETCD, "--name", member.name, "--data-dir", str(member.data_dir),
            "--listen-client-urls", f"http://{member.endpoint}",
            "--advertise-client-urls", f"http://{member.endpoint}",
            "--listen-peer-urls", member.peer_url, "--initial-advertise-peer-urls", member.peer_url,
            "--initial-cluster", initial, "--initial-cluster-token", self.token,
            "--initial-cluster-state", "new",
            # Short timings so elections finish quickly on a busy 2-core machine.
            "--heartbeat-interval", "100", "--election-timeout", "1000",
            # Larger request limits than etcd's defaults, as bench/cluster.py and scripts/cluster run it
            # (nodes that keep the default `cluster.etcd.max.txn.ops` 128 stay within them).
            "--max-txn-ops", str(MAX_TXN_OPS), "--max-request-bytes", str(MAX_REQUEST_BYTES),
            "--logger", "zap", "--log-level", os.environ.get("COHORT_TEST_ETCD_LOG_LEVEL", "warn"), *self.extra_args,
        ]

    def start_member(self, member: EtcdMember) -> None:
        member._log = open(member.log_path, "a")
        member.process = subprocess.Popen(self._command(member), stdout=member._log, stderr=subprocess.STDOUT)

    def start(self, timeout: float = 60, attempts: int = 3) -> "EtcdCluster":
        """Start every member; when one could not bind its port (free_port() chose it, and an outgoing
        connection may take it before etcd binds it), start them all again on fresh ports."""
        for attempt in range(1, attempts + 1):
            for member in self.members:
                self.start_member(member)
            try:
                self.wait_healthy(timeout)
                return self
            except AssertionError:
                if attempt == attempts or "address already in use" not in self.logs():
                    raise
            self.stop()
            for member in self.members:
                shutil.rmtree(member.data_dir, ignore_errors=True)
                member.log_path.unlink(missing_ok=True)
            self._choose_ports()
        return self

    def kill(self, member: EtcdMember) -> None:
        """kill -9 one member (its data dir stays, so `restart` brings it back)."""
        if member.running():
            member.process.send_signal(signal.SIGKILL)
            member.process.wait(10)
        if member._log:
            member._log.close()
            member._log = None

    def restart(self, member: EtcdMember) -> None:
        self.kill(member)
        self.start_member(member)

    def status(self, member: EtcdMember) -> dict | None:
        """The member's /v3/maintenance/status answer, or None when it does not answer."""
        try:
            return member.post("/v3/maintenance/status", {}, timeout=1.0)
        except (OSError, ValueError):
            return None

    def leader(self, timeout: float = 20) -> EtcdMember:
        """The member that is raft leader now (bounded wait until one is elected)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for member in self.members:
                if not member.running():
                    continue
                status = self.status(member)
                if status and status.get("leader") and status["leader"] == status["header"]["member_id"]:
                    return member
            time.sleep(0.1)
        raise AssertionError(f"no etcd leader within {timeout}s: {self.logs()}")

    def wait_healthy(self, timeout: float = 60) -> None:
        """Every running member answers and a quorum write goes through."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for member in self.members:
                if member.process is not None and member.process.poll() is not None and member._log:
                    raise AssertionError(f"etcd {member.name} exited: {member.log_tail()}")
            try:
                if all(self.status(m) for m in self.members if m.running()):
                    self.members[0 if self.members[0].running() else 1].post(
                        "/v3/kv/put", {"key": "X19oZWFsdGhfXw==", "value": ""}, timeout=2.0)
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"etcd cluster not healthy within {timeout}s: {self.logs()}")

    def wipe(self) -> None:
        """Delete every key (between tests sharing the cluster)."""
        member = next(m for m in self.members if m.running())
        member.post("/v3/kv/deleterange", {"key": "AA==", "range_end": "AA=="}, timeout=5.0)

    def logs(self) -> str:
        return "\n".join(f"--- {m.name}\n{m.log_tail()}" for m in self.members)

    def stop(self) -> None:
        for member in self.members:
            self.kill(member)
