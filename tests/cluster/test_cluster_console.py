"""The web console of a cluster node lists the groups of every node (it is a Kafka client of the cluster), and
its cluster page shows the nodes, their leases and the partitions' owners as etcd and the nodes say."""
from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from pathlib import Path
import urllib.error
import urllib.request

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import NoError
from kafka.structs import OffsetAndMetadata

from bounded_wait import wait_until
from console_browser import browser  # noqa: F401 - the headless Chromium fixture
from cohort_process import CohortServer, free_port, metric_value

pytestmark = pytest.mark.timeout(180)


def owned(node: CohortServer) -> float:
    try:
        return metric_value(node.scrape(), "cohort_cluster_owned_partitions")
    except (OSError, AssertionError):
        return 0


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=15) as response:
        return json.loads(response.read())


def test_each_nodes_console_shows_the_groups_of_the_whole_cluster(etcd, tmp_path):
    consoles = [free_port() for _ in range(2)]
    nodes = [CohortServer(tmp_path / f"node{i}", "--cluster", etcd.url, "--node-id", str(i + 1),
                          "--cluster.lease.ttl.ms", "3000", "--console.listen", f"127.0.0.1:{consoles[i]}").start()
             for i in range(2)]
    try:
        wait_until(lambda: sum(owned(n) for n in nodes) == 50 and all(owned(n) > 0 for n in nodes), 60,
                   "both nodes own their share of the partitions")
        groups = [f"team-{i}" for i in range(8)]  # hashed over the partitions, so over both nodes
        admin = KafkaAdminClient(bootstrap_servers=nodes[0].bootstrap, request_timeout_ms=15000)
        try:
            deadline = time.monotonic() + 60
            for i, group in enumerate(groups):
                while True:  # ownership may still be moving to the second node: retry as a client would
                    try:
                        # (kafka-python answers a partition's error, e.g. NOT_COORDINATOR, instead of raising it)
                        errors = admin.alter_group_offsets(group, {TopicPartition("work", 0):
                                                                   OffsetAndMetadata(i, "", -1)})
                        if all(error is NoError for error in errors.values()):
                            break
                        failure: Exception = AssertionError(f"committing {group}: {errors}")
                    except Exception as exc:
                        failure = exc
                    if time.monotonic() > deadline:
                        raise failure
                    time.sleep(0.2)
        finally:
            admin.close()
        coordinators = set()
        last: dict[int, list[str]] = {}

        def lists_every_group(port: int) -> bool:
            last[port] = [g["group_id"] for g in get(f"http://127.0.0.1:{port}/api/groups")["groups"]]
            return last[port] == groups

        for port in consoles:
            try:
                wait_until(lambda: lists_every_group(port), 60, f"the console on {port} to list every group")
            except AssertionError:
                each_node = {}
                for node in nodes:  # what each node's ListGroups says, to tell the console from the server
                    direct = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=15000)
                    try:
                        each_node[node.port] = sorted(g["group_id"] for g in direct.list_groups())
                    finally:
                        direct.close()
                raise AssertionError(f"console {port} listed {last[port]}; the nodes list {each_node}") from None
        for i, group in enumerate(groups):
            detail = get(f"http://127.0.0.1:{consoles[1]}/api/groups/{group}")
            assert [o["offset"] for o in detail["offsets"]] == [i]
            coordinators.add(detail["coordinator"]["node_id"])
        assert coordinators == {1, 2}  # the groups live on both nodes
        try:  # etcd keeps the latest offsets only: the console says so instead of a history
            urllib.request.urlopen(f"http://127.0.0.1:{consoles[0]}/api/groups/team-0/history", timeout=15)
            raise AssertionError("a cluster node answered an offset history")
        except urllib.error.HTTPError as exc:
            assert exc.code == 400 and "cluster mode" in json.loads(exc.read())["message"]
    finally:
        for node in nodes:
            node.stop()


IMAGES = Path(os.environ.get("COHORT_SCREENSHOTS") or tempfile.mkdtemp(prefix="cohort-console-screenshots-"))


def test_the_cluster_page_shows_a_node_going_away_after_a_kill(etcd, tmp_path, browser):  # noqa: F811
    from playwright.sync_api import expect

    console = free_port()
    nodes = [CohortServer(tmp_path / f"node{i}", "--cluster", etcd.url, "--node-id", str(i + 1),
                          "--cluster.lease.ttl.ms", "3000",
                          *(("--console.listen", f"127.0.0.1:{console}") if i == 0 else ())).start()
             for i in range(3)]
    try:
        wait_until(lambda: sum(owned(n) for n in nodes) == 50 and all(owned(n) > 0 for n in nodes), 90,
                   "the three nodes own their share of the partitions")
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(f"http://127.0.0.1:{console}/#/cluster")
        expect(page.locator("h1")).to_have_text("Cluster")
        expect(page.locator("#brokers tr.broker")).to_have_count(3, timeout=30_000)
        expect(page.locator("#etcd tr.lease")).to_have_count(3)
        expect(page.locator("#etcd tr[data-partition] .load-loaded")).to_have_count(50, timeout=30_000)
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "console-cluster.png"), full_page=True)

        nodes[2].process.send_signal(signal.SIGKILL)  # no goodbye: its lease must run out
        nodes[2].wait(30)
        # the page refreshes itself: the node leaves etcd's list and the brokers; its partitions move
        expect(page.locator('#etcd tr.lease[data-node="3"]')).to_have_count(0, timeout=60_000)
        expect(page.locator("#brokers tr.broker")).to_have_count(2, timeout=30_000)
        expect(page.locator('#brokers tr.broker[data-node="3"]')).to_have_count(0)
        expect(page.locator("#etcd tr[data-partition] .load-loaded")).to_have_count(50, timeout=60_000)
        owners = page.locator("#etcd tr[data-partition] td:nth-child(2)").all_inner_texts()
        assert set(owners) == {"1", "2"}
    finally:
        for node in nodes[:2]:
            node.stop()
        if nodes[2].process.poll() is None:
            nodes[2].process.kill()
