"""What etcd says of a cluster: the etcd members' health, the nodes and their leases, each offsets
partition's owner, epoch, load state and record counts (`cohort cluster status`, the console's cluster page).

A member's own status needs no quorum, so quorum loss is told as such; a node whose lease lapsed is
`cut-off` if its address still takes a connection, else `gone`; the load state is what the owner
publishes at `load/<p>` (its partition lifecycle), "unknown" when the owner published none.
"""
from __future__ import annotations

import asyncio
import time

from cohort.coordinator.cluster import keys
from cohort.coordinator.cluster.etcd import EtcdUnavailable, op_count, prefix_end


async def cluster_status(client) -> dict:
    """What etcd says of the cluster (`cohort cluster status`, the console's cluster page): the etcd
    members' health (needs no quorum), then, when etcd has one, each node's address, state and lease time
    left, and each offsets partition's owner, epoch, load state and record counts."""
    await client.connect()
    try:
        members = await client.member_statuses(min(client.timeout_s, 2.0))
        answering = [m for m in members if not m.error]
        leaders = {m.leader_id for m in answering if m.leader_id}
        majority = len(members) // 2 + 1
        report = {
            "members": [{"endpoint": m.endpoint, "member_id": m.member_id or None,
                         "health": "no answer" if m.error else ("ok" if m.leader_id else "no leader"),
                         "leader": bool(m.member_id) and m.member_id == m.leader_id, "raft_term": m.raft_term,
                         "db_size": m.db_size or None, "db_size_in_use": m.db_size_in_use or None,
                         "db_size_quota": m.db_size_quota or None, "alarms": list(m.alarms),
                         "error": m.error or None} for m in members],
            "alarms": sorted({alarm for m in answering for alarm in m.alarms}),
            "quorum": True, "quorum_detail": None,
        }
        if len(answering) < majority or not leaders:
            # A linearizable read would only wait for its deadline: say why instead.
            report.update(quorum=False, quorum_detail=f"{len(answering)} of {len(members)} members answer, "
                          f"{'no leader' if not leaders else 'leader known'} (a majority is {majority})")
            return report
        try:
            report.update(await _cluster_view(client))
        except EtcdUnavailable as exc:  # the members answered, yet a quorum read did not complete
            report.update(quorum=False, quorum_detail=str(exc))
        return report
    finally:
        await client.close()


async def _cluster_view(client) -> dict:
    nodes, _, _ = await client.range(keys.NODES, prefix_end(keys.NODES))
    seen, _, _ = await client.range(keys.SEEN, prefix_end(keys.SEEN))
    owners, _, revision = await client.range(keys.OWNERS, prefix_end(keys.OWNERS))
    loads, _, _ = await client.range(keys.LOADS, prefix_end(keys.LOADS), revision=revision)
    live = {keys.id_of(kv.key, keys.NODES): kv for kv in nodes}
    lease_left = dict(zip(live, await asyncio.gather(*(_lease_left(client, kv.lease) for kv in live.values()))))
    node_rows = [{"node_id": node_id, "address": kv.value.decode(errors="replace").split("\n", 1)[0], "state": "live",
                  "lease_ttl_s": lease_left[node_id][0], "lease_ttl_exact": lease_left[node_id][1]}
                 for node_id, kv in live.items()]
    for kv in seen:
        node_id = keys.id_of(kv.key, keys.SEEN)
        if node_id is not None and node_id not in live:
            address = kv.value.decode(errors="replace")
            node_rows.append({"node_id": node_id, "address": address, "lease_ttl_s": None, "lease_ttl_exact": False,
                              "state": "cut-off" if await _answers(address) else "gone"})
    node_rows.sort(key=lambda row: row["node_id"])
    owner_of = {keys.id_of(kv.key, keys.OWNERS): kv for kv in owners}
    load_of = {keys.id_of(kv.key, keys.LOADS): kv for kv in loads}
    num_partitions = max([50, *(p + 1 for p in owner_of if p is not None)])
    counts: dict[tuple[bytes, int], int] = {}
    for kind in (b"g/", b"o/"):
        for first in range(0, num_partitions, 100):
            batch = range(first, min(num_partitions, first + 100))
            _, _, responses = await client.txn([], [
                op_count(prefix, revision) for prefix in (kind + b"%d/" % p for p in batch)])
            for p, response in zip(batch, responses):
                counts[(kind, p)] = response.response_range.count
    rows = []
    for p in range(num_partitions):
        kv, load = owner_of.get(p), load_of.get(p)
        rows.append({"partition": p, "owner": int(kv.value) if kv and kv.value.isdigit() else None,
                     "epoch": kv.create_revision if kv else None,
                     "load": _load_state(kv, load),
                     "groups": counts[(b"g/", p)], "offsets": counts[(b"o/", p)]})
    return {"revision": revision, "nodes": node_rows, "partitions": rows}


async def _lease_left(client, lease_id: int, budget_s: float = 1.1, poll_s: float = 0.02) -> tuple[float | None, bool]:
    """(seconds the lease has left, whether to the hundredth); (None, False) without a lease.

    etcd reports whole seconds, cut down. The moment the reported value changes (a second boundary passed
    on a lease nobody refreshes) the exact value is known, so poll up to `budget_s` to see one. A live
    node refreshes every TTL/20, so its value seldom changes: then only etcd's bound is known, at least
    the value reported and less than one second more.
    """
    if not lease_id:
        return None, False
    first = previous = await client.time_to_live(lease_id)
    if first < 0:
        return 0.0, True
    started = time.monotonic()
    while time.monotonic() - started < budget_s:
        await asyncio.sleep(poll_s)
        asked = time.monotonic()
        ttl = await client.time_to_live(lease_id)
        if ttl != previous:
            if ttl < 0:
                return 0.0, True
            # The change happened between the two calls: then it had just under ttl + 1 left.
            changed_at = (asked + time.monotonic()) / 2 - poll_s / 2
            return round(max(0.0, ttl + 1 - (time.monotonic() - changed_at)), 2), True
        previous = ttl
    return float(previous), False


async def _answers(address: str, timeout_s: float = 1.0) -> bool:
    """Whether something accepts connections at a node's advertised address (a node cut off from etcd)."""
    host, _, port = address.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout_s)
    except (OSError, ValueError, asyncio.TimeoutError, TimeoutError):
        return False
    writer.close()
    return True


def _load_state(owner, load) -> str | None:
    """The owner's published load state; None without an owner, "unknown" when the owner published none."""
    if owner is None:
        return None
    if load is None or load.lease != owner.lease:  # a previous owner's key, or a node that does not publish
        return "unknown"
    return load.value.decode(errors="replace")
