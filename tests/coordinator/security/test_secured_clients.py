"""Real clients (kafka-python, confluent-kafka) against a secured Cohort: SASL_PLAINTEXT with PLAIN,
SASL_SSL with SCRAM-SHA-512 over a CA made in the test, wrong passwords refused, ACLs enforced with
Kafka's error codes, credentials and ACLs kept across a restart.

The first credential is written the way an operator does it, with ``cohort users add --data-dir``
before the server starts.
"""
from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pytest

from cohort_process import run_cohort
from tls_ca import make_ca

import confluent_kafka  # the test command installs every real client: a missing one fails, never skips
import kafka
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, NewTopic
from kafka.admin import ResourcePattern, ResourcePatternFilter, ResourceType
from kafka.structs import OffsetAndMetadata

pytestmark = pytest.mark.timeout(180)

ADMIN, ALICE, BOB = ("admin", "admin-secret"), ("alice", "alice-secret"), ("bob", "bob-secret")


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


def add_user(data_dir, tmp_path, user, password, mechanism="SCRAM-SHA-512"):
    secret = tmp_path / f"{user}.password"
    secret.write_text(password + "\n")
    result = run_cohort("users", "add", user, "--mechanism", mechanism, "--password-file", str(secret),
                        "--data-dir", str(data_dir))
    assert result.returncode == 0, result.stderr
    assert password not in result.stdout + result.stderr


@pytest.fixture
def secured(server_factory, tmp_path, ca):
    """Start a node with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners (users admin, alice, bob)."""
    def start(data_dir=None, **overrides):
        data_dir = data_dir or tmp_path / "data"
        if not data_dir.exists():
            for user, password in (ADMIN, ALICE, BOB):
                add_user(data_dir, tmp_path, user, password)
        settings = dict(
            listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", ssl_keystore_location=ca.server,
            connection_failed_authentication_delay_ms=100)
        settings.update(overrides)
        return server_factory(data_dir, **settings)
    return start


def bootstrap(node, listener: str) -> str:
    return f"127.0.0.1:{node.server.ports[listener]}"


def kp_security(node, ca, protocol, mechanism, user, password) -> dict:
    settings = dict(bootstrap_servers=bootstrap(node, protocol), security_protocol=protocol,
                    sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    if protocol == "SASL_SSL":
        settings["ssl_cafile"] = str(ca.ca)
    return settings


def ck_security(node, ca, protocol, mechanism, user, password) -> dict:
    settings = {"bootstrap.servers": bootstrap(node, protocol), "security.protocol": protocol,
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    if protocol == "SASL_SSL":
        settings["ssl.ca.location"] = str(ca.ca)
    return settings


def create_topic(security: dict, topic: str, partitions: int = 2, bootstrap_timeout_ms: int = 30000) -> None:
    admin = KafkaAdminClient(**security, request_timeout_ms=10000, bootstrap_timeout_ms=bootstrap_timeout_ms)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def kafka_python_group_round(security: dict, topic: str, group: str) -> None:
    """Join a group, get both partitions, commit, read the commit back."""
    consumer = KafkaConsumer(topic, group_id=group, enable_auto_commit=False, session_timeout_ms=6000,
                             heartbeat_interval_ms=300, fetch_max_wait_ms=100, request_timeout_ms=30000,
                             **security)
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(timeout_ms=500)
        offsets = {TopicPartition(topic, p): OffsetAndMetadata(40 + p, "secured", -1) for p in range(2)}
        consumer.commit(offsets)
        assert consumer.committed(TopicPartition(topic, 1)) == 41
    finally:
        consumer.close()


def confluent_group_round(security: dict, topic: str, group: str) -> None:
    consumer = confluent_kafka.Consumer({**security, "group.id": group, "enable.auto.commit": False,
                                         "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, 70 + p) for p in range(2)],
                        asynchronous=False)
        committed = consumer.committed([confluent_kafka.TopicPartition(topic, 1)], timeout=10)
        assert committed[0].offset == 71
    finally:
        consumer.close()


def admin_properties(tmp_path, ca) -> Path:
    """A client properties file (for `--command-config`) logging in as the super user over SASL_SSL."""
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                      f"sasl.username={ADMIN[0]}\nsasl.password={ADMIN[1]}\nssl.truststore.location={ca.ca}\n")
    return config


def cohort_ok(*args: str) -> None:
    result = run_cohort(*args)
    assert result.returncode == 0, result.stderr


def add_user_online(bootstrap: str, config: Path, tmp_path, user: str, password: str) -> None:
    """`cohort users add` through a running server (AlterUserScramCredentials), as the super user."""
    secret = tmp_path / f"{user}.password"
    secret.write_text(password + "\n")
    cohort_ok("users", "add", user, "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
              "--bootstrap-server", bootstrap, "--command-config", str(config))


def assert_group_refused(security: dict, topic: str, group: str) -> None:
    """A kafka-python consumer of `group` gets GroupAuthorizationFailedError (within 20 s of polling)."""
    consumer = KafkaConsumer(topic, group_id=group, enable_auto_commit=False, **security)
    try:
        with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=300)
    finally:
        consumer.close()


CASES = [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN")]


@pytest.mark.parametrize("protocol, mechanism", CASES)
def test_kafka_python_consumer_group_over_sasl(secured, ca, protocol, mechanism):
    node = secured()
    security = kp_security(node, ca, protocol, mechanism, *ALICE)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(security, topic)
    kafka_python_group_round(security, topic, f"g-{uuid.uuid4().hex[:8]}")


def authentication_failures(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "cohort.audit" and r.getMessage() == "authentication failed"]


def test_a_mechanism_the_user_has_no_credential_for_is_refused(secured, ca, caplog):
    node = secured()  # alice has a SCRAM-SHA-512 credential only
    caplog.set_level(logging.INFO, logger="cohort.audit")
    with pytest.raises(kafka.errors.KafkaError):
        create_topic(kp_security(node, ca, "SASL_PLAINTEXT", "SCRAM-SHA-256", *ALICE), "t", bootstrap_timeout_ms=2000)
    assert authentication_failures(caplog)
    assert authentication_failures(caplog)[0].mechanism == "SCRAM-SHA-256"


@pytest.mark.parametrize("protocol, mechanism", CASES)
def test_confluent_kafka_consumer_group_over_sasl(secured, ca, protocol, mechanism):
    node = secured()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(kp_security(node, ca, protocol, mechanism, *ALICE), topic)
    confluent_group_round(ck_security(node, ca, protocol, mechanism, *ALICE), topic, f"g-{uuid.uuid4().hex[:8]}")


def test_wrong_password_is_refused_for_both_clients_and_never_logged(secured, ca, caplog):
    node = secured()
    caplog.set_level(logging.DEBUG, logger="cohort")
    with pytest.raises(kafka.errors.KafkaError):
        create_topic(kp_security(node, ca, "SASL_SSL", "SCRAM-SHA-512", "alice", "not-her-password"), "t",
                     bootstrap_timeout_ms=2000)
    assert authentication_failures(caplog)

    errors = []
    consumer = confluent_kafka.Consumer({**ck_security(node, ca, "SASL_PLAINTEXT", "PLAIN", "alice", "nope-nope"),
                                         "group.id": "g", "error_cb": errors.append})
    try:
        deadline = time.monotonic() + 20
        while not any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors):
            assert time.monotonic() < deadline, errors
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert {r.mechanism for r in authentication_failures(caplog)} == {"SCRAM-SHA-512", "PLAIN"}
    # everything the server logged (messages and their structured fields), at DEBUG
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records if r.name.startswith("cohort"))
    for secret in ("not-her-password", "nope-nope", ALICE[1]):
        assert secret not in text


def test_a_principal_without_acls_gets_group_authorization_failed_until_granted(secured, ca):
    node = secured(authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                   super_users="User:admin")
    admin_security = kp_security(node, ca, "SASL_SSL", "SCRAM-SHA-512", *ADMIN)
    bob = kp_security(node, ca, "SASL_SSL", "SCRAM-SHA-512", *BOB)
    topic, group = "orders", "billing"
    create_topic(admin_security, topic)
    admin = KafkaAdminClient(**admin_security, request_timeout_ms=10000)
    try:
        # bob may read the topic, but has no ACL on the group
        admin.create_acls([ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                               ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))])
        assert_group_refused(bob, topic, group)

        errors = []
        ck = confluent_kafka.Consumer({**ck_security(node, ca, "SASL_SSL", "SCRAM-SHA-512", *BOB),
                                       "group.id": group, "error_cb": errors.append})
        try:
            ck.subscribe([topic])
            deadline = time.monotonic() + 20
            seen = []
            while not any(e.code() == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED for e in seen):
                assert time.monotonic() < deadline, seen
                message = ck.poll(0.2)
                if message is not None and message.error():
                    seen.append(message.error())
                seen.extend(errors)
        finally:
            ck.close()

        # granted a prefixed READ on the group, bob's group works
        admin.create_acls([ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                               ResourcePattern(ResourceType.GROUP, "bill", ACLResourcePatternType.PREFIXED))])
        kafka_python_group_round(bob, topic, group)
        acls, error = admin.describe_acls(ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                    ResourcePatternFilter(ResourceType.ANY, None,
                                                                          ACLResourcePatternType.ANY)))
        assert {(a.resource_pattern.resource_type, a.resource_pattern.resource_name) for a in acls} == {
            (ResourceType.TOPIC, topic), (ResourceType.GROUP, "bill")}
    finally:
        admin.close()

    # bob is not allowed to change ACLs
    bob_admin = KafkaAdminClient(**bob, request_timeout_ms=10000)
    try:
        result = bob_admin.create_acls([ACL("User:bob", "*", ACLOperation.ALL, ACLPermissionType.ALLOW,
                                            ResourcePattern(ResourceType.CLUSTER, "kafka-cluster",
                                                            ACLResourcePatternType.LITERAL))])
        assert not result["succeeded"]
        assert result["failed"] == [kafka.errors.ClusterAuthorizationFailedError]  # kafka-python lists error classes
    finally:
        bob_admin.close()


def test_credentials_and_acls_survive_a_restart(secured, ca, tmp_path):
    data_dir = tmp_path / "data"
    settings = dict(authorizer_class_name="acl", super_users="User:admin")
    node = secured(data_dir, **settings)
    admin_security = kp_security(node, ca, "SASL_SSL", "SCRAM-SHA-512", *ADMIN)
    admin = KafkaAdminClient(**admin_security, request_timeout_ms=10000)
    try:
        admin.create_acls([ACL("User:alice", "*", ACLOperation.ALL, ACLPermissionType.ALLOW,
                               ResourcePattern(ResourceType.GROUP, "*", ACLResourcePatternType.LITERAL)),
                           ACL("User:alice", "*", ACLOperation.ALL, ACLPermissionType.ALLOW,
                               ResourcePattern(ResourceType.TOPIC, "*", ACLResourcePatternType.LITERAL))])
    finally:
        admin.close()
    node.stop()

    again = secured(data_dir, **settings)
    assert again.run(lambda: len(again.server.security.authorizer)) == 2
    alice = kp_security(again, ca, "SASL_SSL", "SCRAM-SHA-512", *ALICE)
    create_topic(alice, "kept")
    kafka_python_group_round(alice, "kept", "kept-group")


def aiokafka_group_round(node, ca, protocol, mechanism, user, password, topic, group) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition as AioTopicPartition
    from aiokafka.helpers import create_ssl_context

    async def scenario():
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap(node, protocol), group_id=group, enable_auto_commit=False,
            security_protocol=protocol, sasl_mechanism=mechanism, sasl_plain_username=user,
            sasl_plain_password=password, session_timeout_ms=6000, heartbeat_interval_ms=300,
            ssl_context=create_ssl_context(cafile=str(ca.ca)) if protocol == "SASL_SSL" else None)
        await consumer.start()
        try:
            deadline = time.monotonic() + 30
            while len(consumer.assignment()) < 2:
                assert time.monotonic() < deadline, "no assignment"
                await consumer.getmany(timeout_ms=200)
            await consumer.commit({AioTopicPartition(topic, p): 90 + p for p in range(2)})
            assert await consumer.committed(AioTopicPartition(topic, 1)) == 91
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(scenario(), 60))


@pytest.mark.parametrize("protocol, mechanism", CASES)
def test_aiokafka_consumer_group_over_sasl(secured, ca, protocol, mechanism):
    node = secured()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(kp_security(node, ca, protocol, mechanism, *ALICE), topic)
    aiokafka_group_round(node, ca, protocol, mechanism, *ALICE, topic, f"g-{uuid.uuid4().hex[:8]}")


def test_ssl_client_certificate_subject_is_the_principal(secured, ca):
    node = secured(listeners="SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0", ssl_client_auth="required",
                   ssl_truststore_location=ca.ca, authorizer_class_name="acl", super_users="User:admin")
    carol = "User:CN=carol,OU=eng,O=Cohort Tests"
    admin = KafkaAdminClient(**kp_security(node, ca, "SASL_SSL", "SCRAM-SHA-512", *ADMIN), request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("certs", 2, 1)])
        admin.create_acls([ACL(carol, "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                               ResourcePattern(kind, name, ACLResourcePatternType.LITERAL))
                           for kind, name in ((ResourceType.TOPIC, "certs"), (ResourceType.GROUP, "carols"))])
    finally:
        admin.close()
    tls = dict(bootstrap_servers=bootstrap(node, "SSL"), security_protocol="SSL", ssl_cafile=str(ca.ca),
               ssl_certfile=str(ca.client_cert), ssl_keyfile=str(ca.client_key))
    kafka_python_group_round(tls, "certs", "carols")
    # without a client certificate the TLS handshake itself is refused
    with pytest.raises(kafka.errors.KafkaError):
        create_topic(dict(bootstrap_servers=bootstrap(node, "SSL"), security_protocol="SSL",
                          ssl_cafile=str(ca.ca)), "nope", bootstrap_timeout_ms=2000)


def test_kafka_python_reauthenticates_before_its_session_ends(secured, ca, caplog):
    caplog.set_level(logging.DEBUG, logger="cohort.coordinator.server.connection")
    node = secured(connections_max_reauth_ms=1500)
    security = kp_security(node, ca, "SASL_SSL", "SCRAM-SHA-512", *ALICE)
    create_topic(security, "long-lived")
    consumer = KafkaConsumer("long-lived", group_id="reauth", enable_auto_commit=False, session_timeout_ms=6000,
                             heartbeat_interval_ms=300, fetch_max_wait_ms=100, **security)
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(timeout_ms=300)
        until = time.monotonic() + 4  # more than two session lifetimes of polling and heartbeats
        while time.monotonic() < until:
            consumer.poll(timeout_ms=200)
        consumer.commit({TopicPartition("long-lived", 0): OffsetAndMetadata(5, "", -1)})
        assert consumer.committed(TopicPartition("long-lived", 0)) == 5
    finally:
        consumer.close()
    messages = [r.getMessage() for r in caplog.records if r.name == "cohort.coordinator.server.connection"]
    assert messages.count("re-authenticated") >= 2
    assert not any("expired" in m for m in messages)


def test_confluent_kafka_reauthenticates_before_its_session_ends(secured, ca, caplog):
    caplog.set_level(logging.DEBUG, logger="cohort.coordinator.server.connection")
    node = secured(connections_max_reauth_ms=1500)
    create_topic(kp_security(node, ca, "SASL_SSL", "SCRAM-SHA-512", *ALICE), "long-lived")
    consumer = confluent_kafka.Consumer({**ck_security(node, ca, "SASL_SSL", "SCRAM-SHA-512", *ALICE),
                                         "group.id": "reauth", "enable.auto.commit": False,
                                         "session.timeout.ms": 6000})
    try:
        consumer.subscribe(["long-lived"])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        until = time.monotonic() + 4
        while time.monotonic() < until:
            consumer.poll(0.2)
        consumer.commit(offsets=[confluent_kafka.TopicPartition("long-lived", 0, 6)], asynchronous=False)
        assert consumer.committed([confluent_kafka.TopicPartition("long-lived", 0)], timeout=10)[0].offset == 6
    finally:
        consumer.close()
    messages = [r.getMessage() for r in caplog.records if r.name == "cohort.coordinator.server.connection"]
    assert messages.count("re-authenticated") >= 2
    assert not any("expired" in m for m in messages)


def test_cohorts_own_client_reauthenticates_on_the_same_connection(secured, ca, caplog):
    import asyncio
    import ssl

    from cohort.client.connection import BrokerConnection
    from cohort.client.security import ClientSecurity
    from cohort.protocol.messages import ApiVersionsRequest

    caplog.set_level(logging.DEBUG, logger="cohort.coordinator.server.connection")
    node = secured(connections_max_reauth_ms=1500)
    host, port = bootstrap(node, "SASL_SSL").split(":")

    async def scenario() -> None:
        context = ssl.create_default_context(cafile=str(ca.ca))
        conn = BrokerConnection(host, int(port), security=ClientSecurity("SASL_SSL", "SCRAM-SHA-512", *ALICE, context))
        try:
            await conn.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
            socket_before = conn._writer
            until = time.monotonic() + 4  # more than two session lifetimes
            while time.monotonic() < until:
                await conn.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
                await asyncio.sleep(0.2)
            assert conn._writer is socket_before  # never reconnected
        finally:
            await conn.close()

    asyncio.run(scenario())
    messages = [r.getMessage() for r in caplog.records if r.name == "cohort.coordinator.server.connection"]
    assert messages.count("authenticated") == 1 and messages.count("re-authenticated") >= 2
    assert not any("expired" in m for m in messages)
