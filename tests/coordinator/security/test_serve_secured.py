"""``cohort serve`` with Kafka's security flags: the interface scripts rely on, its metrics and its log."""
from __future__ import annotations

import re

import pytest

from cohort_process import CohortServer, free_ports
from test_secured_clients import add_user, create_topic

import kafka

pytestmark = pytest.mark.timeout(120)


def metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # exposition sorts labels
    match = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_serve_with_kafka_security_flags_counts_authentications_and_denials(tmp_path):
    data = tmp_path / "data"
    add_user(data, tmp_path, "alice", "alice-secret")
    server = CohortServer(data, "--listeners", "PLACEHOLDER")
    sasl_port = free_ports(1, taken=server.given_ports)[0]
    server.args[server.args.index("PLACEHOLDER")] = (
        f"PLAINTEXT://127.0.0.1:{server.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}")
    server.args += ["--sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512",
                    "--authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "--super.users", "User:alice", "--allow.everyone.if.no.acl.found", "false",
                    "--connection.failed.authentication.delay.ms", "50"]
    server.start()
    try:
        sasl = dict(bootstrap_servers=f"127.0.0.1:{sasl_port}", security_protocol="SASL_PLAINTEXT",
                    sasl_mechanism="PLAIN", sasl_plain_username="alice")
        create_topic({**sasl, "sasl_plain_password": "alice-secret"}, "audited")  # a super user may
        with pytest.raises(kafka.errors.KafkaError):
            create_topic({**sasl, "sasl_plain_password": "wrong-secret"}, "x", bootstrap_timeout_ms=1500)
        # User:ANONYMOUS on the PLAINTEXT listener has no ACL: CreateTopics is refused
        admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
        try:
            with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
                admin.create_topics([kafka.admin.NewTopic("anonymous", 1, 1)])
        finally:
            admin.close()

        text = server.scrape()
        assert metric(text, "cohort_authentications_total", mechanism="PLAIN", result="success") >= 1
        assert metric(text, "cohort_authentications_total", mechanism="PLAIN", result="failure") >= 1
        assert metric(text, "cohort_authorization_denials_total", resource_type="TOPIC", operation="CREATE") >= 1
    finally:
        assert server.stop() == 0
    log = server.stderr()
    assert "authorization denied" in log and "User:ANONYMOUS" in log  # the audit line names who and what
    assert "authentication failed" in log
    assert "alice-secret" not in log and "wrong-secret" not in log
