"""The console when things go wrong, in a real browser: the server stops and comes back while pages are
open, and the server refuses an action. No page may show stale data as live, and every action ends with
the server's answer on the page.
"""
from __future__ import annotations

import json
import re
import time

import pytest
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata
from playwright.sync_api import expect

from console_http import ConsoleServer, commit, create_topic, report_ends, stable_consumers
from test_console_browser import IMAGES, commit_as_admin, local_time_input

pytestmark = pytest.mark.timeout(240)


def test_pages_say_the_server_is_unreachable_mark_their_data_stale_and_recover_by_themselves(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    try:
        create_topic(server.bootstrap, "payments", 2)
        commit_as_admin(server.bootstrap, {"ledger": {TopicPartition("payments", 0): 40}})
        url = f"http://127.0.0.1:{server.console_port}/"
        group_page = browser.new_page(viewport={"width": 1200, "height": 800})
        group_page.goto(url + "#/group/ledger")  # refreshes only when asked
        expect(group_page.locator("#offsets td.committed")).to_have_text(["40"])
        expect(group_page.locator("#refresh-note")).to_contain_text("refreshes only when asked")
        list_page = browser.new_page(viewport={"width": 1200, "height": 800})
        list_page.goto(url)  # refreshes every 5 s
        expect(list_page.locator("a.group-id")).to_have_text(["ledger"])
        for page in (group_page, list_page):
            expect(page.locator("#connection")).to_be_hidden()

        assert server.stop() == 0
        group_page.click("#refresh-now")
        for page in (group_page, list_page):  # the list notices by itself, at its next refresh
            expect(page.locator("#connection")).to_be_visible(timeout=15_000)
            expect(page.locator("#connection")).to_contain_text(re.compile(r"Server unreachable since \d"))
            expect(page.locator("#connection")).to_contain_text("may be stale")
            expect(page.locator("main#app")).to_have_class(re.compile(r"\bstale\b"))
            expect(page.locator("#status")).to_have_text("stale")
        # what it showed stays, dimmed and labelled stale, never as live
        expect(group_page.locator("#offsets td.committed")).to_have_text(["40"])
        group_page.screenshot(path=str(IMAGES / "console-unreachable.png"))

        server.start()
        commit_as_admin(server.bootstrap, {"ledger": {TopicPartition("payments", 0): 55},
                                           "archiver": {TopicPartition("payments", 1): 3}})
        for page in (group_page, list_page):  # back without a reload: the retry with backoff (at most 30 s)
            expect(page.locator("#connection")).to_be_hidden(timeout=40_000)
            expect(page.locator("main#app")).not_to_have_class(re.compile(r"\bstale\b"))
            expect(page.locator("#status")).to_contain_text("updated")
        expect(group_page.locator("#offsets td.committed")).to_have_text(["55"])
        expect(list_page.locator("a.group-id")).to_have_text(["archiver", "ledger"])
        # and the list goes on refreshing itself
        commit_as_admin(server.bootstrap, {"billing": {TopicPartition("payments", 1): 1}})
        expect(list_page.locator("a.group-id")).to_have_text(["archiver", "billing", "ledger"], timeout=15_000)
    finally:
        assert server.stop() == 0


def test_a_page_opened_while_the_server_is_down_loads_once_it_is_back(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    try:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(f"http://127.0.0.1:{server.console_port}/#/topics")
        expect(page.locator("h1")).to_have_text("Topics")
        assert server.stop() == 0
        page.evaluate("() => { location.hash = '#/cluster'; }")
        expect(page.locator("#connection")).to_contain_text("Server unreachable since")
        server.start()
        expect(page.locator("#connection")).to_be_hidden(timeout=40_000)
        expect(page.locator("#brokers tr.broker")).to_have_count(1)
    finally:
        assert server.stop() == 0


def test_a_refused_action_shows_the_servers_answer_and_a_refusal_known_before_is_said_up_front(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    consumers = []
    try:
        create_topic(server.bootstrap, "payments", 2)
        commit_as_admin(server.bootstrap, {"ledger": {TopicPartition("payments", 0): 10, TopicPartition("payments", 1): 20}})
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(f"http://127.0.0.1:{server.console_port}/#/group/ledger")
        expect(page.locator("#offsets td.committed")).to_have_text(["10", "20"])

        # the group becomes active after the page loaded: the page could not know, the server refuses
        consumers = stable_consumers(server.bootstrap, "payments", "ledger", 1, 2)
        page.check('input[aria-label="select payments-0"]')
        page.click("#delete-offsets")
        dialog = page.locator("dialog#confirm")
        expect(dialog).to_be_visible()
        page.click("#confirm-ok")
        expect(page.locator("#confirm-error")).to_contain_text("The server refused")
        expect(page.locator("#confirm-error")).to_contain_text("GROUP_SUBSCRIBED_TO_TOPIC")
        expect(dialog).to_be_visible()  # never closed as if it had worked
        page.click("#confirm-cancel")

        # once the page knows the group is active, the preview says Kafka's refusal before any click
        page.click("#refresh-now")
        expect(page.locator("main")).to_contain_text("ledger-c0")
        page.check('input[aria-label="select payments-0"]')
        page.click("#delete-offsets")
        expect(page.locator("#confirm-error")).to_contain_text("GROUP_SUBSCRIBED_TO_TOPIC")
        expect(page.locator("#confirm-ok")).to_be_disabled()
        page.click("#confirm-cancel")
        page.click("#preview-delete-group")
        expect(page.locator("#confirm-error")).to_contain_text("NON_EMPTY_GROUP")
        expect(page.locator("#confirm-ok")).to_be_disabled()
        page.click("#confirm-cancel")
        page.select_option("#reset-scenario", "earliest")
        page.click("#preview-offsets-reset")
        expect(page.locator("#confirm-error")).to_contain_text("can only be reset if the group 'ledger' is inactive")
        expect(dialog.locator("td.planned")).to_have_text(["0", "0"])  # old -> new is still shown
        expect(page.locator("#confirm-ok")).to_be_disabled()
        page.click("#confirm-cancel")

        # the API the page uses says the same to a script, and refuses bad input before any Kafka request
        refused = {"scenario": "earliest", "partitions": None, "confirm": "ledger"}
        status, body, _ = server.api("/api/groups/ledger/reset-offsets", method="POST", body=refused)
        assert (status, body["error"]) == (409, "NON_EMPTY_GROUP"), body
        status, body, _ = server.api("/api/groups/ledger/delete", method="POST", body={"confirm": "ledger"})
        assert (status, body["error"]) == (409, "NON_EMPTY_GROUP"), body
        for query in ("scenario=sideways", "scenario=offset&value=ten", "scenario=duration&value=1h",
                      "scenario=earliest&partitions=payments", "scenario=offset&value=-1"):
            status, body, _ = server.api(f"/api/groups/ledger/reset-plan?{query}")
            assert (status, body["error"]) == (400, "BAD_REQUEST"), (query, body)
        status, body, _ = server.api("/api/groups/ledger/delete", method="POST", body={"confirm": "other"})
        assert status == 400 and "confirm" in body["message"]
        many = [{"topic": "payments", "partition": p} for p in range(10_001)]
        status, body, _ = server.api("/api/groups/ledger/delete-offsets", method="POST",
                                     body={"partitions": many, "confirm": "ledger"})
        assert status == 400 and "at most 10000" in body["message"], body
    finally:
        for c in consumers:
            c.close()
        assert server.stop() == 0


def test_an_action_without_an_answer_says_its_outcome_is_not_known_and_the_page_goes_unreachable(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    try:
        create_topic(server.bootstrap, "payments", 2)
        commit_as_admin(server.bootstrap, {"ledger": {TopicPartition("payments", 0): 10}})
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(f"http://127.0.0.1:{server.console_port}/#/group/ledger")
        expect(page.locator("#offsets td.committed")).to_have_text(["10"])
        page.select_option("#reset-scenario", "earliest")
        page.click("#preview-offsets-reset")
        expect(page.locator("dialog#confirm td.planned")).to_have_text(["0"])

        assert server.stop() == 0  # the click reaches no one
        page.click("#confirm-ok")
        expect(page.locator("#confirm-error")).to_contain_text("No answer from the server")
        expect(page.locator("#confirm-error")).to_contain_text("Whether it was done is not known")
        expect(page.locator("#confirm-error")).not_to_contain_text("refused")
        expect(page.locator("#connection")).to_contain_text("Server unreachable since")
        expect(page.locator("main#app")).to_have_class(re.compile(r"\bstale\b"))
        page.click("#confirm-cancel")

        server.start()  # what the server has is shown once it answers: the reset never happened
        expect(page.locator("#connection")).to_be_hidden(timeout=40_000)
        expect(page.locator("#offsets td.committed")).to_have_text(["10"])
    finally:
        assert server.stop() == 0


def test_offsets_are_reset_every_way_kafka_ui_does_with_a_preview_and_an_audit_entry(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    try:
        create_topic(server.bootstrap, "orders", 2)
        p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
        consumers = stable_consumers(server.bootstrap, "orders", "shipping", 1, 2)
        commit(consumers[0], {p0: OffsetAndMetadata(100, "", -1), p1: OffsetAndMetadata(200, "", -1)})
        consumers[0].close()  # a consumer group, now Empty: the resets are admin actions in its journal
        report_ends(server.bootstrap, {("orders", 0): 500, ("orders", 1): 600})
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(f"http://127.0.0.1:{server.console_port}/#/group/shipping")
        dialog = page.locator("dialog#confirm")
        committed = page.locator("#offsets td.committed")
        expect(committed).to_have_text(["100", "200"])

        def reset(scenario: str, value: str | None, planned: list[str], picked: list[str] = ()):
            for label in picked:
                page.check(f'input[aria-label="select {label}"]')
            page.select_option("#reset-scope", "picked" if picked else "all")
            page.select_option("#reset-scenario", scenario)
            if value is not None:
                page.fill("#reset-value", value)
            page.click("#preview-offsets-reset")
            expect(dialog).to_be_visible()
            expect(dialog.locator("td.planned")).to_have_text(planned)
            page.click("#confirm-ok")
            expect(dialog).to_be_hidden()
            expect(page.locator("#notice")).to_contain_text("Reset")

        reset("latest", None, ["500", "600"])
        expect(committed).to_have_text(["500", "600"])
        reset("shift", "-50", ["550"], picked=["orders-1"])
        expect(committed).to_have_text(["500", "550"])
        reset("offset", "9999", ["500", "600"])  # past the end: kept at the latest, with Kafka's warning
        reset("earliest", None, ["0", "0"])
        expect(committed).to_have_text(["0", "0"])
        reset("offset", "42", ["42"], picked=["orders-0"])
        expect(committed).to_have_text(["42", "0"])
        # an hour ago: the first end the source reported since then (docs/lag.md, offsets by time)
        reset("duration", "PT1H", ["600"], picked=["orders-1"])
        expect(committed).to_have_text(["42", "600"])
        # a date and time: the first end reported at or after it
        moment = int(time.time() * 1000)
        while int(time.time() * 1000) <= moment:  # the next report is stamped after that moment
            pass
        report_ends(server.bootstrap, {("orders", 0): 700})
        report_ends(server.bootstrap, {("orders", 0): 800})  # the latest now, not the answer
        reset("datetime", local_time_input(moment), ["700"], picked=["orders-0"])
        expect(committed).to_have_text(["700", "600"])
        page.screenshot(path=str(IMAGES / "console-reset.png"), full_page=True)
        # each reset is an admin entry in the group's journal, with the console as its client
        _, journal, _ = server.api("/api/groups/shipping/rebalances")
        resets = [e for e in journal["entries"] if e["trigger"] == "reset_offsets"]
        assert len(resets) == 7, journal
        assert all("cohort-console/anonymous@" in json.dumps(e) for e in resets), resets

        page.click("#preview-delete-group")
        expect(dialog.locator("tbody tr")).to_have_count(2)
        page.click("#confirm-ok")
        expect(page.locator("#notice")).to_contain_text("Deleted the group shipping")
        expect(page).to_have_url(re.compile(r"#/$"))
        expect(page.locator("#group-list")).to_contain_text("No groups yet.")
    finally:
        assert server.stop() == 0


def test_the_list_keeps_focus_and_its_view_in_the_url_fits_a_phone_and_follows_dark_mode(tmp_path, browser):
    server = ConsoleServer(tmp_path / "data").start()
    try:
        create_topic(server.bootstrap, "payments", 2)
        p0 = TopicPartition("payments", 0)
        commit_as_admin(server.bootstrap, {"ledger": {p0: 400}, "fraud-check": {p0: 500}, "archiver": {p0: 0}})
        report_ends(server.bootstrap, {("payments", 0): 500})
        url = f"http://127.0.0.1:{server.console_port}/"
        page = browser.new_page(viewport={"width": 1200, "height": 700})
        page.goto(url)
        ids = page.locator("a.group-id")
        expect(ids).to_have_text(["archiver", "fraud-check", "ledger"])
        page.click('a.sort[data-sort="lag"]')
        expect(ids).to_have_text(["archiver", "ledger", "fraud-check"])
        page.select_option("#filter-state", "Empty")
        expect(page).to_have_url(re.compile(r"#/\?.*sort=lag"))
        shared = page.url
        assert "order=desc" in shared and "state=Empty" in shared

        # the keyboard stays where it was while the list refreshes itself
        page.select_option("#refresh-every", "2000")
        page.focus('a.sort[data-sort="members"]')
        for _ in range(2):  # two refreshes after the focus moved, each redrawing the list
            refreshed = page.locator("#status").inner_text()
            expect(page.locator("#status")).not_to_have_text(refreshed, timeout=10_000)
            assert page.evaluate("() => document.activeElement.getAttribute('data-sort')") == "members"

        # the shared URL opens the same view
        other = browser.new_page(viewport={"width": 1200, "height": 700})
        other.goto(shared)
        expect(other.locator("a.group-id")).to_have_text(["archiver", "ledger", "fraud-check"])
        expect(other.locator("#filter-state")).to_have_value("Empty")
        expect(other.locator('a.sort[data-sort="lag"]')).to_have_class(re.compile("active"))

        # 390 px wide: nothing but the tables' own boxes scrolls sideways
        phone = browser.new_page(viewport={"width": 390, "height": 844})
        for path in ("", "#/group/ledger", "#/topics", "#/topic/payments", "#/cluster"):
            phone.goto(url + path)
            expect(phone.locator("#status")).to_contain_text("updated")
            assert phone.evaluate("() => document.documentElement.scrollWidth") <= 390, path
        phone.goto(url + "#/group/ledger")
        expect(phone.locator("#offsets td.committed")).to_have_text(["400"])
        phone.screenshot(path=str(IMAGES / "console-phone.png"), full_page=True)

        # dark mode follows the system's choice
        dark = browser.new_page(viewport={"width": 1200, "height": 700}, color_scheme="dark")
        dark.goto(url)
        expect(dark.locator("a.group-id")).to_have_count(3)
        background = dark.evaluate("() => getComputedStyle(document.body).backgroundColor")
        light = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert background != light and background == "rgb(18, 21, 28)", background
        dark.screenshot(path=str(IMAGES / "console-dark.png"), full_page=True)
    finally:
        assert server.stop() == 0
