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


async def test_late_writes_of_creates_updates_and_deletes_over_two_partitions_never_land(etcd, proxies):
    """Rounds of two partitions sharing transactions, each round a create, an update or a delete: after
    every held transaction reached etcd, each partition holds exactly what was acknowledged (a late
    transaction landing would resurrect a deleted key, roll an update back or add a refused create)."""
    client = EtcdClient([p.endpoint for p in proxies], timeout_s=0.5)
    await client.connect()
    try:
        epochs = {p: (await claim(client, p, node_id=1))[0] for p in (3, 4)}
        store = EtcdStore(client)
        for p, epoch in epochs.items():
            await load_all(store, p, epoch)
        acknowledged: dict[int, dict[bytes, bytes]] = {p: {} for p in epochs}
        created: dict[int, list[bytes]] = {p: [] for p in epochs}
        step = 0

        async def writer(p: int, until: float) -> None:
            nonlocal step
            while time.monotonic() < until:
                step += 1
                creating = step % 3 == 0
                if creating:
                    record = commit(f"new-{step}", p, step)
                elif step % 3 == 1 or not created[p]:
                    record = commit("hot", p, step)
                else:
                    record = (created[p][0], None)
                try:
                    await asyncio.wait_for(store.append(p, [record]), 10)
                except StorageError as exc:
                    assert exc.error_code.retriable, exc
                    if p not in store._partitions:  # given up: load it again, as the ownership does
                        await store.release(p)
                        assert await load_all(store, p, epochs[p]) == acknowledged[p]
                    continue
                key, value = record
                if value is None:
                    del acknowledged[p][key]
                    created[p].remove(key)
                else:
                    acknowledged[p][key] = value
                    if creating:
                        created[p].append(key)

        for cut in range(4):
            stalled = proxies[cut % len(proxies)]
            stalled.hold()
            until = time.monotonic() + 2.5
            await asyncio.gather(*(writer(p, until) for p in epochs))
            stalled.heal()
            await asyncio.sleep(1.0)  # the held bytes reach etcd now: applied or refused
        assert sum(map(len, acknowledged.values())) > 2 and step > 30
        assert store.stats.etcd_errors > 0, "no transaction was held"
        for p, epoch in epochs.items():
            assert await load_all(EtcdStore(client), p, epoch) == acknowledged[p], f"partition {p}"
    finally:
        await client.close()
