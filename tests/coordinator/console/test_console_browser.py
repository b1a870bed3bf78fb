"""The console in a real browser: Debian's Chromium driven by Playwright against ``cohort serve`` with real groups.

Playwright drives the system's browser (the `browser` fixture in conftest.py). The screenshots it takes are the ones the README shows (docs/images/, with COHORT_SCREENSHOTS=docs/images).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.structs import OffsetAndMetadata
from playwright.sync_api import expect

from console_http import ConsoleServer, commit, create_topic, stable_consumers

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
