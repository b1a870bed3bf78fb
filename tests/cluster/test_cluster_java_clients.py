"""Apache Kafka's Java consumer (kafka-clients 4.4) against three `cohort serve --cluster` nodes on a real
3-member etcd: a kill -9 of the group's coordinator and a rolling restart of every node cost no rebalance
and lose nothing committed, for a classic group of three members and a KIP-848 member alike."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from cohort_process import CohortServer, metric_value, run_cohort
from java_peer import JavaPeer

from bounded_wait import wait_until
from cohort.protocol.partitioning import partition_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "java"))
from java_groups import consumer_props, create_topics, partitions, rebalance_events, settled  # noqa: E402

pytestmark = pytest.mark.timeout(240)
TTL_MS = 2000
TOPIC = "java-orders"


def restart_node(old: CohortServer) -> CohortServer:
    """The same node again, at the same addresses (as a rolling restart brings a node back)."""
    node = CohortServer(old.data_dir, *old.args[old.args.index("--group.initial.rebalance.delay.ms") + 2:])
    node.port, node.metrics_port = old.port, old.metrics_port
    node.args = list(old.args)
    node.stderr_path = old.stderr_path.with_suffix(".restarted.stderr")
    return node.start()


def start_node(tmp_path, etcd, node_id: int) -> CohortServer:
    return CohortServer(tmp_path / f"node{node_id}-data", "--cluster", etcd.url, "--node-id", str(node_id),
                        "--cluster.lease.ttl.ms", str(TTL_MS)).start()


def node_id(node: CohortServer) -> int:
    return int(node.args[node.args.index("--node-id") + 1])


def owner_of(etcd, group: str) -> int | None:
    import json

    result = run_cohort("cluster", "status", "--cluster", etcd.url, "--output", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["partitions"][partition_for(group, 50)]["owner"]


@pytest.fixture
def cluster(etcd, tmp_path):
    nodes = [start_node(tmp_path, etcd, i) for i in (1, 2, 3)]
    owned = lambda n: metric_value(n.scrape(), "cohort_cluster_owned_partitions")  # noqa: E731
    wait_until(lambda: sum(owned(n) for n in nodes) == 50, 30, "the 50 partitions owned")
    java = JavaPeer(tmp_path, name="cluster")
    yield nodes, java
    java.close()
    for node in nodes:
        if node.process.poll() is None:
            node.stop()


def group_of_three(java, bootstrap: str, group: str) -> list:
    """Three classic members that outlast a failover: a 30 s session, heartbeats every 500 ms."""
    admin = java.admin(f"{group}-admin", {"bootstrap.servers": bootstrap})
    create_topics(admin, **{TOPIC: 6})
    members = [java.consumer(c, consumer_props(bootstrap, group, c, session_timeout_ms=30000,
                                               heartbeat_interval_ms=500, default_api_timeout_ms=90000,
                                               request_timeout_ms=15000), topics=[TOPIC]) for c in ("c1", "c2", "c3")]
    settled(members, partitions(TOPIC, 6), timeout=60)
    return members


def commit_round(members, n: int, acknowledged: dict[str, int]) -> None:
    """Each member commits offset n for its partitions; commitSync returns once acknowledged (it retries
    a moving coordinator within default.api.timeout.ms)."""
    for member in members:
        owned = member.assignment()
        member.commit_sync({p: {"offset": n, "metadata": f"round {n}"} for p in owned}, timeout_ms=90000)
        acknowledged.update({p: n for p in owned})


def no_rebalance_since(members, before: dict) -> None:
    for member in members:
        state = member.state()
        assert state["generation"] == before[member.name]["generation"], member.name
        assert state["assignment"] == before[member.name]["assignment"], member.name
        assert rebalance_events(state, len(before[member.name]["events"])) == [], (member.name, state["events"])


def test_java_consumers_commit_through_a_kill_9_of_their_coordinator_without_a_rebalance(cluster, etcd):
    nodes, java = cluster
    group = "java-failover"
    bootstrap = ",".join(n.bootstrap for n in nodes)
    members = group_of_three(java, bootstrap, group)
    before = {m.name: m.state() for m in members}
    acknowledged: dict[str, int] = {}
    for n in range(1, 4):
        commit_round(members, n, acknowledged)

    owner = owner_of(etcd, group)
    victim = next(node for node in nodes if node_id(node) == owner)
    victim.signal(signal.SIGKILL)
    victim.process.wait(10)
    for n in range(4, 7):  # the first of these waits out the lease (2 s), the claim and the load
        commit_round(members, n, acknowledged)

    assert owner_of(etcd, group) not in (None, owner)
    no_rebalance_since(members, before)
    committed = members[0].committed(partitions(TOPIC, 6))
    assert {p: c["offset"] for p, c in committed.items()} == acknowledged == {p: 6 for p in partitions(TOPIC, 6)}
    for member in members:
        member.close()


def test_a_rolling_restart_of_every_node_costs_java_consumers_no_rebalance_and_no_commit(cluster, etcd, tmp_path):
    nodes, java = cluster
    group, modern_group = "java-rolling", "java-rolling-kip848"
    bootstrap = ",".join(n.bootstrap for n in nodes)
    members = group_of_three(java, bootstrap, group)
    modern = java.consumer("k1", {"bootstrap.servers": bootstrap, "group.id": modern_group, "client.id": "k1",
                                  "group.protocol": "consumer", "enable.auto.commit": "false",
                                  "default.api.timeout.ms": 90000}, topics=[TOPIC])
    settled([modern], partitions(TOPIC, 6), timeout=60)
    before = {m.name: m.state() for m in [*members, modern]}
    acknowledged: dict[str, int] = {}
    modern_acknowledged: dict[str, int] = {}
    commit_round(members, 1, acknowledged)

    for round_number, index in enumerate(range(3), start=2):
        old = nodes[index]
        assert old.stop() == 0  # SIGTERM: the node hands its partitions over before it exits
        nodes[index] = restart_node(old)
        commit_round(members, round_number, acknowledged)
        commit_round([modern], round_number, modern_acknowledged)

    no_rebalance_since([*members, modern], before)
    committed = members[0].committed(partitions(TOPIC, 6))
    assert {p: c["offset"] for p, c in committed.items()} == acknowledged == {p: 4 for p in partitions(TOPIC, 6)}
    assert {p: c["offset"] for p, c in modern.committed(partitions(TOPIC, 6)).items()} == modern_acknowledged
    for member in [*members, modern]:
        member.close()
