"""One worker of `cohort serve --workers N`: a whole coordinator node over its share of the partitions.

The supervisor (`cohort.coordinator.supervisor`) starts ``python -m cohort.coordinator.worker SPEC``
with the worker's Kafka listening socket already bound (inherited descriptor) and a pipe to report on.
SPEC (JSON) carries the supervisor's effective settings, this worker's index and every worker's node.
The worker is then an ordinary `Daemon` except that:

* it does not take the data-dir lock (the supervisor holds it); its offsets log locks the partition
  directories it loads and writes journals of its own (`cohort.coordinator.log`);
* it serves ``/metrics`` and ``/health`` on an ephemeral 127.0.0.1 port and writes that port to the
  pipe, so the supervisor can aggregate them on the one ``--metrics`` address;
* it exits when the supervisor dies (parent-death signal), so no orphan keeps partitions locked.
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cohort.coordinator.config import CoordinatorConfig, EffectiveConfig
from cohort.coordinator.daemon import Daemon
from cohort.coordinator.ownership import Node
from cohort.coordinator.static_ownership import StaticOwnership

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a worker is told by its supervisor."""

    index: int
    nodes: list[Node]
    settings: dict[str, Any]  # CoordinatorConfig fields, already this worker's (listeners, node.id, metrics)
    listen_fds: list[int]
    status_fd: int
    supervisor_pid: int

    def to_json(self) -> str:
        return json.dumps({
            "index": self.index, "nodes": [[n.node_id, n.host, n.port] for n in self.nodes],
            "settings": self.settings, "listen_fds": self.listen_fds, "status_fd": self.status_fd,
            "supervisor_pid": self.supervisor_pid})

    @classmethod
    def from_json(cls, text: str) -> "WorkerSpec":
        doc = json.loads(text)
        return cls(doc["index"], [Node(*n) for n in doc["nodes"]], doc["settings"], doc["listen_fds"],
                   doc["status_fd"], doc["supervisor_pid"])


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
        from cohort.coordinator.node import CoordinatorServer

        spec = self.spec
        ownership = StaticOwnership(spec.nodes[spec.index], spec.nodes, self.config.offsets_topic_num_partitions)
        sockets = [socket.socket(fileno=fd) for fd in spec.listen_fds]
        return CoordinatorServer(self.config, metrics=metrics, ownership=ownership, listen_sockets=sockets)

    def metrics_bound(self, port: int) -> None:
        try:
            os.write(self.spec.status_fd, (json.dumps({"metrics_port": port}) + "\n").encode())
        except OSError:  # the supervisor is gone: the parent-death signal ends this process
            pass


def _die_with_parent(supervisor_pid: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != supervisor_pid:  # it died before the signal was armed
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = WorkerSpec.from_json(args[0])
    _die_with_parent(spec.supervisor_pid)
    return WorkerDaemon(spec).run()


if __name__ == "__main__":
    sys.exit(main())
