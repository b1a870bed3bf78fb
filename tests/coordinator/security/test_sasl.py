"""The SASL state machine of one connection, driven with real SCRAM clients (scramp) and PLAIN tokens."""
from __future__ import annotations

import pytest
import scramp
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cohort.coordinator.security.credentials import CredentialStore, ScramMechanism, credential_from_password
from cohort.coordinator.security.sasl import SaslAuthenticator, SaslState
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import (
    ApiVersionsRequest, JoinGroupRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
)

PASSWORD = "s3cret-pässword"
ALL = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@pytest.fixture(scope="module")
def credentials() -> CredentialStore:
    store = CredentialStore()
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        store.apply(credential_from_password("alice", mechanism, PASSWORD, iterations=4096).record())
    return store


def handshake(auth, mechanism, version=1):
    return auth.on_request(SaslHandshakeRequest.API_KEY, version, SaslHandshakeRequest(mechanism=mechanism))


def checked(auth, step):
    """Run a password check the step handed out (the connection runs it off the loop) and go on."""
    if step.verify is not None:
        assert auth.verifying and "password" not in repr(step.verify)
        return auth.verified(step.verify.run())
    return step


def authenticate(auth, token: bytes):
    return checked(auth, auth.on_request(SaslAuthenticateRequest.API_KEY, 2, SaslAuthenticateRequest(auth_bytes=token)))


def raw_token(auth, token: bytes):
    return checked(auth, auth.on_raw_token(token))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_authenticates_and_the_client_verifies_the_server(credentials, mechanism):
    auth = SaslAuthenticator(ALL, credentials)
    assert auth.on_request(ApiVersionsRequest.API_KEY, 3, ApiVersionsRequest()).serve
    step = handshake(auth, mechanism)
    assert step.response.error_code == 0 and step.response.mechanisms == list(ALL)
    client = scramp.ScramClient([mechanism], "alice", PASSWORD)
    first = authenticate(auth, client.get_client_first().encode())
    assert first.response.error_code == 0 and first.outcome is None
    client.set_server_first(first.response.auth_bytes.decode())
    final = authenticate(auth, client.get_client_final().encode())
    assert final.response.error_code == 0 and final.outcome == "success" and final.mechanism == mechanism
    client.set_server_final(final.response.auth_bytes.decode())  # raises if the server's signature is wrong
    assert auth.authenticated and auth.principal == "User:alice"
    assert auth.on_request(JoinGroupRequest.API_KEY, 5, JoinGroupRequest()).serve


def test_wrong_scram_password_fails_with_a_delayed_close_and_no_secret_in_the_answer(credentials):
    auth = SaslAuthenticator(ALL, credentials)
    handshake(auth, "SCRAM-SHA-512")
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", "wrong-password")
    first = authenticate(auth, client.get_client_first().encode())
    client.set_server_first(first.response.auth_bytes.decode())
    step = authenticate(auth, client.get_client_final().encode())
    assert step.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert step.close and step.delay_close and step.outcome == "failure"
    assert "SCRAM-SHA-512" in step.response.error_message
    for secret in ("wrong-password", PASSWORD):
        assert secret not in repr(step)
    assert auth.state is SaslState.FAILED and auth.principal is None


def test_an_unknown_scram_user_gets_a_made_up_salt_and_fails_at_client_final(credentials):
    auth = SaslAuthenticator(ALL, credentials)
    handshake(auth, "SCRAM-SHA-256")
    client = scramp.ScramClient(["SCRAM-SHA-256"], "mallory", PASSWORD)
    first = authenticate(auth, client.get_client_first().encode())
    assert first.response.error_code == 0 and not first.close
    client.set_server_first(first.response.auth_bytes.decode())
    step = authenticate(auth, client.get_client_final().encode())
    assert step.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and step.delay_close
    assert auth.state is SaslState.FAILED and auth.principal is None


@pytest.mark.parametrize("token, ok, message", [
    (b"\x00alice\x00" + PASSWORD.encode(), True, None),
    (b"alice\x00alice\x00" + PASSWORD.encode(), True, None),
    (b"\x00alice\x00nope", False, "Invalid username or password"),
    (b"\x00bob\x00" + PASSWORD.encode(), False, "Invalid username or password"),
    (b"bob\x00alice\x00" + PASSWORD.encode(), False, "authorization id that is different"),
    (b"\x00\x00x", False, "username not specified"),
    (b"\x00alice\x00", False, "password not specified"),
    (b"garbage", False, "expected 3 tokens"),
])
def test_plain_checks_the_password_against_the_scram_credentials(credentials, token, ok, message):
    auth = SaslAuthenticator(ALL, credentials)
    handshake(auth, "PLAIN")
    step = authenticate(auth, token)
    if ok:
        assert step.response.error_code == 0 and auth.principal == "User:alice"
    else:
        assert step.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and step.delay_close
        assert message in step.response.error_message
        assert PASSWORD not in repr(step)


def test_v0_handshake_moves_the_tokens_out_of_kafka_framing(credentials):
    auth = SaslAuthenticator(ALL, credentials)
    assert handshake(auth, "SCRAM-SHA-256", version=0).response.error_code == 0
    assert auth.expects_raw_token
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", PASSWORD)
    first = raw_token(auth, client.get_client_first().encode())
    client.set_server_first(first.raw_reply.decode())
    final = raw_token(auth, client.get_client_final().encode())
    client.set_server_final(final.raw_reply.decode())
    assert auth.authenticated and not auth.expects_raw_token


def test_v0_plain_failure_closes_without_an_answer(credentials):
    auth = SaslAuthenticator(ALL, credentials)
    handshake(auth, "PLAIN", version=0)
    step = raw_token(auth, b"\x00alice\x00bad")
    assert step.close and step.delay_close and step.raw_reply is None and step.response is None


def test_other_apis_before_authentication_close_the_connection(credentials):
    auth = SaslAuthenticator(ALL, credentials)
    step = auth.on_request(JoinGroupRequest.API_KEY, 5, JoinGroupRequest())
    assert step.close and not step.serve and step.response is None


def test_unsupported_mechanism_is_answered_with_the_enabled_list_then_closed(credentials):
    auth = SaslAuthenticator(("SCRAM-SHA-512",), credentials)
    step = handshake(auth, "PLAIN")
    assert step.response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert step.response.mechanisms == ["SCRAM-SHA-512"] and step.close


def test_authenticate_before_handshake_is_an_illegal_state(credentials):
    auth = SaslAuthenticator(ALL, credentials)
    step = authenticate(auth, b"x")
    assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE and step.close


def test_handshake_after_authentication_is_answered_illegal_state_and_the_connection_stays(credentials):
    auth = SaslAuthenticator(ALL, credentials)
    handshake(auth, "PLAIN")
    authenticate(auth, b"\x00alice\x00" + PASSWORD.encode())
    step = handshake(auth, "PLAIN")
    assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE and not step.close
    assert authenticate(auth, b"x").response.error_code == ErrorCode.ILLEGAL_SASL_STATE


@settings(max_examples=300, derandomize=True, deadline=None)
@given(mechanism=st.sampled_from(ALL), version=st.sampled_from([0, 1]),
       tokens=st.lists(st.one_of(st.binary(max_size=80),
                                 st.text(max_size=80).map(str.encode),
                                 st.sampled_from([b"n,,n=alice,r=abc", b"c=biws,r=abc,p=AAAA", b"n,,n=,r=",
                                                  b"p=tls-unique,,n=alice,r=x", b"\x00alice\x00"])),
                       min_size=1, max_size=4))
def test_fuzzed_tokens_end_in_an_answer_or_a_close_never_an_exception(credentials, mechanism, version, tokens):
    auth = SaslAuthenticator(ALL, credentials)
    handshake(auth, mechanism, version)
    for token in tokens:
        if auth.state in (SaslState.FAILED, SaslState.AUTHENTICATED):
            break
        step = raw_token(auth, token) if auth.expects_raw_token else authenticate(auth, token)
        assert step.close or step.response is not None or step.raw_reply is not None
        assert not auth.authenticated  # nobody guesses a credential


# ---------------------------------------------------------------- model


class SaslConnectionModel(RuleBasedStateMachine):
    """Kafka's rules for one SASL connection, stated as a small table, against `SaslAuthenticator` (PLAIN)."""

    def __init__(self) -> None:
        super().__init__()
        store = CredentialStore()
        store.apply(credential_from_password("alice", ScramMechanism.SCRAM_SHA_512, "pw", iterations=4096).record())
        self.store = store
        self.auth = SaslAuthenticator(("PLAIN",), store)
        self.state = "start"  # start | v0 | v1 | authenticated | closed

    @precondition(lambda self: self.state == "closed")
    @rule()
    def reconnect(self) -> None:
        self.auth = SaslAuthenticator(("PLAIN",), self.store)
        self.state = "start"

    def _expect_close(self, step, delayed=False) -> None:
        assert step.close and not step.serve and step.delay_close == delayed
        self.state = "closed"

    @precondition(lambda self: self.state != "closed" and self.state != "v0")
    @rule()
    def api_versions(self) -> None:
        step = self.auth.on_request(ApiVersionsRequest.API_KEY, 2, ApiVersionsRequest())
        if self.state in ("start", "authenticated"):
            assert step.serve and not step.close
        else:
            self._expect_close(step)

    @precondition(lambda self: self.state != "closed" and self.state != "v0")
    @rule()
    def join_group(self) -> None:
        step = self.auth.on_request(JoinGroupRequest.API_KEY, 5, JoinGroupRequest())
        if self.state == "authenticated":
            assert step.serve
        else:
            assert step.response is None
            self._expect_close(step)

    @precondition(lambda self: self.state != "closed" and self.state != "v0")
    @rule(version=st.sampled_from([0, 1]), mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256"]))
    def sasl_handshake(self, version, mechanism) -> None:
        step = handshake(self.auth, mechanism, version)
        if self.state == "authenticated":
            assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE and not step.close
        elif self.state != "start":
            assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE
            self._expect_close(step)
        elif mechanism != "PLAIN":
            assert step.response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
            assert step.response.mechanisms == ["PLAIN"]
            self._expect_close(step)
        else:
            assert step.response.error_code == 0 and not step.close
            self.state = "v0" if version == 0 else "v1"

    @precondition(lambda self: self.state != "closed" and self.state != "v0")
    @rule(good=st.booleans())
    def sasl_authenticate(self, good) -> None:
        step = authenticate(self.auth, b"\x00alice\x00" + (b"pw" if good else b"nope"))
        if self.state == "authenticated":
            assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE and not step.close
        elif self.state == "start":
            assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE
            self._expect_close(step)
        elif good:
            assert step.response.error_code == 0 and step.outcome == "success"
            self.state = "authenticated"
        else:
            assert step.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            self._expect_close(step, delayed=True)

    @precondition(lambda self: self.state == "v0")
    @rule(good=st.booleans())
    def raw_token(self, good) -> None:
        step = raw_token(self.auth, b"\x00alice\x00" + (b"pw" if good else b"nope"))
        assert step.response is None
        if good:
            assert step.raw_reply == b"" and not step.close
            self.state = "authenticated"
        else:
            assert step.raw_reply is None
            self._expect_close(step, delayed=True)

    @invariant()
    def principal_only_when_authenticated(self) -> None:
        assert (self.auth.principal == "User:alice") == (self.state == "authenticated")
        assert self.auth.expects_raw_token == (self.state == "v0")


TestSaslConnectionModel = SaslConnectionModel.TestCase
TestSaslConnectionModel.settings = settings(max_examples=150, stateful_step_count=12, derandomize=True,
                                            deadline=None)


# ---------------------------------------------------------------- re-authentication (KIP-368)


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plain_session(credentials, clock, max_reauth_ms=2000):
    auth = SaslAuthenticator(ALL, credentials, max_reauth_ms=max_reauth_ms, clock=clock)
    handshake(auth, "PLAIN")
    step = authenticate(auth, b"\x00alice\x00" + PASSWORD.encode())
    assert step.response.session_lifetime_ms == max_reauth_ms
    return auth


def test_reauthentication_renews_the_session_and_an_expired_session_is_closed(credentials):
    clock = ManualClock()
    auth = plain_session(credentials, clock)
    clock.now += 1.5
    assert auth.on_request(JoinGroupRequest.API_KEY, 5, JoinGroupRequest()).serve
    assert handshake(auth, "PLAIN").response.error_code == 0
    assert auth.on_request(JoinGroupRequest.API_KEY, 5, JoinGroupRequest()).serve  # served during re-auth
    step = authenticate(auth, b"\x00alice\x00" + PASSWORD.encode())
    assert step.response.error_code == 0 and step.outcome == "success" and auth.authenticated
    clock.now += 1.5  # 3 s after the first authentication, 1.5 s after the second
    assert auth.on_request(JoinGroupRequest.API_KEY, 5, JoinGroupRequest()).serve
    clock.now += 1.0
    step = auth.on_request(JoinGroupRequest.API_KEY, 5, JoinGroupRequest())
    assert step.close and "expired" in step.reason


def test_reauthentication_cannot_change_the_principal_or_the_mechanism(credentials):
    other = CredentialStore()
    for c in credentials:
        other.apply(c.record())
    other.apply(credential_from_password("bob", ScramMechanism.SCRAM_SHA_512, "bobpw", iterations=4096).record())
    auth = plain_session(other, ManualClock())
    handshake(auth, "PLAIN")
    step = authenticate(auth, b"\x00bob\x00bobpw")
    assert step.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and step.delay_close
    assert "Cannot change principals" in step.response.error_message

    auth = plain_session(credentials, ManualClock())
    step = handshake(auth, "SCRAM-SHA-512")
    assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE and step.close


def test_without_reauthentication_sessions_never_expire(credentials):
    clock = ManualClock()
    auth = plain_session(credentials, clock, max_reauth_ms=0)
    clock.now += 10 ** 9
    assert auth.on_request(JoinGroupRequest.API_KEY, 5, JoinGroupRequest()).serve
    assert handshake(auth, "PLAIN").response.error_code == ErrorCode.ILLEGAL_SASL_STATE
