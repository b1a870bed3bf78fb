"""Apache Kafka's Admin client (kafka-clients 4.4) against Cohort: groups, offsets and topics over
PLAINTEXT; SCRAM credentials and ACLs over SASL_SSL, enforced on Java consumers of the same run."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cohort_process import CohortServer, free_ports, run_cohort
from java_groups import consumer_props, create_topics, partitions, settled

from bounded_wait import wait_until

pytestmark = pytest.mark.timeout(180)


def error_class(outcome: dict) -> str:
    assert "error" in outcome, f"expected an error, got {outcome}"
    return outcome["error"]["class"].rsplit(".", 1)[-1]


def test_admin_lists_describes_and_edits_groups_offsets_and_topics(java, java_admin, cohort, names):
    topic = f"{names}-t"
    created = java_admin.createTopics(topics=[{"name": topic, "partitions": 3, "replicationFactor": 1},
                                              {"name": f"{names}-zero", "partitions": 0}])
    assert created[topic] == {"ok": None}
    assert error_class(created[f"{names}-zero"]) == "InvalidPartitionsException"
    assert error_class(java_admin.createTopics(topics=[{"name": topic, "partitions": 1}])[topic]) == \
        "TopicExistsException"
    assert java_admin.describeTopics(topics=[topic])[topic]["ok"]["partitions"] == 3
    assert topic in java_admin.listTopics()

    # An active classic group, an empty one (offsets only) and an active KIP-848 group.
    active, idle, kip848 = f"{names}-active", f"{names}-idle", f"{names}-kip848"
    members = [java.consumer(c, consumer_props(cohort.bootstrap, active, c), topics=[topic]) for c in ("m1", "m2")]
    settled(members, partitions(topic, 3))
    members[0].commit_sync({f"{topic}:0": 5, f"{topic}:1": 6})
    assert java_admin.alterConsumerGroupOffsets(group=idle, offsets={f"{topic}:0": 100, f"{topic}:2": {
        "offset": 102, "metadata": "by admin"}})["all"] == {"ok": None}
    modern = java.consumer("k1", {"bootstrap.servers": cohort.bootstrap, "group.id": kip848, "client.id": "k1",
                                  "group.protocol": "consumer", "enable.auto.commit": "false"}, topics=[topic])
    settled([modern], partitions(topic, 3))

    listed = {g["groupId"]: g for g in java_admin.listGroups() if g["groupId"].startswith(names)}
    assert {g: (r["type"], r["protocol"], r["state"]) for g, r in listed.items()} == {
        active: ("Classic", "consumer", "Stable"), idle: ("Classic", "", "Empty"),
        kip848: ("Consumer", "consumer", "Stable")}
    stable = java_admin.listGroups(consumer=True, states=["Stable"])
    assert {g["groupId"] for g in stable if g["groupId"].startswith(names)} == {active, kip848}
    only_consumer = java_admin.listGroups(consumer=True, types=["consumer"])
    assert {g["groupId"] for g in only_consumer if g["groupId"].startswith(names)} == {kip848}
    legacy = {g["groupId"]: g for g in java_admin.listConsumerGroups() if g["groupId"].startswith(names)}
    assert {g: (r["state"], r["simple"]) for g, r in legacy.items()} == {
        active: ("Stable", False), idle: ("Empty", True), kip848: ("Stable", False)}

    described = java_admin.describeConsumerGroups(groups=[active, idle, kip848, f"{names}-nobody"])
    group = described[active]["ok"]
    assert (group["state"], group["type"], group["partitionAssignor"], group["simple"]) == \
        ("Stable", "Classic", "range", False)
    assert group["coordinator"] == {"id": 0, "host": "127.0.0.1", "port": cohort.port}
    assert {m["clientId"]: m["assignment"] for m in group["members"]} == {
        "m1": [f"{topic}:0", f"{topic}:1"], "m2": [f"{topic}:2"]}
    assert all(m["host"] == "/127.0.0.1" and m["consumerId"].startswith(m["clientId"] + "-") for m in group["members"])
    assert (described[idle]["ok"]["state"], described[idle]["ok"]["members"]) == ("Empty", [])
    assert described[kip848]["ok"]["type"] == "Consumer" and described[kip848]["ok"]["groupEpoch"] == 2
    assert error_class(described[f"{names}-nobody"]) == "GroupIdNotFoundException"

    assert {p: (o["offset"], o["metadata"]) for p, o in java_admin.listConsumerGroupOffsets(group=idle).items()} == {
        f"{topic}:0": (100, ""), f"{topic}:2": (102, "by admin")}
    assert {p: o["offset"] for p, o in java_admin.listConsumerGroupOffsets(group=active).items()} == {
        f"{topic}:0": 5, f"{topic}:1": 6}

    # What Kafka refuses while a group has members: an admin's commit, deleting offsets of a topic the
    # group consumes, deleting the group.
    refused = java_admin.alterConsumerGroupOffsets(group=active, offsets={f"{topic}:0": 1})
    assert error_class(refused[f"{topic}:0"]) == "UnknownMemberIdException"
    still = java_admin.deleteConsumerGroupOffsets(group=active, partitions=[f"{topic}:0"])
    assert error_class(still[f"{topic}:0"]) == "GroupSubscribedToTopicException"
    assert error_class(java_admin.deleteConsumerGroups(groups=[active])[active]) == "GroupNotEmptyException"

    deleted = java_admin.deleteConsumerGroupOffsets(group=idle, partitions=[f"{topic}:0"])
    assert deleted[f"{topic}:0"] == {"ok": None}
    assert list(java_admin.listConsumerGroupOffsets(group=idle)) == [f"{topic}:2"]
    gone = java_admin.deleteConsumerGroups(groups=[idle, f"{names}-nobody"])
    assert gone[idle] == {"ok": None}
    assert error_class(gone[f"{names}-nobody"]) == "GroupIdNotFoundException"
    assert java_admin.listConsumerGroupOffsets(group=idle) == {}

    # Once its members leave, the active group can be deleted too; its offsets go with it.
    for member in members:
        member.close()
    modern.close()
    wait_until(lambda: java_admin.describeConsumerGroups(groups=[active])[active]["ok"]["state"] == "Empty", 15,
               "the group empty after its members left")
    assert java_admin.deleteConsumerGroups(groups=[active, kip848]) == {active: {"ok": None}, kip848: {"ok": None}}
    assert java_admin.listConsumerGroupOffsets(group=active) == {}


# -- SASL_SSL: SCRAM credentials and ACLs -------------------------------------------------------------

@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A server with PLAINTEXT and SASL_SSL listeners (SCRAM), ACLs on, and one super user 'admin'
    written into the data dir beforehand, the way an operator starts a secured server."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coordinator" / "security"))
    from tls_ca import make_ca  # the suite's throwaway CA (openssl)

    root = tmp_path_factory.mktemp("secured")
    ca_dir = root / "ca"
    ca_dir.mkdir()
    ca = make_ca(ca_dir)
    data = root / "data"
    secret = root / "admin.secret"
    secret.write_text("admin-secret")
    added = run_cohort("users", "add", "admin", "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
                       "--data-dir", str(data))
    assert added.returncode == 0, added.stderr
    server = CohortServer(data, "--listeners", "PLACEHOLDER")
    sasl_port = free_ports(1, taken=server.given_ports)[0]
    server.args[server.args.index("PLACEHOLDER")] = (
        f"PLAINTEXT://127.0.0.1:{server.port},SASL_SSL://127.0.0.1:{sasl_port}")
    server.args += ["--sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512",
                    "--ssl.keystore.location", str(ca.server), "--ssl.truststore.location", str(ca.ca),
                    "--authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "--super.users", "User:admin", "--connection.failed.authentication.delay.ms", "50"]
    server.start()
    server.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    server.ca = ca
    try:
        yield server
    finally:
        server.stop()


def sasl_ssl(server, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict:
    """Java client settings for the SASL_SSL listener: Kafka's own names, a PEM truststore."""
    return {"bootstrap.servers": server.sasl_bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism, "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(server.ca.ca),
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                f'username="{user}" password="{password}";'}


def test_scram_credentials_and_acls_through_the_admin_client_over_sasl_ssl(java, secured, names):
    admin = java.admin("sasl-admin", sasl_ssl(secured, "admin", "admin-secret"))
    try:
        topic, group = f"{names}-orders", f"{names}-billing"
        create_topics(admin, **{topic: 2})
        altered = admin.alterUserScramCredentials(upsertions=[
            {"user": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 8192, "password": "alice-secret"},
            {"user": "bob", "mechanism": "SCRAM-SHA-512", "password": "bob-secret"}])
        assert altered == {"alice": {"ok": None}, "bob": {"ok": None}}
        described = admin.describeUserScramCredentials(users=["alice", "bob", "nobody"])
        assert described["alice"] == {"ok": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]}
        assert described["bob"] == {"ok": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}
        assert error_class(described["nobody"]) == "ResourceNotFoundException"
        everyone = admin.describeUserScramCredentials()
        assert {"admin", "alice", "bob"} <= set(everyone)

        grants = [
            {"resourceType": "GROUP", "name": f"{names}-", "patternType": "PREFIXED", "principal": "User:alice",
             "operation": "READ"},
            {"resourceType": "TOPIC", "name": topic, "principal": "User:alice", "operation": "READ"},
        ]
        assert admin.createAcls(bindings=grants) == [{"ok": None}, {"ok": None}]
        listed = admin.describeAcls(filter={"principal": "User:alice"})
        assert sorted((b["resourceType"], b["name"], b["patternType"], b["operation"], b["permission"], b["host"])
                      for b in listed) == [
            ("GROUP", f"{names}-", "PREFIXED", "READ", "ALLOW", "*"),
            ("TOPIC", topic, "LITERAL", "READ", "ALLOW", "*")]

        # alice (SCRAM-SHA-256) may consume and commit in her groups; bob may not do anything.
        alice = java.consumer("alice", {**sasl_ssl(secured, "alice", "alice-secret", "SCRAM-SHA-256"),
                                        **consumer_props(secured.sasl_bootstrap, group, "alice")}, topics=[topic])
        settled([alice], partitions(topic, 2), what="alice joined over SASL_SSL")
        alice.commit_sync({f"{topic}:0": 3})
        assert admin.listConsumerGroupOffsets(group=group)[f"{topic}:0"]["offset"] == 3
        bob = java.admin("bob", sasl_ssl(secured, "bob", "bob-secret"))
        refused = bob.describeConsumerGroups(groups=[group])[group]
        assert error_class(refused) == "GroupAuthorizationException"
        assert error_class(bob.createAcls(bindings=[{**grants[1], "principal": "User:bob"}])[0]) == \
            "ClusterAuthorizationException"
        bob.close()

        # Taking the topic grant away refuses alice's next commit, as Kafka does.
        removed = admin.deleteAcls(filters=[{"resourceType": "TOPIC", "name": topic, "principal": "User:alice"}])
        assert removed == [{"ok": [{**{k: v for k, v in listed[1].items()}}]}]
        with pytest.raises(Exception) as denied:
            alice.commit_sync({f"{topic}:0": 4}, timeout_ms=10000)
        assert denied.value.java_class == "org.apache.kafka.common.errors.TopicAuthorizationException"
        alice.close(timeout_ms=5000)

        # Without her credential alice cannot sign in any more.
        assert admin.alterUserScramCredentials(deletions=[{"user": "alice", "mechanism": "SCRAM-SHA-256"}]) == \
            {"alice": {"ok": None}}
        locked_out = java.admin("alice-admin", {**sasl_ssl(secured, "alice", "alice-secret", "SCRAM-SHA-256"),
                                                "default.api.timeout.ms": 5000, "request.timeout.ms": 4000})
        with pytest.raises(Exception) as failed:
            locked_out.listTopics()
        assert "SaslAuthenticationException" in str(failed.value)
        locked_out.close()
    finally:
        admin.close()
