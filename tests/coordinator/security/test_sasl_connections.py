"""A SASL listener at the socket: the v0 unframed handshake, the order rules before authentication,
the delayed close after a failure, and fuzzed SASL frames that never hurt the server."""
from __future__ import annotations

import base64
import struct
import time

import pytest
import scramp
from hypothesis import HealthCheck, given, settings, strategies as st

from server_harness import RawClient, size_prefixed
from test_secured_clients import ALICE, add_user

from cohort.protocol.messages import (
    ApiVersionsRequest, HeartbeatRequest, MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sasl_node(server_factory, tmp_path):
    data = tmp_path / "data"
    add_user(data, tmp_path, *ALICE)
    return server_factory(data, listeners="SASL_PLAINTEXT://127.0.0.1:0",
                          sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-512",
                          connection_failed_authentication_delay_ms=300)


def raw_token_exchange(client: RawClient, token: bytes) -> bytes:
    client.send_bytes(size_prefixed(token))
    return client.receive_frame()


def test_v0_handshake_then_unframed_scram_tokens_authenticate(sasl_node):
    client = RawClient(sasl_node.port)
    try:
        assert client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 0).error_code == 0
        scram = scramp.ScramClient(["SCRAM-SHA-512"], *ALICE)
        scram.set_server_first(raw_token_exchange(client, scram.get_client_first().encode()).decode())
        scram.set_server_final(raw_token_exchange(client, scram.get_client_final().encode()).decode())
        # authenticated: ordinary requests are served
        assert client.request(MetadataRequest(topics=[]), 12).cluster_id
    finally:
        client.close()


def test_v0_plain_token_gets_an_empty_unframed_answer(sasl_node):
    client = RawClient(sasl_node.port)
    try:
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        assert raw_token_exchange(client, b"\x00alice\x00" + ALICE[1].encode()) == b""
        assert client.request(ApiVersionsRequest(), 2).error_code == 0
    finally:
        client.close()


def test_requests_before_authentication_close_the_connection(sasl_node):
    client = RawClient(sasl_node.port)
    try:
        assert client.request(ApiVersionsRequest(), 2).error_code == 0  # allowed before authentication
        client.send(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 3)
        assert client.is_closed_by_server()
    finally:
        client.close()


def test_a_failed_authentication_is_answered_then_closed_after_the_delay(sasl_node):
    client = RawClient(sasl_node.port)
    try:
        client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        started = time.monotonic()
        response = client.request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00wrong"), 2)
        assert response.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert client.is_closed_by_server(timeout=5)
        assert time.monotonic() - started >= 0.25  # connection.failed.authentication.delay.ms = 300
    finally:
        client.close()


def scram_attempt(port: int, user: str, password: str) -> tuple[str, object]:
    """One SCRAM-SHA-512 exchange over a real socket: (the server-first message, the client-final answer)."""
    client = RawClient(port)
    try:
        assert client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1).error_code == 0
        scram = scramp.ScramClient(["SCRAM-SHA-512"], user, password)
        first = client.request(SaslAuthenticateRequest(auth_bytes=scram.get_client_first().encode()), 2)
        assert first.error_code == 0, first.error_message  # an unknown user is not told apart here
        server_first = first.auth_bytes.decode()
        scram.set_server_first(server_first)
        final = client.request(SaslAuthenticateRequest(auth_bytes=scram.get_client_final().encode()), 2)
        return server_first, final
    finally:
        client.close()


def test_an_unknown_scram_user_gets_a_steady_salt_and_fails_only_as_a_wrong_password_does(sasl_node):
    """RFC 5802 §5.1: server-first does not tell which user names exist."""
    def salt_and_iterations(server_first: str) -> tuple[str, str]:
        fields = dict(part.split("=", 1) for part in server_first.split(","))
        return fields["s"], fields["i"]

    known_first, wrong = scram_attempt(sasl_node.port, "alice", "not-her-password")
    unknown_first, unknown = scram_attempt(sasl_node.port, "mallory", "whatever")
    again_first, _ = scram_attempt(sasl_node.port, "mallory", "something-else")
    assert salt_and_iterations(unknown_first) == salt_and_iterations(again_first)  # the same at every attempt
    salt, iterations = salt_and_iterations(unknown_first)
    assert len(base64.b64decode(salt)) == len(base64.b64decode(salt_and_iterations(known_first)[0]))
    assert iterations == salt_and_iterations(known_first)[1]  # alice was added with the default count
    assert salt_and_iterations(scram_attempt(sasl_node.port, "trudy", "x")[0])[0] != salt
    for answer in (wrong, unknown):
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
    assert unknown.error_message == wrong.error_message


def test_an_oversized_frame_before_authentication_is_refused(sasl_node):
    client = RawClient(sasl_node.port)
    try:
        client.send_bytes(struct.pack(">i", 600_000))  # above Kafka's sasl.server.max.receive.size (512 KiB)
        assert client.is_closed_by_server()
    finally:
        client.close()


@settings(max_examples=60, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(version=st.sampled_from([0, 1]), mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-512", "GSSAPI", ""]),
       frames=st.lists(st.binary(max_size=64), min_size=1, max_size=4))
def test_fuzzed_sasl_frames_never_hurt_the_server(sasl_node, version, mechanism, frames):
    client = RawClient(sasl_node.port, timeout=5)
    try:
        client.send(SaslHandshakeRequest(mechanism=mechanism), version)
        for frame in frames:
            if version == 1:
                client.send(SaslAuthenticateRequest(auth_bytes=frame), 1)
                client.send_bytes(size_prefixed(frame))  # and a garbage Kafka frame too
            else:
                client.send_bytes(size_prefixed(frame))
    except OSError:
        pass  # the server may already have closed this connection: that is an allowed answer
    finally:
        client.close()
    # the server still serves a well-behaved client
    probe = RawClient(sasl_node.port)
    try:
        assert probe.request(ApiVersionsRequest(), 2).error_code == 0
    finally:
        probe.close()


def _plain_with_authzid(port: int, authzid: str, proof_for=None) -> int:
    """SaslAuthenticate's error code for alice's right password sent with `authzid` (or the console's proof
    made by `proof_for(client_address, server_address)`)."""
    client = RawClient(port)
    try:
        if proof_for is not None:
            here, there = client.sock.getsockname(), client.sock.getpeername()
            authzid = proof_for(f"{here[0]}:{here[1]}", f"{there[0]}:{there[1]}")
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        token = authzid.encode() + b"\x00alice\x00" + ALICE[1].encode()
        return client.request(SaslAuthenticateRequest(auth_bytes=token), 2).error_code
    finally:
        client.close()


def test_only_the_consoles_own_proof_signs_in_with_a_console_authorization_id(sasl_node):
    from cohort.coordinator.security.console_sign_ins import CONSOLE_AUTHZID_PREFIX, CONSOLE_SIGN_INS

    # the console's proof, made with this process's key for this very connection
    assert _plain_with_authzid(sasl_node.port, "", lambda here, there: CONSOLE_SIGN_INS.authzid(here, there, "alice")) == 0
    # forged, made for another connection (replayed), or for another user: refused, right password or not
    assert _plain_with_authzid(sasl_node.port, CONSOLE_AUTHZID_PREFIX + "00" * 32) == 58  # SASL_AUTHENTICATION_FAILED
    assert _plain_with_authzid(sasl_node.port, CONSOLE_SIGN_INS.authzid("127.0.0.1:1", f"127.0.0.1:{sasl_node.port}",
                                                                        "alice")) == 58
    assert _plain_with_authzid(sasl_node.port, "", lambda here, there: CONSOLE_SIGN_INS.authzid(here, there, "bob")) == 58
