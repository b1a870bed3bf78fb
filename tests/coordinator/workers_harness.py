"""`cohort serve --workers N` for the tests: the one launcher (`cohort_process.CohortServer`) with its worker ports.

`WorkersServer` keeps its ports across restarts, so a test can stop it and start the same data dir
with another N (`restarted(n)`). `group_on_worker` finds a group id that Kafka's hash puts on a
given worker, so a test can spread its groups over the workers on purpose.
"""
from __future__ import annotations

import signal
from pathlib import Path

from cohort_process import CohortServer, free_ports, http_get

from cohort.protocol.partitioning import partition_for

NUM_PARTITIONS = 50


def group_on_worker(prefix: str, worker: int, workers: int) -> str:
    """The first group id `prefix-i` whose offsets partition worker `worker` of `workers` owns."""
    for i in range(10_000):
        group = f"{prefix}-{i}"
        if partition_for(group, NUM_PARTITIONS) % workers == worker:
            return group
    raise AssertionError("no such group id")


def worker_of(group: str, workers: int) -> int:
    return partition_for(group, NUM_PARTITIONS) % workers


class WorkersServer(CohortServer):
    """`cohort serve --workers N --worker-ports ...` on free ports (the first is --listen)."""

    def __init__(self, data_dir: Path, workers: int, *extra: str, ports: list[int] | None = None,
                 metrics_port: int | None = None) -> None:
        super().__init__(data_dir, *extra)
        self.workers = workers
        self.ports = ports or [self.port] + free_ports(workers - 1, taken=[self.port, self.metrics_port])
        self.port = self.ports[0]
        if metrics_port is not None:
            self.metrics_port = metrics_port
        self.extra = extra
        self.args = [
            "serve", "--listen", f"127.0.0.1:{self.port}", "--metrics", f"127.0.0.1:{self.metrics_port}",
            "--data-dir", str(data_dir), "--group.initial.rebalance.delay.ms", "0",
            "--group.min.session.timeout.ms", "500", "--workers", str(workers), *extra,
        ]
        if workers > 1:
            self.args += ["--worker-ports", ",".join(str(p) for p in self.ports[:workers])]
        self.stderr_path = data_dir.parent / f"cohort-workers-{self.port}-{workers}.stderr"

    def bootstrap_of(self, worker: int) -> str:
        return f"127.0.0.1:{self.ports[worker]}"

    @property
    def all_bootstrap(self) -> str:
        return ",".join(self.bootstrap_of(k) for k in range(self.workers))

    def restarted(self, workers: int) -> "WorkersServer":
        """The same data dir, ports and metrics port with `workers` workers (not started)."""
        ports = self.ports + free_ports(workers - len(self.ports), taken=[*self.ports, self.metrics_port])
        return WorkersServer(self.data_dir, workers, *self.extra, ports=ports, metrics_port=self.metrics_port)

    def health(self) -> tuple[int, str]:
        return http_get(f"http://127.0.0.1:{self.metrics_port}/health")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.wait(30)
