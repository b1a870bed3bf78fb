"""The console in a real browser: Debian's Chromium driven by Playwright against ``cohort serve`` with real groups.

Playwright drives the system's browser (the `browser` fixture in conftest.py). The screenshots it takes are the ones the README shows (docs/images/, with COHORT_SCREENSHOTS=docs/images).
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.structs import OffsetAndMetadata
from playwright.sync_api import expect

from bounded_wait import wait_until
from console_http import ConsoleServer, commit, create_topic, report_ends, stable_consumers

pytestmark = pytest.mark.timeout(240)

# Screenshots go to a temporary folder, so a test run leaves the checkout as it was; the README's are
# made with COHORT_SCREENSHOTS=docs/images (see docs/console.md).
IMAGES = Path(os.environ.get("COHORT_SCREENSHOTS") or tempfile.mkdtemp(prefix="cohort-console-screenshots-"))


def test_the_group_list_and_a_group_page_show_real_groups(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    consumers = []
    try:
        create_topic(server.bootstrap, "payments", 4)
        consumers = stable_consumers(server.bootstrap, "payments", "ledger", 2, 4)
        consumers += stable_consumers(server.bootstrap, "payments", "fraud-check", 1, 4)
        for c in consumers:
            commit(c, {tp: OffsetAndMetadata(100 * (tp.partition + 1), "", -1) for tp in c.assignment()})

        page = browser.new_page(viewport={"width": 1200, "height": 700})
        page.goto(f"http://127.0.0.1:{server.console_port}/")
        ids = page.locator("a.group-id")
        expect(ids).to_have_count(2)
        assert ids.all_inner_texts() == ["fraud-check", "ledger"]
        expect(page.locator('tr[data-group="ledger"]')).to_contain_text("Stable")

        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
        try:  # a group that appears later shows up without a reload (the list refreshes itself)
            admin.alter_group_offsets("archiver", {TopicPartition("payments", 0): OffsetAndMetadata(1, "", -1)})
        finally:
            admin.close()
        expect(ids).to_have_count(3, timeout=15000)
        assert ids.all_inner_texts() == ["archiver", "fraud-check", "ledger"]
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "console-groups.png"), full_page=True)

        page.click("text=ledger")
        expect(page.locator("h1")).to_have_text("ledger")
        committed = page.locator("#offsets td.committed")
        expect(committed).to_have_count(4)
        assert committed.all_inner_texts() == ["100", "200", "300", "400"]
        for c in consumers[:2]:
            expect(page.locator("main")).to_contain_text(c.config["client_id"])
        page.screenshot(path=str(IMAGES / "console-group.png"), full_page=True)
    finally:
        for c in consumers:
            c.close()
        assert server.stop() == 0


def local_time_input(ms: int) -> str:
    """The datetime-local value for `ms` in this machine's time zone (the browser's too)."""
    from datetime import datetime

    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def test_an_undo_through_the_page_restores_what_the_group_had_committed(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    try:
        create_topic(server.bootstrap, "invoices", 2)
        consumers = stable_consumers(server.bootstrap, "invoices", "settlement", 1, 2)
        p0, p1 = TopicPartition("invoices", 0), TopicPartition("invoices", 1)
        for offsets in ((100, 200), (150, 260), (180, 300)):
            commit(consumers[0], {p0: OffsetAndMetadata(offsets[0], "", -1), p1: OffsetAndMetadata(offsets[1], "", -1)})
        consumers[0].close()
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
        try:  # the bad reset an operator wants to undo
            admin.alter_group_offsets("settlement", {p0: OffsetAndMetadata(0, "", -1), p1: OffsetAndMetadata(0, "", -1)})
            _, history, _ = server.api("/api/groups/settlement/history")
            good = [e["time_ms"] for e in history["events"] if e["offset"] in (150, 260)][-1]

            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"http://127.0.0.1:{server.console_port}/#/group/settlement")
            expect(page.locator("h1")).to_have_text("settlement")
            expect(page.locator("#history circle.commit")).to_have_count(8)  # 3 rounds and the reset, 2 partitions
            expect(page.locator("#rebalances li.entry[data-trigger=reset_offsets]")).to_have_count(1)
            expect(page.locator("#offsets td.committed")).to_have_text(["0", "0"])

            page.fill("#reset-at", local_time_input(good))
            page.click("#preview-reset")
            dialog = page.locator("dialog#confirm")
            expect(dialog).to_be_visible()
            expect(dialog.locator("td.planned")).to_have_text(["150", "260"])
            page.screenshot(path=str(IMAGES / "console-undo-preview.png"))
            assert admin.list_group_offsets("settlement")["settlement"][p0].offset == 0  # a preview changes nothing

            page.click("#confirm-ok")
            expect(dialog).to_be_hidden()
            expect(page.locator("#offsets td.committed")).to_have_text(["150", "260"])
            restored = admin.list_group_offsets("settlement")["settlement"]
            assert {tp.partition: o.offset for tp, o in restored.items()} == {0: 150, 1: 260}
            expect(page.locator("#rebalances li.entry[data-trigger=reset_offsets]")).to_have_count(2)
            page.screenshot(path=str(IMAGES / "console-undo-done.png"), full_page=True)
        finally:
            admin.close()
    finally:
        assert server.stop() == 0


def commit_as_admin(bootstrap: str, offsets_by_group: dict[str, dict[TopicPartition, int]]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        for group, offsets in offsets_by_group.items():
            admin.alter_group_offsets(group, {tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
    finally:
        admin.close()


HIDE_TAB = """() => {
  Object.defineProperty(document, "hidden", { configurable: true, get: () => true });
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "hidden" });
  document.dispatchEvent(new Event("visibilitychange"));
}"""
SHOW_TAB = """() => {
  Object.defineProperty(document, "hidden", { configurable: true, get: () => false });
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "visible" });
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_search_filter_and_sort_narrow_the_group_list_and_a_hidden_tab_asks_nothing(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    try:
        create_topic(server.bootstrap, "payments", 2)
        p0, p1 = TopicPartition("payments", 0), TopicPartition("payments", 1)
        commit_as_admin(server.bootstrap, {"ledger": {p0: 400, p1: 9}, "ledger-replay": {p0: 100, p1: 9},
                                           "fraud-check": {p0: 500, p1: 9}, "archiver": {p0: 0, p1: 9}})
        page = browser.new_page(viewport={"width": 1200, "height": 700})
        page.goto(f"http://127.0.0.1:{server.console_port}/")
        ids = page.locator("a.group-id")
        expect(ids).to_have_text(["archiver", "fraud-check", "ledger", "ledger-replay"])
        # no source reported where payments ends: every lag is unknown, never 0
        expect(page.locator("td.lag")).to_have_text(["–"] * 4)
        # the source reports payments-0 ends at 500: lags 500 - offset; payments-1 at 9, even everywhere
        report_ends(server.bootstrap, {("payments", 0): 500, ("payments", 1): 9})
        # (the list refreshes itself every 5 s, from a snapshot at most 5 s old)
        expect(page.locator('tr[data-group="archiver"] td.lag')).to_have_text("500", timeout=20000)
        expect(page.locator('tr[data-group="fraud-check"] td.lag')).to_have_text("0")

        page.fill("#group-search", "ledg")
        expect(ids).to_have_text(["ledger", "ledger-replay"])
        expect(page.locator("#page-info")).to_contain_text("of 2 (of 4 groups)")
        page.fill("#group-search", "")
        expect(ids).to_have_count(4)

        page.click('a.sort[data-sort="lag"]')  # the biggest lag first
        expect(ids).to_have_text(["archiver", "ledger-replay", "ledger", "fraud-check"])
        page.click('a.sort[data-sort="lag"]')
        expect(ids).to_have_text(["fraud-check", "ledger", "ledger-replay", "archiver"])
        page.select_option("#filter-state", "Empty")
        expect(ids).to_have_count(4)
        page.select_option("#filter-type", "consumer")
        expect(page.locator("#group-list")).to_contain_text("No group matches.")
        page.select_option("#filter-type", "")
        page.select_option("#filter-state", "")
        expect(ids).to_have_text(["fraud-check", "ledger", "ledger-replay", "archiver"])
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "console-groups.png"), full_page=True)

        # Refresh every 2 s; a hidden tab asks nothing, and catches up once it is shown again
        asked: list[float] = []
        page.on("request", lambda r: asked.append(time.monotonic()) if "/api/groups" in r.url else None)
        page.select_option("#refresh-every", "2000")
        # (Playwright delivers the page's events while the test waits through it: wait_for_timeout, not sleep)
        wait_until(lambda: page.wait_for_timeout(200) or len(asked) >= 2, 15, "the list refreshes itself every 2 s")
        page.evaluate(HIDE_TAB)
        hidden_at = time.monotonic()
        page.wait_for_timeout(5000)
        assert [t for t in asked if t > hidden_at + 0.5] == []  # (one already under way may finish)
        commit_as_admin(server.bootstrap, {"newcomer": {p0: 1}})
        page.evaluate(SHOW_TAB)
        expect(page.locator('tr[data-group="newcomer"]')).to_have_count(1, timeout=5000)
    finally:
        assert server.stop() == 0


def test_a_topic_page_shows_its_partitions_end_offsets_and_the_groups_consuming_it(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    consumers = []
    try:
        create_topic(server.bootstrap, "orders", 3)
        create_topic(server.bootstrap, "audit", 1)
        consumers = stable_consumers(server.bootstrap, "orders", "shipping", 1, 3)
        commit(consumers[0], {tp: OffsetAndMetadata(50 * (tp.partition + 1), "", -1) for tp in consumers[0].assignment()})
        commit_as_admin(server.bootstrap, {"billing": {TopicPartition("orders", 0): 20},
                                           "auditors": {TopicPartition("audit", 0): 7}})
        # the source of orders reports its ends (where shipping committed); no source reported audit's
        report_ends(server.bootstrap, {("orders", 0): 50, ("orders", 1): 100, ("orders", 2): 150})
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(f"http://127.0.0.1:{server.console_port}/#/topics")
        expect(page.locator("a.topic-name")).to_have_text(["audit", "orders"])
        expect(page.locator('tr[data-topic="orders"] td.num').nth(1)).to_have_text("2")  # two groups consume it
        expect(page.locator('tr[data-topic="orders"] td.lag')).to_have_text("30")  # billing's 50 - 20, shipping's 0
        expect(page.locator('tr[data-topic="audit"] td.lag')).to_have_text("–")  # a commit (7) is no end
        page.screenshot(path=str(IMAGES / "console-topics.png"), full_page=True)

        page.click("text=orders")
        expect(page.locator("h1")).to_have_text("orders")
        expect(page.locator("#partitions td.end-offset")).to_have_text(["50", "100", "150"])
        expect(page.locator("#consumers a.group-id")).to_have_text(["billing", "shipping"])
        expect(page.locator('#consumers tr[data-group="billing"] td.lag')).to_have_text("30")
        expect(page.locator('#consumers tr[data-group="shipping"] td.lag')).to_have_text("0")
        page.screenshot(path=str(IMAGES / "console-topic.png"), full_page=True)

        page.click("#consumers >> text=billing")  # on to the group, whose page refreshes when asked
        expect(page.locator("h1")).to_have_text("billing")
        expect(page.locator("#group-lag")).to_have_text("30")
        expect(page.locator("#lag")).to_contain_text("Lag now: 30")  # the lag report's total, with its samples
        commit_as_admin(server.bootstrap, {"billing": {TopicPartition("orders", 0): 45}})
        expect(page.locator("#offsets td.committed")).to_have_text(["20"])
        page.click("#refresh-now")
        expect(page.locator("#offsets td.committed")).to_have_text(["45"])
        expect(page.locator("#group-lag")).to_have_text("5")
        expect(page.locator("#lag")).to_contain_text("Lag now: 5")
    finally:
        for c in consumers:
            c.close()
        assert server.stop() == 0
