"""The group list's data: every broker's GroupOverview pages, taken once and shared for a moment.

However many tabs refresh the list, and however they search, filter, sort or page it, the coordinators
are asked at most once per SNAPSHOT_MAX_AGE_S per signed-in user (concurrent requests wait for the same
one), with a few bounded GroupOverview pages per broker instead of two requests per group.
"""
from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from cohort.client.admin import Admin
from cohort.client.errors import KafkaConnectionError, RequestTimedOut

# The list page refreshes every 5 s: a snapshot of that age is what it would show anyway.
SNAPSHOT_MAX_AGE_S = 5.0
# Signed-in users whose last snapshot is kept (the rest take a fresh one).
KEPT_USERS = 64


@dataclass(slots=True)
class GroupSnapshot:
    """Every group's summary row (by id, from its coordinator) and each broker's partitions' load states."""

    taken_ms: int
    groups: dict[str, dict] = field(default_factory=dict)
    partitions: dict[int | None, dict[int, str]] = field(default_factory=dict)  # node id -> partition -> state
    unreachable: dict[int | None, str] = field(default_factory=dict)  # node id -> why it did not answer

    def consumers_of(self, topic: str) -> list[dict]:
        """The groups with committed offsets on `topic`: id, state, members and their lag on it."""
        out = []
        for row in self.groups.values():
            for t in row["topics"]:
                if t["topic"] == topic:
                    out.append({"group_id": row["group_id"], "state": row["state"], "members": row["members"],
                                "partitions": t["partitions"], "lag": t["lag"]})
        return sorted(out, key=lambda r: r["group_id"])


async def take_snapshot(admin: Admin) -> GroupSnapshot:
    """Every broker's pages, brokers in parallel; a broker that cannot answer is named in `unreachable`."""
    snapshot = GroupSnapshot(int(time.time() * 1000))
    node_ids: list[int | None] = list(await admin.broker_ids()) or [None]

    async def pages_of(node_id: int | None) -> None:
        try:
            async for page in admin.group_overview_pages(node_id):
                for row in page["groups"]:
                    snapshot.groups[row["group_id"]] = row
                snapshot.partitions[node_id] = {int(p): state for p, state in page["partitions"].items()}
        except (KafkaConnectionError, RequestTimedOut) as exc:
            if len(node_ids) == 1:
                raise
            snapshot.unreachable[node_id] = str(exc)

    await asyncio.gather(*(pages_of(n) for n in node_ids))
    snapshot.groups = dict(sorted(snapshot.groups.items()))
    return snapshot


class Snapshots:
    """The latest snapshot per `Admin` (one per signed-in user), reused while fresh, taken once when not."""

    def __init__(self, max_age_s: float = SNAPSHOT_MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        # keyed by the client object itself (never its id(): a new client may reuse a closed one's)
        self._latest: OrderedDict[Admin, tuple[float, asyncio.Future]] = OrderedDict()

    async def of(self, admin: Admin) -> GroupSnapshot:
        key = admin
        now = time.monotonic()
        known = self._latest.get(key)
        if known is not None:
            taken_at, future = known
            if not future.done() or (now - taken_at <= self.max_age_s and future.exception() is None):
                self._latest.move_to_end(key)
                return await asyncio.shield(future)
        future = asyncio.ensure_future(take_snapshot(admin))
        self._latest[key] = (now, future)
        self._latest.move_to_end(key)
        while len(self._latest) > KEPT_USERS:
            self._latest.popitem(last=False)
        return await asyncio.shield(future)
