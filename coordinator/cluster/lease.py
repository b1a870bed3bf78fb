"""`NodeLease`: this node's etcd lease, kept alive, and how long it is certainly still valid.

Why a local deadline: etcd deletes a lapsed lease's keys (`nodes/<id>`, `owner/<p>`) on its own, and
another node then claims the partitions. The node itself must stop serving them no later than that,
even when etcd cannot tell it (partitioned, etcd down). Each answered keepalive moves the deadline to
the moment the request was sent plus the TTL etcd reported: before that instant the lease cannot have
expired, after it the node treats its ownership as gone.

Why a fresh lease after an etcd leader change: etcd's leader alone expires leases, by its own clock
of the last refresh it saw. A leader that stalled (a paused process, a disk that blocked its raft
loop) past a lease's expiry may still revoke that lease when it resumes, before it learns that it
was deposed, while the node was refreshing it through the new leader all along (etcd issue 15247:
its guard, from 3.4.28 and 3.5.11, is skipped when the member ticked recently, as it has right after
a pause). So when a refresh is answered in a later raft term than the lease was granted in, the
owner moves its keys to a lease granted in the new term (`on_new_term`); a late revoke of the old
one then deletes nothing.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import NamedTuple

from cohort.coordinator.cluster.etcd import EtcdClient, EtcdUnavailable

log = logging.getLogger("cohort.cluster")

# Refreshes per TTL. A paused process (SIGSTOP, a stalled VM, a long GC-like stall) keeps its lease when
# its first refresh after the pause is answered within the TTL of the last one sent before it: any pause
# up to TTL - TTL/REFRESHES_PER_TTL - one round trip (0.95 x TTL less a round trip). A refresh is one small
# request to the etcd leader, no raft write: 20 per TTL cost etcd little.
REFRESHES_PER_TTL = 20


class SpareLease(NamedTuple):
    lease_id: int
    deadline: float  # time.monotonic() until which it is certainly alive unrefreshed
    term: int  # the raft term it was granted in


class NodeLease:
    def __init__(self, etcd: EtcdClient, ttl_ms: int, *, on_deadline: Callable[[float], None],
                 on_new_term: Callable[[], None] = lambda: None) -> None:
        self.etcd = etcd
        self.ttl_ms = ttl_ms
        self.on_deadline = on_deadline  # the deadline moved (past it, stop serving what the lease holds)
        self.on_new_term = on_new_term  # a refresh was answered in a later raft term than the grant
        self.lease_id = 0
        self.term = 0  # the raft term the lease was granted in
        self._refresh_now = asyncio.Event()
        self._deadline = 0.0
        self._task: asyncio.Task | None = None

    @property
    def deadline(self) -> float:
        """time.monotonic() until which the lease is certainly alive."""
        return self._deadline

    @deadline.setter
    def deadline(self, value: float) -> None:
        self._deadline = value
        self.on_deadline(value)

    @property
    def ttl_s(self) -> int:
        return max(1, math.ceil(self.ttl_ms / 1000))

    def alive(self) -> bool:
        return self.lease_id != 0 and time.monotonic() < self.deadline

    async def grant(self) -> int:
        """A fresh lease (the previous one, if any, is left to expire)."""
        self.use(await self.grant_spare())
        log.info("etcd lease %x granted, TTL %ds", self.lease_id, self.ttl_s)
        return self.lease_id

    async def grant_spare(self) -> "SpareLease":
        """A new lease that is not refreshed until `use` makes it this node's lease."""
        sent = time.monotonic()
        lease_id, ttl = await self.etcd.grant(self.ttl_s)
        return SpareLease(lease_id, sent + ttl, self.etcd.raft_term)

    async def refresh_spare(self, spare: "SpareLease") -> "SpareLease | None":
        """`spare` refreshed once (None: etcd has it expired). A spare is kept alive rather than given up
        for a new one: a move transaction held up on a stalled link may still put keys under it."""
        sent = time.monotonic()
        ttl = await self.etcd.keepalive_anywhere(spare.lease_id, max(0.2, min(1.0, self.ttl_ms / 1000 / 6)))
        return spare._replace(deadline=sent + ttl) if ttl > 0 else None

    def use(self, spare: "SpareLease") -> None:
        """Refresh `spare` from now on instead of the current lease (which is left to expire)."""
        self.lease_id, self.term = spare.lease_id, spare.term
        self.deadline = spare.deadline
        self._refresh_now.set()  # its deadline counts from its grant, not from a refresh

    def start_keepalive(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._keepalive(), name="etcd-lease-keepalive")

    async def stop_keepalive(self) -> None:
        """Stop refreshing the lease (shutdown; tests use it to play a paused node).

        Cancelled until it is done: Python 3.11's `asyncio.wait_for` returns its inner result, swallowing a
        cancel that lands in the loop turn its inner wait ends (a refresh answered, `_refresh_now` set), and
        the loop would then go on refreshing with the stop waiting for it forever."""
        task, self._task = self._task, None
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=0.5)

    async def revoke(self) -> None:
        """Give the lease back now: etcd deletes every key under it at once."""
        await self.stop_keepalive()
        lease_id, self.lease_id = self.lease_id, 0
        self.deadline = 0.0
        if lease_id:
            with contextlib.suppress(EtcdUnavailable):
                await self.etcd.revoke(lease_id)

    async def _keepalive(self) -> None:
        """Refresh every TTL/REFRESHES_PER_TTL; a refresh not answered within a short attempt is sent again
        at once, to every member, so one stalled etcd member costs one attempt."""
        interval = self.ttl_ms / 1000 / REFRESHES_PER_TTL
        attempt_s = max(0.2, min(1.0, self.ttl_ms / 1000 / 6))
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._refresh_now.wait(), interval)
            self._refresh_now.clear()
            lease_id = self.lease_id
            refresh = self.etcd.keepalive_once
            while lease_id and lease_id == self.lease_id:
                sent = time.monotonic()
                try:
                    ttl = await refresh(lease_id, attempt_s)
                except EtcdUnavailable as exc:
                    log.debug("etcd lease keepalive failed, sent again to every member: %s", exc)
                    refresh = self.etcd.keepalive_anywhere
                    await asyncio.sleep(0.05)
                    continue
                if lease_id != self.lease_id:
                    break  # a new lease was granted meanwhile
                if ttl > 0:
                    self.deadline = sent + ttl
                    if self.etcd.raft_term > self.term:
                        self.on_new_term()
                elif await self._confirmed_gone(lease_id):
                    log.warning("etcd lease %x expired: this node's partitions are gone", lease_id)
                    self.lease_id = 0
                    self.deadline = 0.0
                else:
                    refresh = self.etcd.keepalive_anywhere
                    await asyncio.sleep(0.05)
                    continue
                break

    async def _confirmed_gone(self, lease_id: int) -> bool:
        """One member answering a refresh with TTL 0 is asked again (a member that was paused past the
        TTL may answer so until it learns of the new leader): the lease's TTL as etcd has it."""
        try:
            remaining = await self.etcd.time_to_live(lease_id)
        except EtcdUnavailable:
            return False  # unknown: keep refreshing; the local deadline decides meanwhile
        if remaining > 0:
            log.warning("etcd lease %x: a member answered a refresh as expired, etcd has %ds left", lease_id,
                        remaining)
        return remaining <= 0 and lease_id == self.lease_id
