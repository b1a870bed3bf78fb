"""With SASL and ACLs configured the console signs users in (HTTP Basic checked over SASL) and applies the ACLs."""
from __future__ import annotations

import socket
import subprocess
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from cohort_process import free_ports, run_cohort
from console_http import ConsoleServer, call

pytestmark = pytest.mark.timeout(180)

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")  # may DESCRIBE the group "visible" only
BOB = ("bob", "bob-secret")  # may READ and DELETE "visible" and READ its topic (READ implies DESCRIBE)


def add_user(data_dir, tmp_path, user: str, password: str, mechanism: str) -> None:
    secret = tmp_path / f"{user}.password"
    secret.write_text(password + "\n")
    done = run_cohort("users", "add", user, "--mechanism", mechanism, "--password-file", str(secret),
                      "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr


@pytest.fixture
def secured(tmp_path):
    data = tmp_path / "data"
    add_user(data, tmp_path, *ADMIN, "SCRAM-SHA-512")
    add_user(data, tmp_path, *ALICE, "SCRAM-SHA-256")
    add_user(data, tmp_path, *BOB, "SCRAM-SHA-512")
    server = ConsoleServer(data, "--listeners", "PLACEHOLDER")
    server.sasl_port = free_ports(1, taken=server.given_ports)[0]
    server.args[server.args.index("PLACEHOLDER")] = (
        f"PLAINTEXT://127.0.0.1:{server.port},SASL_PLAINTEXT://127.0.0.1:{server.sasl_port}")
    server.args += ["--sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512",
                    "--authorizer.class.name", "acl", "--super.users", "User:admin",
                    "--connection.failed.authentication.delay.ms", "20",
                    "--console.allow.insecure.sign.in", "true"]  # no TLS listener: the console is plain HTTP
    server.start()
    sasl = dict(bootstrap_servers=f"127.0.0.1:{server.sasl_port}", security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ADMIN[0], sasl_plain_password=ADMIN[1])
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                      f"sasl.username={ADMIN[0]}\nsasl.password={ADMIN[1]}\n")
    common = ("--bootstrap-server", f"127.0.0.1:{server.sasl_port}", "--command-config", str(config))
    for args in (("--allow-principal", "User:alice", "--operation", "Describe", "--group", "visible"),
                 ("--allow-principal", "User:bob", "--operation", "Read", "--operation", "Delete", "--group", "visible"),
                 ("--allow-principal", "User:bob", "--operation", "Read", "--topic", "events")):
        done = run_cohort("acls", "add", *args, *common)
        assert done.returncode == 0, done.stderr
    admin = KafkaAdminClient(**sasl, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("events", 1, 1)])
    finally:
        admin.close()
    for group in ("visible", "hidden"):  # committed offsets, no members
        consumer = KafkaConsumer(group_id=group, enable_auto_commit=False, **sasl)
        try:
            consumer.commit({TopicPartition("events", 0): OffsetAndMetadata(7, "", -1)})
        finally:
            consumer.close()
    server.admin_config = config
    yield server
    assert server.stop() == 0


def test_without_accepted_credentials_the_page_and_the_api_answer_401_with_a_basic_challenge(secured):
    for path in ("/", "/api/groups", "/api/groups/visible"):
        for auth in (None, ("alice", "wrong"), ("nobody", "x")):
            status, body, headers = secured.api(path, auth=auth)
            assert status == 401, (path, auth)
            assert headers["WWW-Authenticate"].startswith('Basic realm="cohort console"')
            assert body["error"] == "SIGN_IN_REQUIRED"
    status, _, _ = secured.api("/static/console.js")  # the page's code holds no data
    assert status == 200
    status, _, _ = secured.api("/", auth=ALICE)
    assert status == 200
    assert "alice-secret" not in secured.stderr() and "wrong" not in secured.stderr()


def test_sign_in_over_plain_http_is_refused_at_start_up_unless_the_operator_allows_it(secured, tmp_path):
    from cohort_process import clean_env, cohort_command, free_ports

    warning = [line for line in secured.stderr().splitlines() if "passwords over plain HTTP" in line]
    assert len(warning) == 1 and "WARNING" in warning[0] and "console.allow.insecure.sign.in=true" in warning[0]
    port, console, metrics = free_ports(3)
    done = subprocess.run(cohort_command(
        "serve", "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}", "--metrics", f"127.0.0.1:{metrics}",
        "--data-dir", str(tmp_path / "refused"), "--console.listen", f"127.0.0.1:{console}"),
        env=clean_env(), capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "would ask for passwords over plain HTTP" in lines[0], done.stderr
    assert "console.allow.insecure.sign.in=true" in lines[0]
    assert not (tmp_path / "refused").exists()


def test_each_user_sees_and_changes_only_what_their_acls_allow(secured):
    status, body, _ = secured.api("/api/groups/visible/lag", auth=ADMIN)  # no source reported where events ends
    assert status == 200 and body["total_lag"] is None and body["partitions_without_end"] == 1
    assert [(p["topic"], p["committed"], p["end_offset"], p["lag"]) for p in body["partitions"]] == [
        ("events", 7, None, None)]
    # the source of events reports its end (as the superuser: it needs WRITE or ALTER on the topic)
    done = run_cohort("topics", "end-offsets", "set", "--topic", "events", "--partition", "0", "--offset", "12",
                      "--bootstrap-server", f"127.0.0.1:{secured.sasl_port}", "--command-config",
                      str(secured.admin_config))
    assert done.returncode == 0, done.stderr

    status, body, _ = secured.api("/api/groups", auth=ALICE)
    assert status == 200 and [g["group_id"] for g in body["groups"]] == ["visible"]
    # the list's lag leaves out topics the user may not DESCRIBE, as OffsetFetch does
    assert body["groups"][0]["topics"] == 0 and body["groups"][0]["lag"] is None
    status, body, _ = secured.api("/api/groups", auth=ADMIN)
    assert status == 200 and [g["group_id"] for g in body["groups"]] == ["hidden", "visible"]
    assert [(g["topics"], g["lag"]) for g in body["groups"]] == [(1, 5), (1, 5)]  # 12 - 7
    status, body, _ = secured.api("/api/groups/visible/lag", auth=ALICE)  # the lag report is filtered the same way
    assert status == 200 and body["group"] == "visible" and body["partitions"] == []
    assert body["total_lag"] is None and body["partitions_without_end"] == 0 and body["samples"] == []
    status, body, _ = secured.api("/api/groups/visible/lag", auth=ADMIN)
    assert [(p["topic"], p["committed"], p["end_offset"], p["lag"]) for p in body["partitions"]] == [
        ("events", 7, 12, 5)]
    assert body["total_lag"] == 5 and body["partitions_without_end"] == 0
    status, body, _ = secured.api("/api/topics", auth=ALICE)
    assert status == 200 and body["topics"] == []
    status, body, _ = secured.api("/api/topics/events", auth=BOB)  # READ implies DESCRIBE
    assert status == 200 and [g["group_id"] for g in body["groups"]] == ["visible"]

    status, body, _ = secured.api("/api/groups/hidden", auth=ALICE)
    assert status == 403 and body["error"] == "GROUP_AUTHORIZATION_FAILED"
    status, body, _ = secured.api("/api/groups/visible", auth=ALICE)
    assert status == 200 and body["offsets"] == []  # no DESCRIBE on the topic: OffsetFetch leaves it out

    wanted = {"partitions": [{"topic": "events", "partition": 0}], "confirm": "visible"}
    status, body, _ = secured.api("/api/groups/visible/delete-offsets", method="POST", body=wanted, auth=ALICE)
    assert status == 403 and body["error"] == "GROUP_AUTHORIZATION_FAILED"  # OffsetDelete needs group DELETE
    status, body, _ = secured.api("/api/groups/visible", auth=ADMIN)
    assert [(o["topic"], o["offset"]) for o in body["offsets"]] == [("events", 7)]

    status, body, _ = secured.api("/api/groups/visible/delete-offsets", method="POST", body=wanted, auth=BOB)
    assert status == 200 and body["partitions"] == [{"topic": "events", "partition": 0, "error": "NONE"}]
    status, body, _ = secured.api("/api/groups/visible", auth=ADMIN)
    assert body["offsets"] == []
    status, journal, _ = secured.api("/api/groups/visible/rebalances", auth=ADMIN)
    deleted = journal["entries"][-1]  # who did it, and from which browser
    assert (deleted["trigger"], deleted["principal"]) == ("delete_offsets", "User:bob")
    assert deleted["members"][0]["client_id"] == "cohort-console/bob@127.0.0.1"
    assert any("method=POST" in line and "principal=User:bob" in line and "remote=127.0.0.1" in line
               for line in secured.stderr().splitlines())


def test_with_a_tls_listener_the_console_serves_https_with_the_listeners_certificate(tmp_path):
    import http.client
    import ssl
    import urllib.request

    from security.tls_ca import make_ca

    (tmp_path / "ca").mkdir()
    ca = make_ca(tmp_path / "ca")
    data = tmp_path / "data"
    add_user(data, tmp_path, *ADMIN, "SCRAM-SHA-512")
    server = ConsoleServer(data, "--listeners", "PLACEHOLDER", "--ssl.keystore.location", str(ca.server),
                           "--sasl.enabled.mechanisms", "SCRAM-SHA-512", "--authorizer.class.name", "acl",
                           "--super.users", "User:admin", "--console.request.timeout.ms", "1000")
    server.args[server.args.index("PLACEHOLDER")] = f"SASL_SSL://127.0.0.1:{server.port}"
    server.start()
    try:
        trusted = ssl.create_default_context(cafile=str(ca.ca))
        url = f"https://localhost:{server.console_port}"
        status, body, _ = call(f"{url}/api/groups", auth=ADMIN, context=trusted)
        assert status == 200 and body["groups"] == [] and body["total"] == 0
        status, _, headers = call(f"{url}/api/groups", context=trusted)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert headers["Strict-Transport-Security"] == "max-age=31536000"  # HTTPS answers pin HTTPS
        assert "passwords over plain HTTP" not in server.stderr()
        try:  # plain HTTP is not answered
            urllib.request.urlopen(f"http://127.0.0.1:{server.console_port}/api/groups", timeout=5)
            answered = True
        except (OSError, urllib.error.URLError, http.client.HTTPException):
            answered = False
        assert not answered
        # a connection that never starts its TLS handshake is closed at console.request.timeout.ms
        silent = socket.create_connection(("127.0.0.1", server.console_port), timeout=10)
        try:
            started = time.monotonic()
            try:
                assert silent.recv(64) == b""
            except ConnectionResetError:
                pass  # (closed too)
            assert time.monotonic() - started < 8
        finally:
            silent.close()
    finally:
        assert server.stop() == 0


def test_an_undo_needs_what_an_offset_commit_needs_while_describing_the_group_shows_its_journal(secured):
    status, history, _ = secured.api("/api/groups/visible/history", auth=BOB)  # GroupReport: group DESCRIBE
    assert status == 200 and [e["offset"] for e in history["events"]] == [7]
    status, _, _ = secured.api("/api/groups/hidden/history", auth=BOB)
    assert status == 403
    at_ms = history["events"][0]["time_ms"]
    undo = {"at_ms": at_ms, "confirm": "visible"}
    status, body, _ = secured.api("/api/groups/visible/reset-offsets", method="POST", body=undo, auth=BOB)
    assert status == 200 and body["executed"] is True
    assert [(p["topic"], p["planned"]) for p in body["partitions"]] == [("events", 7)]


def test_the_group_reports_show_only_the_topics_offset_fetch_shows(secured):
    """Alice may DESCRIBE the group "visible" but not its topic: every report hides the topic as OffsetFetch
    does (history, health, offsets at a time and the undo's plan), and no answer names it."""
    status, detail, _ = secured.api("/api/groups/visible", auth=ALICE)
    assert status == 200 and detail["offsets"] == []
    status, history, _ = secured.api("/api/groups/visible/history", auth=ALICE)
    assert status == 200 and history["events"] == []
    status, body, _ = secured.api("/api/groups/visible/history?topic=events", auth=ALICE)
    assert status == 403 and "events" not in body["message"]
    status, health, _ = secured.api("/api/groups/visible/health", auth=ALICE)
    assert status == 200 and health["partitions"] == []
    status, admin_history, _ = secured.api("/api/groups/visible/history", auth=ADMIN)
    at_ms = admin_history["events"][0]["time_ms"]
    status, plan, _ = secured.api(f"/api/groups/visible/reset-plan?at_ms={at_ms}", auth=ALICE)
    assert status == 200 and plan["partitions"] == [] and "events" not in str(plan)
    status, body, _ = secured.api("/api/groups/visible/reset-offsets", method="POST",
                                  body={"at_ms": at_ms, "confirm": "visible"}, auth=ALICE)
    assert "events" not in str(body) and body.get("executed") is not True

    # The same principal with the topic's DESCRIBE sees it in every report.
    status, health, _ = secured.api("/api/groups/visible/health", auth=ADMIN)
    assert [(p["topic"], p["offset"]) for p in health["partitions"]] == [("events", 7)]
    status, plan, _ = secured.api(f"/api/groups/visible/reset-plan?at_ms={at_ms}", auth=ADMIN)
    assert [(p["topic"], p["planned"]) for p in plan["partitions"]] == [("events", 7)]


async def test_a_deleted_user_is_signed_out_once_the_session_is_older_than_its_age(secured):
    from cohort.coordinator.console.access import CoordinatorAccess, Sessions, SignInRequired

    from bounded_wait import wait_until_async

    access = CoordinatorAccess((f"127.0.0.1:{secured.sasl_port}",), "SASL_PLAINTEXT", ("SCRAM-SHA-256", "SCRAM-SHA-512"))
    sessions = Sessions(access, max_age_s=0.5)
    try:
        admin = await sessions.admin_for(BOB)
        assert await sessions.admin_for(BOB) is admin  # reused while young
        with pytest.raises(SignInRequired):
            await sessions.admin_for((BOB[0], "not-bobs"))
        done = run_cohort("users", "delete", BOB[0], "--bootstrap-server", f"127.0.0.1:{secured.sasl_port}",
                          "--command-config", str(secured.admin_config))
        assert done.returncode == 0, done.stderr

        async def refused() -> bool:
            try:
                await sessions.admin_for(BOB)
            except SignInRequired:
                return True
            return False

        await wait_until_async(refused, 10, "bob's session to end after his deletion", interval=0.2)
    finally:
        await sessions.close()


def test_in_a_browser_a_signed_in_user_sees_only_the_groups_their_acls_allow(secured, browser):
    from playwright.sync_api import expect

    url = f"http://127.0.0.1:{secured.console_port}/"
    anonymous = browser.new_context()
    try:
        assert anonymous.request.get(url).status == 401  # no credentials: the browser is asked for them
    finally:
        anonymous.close()
    context = browser.new_context(http_credentials={"username": ALICE[0], "password": ALICE[1]})
    try:
        page = context.new_page()
        page.goto(url)
        expect(page.locator("a.group-id")).to_have_text(["visible"])
        page.goto(url + "#/group/hidden")
        expect(page.locator("main")).to_contain_text("not allowed")
        # "visible" has offsets only on a topic alice may not describe: no section of its page shows them
        page.goto(url + "#/group/visible")
        expect(page.locator("#offsets")).to_contain_text("No committed offsets.")
        expect(page.locator("main")).to_contain_text("No commits in the history.")
        assert "events" not in page.locator("main").inner_text()
    finally:
        context.close()


def test_the_consoles_kafka_client_re_authenticates_before_its_sasl_session_ends(tmp_path):
    import time

    data = tmp_path / "data"
    add_user(data, tmp_path, *ADMIN, "SCRAM-SHA-512")
    server = ConsoleServer(data, "--listeners", "PLACEHOLDER", "--sasl.enabled.mechanisms", "SCRAM-SHA-512",
                           "--connections.max.reauth.ms", "1500", "--console.allow.insecure.sign.in", "true")
    server.args[server.args.index("PLACEHOLDER")] = f"SASL_PLAINTEXT://127.0.0.1:{server.port}"
    server.start()
    try:
        deadline = time.monotonic() + 5  # three session lifetimes, on the same signed-in client
        while time.monotonic() < deadline:
            status, body, _ = server.api("/api/groups", auth=ADMIN)
            assert status == 200, body
            time.sleep(0.3)
        stderr = server.stderr()
        assert "session expired" not in stderr and "Traceback" not in stderr, stderr
    finally:
        assert server.stop() == 0


def test_with_workers_and_a_sasl_listener_the_console_signs_users_in(tmp_path):
    import time

    from workers_harness import WorkersServer, group_on_worker

    data = tmp_path / "data"
    add_user(data, tmp_path, *ADMIN, "SCRAM-SHA-512")
    console_port = free_ports(1)[0]
    server = WorkersServer(data, 2, "--sasl.enabled.mechanisms", "SCRAM-SHA-512", "--console.listen",
                           f"127.0.0.1:{console_port}", "--console.allow.insecure.sign.in", "true")
    server.args += ["--listeners", f"SASL_PLAINTEXT://127.0.0.1:{server.port}"]
    server.start()
    try:
        group = group_on_worker("signed", 1, 2)
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_of(0), security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ADMIN[0],
                                 sasl_plain_password=ADMIN[1], request_timeout_ms=10000)
        try:
            admin.alter_group_offsets(group, {TopicPartition("t", 0): OffsetAndMetadata(5, "", -1)})
        finally:
            admin.close()
        url = f"http://127.0.0.1:{console_port}"
        started = time.monotonic()
        status, body, headers = call(f"{url}/api/groups")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic"), body
        assert time.monotonic() - started < 5  # answered, not a request left to time out
        status, body, _ = call(f"{url}/api/groups", auth=ADMIN)
        assert status == 200 and [g["group_id"] for g in body["groups"]] == [group]
        status, body, _ = call(f"{url}/api/groups/{group}", auth=ADMIN)
        assert status == 200 and [o["offset"] for o in body["offsets"]] == [5]
        status, _, _ = call(f"{url}/api/groups", auth=(ADMIN[0], "wrong"))
        assert status == 401
    finally:
        assert server.stop() == 0


def test_the_journal_and_the_group_page_name_no_topic_the_user_may_not_describe(secured):
    """Alice may DESCRIBE the group "visible" but not its topic "events": an admin's reset of it and a member's
    rebalance onto it are in the group's journal, and the member holds it; her journal, group page and
    overview name it nowhere, while the admin's show it."""
    def member() -> KafkaConsumer:
        consumer = KafkaConsumer("events", group_id="visible", enable_auto_commit=False,
                                 bootstrap_servers=f"127.0.0.1:{secured.sasl_port}", security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ADMIN[0],
                                 sasl_plain_password=ADMIN[1])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the member got no assignment"
            consumer.poll(timeout_ms=200)
        return consumer

    member().close()  # the group is a consumer group now: an offset reset is an admin action on it
    reset = run_cohort("groups", "reset-offsets", "--group", "visible", "--topic", "events", "--to-offset", "3",
                       "--execute", "--bootstrap-server", f"127.0.0.1:{secured.sasl_port}",
                       "--command-config", str(secured.admin_config))
    assert reset.returncode == 0, reset.stderr
    consumer = member()
    try:
        deadline = time.monotonic() + 30
        while True:  # the rebalance's entry is written after the rebalance itself
            status, journal, _ = secured.api("/api/groups/visible/rebalances", auth=ADMIN)
            entries = journal if isinstance(journal, list) else journal.get("entries", [])
            if any(e["kind"] == "rebalance" for e in entries) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert any(mv["topic"] == "events" for e in entries for mv in e["moves"]), entries
        assert any(e["kind"] == "admin" and "events:0" in e["detail"] for e in entries), entries
        status, page, _ = secured.api("/api/groups/visible", auth=ADMIN)
        assert [tp["topic"] for m in page["members"] for tp in m["assignment"]] == ["events"]

        status, journal, _ = secured.api("/api/groups/visible/rebalances", auth=ALICE)
        assert status == 200 and "events" not in str(journal), journal
        mine = journal if isinstance(journal, list) else journal.get("entries", [])
        assert {e["kind"] for e in mine} == {"admin", "rebalance"}
        assert all(e["moves"] == [] and e["moves_total"] == 0 for e in mine)
        status, page, _ = secured.api("/api/groups/visible", auth=ALICE)
        assert status == 200 and "events" not in str(page)
        assert len(page["members"]) == 1 and page["members"][0]["assignment"] == [] and page["offsets"] == []
        status, listing, _ = secured.api("/api/groups", auth=ALICE)
        assert status == 200 and [g["group_id"] for g in listing["groups"]] == ["visible"]
        assert "events" not in str(listing) and listing["groups"][0]["topics"] == 0
    finally:
        consumer.close()
