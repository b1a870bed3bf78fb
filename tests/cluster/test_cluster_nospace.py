"""etcd out of space (its NOSPACE alarm) under running nodes: reported, nothing lost, and service back by
itself once an operator frees space. A 3-member etcd of its own, with a small `--quota-backend-bytes`."""
from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import time
import urllib.error
from pathlib import Path

import pytest
from cohort_process import CohortServer, metric_value, run_cohort
from etcd_cluster import EtcdCluster

from cohort.protocol.errors import ErrorCode

from test_cluster_failures import RETRIABLE, commit, commit_accepted, coordinator, fetched, owned, until

pytestmark = pytest.mark.timeout(300)
QUOTA_BYTES = 8 * 1024 * 1024
BALLAST = b"ballast/"
OPERATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster-operations.md"


@pytest.fixture
def small_etcd(tmp_path):
    (tmp_path / "etcd").mkdir()
    cluster = EtcdCluster(tmp_path / "etcd", extra_args=("--quota-backend-bytes", str(QUOTA_BYTES)))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def fill_until_nospace(etcd: EtcdCluster) -> None:
    """Write 1 MiB values until etcd refuses with its NOSPACE alarm."""
    member = etcd.members[0]
    for i in range(4 * QUOTA_BYTES // (1 << 20)):
        try:
            answer = member.post("/v3/kv/put", {"key": b64(BALLAST + b"%d" % i), "value": b64(b"x" * (1 << 20))},
                                 timeout=10)
        except urllib.error.HTTPError as exc:
            answer = {"error": exc.read().decode()}
        if "space exceeded" in json.dumps(answer):
            return
    raise AssertionError("etcd never reached its quota")


def free_space(etcd: EtcdCluster) -> None:
    """What docs/cluster-operations.md tells an operator to do: delete, compact, defragment every member, disarm."""
    first = etcd.members[0]
    end = bytes(BALLAST[:-1]) + bytes([BALLAST[-1] + 1])
    first.post("/v3/kv/deleterange", {"key": b64(BALLAST), "range_end": b64(end)}, timeout=10)
    revision = int(first.post("/v3/kv/range", {"key": b64(b"x"), "limit": 1})["header"]["revision"])
    first.post("/v3/kv/compaction", {"revision": str(revision), "physical": True}, timeout=30)
    for member in etcd.members:
        member.post("/v3/maintenance/defragment", {}, timeout=30)
    for alarm in first.post("/v3/maintenance/alarm", {"action": "GET"}).get("alarms", []):
        first.post("/v3/maintenance/alarm", {"action": "DEACTIVATE", "memberID": alarm["memberID"],
                                             "alarm": alarm["alarm"]})


async def test_nospace_is_reported_and_unowned_partitions_are_claimed_once_an_operator_frees_space(small_etcd, tmp_path):
    etcd = small_etcd
    nodes = [CohortServer(tmp_path / f"node{i}", "--cluster", etcd.url, "--node-id", str(i),
                          "--cluster.lease.ttl.ms", "2000").start() for i in (1, 2)]
    try:
        one, two = nodes
        await until(lambda: owned(one) + owned(two) == 50 and owned(one) and owned(two), 30, "spread over 2 nodes")
        owner = coordinator(nodes, etcd)
        await commit_accepted(owner, 5)

        fill_until_nospace(etcd)
        # Reported by `cohort cluster status` (exit 0: it could read everything) ...
        status = await asyncio.to_thread(run_cohort, "cluster", "status", "--cluster", etcd.url)
        assert status.returncode == 0, status.stderr
        assert "ALARM NOSPACE" in status.stdout and "docs/cluster-operations.md" in status.stdout, status.stdout
        report = json.loads((await asyncio.to_thread(run_cohort, "cluster", "status", "--cluster", etcd.url,
                                                     "--output", "json")).stdout)
        assert report["alarms"] == ["NOSPACE"] and all(m["alarms"] == ["NOSPACE"] for m in report["members"])
        # ... and by the node whose write etcd refused: a retriable error, one log line, a metric.
        error = await commit(owner, 6)
        assert error in RETRIABLE, error
        # Kafka's group coordinator answers a refused log append so; the operators' page says what it is.
        assert error == ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode(error).name
        documented = re.search(r"commits answer ([A-Z_]+)", OPERATIONS_DOC.read_text())
        assert documented and documented.group(1) == ErrorCode(error).name, documented
        await until(lambda: metric_value(owner.scrape(), "cohort_cluster_etcd_nospace") == 1, 10, "nospace metric")
        assert owner.stderr().count("etcd refuses writes: NOSPACE alarm") == 1, owner.output()

        # A node dies: its partitions cannot be claimed while etcd refuses writes.
        survivor = one if owner is two else two
        owner.signal(signal.SIGKILL)
        owner.process.wait(10)
        time.sleep(4)  # the lease (2 s) lapsed
        assert owned(survivor) < 50

        free_space(etcd)
        started = time.monotonic()
        await until(lambda: owned(survivor) == 50, 30, "the survivor claims the dead node's partitions")
        claimed_after = time.monotonic() - started
        print(f"partitions claimed {claimed_after:.2f} s after etcd's NOSPACE alarm was cleared")
        assert await fetched(survivor) == 5  # nothing acknowledged was lost
        await commit_accepted(survivor, 7)
        await until(lambda: metric_value(survivor.scrape(), "cohort_cluster_etcd_nospace") == 0, 10, "cleared")
        assert claimed_after < 10, claimed_after
        status = await asyncio.to_thread(run_cohort, "cluster", "status", "--cluster", etcd.url)
        assert status.returncode == 0 and "ALARM NOSPACE" not in status.stdout, status.stdout
    finally:
        for node in nodes:
            if node.process.poll() is None:
                node.stop()
