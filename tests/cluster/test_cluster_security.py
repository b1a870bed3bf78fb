"""Security in cluster mode: three `cohort serve --cluster` nodes with a SASL_SSL listener and the ACL
authorizer on a real 3-member etcd. Credentials and ACLs are records under etcd's `s/`, followed by every
node: a SCRAM user added through one node authenticates on another, an ACL added through one node is
enforced on another, and real clients (kafka-python, confluent-kafka) run groups over SASL_SSL
SCRAM-SHA-512 whichever node coordinates them.

The first credentials are written as an operator would: `cohort users add --data-dir` into a local data
dir, then `cohort cluster import` into etcd before any node starts.
"""
from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

from cohort_process import CohortServer, run_cohort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "coordinator" / "security"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "coordinator"))
from tls_ca import make_ca  # noqa: E402
from test_secured_clients import (  # noqa: E402  (the single-node suite's scenarios, run on three nodes)
    ADMIN, ALICE, add_user, add_user_online, admin_properties, assert_group_refused, cohort_ok,
    confluent_group_round, create_topic, kafka_python_group_round,
)

pytestmark = pytest.mark.timeout(300)
TTL_MS = 2000


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def secured_nodes(etcd, tmp_path, ca):
    seed = tmp_path / "seed"
    add_user(seed, tmp_path, *ADMIN)
    add_user(seed, tmp_path, *ALICE)
    imported = run_cohort("cluster", "import", "--data-dir", str(seed), "--cluster", etcd.url, "--execute")
    assert imported.returncode == 0, imported.stderr
    nodes = []
    for node_id in (1, 2, 3):
        node = CohortServer(tmp_path / f"node{node_id}-data", "--cluster", etcd.url, "--node-id", str(node_id),
                            "--cluster.lease.ttl.ms", str(TTL_MS), "--sasl.enabled.mechanisms", "SCRAM-SHA-512",
                            "--ssl.keystore.location", str(ca.server), "--authorizer.class.name", "acl",
                            "--super.users", "User:admin", "--group.min.session.timeout.ms", "500")
        node.args += ["--listeners", f"SASL_SSL://127.0.0.1:{node.port}"]
        nodes.append(node.start())
    yield nodes
    for node in nodes:
        if node.process.poll() is None:
            node.stop()


def kp(node: CohortServer, ca, user: str, password: str) -> dict:
    return dict(bootstrap_servers=node.bootstrap, security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                sasl_plain_username=user, sasl_plain_password=password, ssl_cafile=str(ca.ca))


def ck(node: CohortServer, ca, user: str, password: str) -> dict:
    return {"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": str(ca.ca)}


def logged(node: CohortServer, message: str) -> bool:
    deadline = time.monotonic() + 10
    while message not in node.stderr():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_user_and_an_acl_added_through_one_node_are_in_force_on_the_others(secured_nodes, ca, tmp_path):
    one, two, three = secured_nodes
    config = admin_properties(tmp_path, ca)
    add_user_online(one.bootstrap, config, tmp_path, "dave", "dave-secret")
    assert logged(one, "SCRAM credential set")
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(kp(two, ca, *ADMIN), topic)
    cohort_ok("acls", "add", "--allow-principal", "User:dave", "--operation", "Read", "--topic", topic,
              "--bootstrap-server", one.bootstrap, "--command-config", str(config))
    # dave authenticates on node 3 (his credential came through node 1) but has no ACL on the group yet
    assert_group_refused(kp(three, ca, "dave", "dave-secret"), topic, group)
    cohort_ok("acls", "add", "--allow-principal", "User:dave", "--operation", "Read", "--group", group,
              "--bootstrap-server", one.bootstrap, "--command-config", str(config))
    assert logged(one, f"name={group}")
    kafka_python_group_round(kp(three, ca, "dave", "dave-secret"), topic, group)
    # removed through node 2: refused again on node 3
    cohort_ok("acls", "remove", "--allow-principal", "User:dave", "--operation", "Read", "--group", group, "--force",
              "--bootstrap-server", two.bootstrap, "--command-config", str(config))
    assert_group_refused(kp(three, ca, "dave", "dave-secret"), topic, group)


def test_kafka_python_and_confluent_kafka_groups_over_sasl_ssl_on_every_node(secured_nodes, ca, tmp_path):
    config = admin_properties(tmp_path, ca)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(kp(secured_nodes[0], ca, *ADMIN), topic)
    cohort_ok("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic,
              "--group", "*", "--bootstrap-server", secured_nodes[0].bootstrap, "--command-config", str(config))
    for i, node in enumerate(secured_nodes):  # 3 groups each: their coordinators are spread over the nodes
        for k in range(3):
            kafka_python_group_round(kp(node, ca, *ALICE), topic, f"kp-{i}-{k}")
        confluent_group_round(ck(node, ca, *ALICE), topic, f"ck-{i}")


def test_nodes_serve_every_listener_and_users_are_managed_in_etcd(etcd, tmp_path):
    """Each node serves an internal PLAINTEXT listener beside an external SASL_PLAINTEXT one and tells a client
    every node's address on the client's listener; `cohort users … --cluster` reaches the credentials the
    running nodes follow."""
    from cohort_process import free_ports
    from server_harness import RawClient
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    from cohort.protocol.messages import MetadataRequest

    secret = tmp_path / "admin.password"
    secret.write_text(ADMIN[1] + "\n")
    cohort_ok("users", "add", ADMIN[0], "--password-file", str(secret), "--cluster", etcd.url)
    nodes, internal = [], {}
    for node_id in (1, 2, 3):
        node = CohortServer(tmp_path / f"node{node_id}-data", "--cluster", etcd.url, "--node-id", str(node_id),
                            "--cluster.lease.ttl.ms", str(TTL_MS), "--sasl.enabled.mechanisms", "SCRAM-SHA-512",
                            "--group.min.session.timeout.ms", "500")
        internal[node_id] = free_ports(1, taken=[n.port for n in nodes] + [node.port, node.metrics_port]
                                       + list(internal.values()))[0]
        node.args += ["--listeners", f"EXTERNAL://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{internal[node_id]}",
                      "--listener.security.protocol.map", "EXTERNAL:SASL_PLAINTEXT,INTERNAL:PLAINTEXT"]
        nodes.append(node.start())
    try:
        def brokers(port: int) -> set[int]:
            client = RawClient(port)
            try:
                return {b.port for b in client.request(MetadataRequest(topics=[]), 12).brokers}
            finally:
                client.sock.close()
        deadline = time.monotonic() + 20
        while brokers(internal[1]) != set(internal.values()):
            assert time.monotonic() < deadline, brokers(internal[1])
            time.sleep(0.1)

        external = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512")
        secret.write_text("erin-secret\n")
        cohort_ok("users", "add", "erin", "--password-file", str(secret), "--cluster", etcd.url)
        listed = run_cohort("users", "list", "--cluster", etcd.url, "--output", "json")
        assert listed.returncode == 0 and {r["user"] for r in __import__("json").loads(listed.stdout)} == {
            "admin", "erin"}
        group = f"g-{uuid.uuid4().hex[:8]}"
        for bootstrap, security in ((nodes[2].bootstrap, dict(external, sasl_plain_username="erin",
                                                                sasl_plain_password="erin-secret")),
                                    (f"127.0.0.1:{internal[2]}", {})):
            consumer = KafkaConsumer(group_id=group, bootstrap_servers=bootstrap, enable_auto_commit=False,
                                     request_timeout_ms=20000, **security)
            try:
                consumer.commit({TopicPartition("t", 0): OffsetAndMetadata(3, "", -1)})
                assert consumer.committed(TopicPartition("t", 0)) == 3
                assert {b.port for b in consumer._client.cluster.brokers()} == (
                    {n.port for n in nodes} if security else set(internal.values()))
            finally:
                consumer.close()

        cohort_ok("users", "delete", "erin", "--cluster", etcd.url)
        gone = run_cohort("users", "delete", "erin", "--cluster", etcd.url)
        assert gone.returncode == 1 and "no SCRAM-SHA-512 credential" in gone.stderr
        refused = run_cohort("groups", "list", "--bootstrap-server", nodes[0].bootstrap, "--command-config",
                             str(_properties(tmp_path, "erin", "erin-secret")))
        assert refused.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in refused.stderr
    finally:
        for node in nodes:
            if node.process.poll() is None:
                node.stop()


def _properties(tmp_path, user: str, password: str):
    path = tmp_path / f"{user}.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username={user}\n"
                    f"sasl.password={password}\n")
    return path
