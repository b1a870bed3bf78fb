"""GroupOverview: one bounded page of the groups this node coordinates, each summarized from memory.

The console's group list once cost a DescribeGroups and a GroupReport per group, each a round trip
through the event loop that also serves every Kafka client. A page answers the same from memory in one
request, and its cost is bounded: at most MAX_PAGE_GROUPS groups, at most PAGE_OFFSET_BUDGET committed
offsets read (a page of huge groups ends early), at most PAGE_SCAN_BUDGET ids looked at for a search
that matches few, and at most PAGE_TIME_BUDGET_S of the loop's time (a page holds up the heartbeats
waiting behind it no longer than that). The caller pages on with `next_after` while `more` is true.
"""
from __future__ import annotations

import bisect
import time

MAX_PAGE_GROUPS = 500
PAGE_OFFSET_BUDGET = 20_000
PAGE_SCAN_BUDGET = 20_000
PAGE_TIME_BUDGET_S = 0.002
# The sorted id list is rebuilt for each first page (a new listing), and for later pages once this old.
SORTED_IDS_MAX_AGE_S = 5.0


class GroupOverview:
    """Pages of `GroupReports.group_summary` rows in group id order."""

    __slots__ = ("_groups", "_partition_states", "_sorted", "_sorted_at")

    def __init__(self, reports, partition_states) -> None:
        """`reports`: the coordinator's `GroupReports`; `partition_states()`: each owned partition's load state."""
        self._groups = reports
        self._partition_states = partition_states
        self._sorted: list[str] = []
        self._sorted_at = float("-inf")

    def _ids(self, first_page: bool) -> list[str]:
        now = time.monotonic()
        if first_page or now - self._sorted_at > SORTED_IDS_MAX_AGE_S:
            self._sorted = sorted(self._groups.served_group_ids())
            self._sorted_at = now
        return self._sorted

    def page(self, after: str, limit: int, search: str | None) -> dict:
        limit = max(1, min(limit, MAX_PAGE_GROUPS))
        needle = search.lower() if search else None
        ids = self._ids(not after)
        start = bisect.bisect_right(ids, after) if after else 0
        rows: list[dict] = []
        offsets_read = scanned = 0
        position = start
        until = time.perf_counter() + PAGE_TIME_BUDGET_S
        while position < len(ids) and len(rows) < limit and offsets_read < PAGE_OFFSET_BUDGET \
                and scanned < PAGE_SCAN_BUDGET and (not rows or time.perf_counter() < until):
            group_id = ids[position]
            position += 1
            scanned += 1
            if needle is not None and needle not in group_id.lower():
                continue
            row = self._groups.group_summary(group_id)
            if row is not None:
                rows.append(row)
                offsets_read += row["offsets"]
        return {"groups": rows, "next_after": ids[position - 1] if position > start else after,
                "more": position < len(ids), "partitions": self._partition_states()}
