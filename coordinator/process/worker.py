"""One worker of `cohort serve --workers N`: a whole coordinator node over its share of the partitions.

The supervisor (`cohort.coordinator.process.supervisor`) starts ``python -m cohort.coordinator.process.worker SPEC``
with the worker's Kafka listening socket already bound (inherited descriptor) and a pipe to report on.
SPEC (JSON) carries the supervisor's effective settings, this worker's index and every worker's node.
The worker is then an ordinary `Daemon` except that:

* it does not take the data-dir lock (the supervisor holds it); its offsets log locks the partition
  directories it loads and writes journals of its own (`cohort.coordinator.log`);
* it serves ``/metrics`` and ``/health`` on an ephemeral 127.0.0.1 port and writes that port to the
  pipe, so the supervisor can aggregate them on the one ``--metrics`` address;
* it exits when the supervisor dies (parent-death signal), so no orphan keeps partitions locked;
* the supervisor tells it which workers are down (a JSON line ``{"down": [node ids]}`` on a second
  pipe): their partitions have no owner meanwhile, so FindCoordinator answers COORDINATOR_NOT_AVAILABLE
  and Metadata leaves them out, as Kafka does while a dead broker's partitions fail over;
* it reaches the other workers over the worker link (`cohort.coordinator.server.peers.PeerLink`: a loopback
  port of its own, also bound by the supervisor, and the secret of this start in its environment), and
  its credentials and ACLs are worker 0's, relayed through the same pipes
  (`cohort.coordinator.security.worker_sync`).
"""
from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import logging
import json
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.config_sources import EffectiveConfig
from cohort.coordinator.process.daemon import Daemon
from cohort.coordinator.contracts.ownership import Node
from cohort.coordinator.security.console_sign_ins import CONSOLE_SIGN_INS
from cohort.coordinator.server.peers import LINK_SECRET_ENV, PeerLink
from cohort.coordinator.security.worker_sync import WorkerSecurity
from cohort.coordinator.server.static_ownership import StaticOwnership

_PR_SET_PDEATHSIG = 1
PIPE_LINE_LIMIT = 1 << 28  # a line on a worker's pipes (worker 0's security state is one line)
log = logging.getLogger("cohort.coordinator.process.worker")


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a worker is told by its supervisor."""

    index: int
    nodes: list[Node]
    settings: dict[str, Any]  # CoordinatorConfig fields, already this worker's (listeners, node.id, metrics)
    listen_fds: list[int]
    status_fd: int  # the worker writes {"metrics_port": P}
    control_fd: int  # the supervisor writes {"down": [node ids]}
    supervisor_pid: int
    down: list[int]  # node ids of the workers down when this one starts
    link_fd: int  # its loopback port of the worker link, bound
    link_ports: list[int]  # every worker's, in the order of `nodes`

    def to_json(self) -> str:
        return json.dumps({
            "index": self.index, "nodes": [[n.node_id, n.host, n.port, [list(entry) for entry in n.listeners]]
                                           for n in self.nodes],
            "settings": self.settings, "listen_fds": self.listen_fds, "status_fd": self.status_fd,
            "control_fd": self.control_fd, "supervisor_pid": self.supervisor_pid, "down": self.down,
            "link_fd": self.link_fd, "link_ports": self.link_ports})

    @classmethod
    def from_json(cls, text: str) -> "WorkerSpec":
        doc = json.loads(text)
        nodes = [Node(n[0], n[1], n[2], tuple(tuple(entry) for entry in n[3])) for n in doc["nodes"]]
        return cls(doc["index"], nodes, doc["settings"], doc["listen_fds"],
                   doc["status_fd"], doc["control_fd"], doc["supervisor_pid"], doc["down"], doc["link_fd"],
                   doc["link_ports"])


class WorkerOwnership(StaticOwnership):
    """The static split, minus the workers the supervisor says are down (their partitions have no owner)."""

    def __init__(self, local: Node, nodes: list[Node], num_partitions: int, down: list[int]) -> None:
        super().__init__(local, nodes, num_partitions)
        self.down: set[int] = set(down) - {local.node_id}

    def owner(self, partition: int) -> Node | None:
        node = super().owner(partition)
        return None if node is None or node.node_id in self.down else node

    def nodes(self) -> list[Node]:
        return [n for n in super().nodes() if n.node_id not in self.down]


def config_settings(config: CoordinatorConfig, **overrides: Any) -> dict[str, Any]:
    """A config as JSON-able keyword arguments (paths as text), with `overrides`."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    values.update(overrides)
    return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}


class WorkerDaemon(Daemon):
    holds_data_dir_lock = False

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(EffectiveConfig(CoordinatorConfig(**spec.settings), {}, None))
        self.spec = spec

    def new_server(self, metrics: Any) -> Any:
        from cohort.coordinator.server.node import CoordinatorServer

        spec = self.spec
        ownership = WorkerOwnership(spec.nodes[spec.index], spec.nodes, self.config.offsets_topic_num_partitions,
                                    spec.down)
        security = WorkerSecurity(spec.index, self._tell_supervisor)
        self._control = asyncio.get_running_loop().create_task(self._follow_supervisor(ownership, security))
        sockets = [socket.socket(fileno=fd) for fd in spec.listen_fds]
        secret = os.environ.pop(LINK_SECRET_ENV, "")
        if secret:
            CONSOLE_SIGN_INS.share(secret)  # the supervisor's console proves its sign-ins with the same key
        link = PeerLink({n.node_id: port for n, port in zip(spec.nodes, spec.link_ports)}, secret,
                        socket.socket(fileno=spec.link_fd))
        return CoordinatorServer(self.config, metrics=metrics, ownership=ownership, listen_sockets=sockets,
                                 peer_link=link, worker_security=security)

    async def _follow_supervisor(self, ownership: WorkerOwnership, security: WorkerSecurity) -> None:
        """Apply the supervisor's news (workers down, worker 0's security state), for the life of the process."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=PIPE_LINE_LIMIT)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                    os.fdopen(self.spec.control_fd, "rb", buffering=0))
        try:
            while line := await reader.readline():
                try:
                    doc = json.loads(line)
                    if not security.on_message(doc):
                        down = {int(n) for n in doc["down"]}
                        ownership.down = down - {ownership.local.node_id}
                except (ValueError, KeyError, TypeError):
                    log.warning("unreadable line from the supervisor (%d bytes)", len(line))
                    continue
        finally:
            transport.close()

    def _tell_supervisor(self, doc: dict[str, Any]) -> None:
        """One line up the status pipe; written whole (the supervisor reads it all the time)."""
        data = memoryview((json.dumps(doc) + "\n").encode())
        try:
            while data:
                data = data[os.write(self.spec.status_fd, data):]
        except OSError:  # the supervisor is gone: the parent-death signal ends this process
            pass

    def metrics_bound(self, port: int) -> None:
        self._tell_supervisor({"metrics_port": port})


def _die_with_parent(supervisor_pid: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != supervisor_pid:  # it died before the signal was armed
        os._exit(1)


def _label_log_records(index: int) -> None:
    """Every log line of this process carries ``worker=K`` (the workers share the supervisor's stderr or file)."""
    make_record = logging.getLogRecordFactory()

    def labelled(*args, **kwargs) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        record.worker = index
        return record

    logging.setLogRecordFactory(labelled)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = WorkerSpec.from_json(args[0])
    _die_with_parent(spec.supervisor_pid)
    _label_log_records(spec.index)
    return WorkerDaemon(spec).run()


if __name__ == "__main__":
    sys.exit(main())
