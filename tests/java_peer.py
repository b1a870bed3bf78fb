"""Apache Kafka's Java client and tools as a test peer: one JVM running `tests/java/src` (cohortpeer.Peer).

`peer_classpath()` fetches the pinned jars (`tests/java/pom.xml`, through `maven_jars`) and compiles the
peer with ``javac`` once (into a folder keyed by the sources' and jars' digest, so a run compiles at most
once and an unchanged checkout not at all). `JavaPeer` starts one JVM and talks to it in JSON lines:
consumers on poll loops of their own (`JavaConsumer`), Admin clients (`JavaAdmin`) and in-process runs of
Kafka's command-line tools (`JavaPeer.tool`). Requests may overlap (each is answered by id), so a test can
commit from one consumer while another waits out a failover. A missing JDK is an error, never a skip.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maven_jars import CACHE_ROOT, maven_jars

JAVA_DIR = Path(__file__).resolve().parent / "java"
POM = JAVA_DIR / "pom.xml"
SOURCES = JAVA_DIR / "src"
KAFKA_VERSION = "4.4.0"  # the <kafka.version> of tests/java/pom.xml (test_java_peer checks they agree)
# Start-up matters more than peak speed here: one JVM per scenario group, mostly waiting on the network.
JVM_OPTIONS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k", "-Xmx384m", "-Xshare:auto"]


class JavaToolMissing(RuntimeError):
    """No JDK: java or javac is not installed."""


def jdk_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None and os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / name
        found = str(candidate) if candidate.exists() else None
    if found is None:
        raise JavaToolMissing(f"{name} is not installed (apt-get install -y default-jdk-headless; scripts/test does)")
    return found


_compiled: dict[str, str] = {}
_compile_lock = threading.Lock()


def peer_classpath() -> str:
    """The classpath of the compiled peer and Kafka's jars (compiled at most once per run)."""
    with _compile_lock:
        if "classpath" in _compiled:
            return _compiled["classpath"]
        jars = maven_jars(POM)
        sources = sorted(SOURCES.rglob("*.java"))
        digest = hashlib.sha256()
        for path in [*sources, *jars]:
            digest.update(path.name.encode())
            if path.suffix == ".java":
                digest.update(path.read_bytes())
        classes = CACHE_ROOT / f"peer-classes-{digest.hexdigest()[:16]}"
        if not (classes / ".complete").exists():
            shutil.rmtree(classes, ignore_errors=True)
            classes.mkdir(parents=True)
            done = subprocess.run(
                [jdk_tool("javac"), "-nowarn", "--release", "17", "-encoding", "UTF-8", "-d", str(classes),
                 "-cp", os.pathsep.join(map(str, jars)), *map(str, sources)],
                capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                raise RuntimeError(f"javac failed:\n{done.stdout}{done.stderr}")
            (classes / ".complete").touch()
        _compiled["classpath"] = os.pathsep.join([str(classes), *map(str, jars)])
        return _compiled["classpath"]


class JavaError(Exception):
    """An exception the Java side raised: `java_class` and `message` as Kafka's client gave them."""

    def __init__(self, error: dict) -> None:
        self.java_class: str = error.get("class", "")
        self.message: str | None = error.get("message")
        self.cause: dict | None = error.get("cause")
        super().__init__(f"{self.java_class}: {self.message}")

    @property
    def simple_name(self) -> str:
        return self.java_class.rsplit(".", 1)[-1]


@dataclass
class ToolRun:
    exit: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


class JavaPeer:
    """One JVM of `cohortpeer.Peer`; `close()` ends it (its consumers close first), `kill()` is kill -9."""

    def __init__(self, log_dir: Path, name: str = "peer", start_timeout: float = 60) -> None:
        self.name = name
        self.log_path = log_dir / f"java-{name}.log"
        self.stderr_path = log_dir / f"java-{name}.stderr"
        self._stderr = open(self.stderr_path, "w")
        level = os.environ.get("COHORT_TEST_JAVA_LOG", "warn")
        self.process = subprocess.Popen(
            [jdk_tool("java"), *JVM_OPTIONS, f"-Dorg.slf4j.simpleLogger.logFile={self.log_path}",
             f"-Dorg.slf4j.simpleLogger.defaultLogLevel={level}", "-Dorg.slf4j.simpleLogger.showDateTime=true",
             "-cp", peer_classpath(), "cohortpeer.Peer"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1)
        self._ids = itertools.count(1)
        self._pending: dict[int, Future] = {0: Future()}
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"java-{name}-reader", daemon=True)
        self._reader.start()
        try:
            self._pending[0].result(start_timeout)
        except FutureTimeout:
            self.kill()
            raise AssertionError(f"java peer {name} not ready in {start_timeout}s: {self.output()}") from None

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            future = self._pending.pop(answer.get("id"), None)
            if future is None:
                continue
            if answer.get("ok"):
                future.set_result(answer.get("result"))
            else:
                future.set_exception(JavaError(answer.get("error") or {}))
        gone = RuntimeError(f"java peer {self.name} exited ({self.process.poll()}): {self.output()}")
        for future in list(self._pending.values()):
            if not future.done():
                future.set_exception(gone)
        self._pending.clear()

    def send(self, op: str, **fields: Any) -> Future:
        """Send one request; the Future holds its answer (or raises JavaError)."""
        request_id = next(self._ids)
        future: Future = Future()
        self._pending[request_id] = future
        with self._write_lock:
            if self.process.poll() is not None:
                self._pending.pop(request_id, None)
                raise RuntimeError(f"java peer {self.name} exited ({self.process.returncode}): {self.output()}")
            self.process.stdin.write(json.dumps({"id": request_id, "op": op, **fields}) + "\n")
            self.process.stdin.flush()
        return future

    def request(self, op: str, timeout: float = 90, **fields: Any) -> Any:
        try:
            return self.send(op, **fields).result(timeout)
        except FutureTimeout:
            raise AssertionError(f"java peer {self.name}: {op} not answered in {timeout}s") from None

    # -- what tests use ------------------------------------------------------------------------------
    def consumer(self, name: str, props: dict[str, Any], *, topics: list[str] | None = None,
                 pattern: str | None = None, subscription_pattern: str | None = None,
                 assign: list[str] | None = None, poll_ms: int = 100) -> "JavaConsumer":
        subscribe: dict[str, Any] = {}
        if topics is not None:
            subscribe["topics"] = topics
        if assign is not None:
            subscribe["assign"] = assign
        if pattern is not None:
            subscribe["pattern"] = pattern
        if subscription_pattern is not None:
            subscribe["subscription_pattern"] = subscription_pattern
        self.request("consumer.start", name=name, props={k: str(v) for k, v in props.items()},
                     subscribe=subscribe, poll_ms=poll_ms)
        return JavaConsumer(self, name)

    def admin(self, name: str, props: dict[str, Any]) -> "JavaAdmin":
        self.request("admin.create", name=name, props={k: str(v) for k, v in props.items()})
        return JavaAdmin(self, name)

    def tool(self, tool: str, *args: str, timeout: float = 120) -> ToolRun:
        """A Kafka command-line tool run in this JVM: 'kafka-consumer-groups', 'kafka-acls', 'kafka-topics'."""
        result = self.request("tool", timeout=timeout, tool=tool, args=list(args))
        return ToolRun(result["exit"], result["out"], result["err"])

    def output(self) -> str:
        try:
            return self.stderr_path.read_text()[-3000:] + self.log_path.read_text()[-3000:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self._stderr.close()

    def close(self, timeout: float = 60) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(10)
        self._stderr.close()


class JavaConsumer:
    """A KafkaConsumer on its own poll loop inside a JavaPeer."""

    def __init__(self, peer: JavaPeer, name: str) -> None:
        self.peer = peer
        self.name = name

    def state(self) -> dict:
        """assignment ("topic:partition" names), generation, member_id, polls, poll_error, events."""
        return self.peer.request("consumer.state", name=self.name)

    def assignment(self) -> list[str]:
        return self.state()["assignment"]

    def call(self, call: str, timeout: float = 90, **args: Any) -> Any:
        return self.peer.request("consumer.call", timeout=timeout, name=self.name, call=call, args=args)

    def send(self, call: str, **args: Any) -> Future:
        """`call` without waiting for its answer."""
        return self.peer.send("consumer.call", name=self.name, call=call, args=args)

    def commit_sync(self, offsets: dict[str, Any] | None = None, **args: Any) -> None:
        if offsets is not None:
            args["offsets"] = offsets
        self.call("commitSync", **args)

    def commit_async(self, offsets: dict[str, Any] | None = None) -> dict:
        """commitAsync with a callback; returns the offsets the callback saw (raises its exception)."""
        return self.call("commitAsync", **({"offsets": offsets} if offsets is not None else {}))

    def committed(self, partitions: list[str]) -> dict:
        return self.call("committed", partitions=partitions)

    def close(self, **args: Any) -> None:
        self.peer.request("consumer.close", name=self.name, args=args)


class JavaAdmin:
    """Kafka's Admin client inside a JavaPeer."""

    def __init__(self, peer: JavaPeer, name: str) -> None:
        self.peer = peer
        self.name = name

    def __getattr__(self, call: str):
        if call.startswith("_"):
            raise AttributeError(call)

        def invoke(timeout: float = 90, **args: Any) -> Any:
            return self.peer.request("admin.call", timeout=timeout, name=self.name, call=call, args=args)

        return invoke

    def close(self) -> None:
        self.peer.request("admin.close", name=self.name)
