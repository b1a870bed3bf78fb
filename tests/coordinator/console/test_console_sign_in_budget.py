"""The console keeps its own budget of password checks per browser address and per user: a browser guessing
passwords slows nobody else's sign-in and spends nothing of the Kafka listener's budget. A real ``cohort
serve`` with a SASL_PLAINTEXT listener offering PLAIN, real HTTP from distinct loopback addresses."""
from __future__ import annotations

import base64
import http.client
import threading
import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from cohort_process import add_scram_users, free_ports
from console_http import ConsoleServer

pytestmark = pytest.mark.timeout(180)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret",
         "dave": "dave-secret"}


@pytest.fixture
def plain_console(tmp_path):
    data = tmp_path / "data"
    add_scram_users(data, USERS, "SCRAM-SHA-256")
    server = ConsoleServer(data, "--listeners", "PLACEHOLDER")
    server.sasl_port = free_ports(1, taken=server.given_ports)[0]
    server.args[server.args.index("PLACEHOLDER")] = (
        f"PLAINTEXT://127.0.0.1:{server.port},SASL_PLAINTEXT://127.0.0.1:{server.sasl_port}")
    server.args += ["--sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256",
                    "--connection.failed.authentication.delay.ms", "20",
                    "--console.allow.insecure.sign.in", "true", "--console.trusted.proxies", "127.0.0.8",
                    # an address earns a wrong password back only each minute: the counts below hold on a slow machine
                    "--console.sign.in.failure.interval.ms", "60000"]
    server.start()
    yield server
    assert server.stop() == 0


def sign_in(server, source: str, user: str, password: str, headers: dict[str, str] | None = None
            ) -> tuple[int, float]:
    """(status, seconds) of one GET /api/groups from `source` (a loopback address) on a new connection."""
    connection = http.client.HTTPConnection("127.0.0.1", server.console_port, timeout=30, source_address=(source, 0))
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    started = time.monotonic()
    try:
        connection.request("GET", "/api/groups", headers={"Authorization": f"Basic {token}", **(headers or {})})
        response = connection.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    finally:
        connection.close()


class Guesser(threading.Thread):
    """Wrong passwords for `user` from `source`, `per_second` a second whatever the answers take (each on a
    thread of its own), each claiming another X-Forwarded-For."""

    def __init__(self, server, source: str, user: str, per_second: float) -> None:
        super().__init__(daemon=True)
        self.server, self.source, self.user, self.per_second = server, source, user, per_second
        self.statuses: list[int] = []
        self.stopping = threading.Event()
        self._attempts: list[threading.Thread] = []

    def _attempt(self, count: int) -> None:
        try:
            status, _ = sign_in(self.server, self.source, self.user, f"guess-{count}",
                                {"X-Forwarded-For": f"10.0.{count // 250}.{count % 250}"})
        except OSError:
            status = 0
        self.statuses.append(status)

    def run(self) -> None:
        count = 0
        started = time.monotonic()
        while not self.stopping.is_set():
            count += 1
            attempt = threading.Thread(target=self._attempt, args=(count,), daemon=True)
            attempt.start()
            self._attempts.append(attempt)
            self.stopping.wait(max(0.0, started + count / self.per_second - time.monotonic()))

    def finish(self) -> None:
        self.stopping.set()
        self.join(30)
        for attempt in self._attempts:
            attempt.join(60)


def test_correct_sign_ins_succeed_within_a_second_while_another_address_guesses_ten_a_second(plain_console):
    guesser = Guesser(plain_console, "127.0.0.3", "admin", 10)
    guesser.start()
    try:
        time.sleep(3.0)  # the scenario: the guessing has gone on past every budget's burst
        timings = []
        for user, source in (("alice", "127.0.0.2"), ("bob", "127.0.0.4"), ("carol", "127.0.0.2"),
                             ("admin", "127.0.0.5")):  # admin: the user being guessed at
            status, seconds = sign_in(plain_console, source, user, USERS[user])
            assert status == 200, (user, status)
            timings.append(seconds)
            time.sleep(2.0)
        assert max(timings) < 1.0, timings
        # a Kafka PLAIN client on the same host as the console signs in and commits at once
        started = time.monotonic()
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{plain_console.sasl_port}", group_id="plain-client",
                                 security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                 sasl_plain_username="dave", sasl_plain_password=USERS["dave"],
                                 enable_auto_commit=False, request_timeout_ms=20000)
        try:
            consumer.commit({TopicPartition("events", 0): OffsetAndMetadata(5, "", -1)})
        finally:
            consumer.close()
        assert time.monotonic() - started < 5.0
    finally:
        guesser.finish()
    # the guesser got its burst of checks (401), then 429 at once; X-Forwarded-For bought it nothing
    assert guesser.statuses.count(401) <= 10 + 1
    assert guesser.statuses.count(429) >= len(guesser.statuses) - 10 - 1
    assert set(guesser.statuses) <= {401, 429}


def test_a_throttled_address_is_told_when_to_try_again(plain_console):
    statuses = [sign_in(plain_console, "127.0.0.6", "alice", "wrong")[0] for _ in range(11)]
    assert statuses == [401] * 10 + [429]  # console.sign.in.failures.per.ip (10) at once
    # a wrong password costs the node one PLAIN check: PLAIN covers every SCRAM credential, no SCRAM retry follows
    failures = [line for line in plain_console.stderr().splitlines() if "authentication failed" in line]
    assert failures and all("mechanism=PLAIN" in line for line in failures), failures
    connection = http.client.HTTPConnection("127.0.0.1", plain_console.console_port, timeout=30,
                                            source_address=("127.0.0.6", 0))
    try:
        token = base64.b64encode(b"alice:alice-secret").decode()
        connection.request("GET", "/api/groups", headers={"Authorization": f"Basic {token}"})
        response = connection.getresponse()
        response.read()
        assert response.status == 429 and int(response.headers["Retry-After"]) >= 1
    finally:
        connection.close()
    # another address signs the same user in at once
    assert sign_in(plain_console, "127.0.0.7", "alice", USERS["alice"])[0] == 200


def test_behind_a_trusted_proxy_each_browser_named_in_x_forwarded_for_has_its_own_budget(plain_console):
    guessing = {"X-Forwarded-For": "10.1.1.1"}
    statuses = [sign_in(plain_console, "127.0.0.8", "bob", "wrong", guessing)[0] for _ in range(11)]
    assert statuses == [401] * 10 + [429]
    # another browser behind the same proxy
    assert sign_in(plain_console, "127.0.0.8", "bob", USERS["bob"], {"X-Forwarded-For": "10.1.1.2"})[0] == 200
    # a browser cannot claim to be behind the proxy: from elsewhere the header is ignored
    spoofed = [sign_in(plain_console, "127.0.0.9", "carol", "wrong", {"X-Forwarded-For": f"10.2.0.{n}"})[0]
               for n in range(11)]
    assert spoofed == [401] * 10 + [429]


def test_with_workers_the_console_spends_nothing_of_the_workers_budget(tmp_path):
    """`--workers 2`: the console runs in the supervisor and signs users in on the workers. Its budget is opened
    wide here, so every wrong password of the guesser reaches a worker: ten a second from the console's host,
    beyond the Kafka listener's two a second per address. The workers know the console's sign-ins (their
    proof) and run them outside that budget, so correct sign-ins and a Kafka client on this host are not held."""
    from workers_harness import WorkersServer

    data = tmp_path / "data"
    add_scram_users(data, USERS, "SCRAM-SHA-256")
    console_port = free_ports(1)[0]
    server = WorkersServer(data, 2, "--sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256", "--console.listen",
                           f"127.0.0.1:{console_port}", "--console.allow.insecure.sign.in", "true",
                           "--connection.failed.authentication.delay.ms", "20",
                           "--console.sign.in.failures.per.ip", "100000", "--console.sign.in.failures.per.user", "100000")
    server.args += ["--listeners", f"SASL_PLAINTEXT://127.0.0.1:{server.port}"]
    server.console_port = console_port
    server.start()
    guesser = Guesser(server, "127.0.0.3", "admin", 10)
    try:
        guesser.start()
        time.sleep(4.0)  # the scenario: ~40 wrong passwords reached the workers, past their burst of 10
        timings = []
        for user, source in (("alice", "127.0.0.2"), ("bob", "127.0.0.4"), ("carol", "127.0.0.5")):
            status, seconds = sign_in(server, source, user, USERS[user])
            assert status == 200, (user, status)
            timings.append(seconds)
            time.sleep(1.0)
        assert max(timings) < 1.0, timings
        started = time.monotonic()
        consumer = KafkaConsumer(bootstrap_servers=server.all_bootstrap, group_id="plain-client-of-workers",
                                 security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                 sasl_plain_username="dave", sasl_plain_password=USERS["dave"],
                                 enable_auto_commit=False, request_timeout_ms=20000)
        try:
            partition = TopicPartition("events", 0)
            consumer.commit({partition: OffsetAndMetadata(5, "", -1)})
            assert consumer.committed(partition) == 5
        finally:
            consumer.close()
        assert time.monotonic() - started < 5.0
    finally:
        guesser.finish()
        assert server.stop() == 0
    assert guesser.statuses.count(401) >= 30  # every guess was checked (the console's budget let them through)
    assert set(guesser.statuses) <= {401}
