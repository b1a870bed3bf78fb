"""A node's own late writes are fenced: a transaction held on a stalled link to one etcd member (its
bytes delivered on heal, in order) can never land on top of a newer, acknowledged commit.

The stalled link is a `LinkProxy` between the store and every etcd member; one of them holds its
bytes while commits go on through the others. What etcd's revision history shows for the committed
key afterwards must never go down, and must end at the last acknowledged offset.
"""
from __future__ import annotations

import asyncio
import time

import pytest
from link_proxy import LinkProxy
from test_store import claim, commit, load_all

from cohort.coordinator.cluster import keys, values
from cohort.coordinator.cluster.etcd import EtcdClient
from cohort.coordinator.cluster.store import EtcdStore
from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.records.types import decode_record

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def proxies(etcd):
    started = [LinkProxy(member.client_port).start() for member in etcd.members]
    yield started
    for proxy in started:
        proxy.heal()
        proxy.close()


async def offset_history(etcd, key: bytes, since_revision: int) -> list[int]:
    """Every value etcd's history holds for `key` from `since_revision` on, oldest first (as offsets)."""
    reader = EtcdClient(etcd.endpoints)
    await reader.connect()
    try:
        current, _, _ = await reader.range(key)
        last = current[0].mod_revision
        seen: list[int] = []

        async def collect() -> None:
            async for events in reader.watch_prefix(key, since_revision):
                for kind, kv in events:
                    if kv.key == key and kind == 0:
                        seen.append(decode_record(keys.record_key(kv.key), values.from_etcd(kv.value)).offset)
                    if kv.mod_revision >= last:
                        return
        await asyncio.wait_for(collect(), 30)
        return seen
    finally:
        await reader.close()


async def test_a_commit_held_on_a_stalled_link_never_lands_on_top_of_a_newer_acknowledged_one(etcd, proxies):
    client = EtcdClient([p.endpoint for p in proxies], timeout_s=0.5)
    await client.connect()
    try:
        epoch, _ = await claim(client, 3, node_id=1)
        store = EtcdStore(client)
        await load_all(store, 3, epoch)
        acknowledged = 0
        offset = 0
        for cut in range(4):
            stalled = proxies[cut % len(proxies)]
            stalled.hold()
            # While one member's link holds its bytes, the client goes on committing newer offsets
            # (as a consumer does after a retriable error); some transactions sit in the held link.
            until = time.monotonic() + 2.5
            while time.monotonic() < until:
                offset += 1
                try:
                    await asyncio.wait_for(store.append(3, [commit("late", 0, offset)]), 10)
                    acknowledged = offset
                except StorageError as exc:
                    assert exc.error_code.retriable, exc
            stalled.heal()
            # the held bytes reach etcd now; give them time to be applied (or refused)
            await asyncio.sleep(1.0)
            await asyncio.wait_for(store.append(3, [commit("late", 0, offset + 1)]), 10)
            offset += 1
            acknowledged = offset
        await asyncio.sleep(1.0)
        history = await offset_history(etcd, keys.etcd_key(3, commit("late", 0, 0)[0]), epoch)
        assert acknowledged > 10
        went_down = [(a, b) for a, b in zip(history, history[1:]) if b < a]
        assert not went_down, f"acknowledged offsets rolled back in etcd's history: {went_down}"
        assert history[-1] == acknowledged
        assert await load_all(EtcdStore(client), 3, epoch) == dict([commit("late", 0, acknowledged)])
    finally:
        await client.close()
