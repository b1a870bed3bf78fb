"""Security with `cohort serve --workers 2`: every worker serves SASL_SSL, authenticates with worker 0's
credentials and decides with its ACLs, and changes made through any worker reach every worker.

Real clients (kafka-python, confluent-kafka) over SASL_SSL with SCRAM-SHA-512 and a CA made in the test;
the groups used live on worker 1, so their coordinator is not the worker that keeps the credentials.
"""
from __future__ import annotations

import os
import signal
import uuid

import pytest

from bounded_wait import wait_until
from tls_ca import make_ca
from workers_harness import WorkersServer, group_on_worker

from kafka import KafkaAdminClient
from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

from test_secured_clients import (  # the single-node suite's scenarios, run here against two workers
    ADMIN, ALICE, add_user, add_user_online, admin_properties, assert_group_refused, cohort_ok,
    confluent_group_round, create_topic, kafka_python_group_round,
)

pytestmark = pytest.mark.timeout(240)
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def workers(tmp_path, ca):
    """Two workers, each with one SASL_SSL listener, an authorizer and super user admin."""
    data = tmp_path / "data"
    add_user(data, tmp_path, *ADMIN)
    add_user(data, tmp_path, *ALICE)
    servers = []

    def start(*extra: str) -> WorkersServer:
        server = WorkersServer(data, 2, "--sasl.enabled.mechanisms", "SCRAM-SHA-512",
                               "--ssl.keystore.location", str(ca.server), "--authorizer.class.name", AUTHORIZER,
                               "--super.users", "User:admin", *extra)
        server.args += ["--listeners", f"SASL_SSL://127.0.0.1:{server.port}"]  # each worker: its port, SASL_SSL
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


def kp(server: WorkersServer, worker: int, ca, user: str, password: str) -> dict:
    return dict(bootstrap_servers=server.bootstrap_of(worker), security_protocol="SASL_SSL",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user, sasl_plain_password=password,
                ssl_cafile=str(ca.ca))


def ck(server: WorkersServer, worker: int, ca, user: str, password: str) -> dict:
    return {"bootstrap.servers": server.bootstrap_of(worker), "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(ca.ca)}


def grant(server: WorkersServer, worker: int, config, principal: str, topic: str, group: str) -> None:
    """READ on the topic and the group, added with `cohort acls add` through worker `worker`."""
    cohort_ok("acls", "add", "--allow-principal", principal, "--operation", "Read", "--topic", topic, "--group", group,
              "--bootstrap-server", server.bootstrap_of(worker), "--command-config", str(config))


def audited_on(server: WorkersServer, message: str, worker: int) -> bool:
    """Whether worker `worker` logged the audit line of a change (the worker a client asked, not worker 0)."""
    return wait_until(lambda: any(message in line and f"worker={worker}" in line
                                  for line in server.stderr().splitlines()), 10, f"{message!r} from worker {worker}")


def test_clients_run_groups_on_worker_1_over_sasl_ssl_with_acls_created_through_worker_1(workers, ca, tmp_path):
    server = workers()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    kp_group, ck_group = group_on_worker("kp", 1, 2), group_on_worker("ck", 1, 2)
    create_topic(kp(server, 1, ca, *ADMIN), topic)  # via worker 1: Metadata forwarded over the worker link
    # the ACLs are created through worker 1, which has worker 0 (partition 0's owner) persist them
    config = admin_properties(tmp_path, ca)
    grant(server, 1, config, "User:alice", topic, kp_group)
    grant(server, 1, config, "User:alice", topic, ck_group)
    assert audited_on(server, "ACL added", worker=1)
    kafka_python_group_round(kp(server, 1, ca, *ALICE), topic, kp_group)
    confluent_group_round(ck(server, 0, ca, *ALICE), topic, ck_group)


def test_a_group_without_an_acl_is_refused_on_every_worker(workers, ca):
    server = workers()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(kp(server, 0, ca, *ADMIN), topic)
    group = group_on_worker("denied", 1, 2)
    admin = KafkaAdminClient(**kp(server, 0, ca, *ADMIN), request_timeout_ms=10000)
    try:
        admin.create_acls([ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                               ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))])
    finally:
        admin.close()
    for worker in (0, 1):
        assert_group_refused(kp(server, worker, ca, *ALICE), topic, group)


def test_a_user_added_through_worker_1_authenticates_on_worker_0_and_after_a_restart(workers, ca, tmp_path):
    server = workers()
    config = admin_properties(tmp_path, ca)
    add_user_online(server.bootstrap_of(1), config, tmp_path, "dave", "dave-secret")
    assert audited_on(server, "SCRAM credential set", worker=1)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(kp(server, 0, ca, *ADMIN), topic)
    group = group_on_worker("dave", 1, 2)
    grant(server, 0, config, "User:dave", topic, group)
    kafka_python_group_round(kp(server, 0, ca, "dave", "dave-secret"), topic, group)
    server.stop()
    restarted = workers()
    kafka_python_group_round(kp(restarted, 1, ca, "dave", "dave-secret"), topic, group)


def test_after_worker_0_is_killed_and_restarted_changes_through_worker_1_still_reach_every_worker(
        workers, ca, tmp_path):
    from test_workers_failover import worker_pids  # tests/coordinator: how the failover suite finds workers

    server = workers()
    os.kill(worker_pids(server.process.pid)[0], signal.SIGKILL)
    wait_until(lambda: "restarting" in server.health()[1], 10, "the supervisor to notice worker 0 died")
    wait_until(lambda: server.health()[0] == 200, 60, "worker 0 back")
    config = admin_properties(tmp_path, ca)
    add_user_online(server.bootstrap_of(1), config, tmp_path, "erin", "erin-secret")
    topic, group = f"t-{uuid.uuid4().hex[:8]}", group_on_worker("erin", 1, 2)
    create_topic(kp(server, 1, ca, *ADMIN), topic)
    grant(server, 1, config, "User:erin", topic, group)
    kafka_python_group_round(kp(server, 0, ca, "erin", "erin-secret"), topic, group)


def test_every_listener_is_served_by_every_worker_with_its_own_addresses(tmp_path):
    """An internal PLAINTEXT listener beside an external SASL_PLAINTEXT one: each worker serves both, and a
    client of either listener is told every worker's address on that listener, as Kafka's brokers do."""
    from cohort_process import free_ports
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    from server_harness import RawClient

    from cohort.protocol.messages import MetadataRequest

    data = tmp_path / "data"
    add_user(data, tmp_path, *ADMIN)
    internal = next(p for p in free_ports(20) if p + 1 <= 65535 and _free(p + 1))  # two ports in a row
    server = WorkersServer(data, 2, "--sasl.enabled.mechanisms", "SCRAM-SHA-512", "--authorizer.class.name",
                           AUTHORIZER, "--super.users", "User:admin;User:ANONYMOUS")
    external = server.ports
    internal_ports = [internal, internal + 1]  # the internal listener's port, then the next one per worker
    server.args += ["--listeners", f"EXTERNAL://127.0.0.1:{external[0]},INTERNAL://127.0.0.1:{internal}",
                    "--listener.security.protocol.map", "EXTERNAL:SASL_PLAINTEXT,INTERNAL:PLAINTEXT"]
    server.start()
    try:
        for ports in (internal_ports,):  # a PLAINTEXT client of the internal listener, on each worker
            for worker in range(2):
                client = RawClient(ports[worker])
                try:
                    brokers = client.request(MetadataRequest(topics=[]), 12).brokers
                finally:
                    client.sock.close()
                assert sorted(b.port for b in brokers) == sorted(ports)
        group = group_on_worker("both-listeners", 1, 2)
        sasl = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                    sasl_plain_username=ADMIN[0], sasl_plain_password=ADMIN[1])
        for bootstrap, security in ((f"127.0.0.1:{external[0]}", sasl), (f"127.0.0.1:{internal}", {})):
            consumer = KafkaConsumer(group_id=group, bootstrap_servers=bootstrap, enable_auto_commit=False,
                                     request_timeout_ms=20000, **security)
            try:  # the group's coordinator is worker 1: reached through the listener the client used
                consumer.commit({TopicPartition("t", 0): OffsetAndMetadata(11, "", -1)})
                assert consumer.committed(TopicPartition("t", 0)) == 11
                assert {c.port for c in consumer._client.cluster.brokers()} == (
                    set(external[:2]) if security else set(internal_ports))
            finally:
                consumer.close()
    finally:
        server.stop()


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
