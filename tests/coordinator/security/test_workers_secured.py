"""Security with `cohort serve --workers 2`: every worker serves SASL_SSL, authenticates with worker 0's
credentials and decides with its ACLs, and changes made through any worker reach every worker.

Real clients (kafka-python, confluent-kafka) over SASL_SSL with SCRAM-SHA-512 and a CA made in the test;
the groups used live on worker 1, so their coordinator is not the worker that keeps the credentials.
"""
from __future__ import annotations

import time
import uuid

import pytest

from bounded_wait import wait_until
from cohort_process import run_cohort
from tls_ca import make_ca
from workers_harness import WorkersServer, group_on_worker

import kafka
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

from test_secured_clients import (  # the single-node suite's scenarios, run here against two workers
    ADMIN, ALICE, add_user, confluent_group_round, create_topic, kafka_python_group_round,
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


def grant(admin_security: dict, principal: str, topic: str, group: str) -> None:
    admin = KafkaAdminClient(**admin_security, request_timeout_ms=10000)
    try:
        admin.create_acls([
            ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)),
            ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType.GROUP, group, ACLResourcePatternType.LITERAL))])
    finally:
        admin.close()


def audited_on(server: WorkersServer, message: str, worker: int) -> bool:
    """Whether worker `worker` logged the audit line of a change (the worker a client asked, not worker 0)."""
    return wait_until(lambda: any(message in line and f"worker={worker}" in line
                                  for line in server.stderr().splitlines()), 10, f"{message!r} from worker {worker}")


def test_clients_run_groups_on_worker_1_over_sasl_ssl_with_acls_created_through_worker_1(workers, ca):
    server = workers()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    kp_group, ck_group = group_on_worker("kp", 1, 2), group_on_worker("ck", 1, 2)
    create_topic(kp(server, 1, ca, *ADMIN), topic)  # via worker 1: Metadata forwarded over the worker link
    # the ACLs are created through worker 1, which has worker 0 (partition 0's owner) persist them
    grant(kp(server, 1, ca, *ADMIN), "User:alice", topic, kp_group)
    grant(kp(server, 1, ca, *ADMIN), "User:alice", topic, ck_group)
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
        consumer = KafkaConsumer(topic, group_id=group, enable_auto_commit=False, **kp(server, worker, ca, *ALICE))
        try:
            with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    consumer.poll(timeout_ms=300)
        finally:
            consumer.close()


def test_a_user_added_through_worker_1_authenticates_on_worker_0_and_after_a_restart(workers, ca, tmp_path):
    server = workers()
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                      f"sasl.username={ADMIN[0]}\nsasl.password={ADMIN[1]}\nssl.truststore.location={ca.ca}\n")
    secret = tmp_path / "dave.password"
    secret.write_text("dave-secret\n")
    result = run_cohort("users", "add", "dave", "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
                        "--bootstrap-server", server.bootstrap_of(1), "--command-config", str(config))
    assert result.returncode == 0, result.stderr
    assert audited_on(server, "SCRAM credential set", worker=1)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(kp(server, 0, ca, *ADMIN), topic)
    group = group_on_worker("dave", 1, 2)
    grant(kp(server, 0, ca, *ADMIN), "User:dave", topic, group)
    kafka_python_group_round(kp(server, 0, ca, "dave", "dave-secret"), topic, group)
    server.stop()
    restarted = workers()
    kafka_python_group_round(kp(restarted, 1, ca, "dave", "dave-secret"), topic, group)
