"""What clients that never sign in can cost a SASL node: password checks off the event loop and throttled
per address, connection slots (TLS handshakes counted, per-address limits), a bound on the time to
authenticate. Real sockets against a real server; the signed-in side uses kafka-python where it matters."""
from __future__ import annotations

import threading
import time

import pytest

from server_harness import RawClient
from test_secured_clients import ALICE, add_user

from cohort.coordinator.security.password_checks import FAILURE_BURST, FAILURE_RATE
from cohort.protocol.messages import ApiVersionsRequest, SaslAuthenticateRequest, SaslHandshakeRequest

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def plain_node(server_factory, tmp_path):
    data = tmp_path / "data"
    add_user(data, tmp_path, *ALICE)
    return server_factory(data, listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="PLAIN",
                          connection_failed_authentication_delay_ms=0)


def plain_token(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


class HeldChecks:
    """The node's credential store with every check held at a gate until the test opens it."""

    def __init__(self, store) -> None:
        self._store = store
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)

    def __getattr__(self, name):
        return getattr(self._store, name)

    def check_plain(self, user: str, password: str) -> bool:
        self.started.release()
        self.gate.wait(30)
        return self._store.check_plain(user, password)


def test_a_password_check_in_progress_does_not_hold_up_other_clients(plain_node):
    """The PBKDF2 of a PLAIN login runs off the event loop: while one is (held) in progress, others are served."""
    held = HeldChecks(plain_node.server.security.credentials)
    plain_node.run(lambda: setattr(plain_node.server.security, "credentials", held))
    guesser, other = RawClient(plain_node.port), RawClient(plain_node.port, timeout=5)
    try:
        guesser.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        guesser.send(SaslAuthenticateRequest(auth_bytes=plain_token("alice", "wrong")), 2)
        assert held.started.acquire(timeout=10)  # the check is running (and held)
        # the event loop still answers another client meanwhile
        assert other.request(ApiVersionsRequest(), 2).error_code == 0
        held.gate.set()
        _, answer = guesser.receive(SaslAuthenticateRequest.API_KEY, 2)
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
    finally:
        held.gate.set()
        guesser.close()
        other.close()


def test_requests_pipelined_behind_a_password_check_are_served_after_it_in_order(plain_node):
    client = RawClient(plain_node.port)
    try:
        client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        first = client.send(SaslAuthenticateRequest(auth_bytes=plain_token(*ALICE)), 2)
        second = client.send(ApiVersionsRequest(), 2)
        assert client.receive(SaslAuthenticateRequest.API_KEY, 2)[0] == first
        correlation_id, versions = client.receive(ApiVersionsRequest.API_KEY, 2)
        assert correlation_id == second and versions.error_code == 0
    finally:
        client.close()


def guess(port: int, source: str, password: str = "wrong") -> float:
    """One wrong PLAIN login from `source`; when its answer arrived (monotonic)."""
    client = RawClient(port, timeout=30, source=source)
    try:
        client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        answer = client.request(SaslAuthenticateRequest(auth_bytes=plain_token("alice", password)), 2)
        assert answer.error_code == 58
        return time.monotonic()
    finally:
        client.close()


def concurrent_guesses(port: int, sources: list[str]) -> list[float]:
    answered: list[float] = []
    threads = [threading.Thread(target=lambda s=s: answered.append(guess(port, s))) for s in sources]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answered) == len(sources)
    return sorted(answered)


def test_wrong_guesses_from_one_address_are_throttled_beyond_its_budget(plain_node):
    extra = 4
    started = time.monotonic()
    answered = concurrent_guesses(plain_node.port, ["127.0.0.1"] * (FAILURE_BURST + extra))
    # the burst is answered at once; each guess beyond it waits for the address's budget to refill
    assert answered[-1] - started >= (extra - 0.5) / FAILURE_RATE
    # another address is not held up by the first one's throttle
    other_started = time.monotonic()
    guess(plain_node.port, "127.0.0.2")
    assert time.monotonic() - other_started < (extra - 0.5) / FAILURE_RATE
