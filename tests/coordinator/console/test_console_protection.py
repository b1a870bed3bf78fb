"""What keeps other web pages out of the console (host names, cross-site changes, framing), its access log,
and bad input answered 400 in the API's JSON shape, against a real ``cohort serve`` over plain HTTP."""
from __future__ import annotations

import http.client
import json
import socket

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.structs import OffsetAndMetadata

from bounded_wait import wait_until
from cohort_process import CohortServer
from console_http import ConsoleServer, call

pytestmark = pytest.mark.timeout(180)

WANTED = {"partitions": [{"topic": "events", "partition": 0}], "confirm": "loaders"}


@pytest.fixture
def served(tmp_path):
    server = ConsoleServer(tmp_path / "data", "--console.allowed.hosts", "console.example.com").start()
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:  # committed offsets of a group with no members: deleting them needs no more than a request
        admin.alter_group_offsets("loaders", {TopicPartition("events", 0): OffsetAndMetadata(42, "", -1)})
    finally:
        admin.close()
    yield server
    assert server.stop() == 0


def offsets_of(server, group: str) -> dict[tuple[str, int], int]:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        return {(tp.topic, tp.partition): o.offset for tp, o in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def raw_request(server, method: str, path: str, headers: dict[str, str], body: bytes | None = None):
    """(status, JSON body, headers) with exactly these headers (Host too: http.client adds none of its own)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.console_port, timeout=15)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data.startswith(b"{") else data.decode(), dict(response.headers)
    finally:
        connection.close()


def test_a_change_needs_json_the_console_header_and_the_consoles_own_origin(served):
    host = f"127.0.0.1:{served.console_port}"
    path = "/api/groups/loaders/delete-offsets"
    body = json.dumps(WANTED).encode()
    json_type = {"Content-Type": "application/json"}
    console = {"X-Cohort-Console": "1"}
    # what a cross-site <form enctype="text/plain"> sends: no custom header, text/plain, a foreign Origin
    status, answer, _ = raw_request(served, "POST", path, {"Host": host, "Content-Type": "text/plain",
                                                           "Origin": "http://attacker.example"}, body)
    assert status == 403 and answer["error"] == "CROSS_SITE_REQUEST"
    status, answer, _ = raw_request(served, "POST", path, {"Host": host, **json_type, **console,
                                                           "Origin": "http://attacker.example"}, body)
    assert status == 403 and "attacker.example" in answer["message"]
    status, answer, _ = raw_request(served, "POST", path, {"Host": host, **json_type, **console,
                                                           "Referer": "http://attacker.example/page"}, body)
    assert status == 403 and answer["error"] == "CROSS_SITE_REQUEST"  # no Origin: the Referer says where from
    status, answer, _ = raw_request(served, "POST", path, {"Host": host, **json_type}, body)
    assert status == 403 and "X-Cohort-Console" in answer["message"]
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, answer, _ = raw_request(served, "POST", path, {"Host": host, "Content-Type": content_type, **console},
                                        body)
        assert status == 415 and answer["error"] == "UNSUPPORTED_MEDIA_TYPE", content_type
    assert offsets_of(served, "loaders") == {("events", 0): 42}  # none of them changed anything

    status, answer, _ = raw_request(served, "POST", path, {"Host": host, **json_type, **console,
                                                           "Origin": f"http://{host}"}, body)
    assert status == 200 and answer["partitions"][0]["error"] == "NONE"  # the console's own page
    assert offsets_of(served, "loaders") == {}
    status, _, _ = raw_request(served, "GET", "/api/groups", {"Host": host})
    assert status == 200  # reads need none of it


def test_only_the_consoles_own_host_names_are_answered(served):
    port = served.console_port
    for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.attacker.example:{port}",
                 f"localhost.attacker.example:{port}", "bad host"):
        for path in ("/", "/api/groups", "/static/console.js"):
            status, answer, _ = raw_request(served, "GET", path, {"Host": host})
            assert status == 421 and answer["error"] == "MISDIRECTED_REQUEST", (host, path)
    status, _, _ = raw_request(served, "POST", "/api/groups/loaders/delete-offsets",
                               {"Host": f"attacker.example:{port}", "Content-Type": "application/json",
                                "X-Cohort-Console": "1", "Origin": f"http://attacker.example:{port}"},
                               json.dumps(WANTED).encode())
    assert status == 421  # a rebinding page is its own origin: the host name is what gives it away
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost.:{port}", f"[::1]:{port}", "10.1.2.3",
                 f"console.example.com:{port}"):  # the last one from console.allowed.hosts
        status, _, _ = raw_request(served, "GET", "/api/groups", {"Host": host})
        assert status == 200, host
    assert offsets_of(served, "loaders") == {("events", 0): 42}


def test_every_answer_forbids_framing_and_sniffing_and_the_api_is_not_cached(served):
    for path in ("/", "/static/console.js", "/api/groups", "/api/nothing-here"):
        status, _, headers = call(f"http://127.0.0.1:{served.console_port}{path}")
        assert status in (200, 404), path
        assert headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "same-origin"
        assert "Strict-Transport-Security" not in headers  # plain HTTP (the HTTPS test checks HSTS)
    _, _, headers = call(f"http://127.0.0.1:{served.console_port}/api/groups")
    assert headers["Cache-Control"] == "no-store"


def test_each_request_is_logged_with_the_browsers_address_and_a_change_is_journaled_with_it(served):
    status, _, _ = served.api("/api/groups/loaders/delete-offsets", method="POST", body=WANTED)
    assert status == 200
    status, _, _ = served.api("/api/groups/loaders")

    def logged():
        lines = [line for line in served.stderr().splitlines() if "console request" in line]
        return lines if len(lines) >= 2 else None

    lines = wait_until(logged, 10, "two access log lines")
    change = next(line for line in lines if "method=POST" in line)
    for part in ("remote=127.0.0.1", "principal=User:ANONYMOUS", "path=/api/groups/loaders/delete-offsets",
                 "status=200"):
        assert part in change, change
    assert any("method=GET" in line and "path=/api/groups/loaders " in line for line in lines), lines
    status, journal, _ = served.api("/api/groups/loaders/rebalances")
    entry = journal["entries"][-1]
    assert (entry["kind"], entry["trigger"]) == ("admin", "delete_offsets")
    assert entry["members"][0]["client_id"] == "cohort-console/anonymous@127.0.0.1"


def test_out_of_range_numbers_and_deeply_nested_bodies_are_400s_in_the_json_shape(served):
    for path in ("/api/groups/loaders/history?since_ms=99999999999999999999",
                 "/api/groups/loaders/history?topic=events&partition=2147483648",
                 "/api/groups/loaders/rebalances?since_ms=9223372036854775808",
                 "/api/groups/loaders/reset-plan?at_ms=1" + "0" * 30):
        status, body, _ = served.api(path)
        assert status == 400 and body["error"] == "BAD_REQUEST" and "at most" in body["message"], path
    for bad in ({"at_ms": 2**70, "confirm": "loaders"},):
        status, body, _ = served.api("/api/groups/loaders/reset-offsets", method="POST", body=bad)
        assert status == 400 and body["error"] == "BAD_REQUEST", bad
    for partition in ({"topic": "events", "partition": 2**31}, {"topic": "t" * 250, "partition": 0}):
        status, body, _ = served.api("/api/groups/loaders/delete-offsets", method="POST",
                                     body={"partitions": [partition], "confirm": "loaders"})
        assert status == 400 and "not a partition" in body["message"]
    for deep in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000):
        status, body, _ = served.api("/api/groups/loaders/delete-offsets", method="POST", raw=deep)
        assert status == 400 and body["error"] == "BAD_REQUEST" and "JSON object" in body["message"]
    assert "Traceback" not in served.stderr()
    assert offsets_of(served, "loaders") == {("events", 0): 42}


def test_an_undo_to_a_time_before_the_history_says_it_did_not_execute(served):
    status, history, _ = served.api("/api/groups/loaders/history")
    assert status == 200 and len(history["events"]) == 1
    _, journal, _ = served.api("/api/groups/loaders/rebalances")
    resets = [e for e in journal["entries"] if e["trigger"] == "reset_offsets"]  # the commit that made the group
    before = history["events"][0]["time_ms"] - 60_000
    status, done, _ = served.api("/api/groups/loaders/reset-offsets", method="POST",
                                 body={"at_ms": before, "confirm": "loaders"})
    assert status == 200 and done["executed"] is False
    assert done["reason"].startswith("nothing to restore")
    assert offsets_of(served, "loaders") == {("events", 0): 42}
    status, journal, _ = served.api("/api/groups/loaders/rebalances")
    assert [e for e in journal["entries"] if e["trigger"] == "reset_offsets"] == resets  # nothing was committed


class _AttackerPage:
    """A web page on another origin (its own port) that posts a form to the console as soon as it loads."""

    def __init__(self, html: str) -> None:
        import http.server
        import threading

        body = html.encode()

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def test_a_cross_site_form_in_a_real_browser_does_not_delete_offsets(served, browser):
    # The classic JSON CSRF: a text/plain form whose one field's name and value add up to a JSON body
    # {"partitions": [...], "confirm": "loaders", "pad": "="}
    name = json.dumps(WANTED)[:-1] + ', "pad": "'
    page_html = f"""<!doctype html><html><body>
<form id="attack" method="POST" enctype="text/plain"
      action="http://127.0.0.1:{served.console_port}/api/groups/loaders/delete-offsets">
  <input type="hidden" name='{name}' value='"}}'>
</form>
<script>document.getElementById("attack").submit();</script>
</body></html>"""
    attacker = _AttackerPage(page_html)
    try:
        page = browser.new_page()
        with page.expect_navigation(url=f"http://127.0.0.1:{served.console_port}/**", timeout=20_000) as landed:
            page.goto(attacker.url)
        answered = landed.value
        assert answered is not None and answered.request.method == "POST"
        assert answered.request.headers["content-type"].startswith("text/plain")  # what a form sends
        assert answered.status == 403, page.content()
        assert "CROSS_SITE_REQUEST" in page.content()
    finally:
        attacker.close()
    assert offsets_of(served, "loaders") == {("events", 0): 42}


def test_a_malformed_group_link_shows_an_error_instead_of_loading_forever(served, browser):
    from playwright.sync_api import expect

    page = browser.new_page()
    complaints = []
    page.on("console", lambda message: complaints.append(message.text) if message.type == "error" else None)
    page.goto(f"http://127.0.0.1:{served.console_port}/#/group/%E0%A4%A")
    expect(page.locator("main")).to_contain_text("Not a group link")
    page.goto(f"http://127.0.0.1:{served.console_port}/#/group/loaders")  # and the page still works
    expect(page.locator("h1")).to_have_text("loaders")
    expect(page.locator("#history circle.commit")).to_have_count(1)  # the chart, drawn under the page's CSP
    assert not [m for m in complaints if "Content Security Policy" in m]  # nothing of the page refused by its CSP


def test_a_console_without_sign_in_on_a_non_loopback_address_is_warned_about(tmp_path, served):
    assert "without sign-in" not in served.stderr()  # 127.0.0.1: only this machine reaches it
    with socket.socket() as probe:  # free on every address, not only on 127.0.0.1 (free_port's probe)
        probe.bind(("0.0.0.0", 0))
        console_port = probe.getsockname()[1]
    server = CohortServer(tmp_path / "wide", "--console.listen", f"0.0.0.0:{console_port}")
    server.reserved_ports = (console_port,)
    server.start()
    try:
        # the console starts beside the Kafka listener: its start-up lines may follow /health's first 200
        wait_until(lambda: "without sign-in" in server.stderr(), 10, "the console's start-up warning")
        warning = [line for line in server.stderr().splitlines() if "without sign-in" in line]
        assert len(warning) == 1 and "WARNING" in warning[0] and f"0.0.0.0:{console_port}" in warning[0]
        status, _, _ = call(f"http://127.0.0.1:{console_port}/api/groups")
        assert status == 200  # a warning, not a refusal
    finally:
        assert server.stop() == 0


def test_in_the_page_an_undo_to_before_the_history_says_why_nothing_was_done(served, browser):
    from playwright.sync_api import expect

    from test_console_browser import local_time_input

    _, history, _ = served.api("/api/groups/loaders/history")
    before = history["events"][0]["time_ms"] - 60_000
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.goto(f"http://127.0.0.1:{served.console_port}/#/group/loaders")
    expect(page.locator("h1")).to_have_text("loaders")
    page.fill("#reset-at", local_time_input(before))
    page.click("#preview-reset")
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    expect(dialog.locator("td.planned")).to_have_text(["no offset (deleted)"])
    page.click("#confirm-ok")
    expect(page.locator("#confirm-error")).to_contain_text("nothing to restore")
    expect(dialog).to_be_visible()  # not closed as if it had been done
    assert offsets_of(served, "loaders") == {("events", 0): 42}
