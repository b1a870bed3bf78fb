"""SASL/OAUTHBEARER with JWTs checked against a JWKS file (Kafka's sasl.oauthbearer.* settings).

The signing keys are made in the test; real clients get their tokens the way applications do:
confluent-kafka from an ``oauth_cb`` (``sasl.oauthbearer.method=default``), kafka-python from a token
provider. Tokens with the wrong audience, issuer, key or algorithm, or expired, are refused; with
``connections.max.reauth.ms`` set, a session ends with its token and the client re-authenticates on the
same connection with a fresh one.
"""
from __future__ import annotations

import json
import logging
import time
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from bounded_wait import wait_until
from test_secured_clients import confluent_group_round, create_topic, kafka_python_group_round

import kafka
from kafka.net.sasl.oauth import AbstractTokenProvider

from cohort.coordinator.config import CoordinatorConfig, ConfigError
from cohort.coordinator.security.oauthbearer import InvalidToken, JwtValidator, parse_client_response

pytestmark = pytest.mark.timeout(180)
AUDIENCE, ISSUER = "cohort", "https://issuer.example"


class KeyPair:
    def __init__(self, kid: str, private_key) -> None:
        self.kid = kid
        self.private_key = private_key
        self.algorithm = "RS256" if isinstance(private_key, rsa.RSAPrivateKey) else "ES256"

    def jwk(self) -> dict:
        jwk = json.loads(jwt.algorithms.get_default_algorithms()[self.algorithm].to_jwk(self.private_key.public_key()))
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.algorithm}

    def token(self, subject: str = "alice", lifetime_s: float = 300, **claims) -> str:
        now = time.time()
        body = {"sub": subject, "aud": AUDIENCE, "iss": ISSUER, "iat": int(now), "exp": int(now + lifetime_s),
                **claims}
        return jwt.encode(body, self.private_key, algorithm=self.algorithm, headers={"kid": self.kid})


@pytest.fixture(scope="module")
def keys():
    return (KeyPair("rsa-1", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
            KeyPair("ec-1", ec.generate_private_key(ec.SECP256R1())))


@pytest.fixture
def jwks(tmp_path, keys):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [k.jwk() for k in keys]}))
    return path


@pytest.fixture
def oauth_node(server_factory, jwks):
    def start(**overrides):
        settings = dict(listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="OAUTHBEARER",
                        sasl_oauthbearer_jwks_endpoint_url=jwks.as_uri(), sasl_oauthbearer_expected_audience=AUDIENCE,
                        sasl_oauthbearer_expected_issuer=ISSUER, connection_failed_authentication_delay_ms=10)
        settings.update(overrides)
        return server_factory(**settings)
    return start


class TokenProvider(AbstractTokenProvider):
    def __init__(self, make_token) -> None:
        super().__init__()
        self.make_token = make_token

    def token(self) -> str:
        return self.make_token()


def kp(node, make_token) -> dict:
    return dict(bootstrap_servers=f"127.0.0.1:{node.server.port}", security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=TokenProvider(make_token))


def ck(node, make_token) -> dict:
    def oauth_cb(_config):  # the token and its expiry, which the client refreshes at 80 % of its lifetime
        token = make_token()
        return token, jwt.decode(token, options={"verify_signature": False})["exp"]
    return {"bootstrap.servers": f"127.0.0.1:{node.server.port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "default", "oauth_cb": oauth_cb}


def test_kafka_python_and_confluent_kafka_run_groups_with_jwts(oauth_node, keys):
    node = oauth_node()
    rsa_key, ec_key = keys
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(kp(node, lambda: rsa_key.token("alice")), topic)
    kafka_python_group_round(kp(node, lambda: ec_key.token("alice")), topic, f"g-{uuid.uuid4().hex[:8]}")
    confluent_group_round(ck(node, lambda: rsa_key.token("bob")), topic, f"g-{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize("what", ["audience", "issuer", "expired", "unknown key", "HS256", "no sub"])
def test_a_bad_token_is_refused_to_a_real_client(oauth_node, keys, what, caplog):
    node = oauth_node()
    caplog.set_level(logging.INFO, logger="cohort.audit")
    rsa_key = keys[0]
    stranger = KeyPair("rsa-1", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    make = {
        "audience": lambda: rsa_key.token(aud="someone-else"),
        "issuer": lambda: rsa_key.token(iss="https://elsewhere.example"),
        "expired": lambda: rsa_key.token(lifetime_s=-120),
        "unknown key": lambda: stranger.token(),  # same kid, another key: the signature does not verify
        "HS256": lambda: jwt.encode({"sub": "x", "aud": AUDIENCE, "iss": ISSUER, "exp": int(time.time()) + 60},
                                    "a-shared-secret-of-32-bytes-or-more!", algorithm="HS256",
                                    headers={"kid": "rsa-1"}),
        "no sub": lambda: rsa_key.token(sub=None),
    }[what]
    with pytest.raises(kafka.errors.KafkaError):
        create_topic(kp(node, make), "t", bootstrap_timeout_ms=3000)
    assert any(r.getMessage() == "authentication failed" and r.mechanism == "OAUTHBEARER" for r in caplog.records)


def test_sessions_end_with_their_token_and_confluent_kafka_reauthenticates(oauth_node, keys, caplog):
    node = oauth_node(connections_max_reauth_ms=600000)
    caplog.set_level(logging.DEBUG, logger="cohort.coordinator.server.connection")
    rsa_key = keys[0]
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(kp(node, lambda: rsa_key.token()), topic)
    import confluent_kafka

    consumer = confluent_kafka.Consumer({**ck(node, lambda: rsa_key.token(lifetime_s=6)),
                                         "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                                         "session.timeout.ms": 6000})
    try:
        consumer.subscribe([topic])

        def reauthenticated():
            consumer.poll(0.2)
            return sum(r.getMessage() == "re-authenticated" for r in caplog.records) >= 2
        wait_until(reauthenticated, 60, "two re-authentications with fresh tokens")
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 5)], asynchronous=False)
        assert consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)[0].offset == 5
    finally:
        consumer.close()
    assert not any("session expired" in r.getMessage() for r in caplog.records)


def test_kafka_python_reauthenticates_with_fresh_tokens_from_its_provider(oauth_node, keys, caplog):
    node = oauth_node(connections_max_reauth_ms=600000)
    caplog.set_level(logging.DEBUG, logger="cohort.coordinator.server.connection")
    rsa_key = keys[0]
    topic = f"t-{uuid.uuid4().hex[:8]}"
    security = kp(node, lambda: rsa_key.token(lifetime_s=4))
    create_topic(security, topic)
    consumer = kafka.KafkaConsumer(topic, group_id=f"g-{uuid.uuid4().hex[:8]}", enable_auto_commit=False,
                                   session_timeout_ms=6000, heartbeat_interval_ms=300, **security)
    try:
        def reauthenticated():
            consumer.poll(timeout_ms=200)
            return sum(r.getMessage() == "re-authenticated" for r in caplog.records) >= 2
        wait_until(reauthenticated, 60, "two re-authentications with fresh tokens")
        tp = kafka.TopicPartition(topic, 0)
        consumer.commit({tp: kafka.structs.OffsetAndMetadata(9, "", -1)})
        assert consumer.committed(tp) == 9
    finally:
        consumer.close()
    assert not any("session expired" in r.getMessage() for r in caplog.records)


def test_the_validator_reads_rotated_keys_and_parses_rfc_7628(tmp_path, keys):
    rsa_key, ec_key = keys
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [rsa_key.jwk()]}))
    validator = JwtValidator(path.as_uri(), (AUDIENCE,), ISSUER)
    assert validator.validate(rsa_key.token("carol")).principal_name == "carol"
    with pytest.raises(InvalidToken):
        validator.validate(ec_key.token())
    path.write_text(json.dumps({"keys": [rsa_key.jwk(), ec_key.jwk()]}))  # a new key: no restart needed
    assert validator.validate(ec_key.token("dave")).principal_name == "dave"
    assert parse_client_response(b"n,a=dave,\x01auth=Bearer abc.def.ghi\x01host=x\x01\x01") == "abc.def.ghi"
    for bad in (b"", b"n,,\x01auth=Basic x\x01\x01", b"y,,\x01auth=Bearer t\x01\x01", b"\xff"):
        with pytest.raises(InvalidToken):
            parse_client_response(bad)


@pytest.mark.parametrize("settings, fragment", [
    ({}, "sasl.oauthbearer.jwks.endpoint.url must be set"),
    ({"sasl_oauthbearer_jwks_endpoint_url": "https://idp.example/jwks"}, "file:// URL"),
])
def test_oauthbearer_settings_are_checked_with_one_clear_line(tmp_path, settings, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.").replace("/", "/")):
        CoordinatorConfig(listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="OAUTHBEARER",
                          data_dir=tmp_path, **settings)
