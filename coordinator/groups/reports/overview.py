"""GroupOverview: one bounded page of the groups this node coordinates, each summarized from memory.

The console's group list once cost a DescribeGroups and a GroupReport per group, each a round trip
through the event loop that also serves every Kafka client. A page answers the same from memory in one
request, and its whole cost is bounded: the ids come from an index kept up to date as groups appear
(`GroupIdIndex`, never rebuilt for a page), and a page reads at most MAX_PAGE_GROUPS groups, at most
PAGE_OFFSET_BUDGET committed offsets, at most PAGE_SCAN_BUDGET ids, and takes at most PAGE_TIME_BUDGET_S
of the loop's time (a page holds up the heartbeats waiting behind it no longer than that).

Pages follow the index's order: a keyed hash of each id (a secret of this process), so the order tells
nothing about the ids. The caller pages on with the opaque `next_after` while `more` is true; it is the
hash where the page stopped, enciphered (`PageCursor`), so it names no group, not even one the asker may
not describe and that the page skipped. Rows are only the groups `group_visible` admits, each summarized
over the topics `topic_visible` admits (offsets, health and lag alike).
"""
from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable

from sortedcontainers import SortedList

MAX_PAGE_GROUPS = 500
PAGE_OFFSET_BUDGET = 20_000
PAGE_SCAN_BUDGET = 20_000
PAGE_TIME_BUDGET_S = 0.002
# The index drops ids no longer served when a page meets them, and is rebuilt once it holds this many times
# the ids the node serves (plus some slack): stale ids never cost more than a bounded share of a page.
INDEX_STALE_FACTOR = 2
INDEX_STALE_SLACK = 1_000

Visible = Callable[[str], bool] | None


class PageCursor:
    """`next_after` as an opaque token: a 64-bit position enciphered by a keyed 4-round Feistel permutation
    (blake2b rounds), so a token reveals neither an id nor where in the order it points."""

    __slots__ = ("_key",)
    _ROUNDS = 4

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _round(self, i: int, half: int) -> int:
        digest = hashlib.blake2b(half.to_bytes(4, "big") + bytes((i,)), key=self._key, digest_size=4).digest()
        return int.from_bytes(digest, "big")

    def encode(self, position: int) -> str:
        left, right = position >> 32, position & 0xFFFF_FFFF
        for i in range(self._ROUNDS):
            left, right = right, left ^ self._round(i, right)
        return format(left << 32 | right, "016x")

    def decode(self, token: str) -> int:
        """The position of a token this process made; ValueError for anything else."""
        if len(token) != 16:
            raise ValueError("not a GroupOverview cursor")
        value = int(token, 16)
        left, right = value >> 32, value & 0xFFFF_FFFF
        for i in reversed(range(self._ROUNDS)):
            left, right = right ^ self._round(i, left), left
        return left << 32 | right


class GroupIdIndex:
    """Every group id the node has seen (classic, KIP-848, offsets only), in keyed-hash order; an id is
    added when its group appears (O(log n)) and dropped when a page finds it no longer served."""

    __slots__ = ("_key", "_entries", "_hashes")

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._entries = SortedList()  # (hash, id)
        self._hashes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._hashes)

    def hash_of(self, group_id: str) -> int:
        data = group_id.encode("utf-8", "surrogatepass")
        return int.from_bytes(hashlib.blake2b(data, key=self._key, digest_size=8).digest(), "big")

    def add(self, group_id: str) -> None:
        if group_id not in self._hashes:
            h = self._hashes[group_id] = self.hash_of(group_id)
            self._entries.add((h, group_id))

    def discard(self, group_id: str) -> None:
        h = self._hashes.pop(group_id, None)
        if h is not None:
            self._entries.discard((h, group_id))

    def replace(self, group_ids) -> None:
        """Hold exactly `group_ids` (a rebuild once stale ids pile up)."""
        self._hashes = {g: self.hash_of(g) for g in group_ids}
        self._entries = SortedList((h, g) for g, h in self._hashes.items())

    def after(self, position: int | None):
        """(hash, id) pairs past `position` (None: from the start), lazily."""
        start = 0 if position is None else self._entries.bisect_left((position + 1,))
        return self._entries.islice(start)


class GroupOverview:
    """Pages of `GroupReports.group_summary` rows over the node's `GroupIdIndex`."""

    __slots__ = ("_groups", "_partition_states", "_index", "_cursor")

    def __init__(self, reports, partition_states) -> None:
        """`reports`: the coordinator's `GroupReports` (it tells the index about every new group id);
        `partition_states()`: each owned partition's load state."""
        self._groups = reports
        self._partition_states = partition_states
        self._index = GroupIdIndex(secrets.token_bytes(16))
        self._cursor = PageCursor(secrets.token_bytes(16))
        reports.watch_new_groups(self._index.add)
        for group_id in reports.known_group_ids():
            self._index.add(group_id)

    def page(self, after: str, limit: int, search: str | None, group_visible: Visible = None,
             topic_visible: Visible = None) -> dict:
        """One page; ValueError when `after` is not a cursor this node made."""
        position = self._cursor.decode(after) if after else None
        self._drop_stale_ids()
        limit = max(1, min(limit, MAX_PAGE_GROUPS))
        needle = search.lower() if search else None
        rows: list[dict] = []
        offsets_read = scanned = 0
        gone: list[str] = []
        more = False
        until = time.perf_counter() + PAGE_TIME_BUDGET_S
        for h, group_id in self._index.after(position):
            if len(rows) >= limit or offsets_read >= PAGE_OFFSET_BUDGET or scanned >= PAGE_SCAN_BUDGET \
                    or (scanned and time.perf_counter() >= until):
                more = True
                break
            scanned += 1
            position = h
            if needle is not None and needle not in group_id.lower():
                continue
            if group_visible is not None and not group_visible(group_id):
                continue
            row = self._groups.group_summary(group_id, topic_visible)
            if row is None:
                if not self._groups.is_known_group(group_id):
                    gone.append(group_id)
                continue
            rows.append(row)
            offsets_read += row["offsets"]
        for group_id in gone:
            self._index.discard(group_id)
        return {"groups": rows, "next_after": "" if position is None else self._cursor.encode(position),
                "more": more, "partitions": self._partition_states()}

    def _drop_stale_ids(self) -> None:
        served = self._groups.known_group_count()
        if len(self._index) > INDEX_STALE_FACTOR * served + INDEX_STALE_SLACK:
            self._index.replace(self._groups.known_group_ids())


# Principals whose page rate is remembered at once (the oldest forgotten first).
RATE_PRINCIPALS_KEPT = 10_000
# A page that would wait longer than this for its principal's rate is refused instead.
RATE_MAX_WAIT_S = 1.0


class PageRate:
    """Pages per second per principal (GCRA: a burst of one second's pages, then one page each 1/rate s): how
    long a principal's next page must wait, or None when that is more than RATE_MAX_WAIT_S (refuse it)."""

    __slots__ = ("per_second", "_due")

    def __init__(self, per_second: int) -> None:
        self.per_second = per_second
        self._due: dict[str, float] = {}  # principal -> its theoretical arrival time (monotonic s)

    def wait_for(self, principal: str, now: float) -> float | None:
        interval = 1.0 / self.per_second
        due = max(self._due.pop(principal, now), now)
        wait = max(0.0, due - now - (1.0 - interval))
        if wait > RATE_MAX_WAIT_S:
            self._due[principal] = due
            return None
        self._due[principal] = due + interval
        if len(self._due) > RATE_PRINCIPALS_KEPT:
            del self._due[next(iter(self._due))]
        return wait
