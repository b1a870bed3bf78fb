"""``cohort users`` and ``cohort acls`` against a secured server, with ``--command-config`` files in
Kafka's client-properties format; and the offline ``--data-dir`` path refusing a running server."""
from __future__ import annotations

import json

import pytest

from cohort_process import run_cohort
from test_secured_clients import ADMIN, add_user, bootstrap, ca, kafka_python_group_round, kp_security, secured  # noqa: F401

pytestmark = pytest.mark.timeout(120)


def command_config(tmp_path, ca, user, password, protocol="SASL_SSL", mechanism="SCRAM-SHA-512") -> str:
    path = tmp_path / f"{user}-{protocol}.properties"
    module = "scram.ScramLoginModule" if mechanism.startswith("SCRAM") else "plain.PlainLoginModule"
    path.write_text(
        "# what kafka-acls.sh --command-config takes\n"
        f"security.protocol={protocol}\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required \\\n"
        f'    username="{user}" password="{password}";\n'
        f"ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={ca.ca}\n")
    return str(path)


@pytest.fixture
def acl_node(secured):
    return secured(authorizer_class_name="acl", super_users="User:admin")


def test_users_are_added_listed_and_deleted_through_a_running_server(acl_node, ca, tmp_path):
    config = command_config(tmp_path, ca, *ADMIN)
    server = bootstrap(acl_node, "SASL_SSL")
    secret = tmp_path / "dave.password"
    secret.write_text("dave-secret\n")
    added = run_cohort("users", "add", "dave", "--mechanism", "SCRAM-SHA-256", "--password-file", str(secret),
                       "--iterations", "4096", "--bootstrap-server", server, "--command-config", config)
    assert added.returncode == 0, added.stderr
    listed = run_cohort("users", "list", "--bootstrap-server", server, "--command-config", config,
                        "--output", "json")
    assert listed.returncode == 0, listed.stderr
    assert {"user": "dave", "mechanism": "SCRAM-SHA-256", "iterations": 4096} in json.loads(listed.stdout)
    assert "dave-secret" not in listed.stdout

    # dave now authenticates with SCRAM-SHA-256, but has no CLUSTER DESCRIBE: refused with Kafka's error
    dave = command_config(tmp_path, ca, "dave", "dave-secret", mechanism="SCRAM-SHA-256")
    refused = run_cohort("users", "list", "--bootstrap-server", server, "--command-config", dave)
    assert refused.returncode == 1
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1

    deleted = run_cohort("users", "delete", "dave", "--mechanism", "SCRAM-SHA-256", "--bootstrap-server", server,
                         "--command-config", config)
    assert deleted.returncode == 0, deleted.stderr
    gone = run_cohort("users", "list", "--bootstrap-server", server, "--command-config", dave)
    assert gone.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in gone.stderr


def test_acls_add_list_remove_with_kafka_acls_conventions(acl_node, ca, tmp_path):
    config = command_config(tmp_path, ca, *ADMIN)
    server = bootstrap(acl_node, "SASL_SSL")
    common = ("--bootstrap-server", server, "--command-config", config)
    added = run_cohort("acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                       "--operation", "Describe", "--group", "team-", "--resource-pattern-type", "prefixed",
                       "--topic", "orders", *common)
    assert added.returncode == 0, added.stderr
    assert added.stdout.count("Adding ACL") == 4
    listed = run_cohort("acls", "list", "--principal", "User:alice", "--output", "json", *common)
    rows = json.loads(listed.stdout)
    assert {(r["resource_type"], r["name"], r["pattern_type"], r["operation"]) for r in rows} == {
        ("GROUP", "team-", "PREFIXED", "READ"), ("GROUP", "team-", "PREFIXED", "DESCRIBE"),
        ("TOPIC", "orders", "PREFIXED", "READ"), ("TOPIC", "orders", "PREFIXED", "DESCRIBE")}

    alice = kp_security(acl_node, ca, "SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret")
    run_cohort("topics", "create", "--topic", "orders-eu", "--partitions", "2", *common)
    kafka_python_group_round(alice, "orders-eu", "team-billing")

    removed = run_cohort("acls", "remove", "--topic", "orders", "--resource-pattern-type", "prefixed", *common,
                         input="y\n")  # kafka-acls.sh asks first
    assert removed.returncode == 0 and removed.stdout.count("Removed ACL") == 2
    left = json.loads(run_cohort("acls", "list", "--output", "json", *common).stdout)
    assert {r["resource_type"] for r in left} == {"GROUP"}


def test_acls_remove_needs_a_resource_and_a_confirmation_and_keeps_other_hosts_rules(acl_node, ca, tmp_path):
    config = command_config(tmp_path, ca, *ADMIN)
    common = ("--bootstrap-server", bootstrap(acl_node, "SASL_SSL"), "--command-config", config)
    for host in ("*", "10.1.2.3"):
        added = run_cohort("acls", "add", "--allow-principal", "User:alice", "--allow-host", host,
                           "--operation", "Read", "--group", "billing", *common)
        assert added.returncode == 0, added.stderr
    added = run_cohort("acls", "add", "--deny-principal", "User:mallory", "--group", "billing", *common)
    assert added.returncode == 0, added.stderr

    def hosts() -> set[tuple[str, str]]:
        listed = run_cohort("acls", "list", "--output", "json", *common)
        return {(r["principal"], r["host"]) for r in json.loads(listed.stdout)}
    everything = {("User:alice", "*"), ("User:alice", "10.1.2.3"), ("User:mallory", "*")}
    assert hosts() == everything

    bare = run_cohort("acls", "remove", "--force", *common)  # no resource: refused, nothing removed
    assert bare.returncode == 2 and "--group, --topic or --cluster" in bare.stderr
    assert len(bare.stderr.strip().splitlines()) == 1
    unasked = run_cohort("acls", "remove", "--group", "billing", *common)  # no stdin to confirm on
    assert unasked.returncode == 1 and "--force" in unasked.stderr and "Removed ACL" not in unasked.stdout
    assert len(unasked.stderr.strip().splitlines()) == 1
    declined = run_cohort("acls", "remove", "--group", "billing", *common, input="n\n")
    assert declined.returncode == 1 and hosts() == everything

    one_host = run_cohort("acls", "remove", "--allow-principal", "User:alice", "--allow-host", "10.1.2.3",
                          "--group", "billing", "--force", *common)
    assert one_host.returncode == 0 and one_host.stdout.count("Removed ACL") == 1, one_host.stdout
    assert hosts() == {("User:alice", "*"), ("User:mallory", "*")}


def test_the_hint_of_acls_remove_without_a_resource_says_what_a_topic_filter_selects(acl_node, ca, tmp_path):
    config = command_config(tmp_path, ca, *ADMIN)
    common = ("--bootstrap-server", bootstrap(acl_node, "SASL_SSL"), "--command-config", config)
    for topic, pattern in (("orders-eu", "literal"), ("orders", "prefixed"), ("*", "literal"), ("billing", "literal")):
        added = run_cohort("acls", "add", "--allow-principal", "User:carol", "--operation", "Read", "--topic", topic,
                           "--resource-pattern-type", pattern, *common)
        assert added.returncode == 0, added.stderr
    bare = run_cohort("acls", "remove", "--force", *common)
    assert bare.returncode == 2 and len(bare.stderr.strip().splitlines()) == 1
    assert "for every topic" not in bare.stderr and "match also the '*' and prefixed ones" in bare.stderr

    # what the hint says: match on a name selects that name's binding and the '*' and prefixed ones applying to it
    removed = run_cohort("acls", "remove", "--resource-pattern-type", "match", "--topic", "orders-eu", "--force",
                         *common)
    assert removed.returncode == 0 and removed.stdout.count("Removed ACL") == 3, removed.stdout
    listed = run_cohort("acls", "list", "--output", "json", *common)
    assert {r["name"] for r in json.loads(listed.stdout) if r["principal"] == "User:carol"} == {"billing"}


def test_an_acl_host_that_is_not_an_ip_address_is_refused_by_the_cli_and_by_create_acls(acl_node, ca, tmp_path):
    from kafka import KafkaAdminClient
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType
    from kafka.errors import InvalidRequestError

    config = command_config(tmp_path, ca, *ADMIN)
    common = ("--bootstrap-server", bootstrap(acl_node, "SASL_SSL"), "--command-config", config)
    for host in ("10.0.0.0/8", "client.example.com"):
        refused = run_cohort("acls", "add", "--allow-principal", "User:alice", "--allow-host", host,
                             "--group", "g", *common)
        assert refused.returncode == 2 and "IP address or *" in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    admin = KafkaAdminClient(**kp_security(acl_node, ca, "SASL_SSL", "SCRAM-SHA-512", *ADMIN))
    try:
        result = admin.create_acls([ACL("User:alice", "10.0.0.0/8", ACLOperation.READ, ACLPermissionType.ALLOW,
                                        ResourcePattern(ResourceType.GROUP, "g"))])
    finally:
        admin.close()
    assert not result["succeeded"]
    assert result["failed"] == [InvalidRequestError]  # Kafka's INVALID_REQUEST
    listed = run_cohort("acls", "list", "--output", "json", *common)
    assert json.loads(listed.stdout) == []


@pytest.mark.parametrize("args, fragment", [
    (("acls", "add", "--group", "g"), "--allow-principal or --deny-principal"),
    (("acls", "add", "--allow-principal", "User:a"), "--group, --topic or --cluster"),
    (("acls", "add", "--allow-principal", "alice", "--group", "g"), "Could not parse principal"),
    (("acls", "add", "--allow-principal", "User:a", "--group", "g", "--operation", "Fly"), "unknown operation"),
    (("users", "add", "x", "--password-file", "/nonexistent/pw", "--data-dir", "/tmp"), "cannot read --password-file"),
    (("users", "add", "x", "--mechanism", "MD5", "--password-file", "/dev/null", "--data-dir", "/tmp"),
     "unknown SCRAM mechanism"),
    (("users", "list", "--cluster", "http://127.0.0.1:2379"), "must look like etcd://"),
    (("users", "list", "--cluster", "etcd://127.0.0.1:1", "--data-dir", "/tmp"), "--cluster or --data-dir"),
    (("acls", "remove", "--allow-principal", "User:a", "--allow-host", "10.0.0.0/8", "--group", "g"),
     "IP address or *"),
    (("acls", "remove", "--allow-host", "10.0.0.1", "--group", "g"), "--allow-host needs --allow-principal"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    result = run_cohort(*args, "--bootstrap-server", "127.0.0.1:1") if args[0] == "acls" else run_cohort(*args)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_bad_command_config_is_one_line(tmp_path):
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    result = run_cohort("groups", "list", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(bad))
    assert result.returncode == 2 and "sasl.mechanism must be one of" in result.stderr


def test_offline_users_add_refuses_a_data_dir_a_server_holds(tmp_path):
    from cohort_process import CohortServer

    data = tmp_path / "data"
    server = CohortServer(data).start()
    try:
        secret = tmp_path / "pw"
        secret.write_text("x-secret\n")
        result = run_cohort("users", "add", "eve", "--password-file", str(secret), "--data-dir", str(data))
        assert result.returncode == 1
        assert "--bootstrap-server" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    finally:
        assert server.stop() == 0
