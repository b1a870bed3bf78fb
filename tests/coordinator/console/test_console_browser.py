"""The console in a real browser: Debian's Chromium driven by Playwright against ``cohort serve`` with real groups.

Playwright drives the system's browser (``/usr/bin/chromium``, from apt; never ``playwright install``).
The screenshots it takes are the ones the README shows (docs/images/).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata
from playwright.sync_api import expect, sync_playwright

from console_http import ConsoleServer, stable_consumers

pytestmark = pytest.mark.timeout(240)

CHROMIUM = "/usr/bin/chromium"
IMAGES = Path(__file__).resolve().parents[3] / "docs" / "images"


@pytest.fixture
def browser():
    assert Path(CHROMIUM).exists(), "the browser test needs Debian's chromium (apt-get install chromium)"
    with sync_playwright() as playwright:
        # --no-sandbox: the test may run as root (CI), where Chromium's sandbox refuses to start
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def test_the_group_list_and_a_group_page_show_real_groups(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    consumers = []
    try:
        create_topic(server.bootstrap, "payments", 4)
        consumers = stable_consumers(server.bootstrap, "payments", "ledger", 2, 4)
        consumers += stable_consumers(server.bootstrap, "payments", "fraud-check", 1, 4)
        for c in consumers:
            c.commit({tp: OffsetAndMetadata(100 * (tp.partition + 1), "", -1) for tp in c.assignment()})

        page = browser.new_page(viewport={"width": 1200, "height": 700})
        page.goto(f"http://127.0.0.1:{server.console_port}/")
        ids = page.locator("a.group-id")
        expect(ids).to_have_count(2)
        assert ids.all_inner_texts() == ["fraud-check", "ledger"]
        expect(page.locator('tr[data-group="ledger"]')).to_contain_text("Stable")
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
