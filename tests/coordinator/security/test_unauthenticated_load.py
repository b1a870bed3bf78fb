"""What clients that never sign in can cost a SASL node: password checks off the event loop and throttled
per address, connection slots (TLS handshakes counted, per-address limits), a bound on the time to
authenticate. Real sockets against a real server; the signed-in side uses kafka-python where it matters."""
from __future__ import annotations

import logging
import socket
import ssl
import threading
import time

import pytest
from kafka import KafkaAdminClient

from server_harness import RawClient
from test_secured_clients import ALICE, add_user
from tls_ca import make_ca

from cohort.coordinator.config import ConfigError, CoordinatorConfig
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


# ---------------------------------------------------------------- connection slots


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


def silent_sockets(port: int, count: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """Connections that never send a byte (on a TLS port: they never start the handshake)."""
    return [socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
            for _ in range(count)]


def closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_tls_handshakes_in_progress_count_against_max_connections(server_factory, tmp_path, ca):
    node = server_factory(tmp_path / "data", listeners="SSL://127.0.0.1:0", ssl_keystore_location=ca.server,
                          max_connections=5)
    port = node.server.ports["SSL"]
    held = silent_sockets(port, 5)
    try:
        wait_for(lambda: node.run(lambda: node.server.quotas.total) == 5)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            assert closed_by_server(extra, timeout=3)  # refused at accept, not held for a handshake
        finally:
            extra.close()
    finally:
        for sock in held:
            sock.close()
    # the slots are given back when the handshakes end: a real TLS client is served again
    wait_for(lambda: node.run(lambda: node.server.quotas.total) == 0)
    context = ssl.create_default_context(cafile=str(ca.ca))
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                             server_hostname="localhost") as tls:
        assert RawClient.over(tls).request(ApiVersionsRequest(), 2).error_code == 0


def test_max_connections_per_ip_closes_the_connection_over_the_limit_and_overrides_apply(server_factory):
    node = server_factory(max_connections_per_ip=2, max_connections_per_ip_overrides="127.0.0.2:3")
    held = silent_sockets(node.port, 2) + silent_sockets(node.port, 3, source="127.0.0.2")
    try:
        wait_for(lambda: node.run(lambda: node.server.quotas.total) == 5)
        over = silent_sockets(node.port, 1) + silent_sockets(node.port, 1, source="127.0.0.2")
        assert all(closed_by_server(sock, timeout=3) for sock in over)
        for sock in over:
            sock.close()
        other = RawClient(node.port, source="127.0.0.3")  # another address has its own count
        try:
            assert other.request(ApiVersionsRequest(), 2).error_code == 0
        finally:
            other.close()
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: node.run(lambda: node.server.quotas.total) == 0, what=lambda: node.run(lambda: (node.server.quotas._by_address, len(node.server._connections))))
    again = RawClient(node.port)
    try:
        assert again.request(ApiVersionsRequest(), 2).error_code == 0
    finally:
        again.close()


def test_a_host_name_in_the_overrides_stands_for_its_addresses(server_factory):
    node = server_factory(max_connections_per_ip=1, max_connections_per_ip_overrides="localhost:3")
    held = silent_sockets(node.port, 3)  # localhost is 127.0.0.1
    try:
        wait_for(lambda: node.run(lambda: node.server.quotas.total) == 3)
        fourth = silent_sockets(node.port, 1)[0]
        assert closed_by_server(fourth, timeout=3)
        fourth.close()
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize("settings, message", [
    ({"max_connections_per_ip_overrides": "10.0.0.1"}, "max.connections.per.ip.overrides"),
    ({"max_connections_per_ip_overrides": "10.0.0.1:x"}, "max.connections.per.ip.overrides"),
    ({"max_connections_per_ip": 0}, "max.connections.per.ip"),
])
def test_bad_per_ip_settings_are_refused_with_their_name(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        CoordinatorConfig(data_dir=tmp_path, **settings)


# ---------------------------------------------------------------- time to authenticate


def test_a_connection_that_does_not_authenticate_in_time_is_closed(server_factory, tmp_path):
    data = tmp_path / "data"
    add_user(data, tmp_path, *ALICE)
    node = server_factory(data, listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="PLAIN",
                          connections_authentication_timeout_ms=600, max_connections=3)
    idle = [RawClient(node.port) for _ in range(3)]  # ApiVersions only: never signs in
    signed_in = None
    try:
        for client in idle:
            assert client.request(ApiVersionsRequest(), 2).error_code == 0
        assert all(client.is_closed_by_server(timeout=10) for client in idle)
        signed_in = RawClient(node.port)
        signed_in.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert signed_in.request(SaslAuthenticateRequest(auth_bytes=plain_token(*ALICE)), 2).error_code == 0
        time.sleep(1.2)  # (twice the bound: a signed-in connection is not subject to it)
        assert signed_in.request(ApiVersionsRequest(), 2).error_code == 0
    finally:
        for client in idle + [signed_in]:
            if client is not None:
                client.close()


def test_kafka_python_signs_in_and_keeps_its_connection_past_the_bound(server_factory, tmp_path):
    data = tmp_path / "data"
    add_user(data, tmp_path, *ALICE)
    node = server_factory(data, listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="PLAIN",
                          connections_authentication_timeout_ms=500)
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username=ALICE[0], sasl_plain_password=ALICE[1],
                             request_timeout_ms=10000)
    try:
        admin.list_groups()
        connections = node.run(lambda: len(node.server._connections))
        time.sleep(1.0)  # (twice the bound)
        assert admin.list_groups() == []
        assert node.run(lambda: len(node.server._connections)) == connections  # none was closed and reopened
    finally:
        admin.close()


# ---------------------------------------------------------------- log lines


def test_failed_logins_name_the_user_and_repeats_are_one_line_per_interval(server_factory, tmp_path, caplog):
    data = tmp_path / "data"
    add_user(data, tmp_path, *ALICE)
    node = server_factory(data, listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="PLAIN",
                          connection_failed_authentication_delay_ms=0, log_aggregation_interval_ms=1500)
    caplog.set_level(logging.INFO, logger="cohort.audit")
    users = ["mallory", "eve", "mallory", "trudy", "mallory", "eve", "oscar", "mallory"]
    for user in users:
        client = RawClient(node.port)
        try:
            client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
            assert client.request(SaslAuthenticateRequest(auth_bytes=plain_token(user, "guess")), 2).error_code == 58
        finally:
            client.close()

    def audit_lines():
        return [r for r in caplog.records if r.name == "cohort.audit" and "authentication failed" in r.getMessage()]

    wait_for(lambda: any(r.getMessage().endswith("(repeated)") for r in audit_lines()))
    first, repeated = audit_lines()
    assert first.getMessage() == "authentication failed" and first.user == "mallory" and first.mechanism == "PLAIN"
    assert first.peer.startswith("127.0.0.1:")
    assert repeated.count == len(users) - 1 and repeated.peer_host == "127.0.0.1"
    assert set(repeated.user.split(",")) == {"eve", "mallory", "trudy", "oscar"}
    assert repeated.first <= repeated.last


def test_failed_tls_handshakes_are_one_line_per_address_and_interval(server_factory, tmp_path, ca, caplog):
    node = server_factory(tmp_path / "data", listeners="SSL://127.0.0.1:0", ssl_keystore_location=ca.server,
                          log_aggregation_interval_ms=1500)
    caplog.set_level(logging.INFO, logger="cohort.coordinator.server.node")
    for _ in range(5):  # a plaintext Kafka client on the TLS port
        client = RawClient(node.server.ports["SSL"])
        try:
            client.send(ApiVersionsRequest(), 2)
            assert client.is_closed_by_server(timeout=10)
        finally:
            client.close()

    def lines():
        return [r for r in caplog.records if r.getMessage().startswith("TLS handshake failed")]

    wait_for(lambda: any(r.getMessage().endswith("(repeated)") for r in lines()))
    first, repeated = lines()
    assert first.peer.startswith("127.0.0.1:") and first.error
    assert repeated.count == 4 and repeated.peer_host == "127.0.0.1"
    assert node.run(lambda: node.server.quotas.total) == 0  # every failed handshake gave its slot back


def wait_for(condition, timeout: float = 10.0, what=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"condition not met in time {what()}"
        time.sleep(0.02)
