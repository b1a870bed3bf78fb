"""A node's move of its keys to a lease of a new etcd raft term, with one of its move transactions held
up on a stalled link and delivered after the node has moved on: that late transaction must not put
`nodes/<id>` or an `owner/<p>` back under a lease the node no longer refreshes (its keys would vanish
when that lease lapses). A real 3-member etcd; the node's transactions to one member go through a
`LinkProxy`."""
from __future__ import annotations

import asyncio
import base64
import math
import time

import pytest
from link_proxy import LinkProxy

from cohort.coordinator.cluster import keys
from cohort.coordinator.cluster.etcd import _channel

from test_ownership import Member, eventually

pytestmark = pytest.mark.timeout(120)
TTL_MS = 6000


def leases(etcd, prefix: bytes) -> dict[bytes, int]:
    """Every key under `prefix` and the lease holding it, as etcd has them."""
    member = next(m for m in etcd.members if m.running())
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    answer = member.post("/v3/kv/range", {"key": base64.b64encode(prefix).decode(),
                                          "range_end": base64.b64encode(end).decode()})
    return {base64.b64decode(kv["key"]): int(kv.get("lease", 0)) for kv in answer.get("kvs", [])}


async def test_a_held_lease_move_transaction_delivered_late_puts_nothing_back_under_an_old_lease(etcd):
    stalled = etcd.endpoints[0]
    proxy = LinkProxy(etcd.members[0].client_port).start()
    node = Member(etcd.endpoints, 1, TTL_MS)
    client, ownership = node.client, node.ownership
    client.timeout_s = 1.0
    # Transactions and refreshes to the first member go through the proxy, and go there first.
    client._members[stalled] = _channel([proxy.endpoint])
    client._leader, client._leader_checked = stalled, math.inf
    try:
        await node.start()
        await eventually(lambda: len(node.events.serving) == 50, 30, "the node serves every partition")
        first_lease = ownership.lease.lease_id

        # The first move's first transaction is held on the stalled link (the refreshes are stopped so
        # that it is the first call to go there); the reconcile moves with the same spare elsewhere.
        await ownership.lease.stop_keepalive()
        proxy.hold()
        ownership._new_etcd_term()
        await eventually(lambda: client._failures.get(stalled, 0) >= 1, 20, "the move's transaction times out")
        ownership.lease.start_keepalive()
        await eventually(lambda: ownership.stats.lease_moves == 1, 20, "the keys moved to a spare lease")
        spare = ownership.lease.lease_id
        # Another raft term: the keys move again, and the spare is no longer refreshed.
        ownership._new_etcd_term()
        await eventually(lambda: ownership.stats.lease_moves == 2, 20, "the keys moved to a third lease")
        current = ownership.lease.lease_id
        assert len({first_lease, spare, current}) == 3
        moved_at = time.monotonic()

        proxy.heal()  # the first move's held transaction reaches etcd now
        node_key = keys.node_key(1)
        # Until well past the spare's TTL (it lapses unrefreshed): every key stays under the lease in force.
        while time.monotonic() - moved_at < TTL_MS / 1000 + 2:
            held = {**leases(etcd, keys.NODES), **leases(etcd, keys.OWNERS)}
            assert held.get(node_key) == current, (held.get(node_key), spare, current)
            assert len(held) == 51 and set(held.values()) == {current}, held
            await asyncio.sleep(0.2)
        assert len(node.events.serving) == 50 and ownership.stats.losses == 0
    finally:
        proxy.heal()
        await node.stop()
        proxy.close()
