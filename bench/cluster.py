"""`cohort-clusterN`: a local etcd (3 members) and N `cohort serve --cluster` nodes, as one bench target.

The target's address is node 1; workloads find each group's coordinator with FindCoordinator (as
with `--workers N`). The kill-9 benchmarks (`bench.failover`) kill and restart single nodes. etcd
runs as a deployment would (its own fsync'd WAL, periodic compaction), on loopback ports, in a
temporary directory removed on close.
"""
from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cohort.coordinator.cluster.ownership import preferred_owner

from bench.targets import (
    Target,
    TargetError,
    _child_priority,
    _cohort_version,
    _git_revision,
    cohort_executable,
    free_port,
    wait_for_port,
)

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCD_MEMBERS = 3
# etcd's request limits for the bench (its defaults: 128 operations, 1.5 MiB), and the nodes told the same
# (`cluster.etcd.max.txn.ops`, `cluster.etcd.max.request.bytes`), as docs/cluster.md advises a deployment.
ETCD_MAX_TXN_OPS = 1024
ETCD_MAX_REQUEST_BYTES = 4 * 1024 * 1024


@dataclass
class _Process:
    name: str
    command: list[str]
    log_path: Path
    process: subprocess.Popen | None = None

    def spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=_child_priority)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int, wait_s: float = 15) -> None:
        if self.running():
            self.process.send_signal(signum)
            try:
                self.process.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@dataclass
class ClusterNode(_Process):
    node_id: int = 0
    port: int = 0
    metrics_port: int = 0


class ClusterTarget(Target):
    def __init__(self, nodes: int = 3, *, lease_ttl_ms: int = 2000, settings: dict | None = None,
                 ready_timeout_s: float = 60.0, etcd_compaction: bool = True) -> None:
        super().__init__(name=f"cohort-cluster{nodes}", host="127.0.0.1", port=0)
        self.workdir = Path(tempfile.mkdtemp(prefix="cohort-cluster-bench-"))
        self.lease_ttl_ms = lease_ttl_ms
        self.ready_timeout_s = ready_timeout_s
        self.version = f"cohort {_cohort_version()} ({_git_revision() or 'no git'}), etcd {etcd_version()}"
        self.etcd_compaction = etcd_compaction  # off: etcd keeps every revision (the durability checker reads them)
        self.etcd: list[_Process] = []
        self.nodes: list[ClusterNode] = []
        try:
            self._start_etcd()
            merged = {"group.initial.rebalance.delay.ms": 0, "log-level": "WARNING",
                      "cluster.lease.ttl.ms": lease_ttl_ms, "cluster.etcd.max.txn.ops": ETCD_MAX_TXN_OPS,
                      "cluster.etcd.max.request.bytes": ETCD_MAX_REQUEST_BYTES, **(settings or {})}
            for node_id in range(1, nodes + 1):
                port = free_port()
                command = [*cohort_executable(), "serve", "--cluster", self.cluster_url, "--node-id", str(node_id),
                           "--listen", f"127.0.0.1:{port}", "--advertised", f"127.0.0.1:{port}"]
                metrics_port = free_port()
                command += ["--metrics", f"127.0.0.1:{metrics_port}"]
                for name, value in merged.items():
                    command += [f"--{name}", str(value)]
                self.nodes.append(ClusterNode(f"node{node_id}", command, self.workdir / f"node{node_id}.log",
                                              node_id=node_id, port=port, metrics_port=metrics_port))
            for node in self.nodes:
                self.restart(node.node_id)
            if self.nodes:  # none: etcd alone (bench.etcd_txn_bench)
                self.port = self.nodes[0].port
                self.command = self.nodes[0].command
                self.wait_all_owned(ready_timeout_s)
        except BaseException:
            self.close()
            raise

    # --- etcd ----------------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        clients = [free_port() for _ in range(ETCD_MEMBERS)]
        peers = [free_port() for _ in range(ETCD_MEMBERS)]
        initial = ",".join(f"e{i}=http://127.0.0.1:{peers[i]}" for i in range(ETCD_MEMBERS))
        self.etcd_endpoints = [f"127.0.0.1:{port}" for port in clients]
        self.cluster_url = "etcd://" + ",".join(self.etcd_endpoints)
        for i in range(ETCD_MEMBERS):
            command = [
                ETCD, "--name", f"e{i}", "--data-dir", str(self.workdir / f"etcd-{i}"),
                "--listen-client-urls", f"http://127.0.0.1:{clients[i]}",
                "--advertise-client-urls", f"http://127.0.0.1:{clients[i]}",
                "--listen-peer-urls", f"http://127.0.0.1:{peers[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peers[i]}",
                "--initial-cluster", initial, "--initial-cluster-token", f"bench-{clients[0]}",
                "--initial-cluster-state", "new",
                *(["--auto-compaction-mode", "periodic", "--auto-compaction-retention", "5m"]
                  if self.etcd_compaction else []),
                "--max-txn-ops", str(ETCD_MAX_TXN_OPS), "--max-request-bytes", str(ETCD_MAX_REQUEST_BYTES),
                "--logger", "zap", "--log-level", "warn",
            ]
            member = _Process(f"etcd{i}", command, self.workdir / f"etcd-{i}.log")
            member.spawn()
            self.etcd.append(member)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.etcd_post("/v3/kv/put", {"key": base64.b64encode(b"bench/ready").decode(), "value": ""})
                return
            except OSError:
                time.sleep(0.1)
        raise TargetError(f"etcd not ready within 60 s (logs in {self.workdir})")

    def etcd_post(self, path: str, body: dict, timeout: float = 2.0) -> dict:
        """One call to etcd's v3 JSON gateway on any member that answers (observing only)."""
        last: OSError | None = None
        for endpoint in self.etcd_endpoints:
            request = urllib.request.Request(f"http://{endpoint}{path}", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"}, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    return json.loads(response.read())
            except OSError as exc:
                last = exc
        raise last or OSError("no etcd endpoint")

    def owners(self) -> dict[int, int]:
        """Partition -> owning node id, as etcd has it now."""
        answer = self.etcd_post("/v3/kv/range", {"key": base64.b64encode(b"owner/").decode(),
                                                 "range_end": base64.b64encode(b"owner0").decode()})
        owners = {}
        for kv in answer.get("kvs", []):
            partition = int(base64.b64decode(kv["key"])[len(b"owner/"):])
            owners[partition] = int(base64.b64decode(kv["value"]))
        return owners

    def loaded(self) -> set[int]:
        """Partitions whose owner published "loaded" under its lease."""
        answer = self.etcd_post("/v3/kv/range", {"key": base64.b64encode(b"load/").decode(),
                                                 "range_end": base64.b64encode(b"load0").decode()})
        return {int(base64.b64decode(kv["key"])[len(b"load/"):]) for kv in answer.get("kvs", [])
                if base64.b64decode(kv["value"]) == b"loaded"}

    def wait_all_owned(self, timeout_s: float, nodes: set[int] | None = None) -> None:
        """Every partition loaded by its preferred owner among `nodes` (default: every running node)."""
        wanted = nodes if nodes is not None else {n.node_id for n in self.nodes if n.running()}
        preferred = {p: preferred_owner(p, wanted) for p in range(50)}
        deadline = time.monotonic() + timeout_s
        owners: dict[int, int] = {}
        while time.monotonic() < deadline:
            try:
                owners = self.owners()
                if owners == preferred and len(self.loaded()) == 50:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise TargetError(f"partitions not spread over nodes {sorted(wanted)} within {timeout_s:.0f} s: {owners}")

    # --- nodes ---------------------------------------------------------------------------------

    def node(self, node_id: int) -> ClusterNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    @property
    def bootstrap(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", n.port) for n in self.nodes]

    def kill(self, node_id: int) -> float:
        """kill -9 one node; the time.monotonic() just before the signal."""
        node = self.node(node_id)
        at = time.monotonic()
        node.signal(signal.SIGKILL)
        return at

    def restart(self, node_id: int) -> None:
        node = self.node(node_id)
        node.signal(signal.SIGKILL)
        node.spawn()
        wait_for_port("127.0.0.1", node.port, self.ready_timeout_s, node.process, node.log_path)

    def close(self) -> None:
        for node in self.nodes:
            node.signal(signal.SIGTERM)
        for member in self.etcd:
            member.signal(signal.SIGTERM)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    @property
    def sampled_pids(self) -> list[int]:
        """Every etcd member and node: the CPU a run reports as the server's is the whole cluster's."""
        return [p.process.pid for p in (*self.etcd, *self.nodes) if p.running()]

    def describe(self) -> dict:
        return {**super().describe(), "nodes": len(self.nodes), "etcd_members": len(self.etcd),
                "lease_ttl_ms": self.lease_ttl_ms, "etcd_compaction": self.etcd_compaction,
                "etcd_max_txn_ops": ETCD_MAX_TXN_OPS, "etcd_max_request_bytes": ETCD_MAX_REQUEST_BYTES}


def etcd_version() -> str:
    try:
        out = subprocess.run([ETCD, "--version"], capture_output=True, text=True, timeout=10).stdout
        return out.splitlines()[0].split(":", 1)[1].strip() if out else "?"
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"

