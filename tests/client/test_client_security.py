"""Kafka client properties (``--command-config``) read into the client's TLS and SASL settings."""
from __future__ import annotations

import ssl

import pytest

from cohort.client.security import ClientSecurity, parse_properties


def test_properties_follow_java_rules():
    props = parse_properties("# comment\n! also a comment\n\na=1\nb : two words \nc=x\\\n   y\nd\n")
    assert props == {"a": "1", "b": "two words", "c": "xy", "d": ""}


def test_jaas_config_gives_the_credentials_and_repr_hides_the_password():
    security = ClientSecurity.from_mapping({
        "security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="alice" password="p\\"w";'})
    assert (security.protocol, security.mechanism, security.username, security.password) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", 'p"w')
    assert 'p"w' not in repr(security) and security.uses_sasl and security.ssl_context is None


def test_librdkafka_names_work_too(tmp_path):
    security = ClientSecurity.from_mapping({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                            "sasl.username": "bob", "sasl.password": "secret",
                                            "ssl.endpoint.identification.algorithm": ""})
    assert security.username == "bob" and isinstance(security.ssl_context, ssl.SSLContext)
    assert security.ssl_context.check_hostname is False
    assert security.ssl_context.minimum_version >= ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize("props, message", [
    ({"security.protocol": "KERBEROS"}, "security.protocol must be one of"),
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism must be one of"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": "hunter2"},
     "needs a username and password"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"}, "cannot load TLS files"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "only ssl.truststore.type=PEM"),
])
def test_unusable_properties_are_one_line_without_the_password(props, message):
    with pytest.raises(ValueError) as info:
        ClientSecurity.from_mapping(props, "admin.properties")
    text = str(info.value)
    assert message in text and "\n" not in text and "hunter2" not in text and text.startswith("admin.properties")
