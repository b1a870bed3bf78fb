"""`cohort groups import-zookeeper` against a real ZooKeeper (Debian's package) and a real `cohort serve`."""
from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from cohort.client.admin import Admin, NewTopic
from cohort.client.membership import GroupMember
from cohort.client.offsets import OffsetAndMetadata
from cohort.client.topic_partition import TopicPartition
from client_harness import assert_one_line_error, free_port, run_cli

pytestmark = pytest.mark.timeout(120)

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF = Path("/etc/zookeeper/conf")


def zookeeper_missing() -> str | None:
    if not ZOOKEEPER_JAR.exists():
        return "Debian's zookeeper package is not installed (apt-get install -y zookeeper)"
    if shutil.which("java") is None:
        return "java is not installed"
    return None


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    """A standalone ZooKeeper on loopback, ephemeral port, temp data dir; `host:port`."""
    missing = zookeeper_missing()
    if missing:  # scripts/test installs it: a missing ZooKeeper fails, never skips
        pytest.fail(f"ZooKeeper is required: {missing}")
    workdir = tmp_path_factory.mktemp("zookeeper")
    port = free_port()
    (workdir / "data").mkdir()
    config = workdir / "zoo.cfg"
    config.write_text(
        f"tickTime=2000\ndataDir={workdir / 'data'}\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
        "maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n"
    )
    log = open(workdir / "zookeeper.log", "wb")
    process = subprocess.Popen(
        [shutil.which("java"), f"-Dzookeeper.log.dir={workdir}", "-Dzookeeper.root.logger=WARN,CONSOLE",
         "-cp", f"{ZOOKEEPER_CONF}:{ZOOKEEPER_JAR}", "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise AssertionError(f"ZooKeeper exited: {(workdir / 'zookeeper.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.sendall(b"ruok")
                    if s.recv(16) == b"imok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("ZooKeeper did not answer ruok within 60 s")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()


def write_offsets(zk_hosts: str, nodes: dict[str, bytes]) -> None:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_hosts, timeout=10)
    zk.start(timeout=15)
    try:
        for path, value in nodes.items():
            zk.ensure_path(path)
            zk.set(path, value)
    finally:
        zk.stop()
        zk.close()


async def fetch(server, group):
    async with Admin(server.bootstrap) as admin:
        return await admin.fetch_offsets(group)


def table_rows(stdout: str) -> list[list[str]]:
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    start = next(i for i, words in enumerate(lines) if words[:1] == ["GROUP"])
    return lines[start:]


async def test_import_is_a_dry_run_then_executes(zookeeper, shared_cohort_server):
    write_offsets(zookeeper, {
        "/consumers/zk-a/offsets/zk-orders/0": b"15",
        "/consumers/zk-a/offsets/zk-orders/1": b"27",
        "/consumers/zk-a/offsets/zk-new/3": b"8",
        "/consumers/zk-b/offsets/zk-orders/0": b"5\n",
        "/consumers/zk-b/ids/consumer-1": b"{}",
        "/consumers/zk-registered-only/ids/consumer-1": b"{}",
    })
    async with Admin(shared_cohort_server.bootstrap) as admin:
        await admin.create_topics([NewTopic("zk-orders", 1)])  # ZooKeeper knows partition 1 too: grow it
    args = ["groups", "import-zookeeper", "--zookeeper", zookeeper, "--group", "zk-a", "--group", "zk-b",
            "--bootstrap-server", shared_cohort_server.bootstrap]

    dry = await asyncio.to_thread(run_cli, *args)
    assert dry.returncode == 0, dry.stderr
    assert "WARN: No action will be performed as the --execute option is missing." in dry.stderr
    assert "Topic 'zk-new' is missing: would create it with 4 partitions." in dry.stdout
    assert "Topic 'zk-orders' has 1 partitions: would grow it to 2." in dry.stdout
    assert table_rows(dry.stdout) == [
        ["GROUP", "TOPIC", "PARTITION", "OFFSET"],
        ["zk-a", "zk-new", "3", "8"], ["zk-a", "zk-orders", "0", "15"], ["zk-a", "zk-orders", "1", "27"],
        ["zk-b", "zk-orders", "0", "5"],
    ]
    assert await fetch(shared_cohort_server, "zk-a") == {}

    done = await asyncio.to_thread(run_cli, *args, "--execute")
    assert done.returncode == 0, done.stderr
    assert await fetch(shared_cohort_server, "zk-a") == {
        TopicPartition("zk-new", 3): OffsetAndMetadata(8),
        TopicPartition("zk-orders", 0): OffsetAndMetadata(15),
        TopicPartition("zk-orders", 1): OffsetAndMetadata(27),
    }
    assert await fetch(shared_cohort_server, "zk-b") == {TopicPartition("zk-orders", 0): OffsetAndMetadata(5)}
    async with Admin(shared_cohort_server.bootstrap) as admin:
        topics = await admin.describe_topics(["zk-new", "zk-orders"])
    assert len(topics["zk-new"].partitions) == 4 and len(topics["zk-orders"].partitions) == 2


async def test_import_all_groups_from_a_chroot_refuses_active_groups(zookeeper, shared_cohort_server):
    write_offsets(zookeeper, {
        "/kafka/consumers/zk-chroot-idle/offsets/zk-chroot-t/0": b"3",
        "/kafka/consumers/zk-chroot-live/offsets/zk-chroot-t/0": b"4",
    })
    async with Admin(shared_cohort_server.bootstrap) as admin:
        await admin.create_topics([NewTopic("zk-chroot-t", 1)])
    member = GroupMember(shared_cohort_server.bootstrap, "zk-chroot-live", ["zk-chroot-t"],
                         session_timeout_ms=10000, heartbeat_interval_ms=300)
    await member.start(timeout=15)
    try:
        result = await asyncio.to_thread(
            run_cli, "groups", "import-zookeeper", "--zookeeper", f"{zookeeper}/kafka", "--execute",
            "--bootstrap-server", shared_cohort_server.bootstrap,
        )
        assert_one_line_error(result, 1, "Offsets can only be imported if the group 'zk-chroot-live' is inactive, "
                                         "but the current state is Stable.")
        assert table_rows(result.stdout)[1:] == [["zk-chroot-idle", "zk-chroot-t", "0", "3"]]
        assert await fetch(shared_cohort_server, "zk-chroot-idle") == {TopicPartition("zk-chroot-t", 0): OffsetAndMetadata(3)}
        assert await fetch(shared_cohort_server, "zk-chroot-live") == {}
    finally:
        await member.close()


async def test_import_bad_input_is_one_line(zookeeper, shared_cohort_server):
    write_offsets(zookeeper, {"/consumers/zk-bad/offsets/zk-bad-t/0": b"not-a-number"})
    base = ["groups", "import-zookeeper", "--bootstrap-server", shared_cohort_server.bootstrap]
    bad, unknown, unreachable = await asyncio.gather(
        asyncio.to_thread(run_cli, *base, "--zookeeper", zookeeper, "--group", "zk-bad", "--execute"),
        asyncio.to_thread(run_cli, *base, "--zookeeper", zookeeper, "--group", "zk-nobody"),
        asyncio.to_thread(run_cli, *base, "--zookeeper", f"127.0.0.1:{free_port()}", "--timeout", "2000"),
    )
    assert_one_line_error(bad, 1, "/consumers/zk-bad/offsets/zk-bad-t/0", "not an integer")
    assert_one_line_error(unknown, 1, "no offsets for group 'zk-nobody'")
    assert_one_line_error(unreachable, 3, "cannot connect to ZooKeeper")
    assert await fetch(shared_cohort_server, "zk-bad") == {}
