"""A node paused (SIGSTOP) for less than its lease TTL keeps its lease and its partitions: six pauses of
0.9 x TTL at random moments between two lease refreshes, a real 3-member etcd."""
from __future__ import annotations

import base64
import random
import signal
import time

import pytest
from cohort_process import metric_value

from test_cluster_failures import cluster_nodes, owned, until  # noqa: F401  (cluster_nodes: a fixture)

pytestmark = pytest.mark.timeout(300)
TTL_MS = 4000
PAUSES = 6


def node_lease(etcd) -> int:
    member = next(m for m in etcd.members if m.running())
    answer = member.post("/v3/kv/range", {"key": base64.b64encode(b"nodes/1").decode()})
    kvs = answer.get("kvs", [])
    return int(kvs[0].get("lease", 0)) if kvs else 0


async def test_pauses_of_nine_tenths_of_the_ttl_keep_the_lease_and_every_partition(etcd, cluster_nodes):
    node = cluster_nodes(1, ttl_ms=TTL_MS)
    await until(lambda: owned(node) == 50, 30, "node 1 owns everything")
    lease = node_lease(etcd)
    lost = 0
    rng = random.Random(44)
    for _ in range(PAUSES):
        time.sleep(rng.uniform(0.0, 0.5))  # anywhere between two refreshes
        node.signal(signal.SIGSTOP)
        time.sleep(0.9 * TTL_MS / 1000)
        node.signal(signal.SIGCONT)
        time.sleep(1.0)  # etcd expires a lapsed lease within its lessor's 0.5 s check
        await until(lambda: owned(node) == 50 and node_lease(etcd) != 0, 30, "node 1 serves everything again")
        if node_lease(etcd) != lease:
            lost += 1
            lease = node_lease(etcd)
    losses = metric_value(node.scrape(), "cohort_cluster_partition_losses_total")
    print(f"leases lost in {PAUSES} pauses of {0.9 * TTL_MS:.0f} ms at TTL {TTL_MS} ms: {lost}; "
          f"partitions lost: {losses:.0f}")
    assert lost == 0 and losses == 0, (lost, losses)
