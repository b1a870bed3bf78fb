"""Apache Kafka 4.x as a peer: a single-node KRaft broker (combined mode) from Maven Central's jars.

Kafka is a test and bench peer only, never a dependency of Cohort. `kafka_libs()` runs
`mvn dependency:copy-dependencies` on `bench/kafka/pom.xml` once and caches the jars (Maven's own
`~/.m2` holds the downloads; the copied folder is `~/.cache/cohort/kafka-<version>/libs`, or
`$COHORT_KAFKA_LIBS`). `KafkaBroker` formats a fresh log dir with Kafka's StorageTool, starts
`kafka.Kafka` on a generated `server.properties` and returns once the broker serves groups: every
`__consumer_offsets` partition loaded and the bench topic created.

The JVM gets a fixed 1 GiB heap (`-Xms1g -Xmx1g`, what `kafka-server-start.sh` sets) and the G1
flags of `kafka-run-class.sh`; the JVM sizes its GC and compiler threads to the machine's 2 cores
itself. Settings are Kafka's own names: `KafkaBroker(settings={"log.flush.interval.messages": 1})`
is the broker that fsyncs every append before it answers.

Used by `bench/` (the `kafka` and `kafka-flush` targets) and by `tests/` (the conformance suite and
any test that needs a real Kafka broker): `with KafkaBroker() as kafka: ... kafka.address`.
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import CreateTopicsRequest, FindCoordinatorRequest, OffsetFetchRequest
from cohort.protocol.partitioning import partition_for

from bench.targets import BENCH_TOPIC, BENCH_TOPIC_PARTITIONS, REPO, TargetError, _ManagedProcess, free_port

KAFKA_VERSION = "4.4.0"
POM = REPO / "bench" / "kafka" / "pom.xml"
HEAP = "1g"
JVM_FLAGS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
             "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true")
OFFSETS_PARTITIONS = 50  # Kafka's default offsets.topic.num.partitions, as Cohort's

# A single node: every replication factor 1. The bench's group settings match Cohort's bench defaults
# (no initial rebalance delay unless a workload sets one).
DEFAULT_SETTINGS = {
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1,
    "group.initial.rebalance.delay.ms": 0,
    "num.partitions": 1,
}

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
logger.coordinator.name = org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime
logger.coordinator.level = INFO
"""


def _cache_dir() -> Path:
    override = os.environ.get("COHORT_KAFKA_LIBS")
    if override:
        return Path(override)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "cohort" / f"kafka-{KAFKA_VERSION}" / "libs"


def kafka_libs() -> Path:
    """The folder holding every jar of the broker, fetched with Maven on first use (a file lock keeps
    concurrent callers from fetching twice). A failed fetch raises `TargetError`, never a partial folder."""
    libs = _cache_dir()
    marker = libs / ".complete"
    if marker.exists():
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with open(libs.parent / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise TargetError("Maven is not installed (apt-get install -y maven): it fetches Kafka's jars")
        partial = libs.with_name(libs.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        done = subprocess.run([mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                               f"-DoutputDirectory={partial}", "-DincludeScope=runtime"],
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0 or not (partial / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
            raise TargetError(f"fetching Kafka {KAFKA_VERSION}'s jars with Maven failed:\n"
                              f"{(done.stdout + done.stderr)[-3000:]}")
        shutil.rmtree(libs, ignore_errors=True)
        partial.rename(libs)
        (libs / ".complete").write_text("\n".join(sorted(p.name for p in libs.glob("*.jar"))) + "\n")
    return libs


def java() -> str:
    path = shutil.which("java")
    if path is None:
        raise TargetError("java is not installed (apt-get install -y default-jre-headless): Kafka 4 needs Java 17+")
    return path


class KafkaBroker(_ManagedProcess):
    """A fresh single-node KRaft broker (broker and controller in one JVM) on loopback ports.

    `data_dir`: reuse a log dir an earlier broker formatted (a restart); by default a temporary one.
    `topics`: created once the broker serves (name → partitions); default the bench topic.
    `wait_until_serving=False` returns as soon as the port accepts connections (the restart workload
    times the rest itself).
    """

    stop_timeout_s = 60.0  # a clean shutdown (SIGTERM) writes snapshots; a kill would make the next start recover

    def __init__(self, *, settings: dict | None = None, data_dir: Path | None = None,
                 topics: dict[str, int] | None = None, name: str = "kafka", heap: str = HEAP,
                 ready_timeout_s: float = 180.0, wait_until_serving: bool = True) -> None:
        super().__init__(name=name, host="127.0.0.1", port=free_port())
        libs = kafka_libs()
        self.workdir = Path(tempfile.mkdtemp(prefix="kafka-peer-"))
        self._own_workdir = True
        self.data_dir = Path(data_dir) if data_dir is not None else self.workdir / "logs"
        self.controller_port = free_port()
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.heap = heap
        self.version = f"Apache Kafka {KAFKA_VERSION} (KRaft combined, heap {heap})"
        properties = self.workdir / "server.properties"
        properties.write_text(self._properties())
        (self.workdir / "log4j2.properties").write_text(LOG4J2)
        self.base_command = [java(), f"-Xms{heap}", f"-Xmx{heap}", *JVM_FLAGS,
                             f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
                             f"-Dkafka.logs.dir={self.workdir}", "-cp", f"{libs}/*"]
        if not (self.data_dir / "meta.properties").exists():
            self._format(properties)
        self._spawn([*self.base_command, "kafka.Kafka", str(properties)], ready_timeout_s=ready_timeout_s)
        if not wait_until_serving:
            return
        try:
            _run_to_end(self._until_serving(topics if topics is not None else {BENCH_TOPIC: BENCH_TOPIC_PARTITIONS},
                                            time.monotonic() + ready_timeout_s))
        except BaseException:
            self.close()
            raise

    def _properties(self) -> str:
        lines = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **self.settings,
        }
        return "".join(f"{k}={v}\n" for k, v in lines.items())

    def _format(self, properties: Path) -> None:
        """`kafka-storage format`: a new cluster id, the log dir stamped with it."""
        command = [*self.base_command, "kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                   "-c", str(properties), "--ignore-formatted"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=self.workdir)
        if done.returncode != 0:
            raise TargetError(f"kafka-storage format failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")

    async def _until_serving(self, topics: dict[str, int], deadline: float) -> None:
        """Accepting connections is not serving: wait until FindCoordinator answers (which creates
        `__consumer_offsets`), every offsets partition has loaded, and the topics exist."""
        from bench.wire import KafkaSession
        groups = _one_group_per_partition(OFFSETS_PARTITIONS)
        last = ""
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise TargetError(f"Kafka exited before serving:\n{self.log_path.read_text(errors='replace')[-3000:]}")
            try:
                session = await asyncio.wait_for(KafkaSession.open(self.host, self.port), 10)
            except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                last = repr(exc)
                await asyncio.sleep(0.2)
                continue
            try:
                find = await session.request(FindCoordinatorRequest(key=groups[0], key_type=0), 2)
                if find.error_code:
                    last = f"FindCoordinator: {ErrorCode(find.error_code).name}"
                elif not await _all_loaded(session, groups):
                    last = "offsets partitions loading"
                else:
                    await _create_topics(session, topics)
                    return
            except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                last = repr(exc)
            finally:
                await session.close()
            await asyncio.sleep(0.2)
        raise TargetError(f"Kafka on {self.address} did not serve groups in time ({last})")


def _run_to_end(coroutine) -> None:
    """Run `coroutine` on an event loop of its own (a thread of its own when this one runs a loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coroutine)
        return
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coroutine).result()


def _cluster_id() -> str:
    """A random 16-byte id in Kafka's URL-safe base64 form (what `kafka-storage random-uuid` prints)."""
    import base64
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _one_group_per_partition(partitions: int) -> list[str]:
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        name = f"kafka-ready-{i}"
        found.setdefault(partition_for(name, partitions), name)
        i += 1
    return [found[p] for p in range(partitions)]


async def _all_loaded(session, groups: list[str]) -> bool:
    answers = await asyncio.gather(*(session.request(OffsetFetchRequest(group_id=g, topics=[]), 5) for g in groups))
    return all(a.error_code == 0 for a in answers)


async def _create_topics(session, topics: dict[str, int]) -> None:
    if not topics:
        return
    _Topic = CreateTopicsRequest.CreatableTopic
    answer = await session.request(CreateTopicsRequest(topics=[
        _Topic(name=name, num_partitions=count, replication_factor=1, assignments=[], configs=[])
        for name, count in topics.items()], timeout_ms=60000, validate_only=False), 5, 90)
    for topic in answer.topics:
        if topic.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise TargetError(f"CreateTopics {topic.name}: {ErrorCode(topic.error_code).name}")


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.kafka_broker [--fetch]`: fetch the jars (CI's set-up), or run a broker until ^C."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--fetch"]:
        print(kafka_libs())
        return 0
    with KafkaBroker() as broker:
        print(f"Kafka {KAFKA_VERSION} serving on {broker.address} (log dir {broker.data_dir}); ^C stops it", flush=True)
        try:
            broker.process.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
