"""`NodeLease` against a real 3-member etcd: its keepalive stops when the node stops, whatever it was doing."""
from __future__ import annotations

import asyncio

from bounded_wait import wait_until_async

from cohort.coordinator.cluster.etcd import EtcdClient
from cohort.coordinator.cluster.lease import NodeLease


async def test_the_keepalive_stops_when_asked_in_the_turn_a_refresh_is_due(etcd):
    client = EtcdClient(etcd.endpoints)
    await client.connect()
    lease = NodeLease(client, 6000, on_deadline=lambda deadline: None)
    stopping = asyncio.get_running_loop().create_future()
    stopping.set_result(None)
    try:
        await lease.grant()
        granted_until = lease.deadline
        lease.start_keepalive()
        # A refresh was answered: the keepalive waits for the next one (`_refresh_now` or its interval).
        await wait_until_async(lambda: lease.deadline > granted_until, 10, "the lease refreshed")
        # A refresh is asked for in the very turn the node stops (a lease move does that): the wait ends as
        # the cancel lands, which Python 3.11's `wait_for` answers by returning rather than being cancelled.
        lease._refresh_now.set()
        stopping = asyncio.ensure_future(lease.stop_keepalive())
        await asyncio.wait([stopping], timeout=5)  # (not wait_for: its own cancel of a hung stop would end it)
        assert stopping.done(), "the keepalive went on: the stop waits for it forever"
        refreshed_until = lease.deadline
        await asyncio.sleep(lease.ttl_ms / 1000 / 10)  # past two refresh intervals
        assert lease.deadline == refreshed_until  # nothing refreshes it any more
    finally:
        if not stopping.done():
            stopping.cancel()
        await lease.revoke()
        await client.close()
