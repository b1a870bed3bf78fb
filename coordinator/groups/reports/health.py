"""Group health by Burrow's evaluation rules: a sliding window of commits per partition, judged with lag.

For each partition a group has an offset for, the window keeps its last `window_commits` commits (Burrow's
`intervals`), each with its offset, its commit time and the partition's lag when it was seen (the reported
end offset then minus the offset; `topics.TopicRegistry.reported_end`). `HealthMonitor.sample` adds a
commit it has not seen yet; one made within `min_distance_ms` of when the window's newest entry began
replaces that entry (Burrow's `min-distance`: entries begin at least that far apart). The coordinator samples every group in the background (and on every question).

A partition is judged as Burrow judges it, the first rule that holds deciding:

* **OK** when its lag is 0 now or was 0 at any commit in the window (it caught up), or its window is empty;
* **REWIND** when an offset in the window is lower than the one before it (an admin reset journaled in
  between starts the group's windows over instead);
* **STOP** when the time since its last commit is longer than the window's span (first to last commit):
  the consumer stopped committing;
* **STALL** when every commit in the window has the same offset: the consumer commits without moving;
* **WARN** when the offset moves but the lag never went down from one commit to the next: it falls behind;
* **OK** otherwise.

Without a reported end the lag is unknown (None, never 0): Burrow counts an unknown end as lag 0, so such a
partition is OK, except that a rewind (which needs no end) is still REWIND. The group's status is the
worst of its partitions, with STOP, STALL and REWIND counted as **ERR** (Burrow's group statuses: OK,
WARN, ERR). Gauge values are Burrow's: OK 1, WARN 2, ERR 3, STOP 4, STALL 5, REWIND 6. Per member it
reports how long ago it last heartbeated (from its session deadline) and last committed.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from cohort.coordinator.groups.reports.lag import partition_lag, total_lag

PARTITION_STATUSES = ("OK", "WARN", "STOP", "STALL", "REWIND")
GROUP_STATUSES = ("OK", "WARN", "ERR")
# Burrow's StatusConstant numbers (its exporters' gauge values): 0 is NOTFOUND, never exported here.
STATUS_VALUES = {"OK": 1, "WARN": 2, "ERR": 3, "STOP": 4, "STALL": 5, "REWIND": 6}
_GROUP_OF = {"OK": "OK", "WARN": "WARN", "STOP": "ERR", "STALL": "ERR", "REWIND": "ERR"}


@dataclass(slots=True, frozen=True)
class WindowCommit:
    offset: int
    commit_ms: int
    lag: int | None  # the lag when the commit was sampled; None: no end reported then (counted as 0)
    slot_ms: int = -1  # when this entry's min-distance slot began (commits within it replace the entry)


@dataclass(slots=True)
class _Partition:
    window: deque
    moved_ms: int  # when the offset was last seen to change (at the commit that changed it)


@dataclass(slots=True, frozen=True)
class PartitionHealth:
    topic: str
    partition: int
    status: str
    offset: int
    last_moved_ms: int
    last_commit_ms: int
    end_offset: int | None = None  # the reported end; None: no source reported one
    lag: int | None = None         # end_offset - offset (never below 0); None: unknown
    window_commits: int = 0        # commits in the window now
    complete: float = 0.0          # how full the window is (Burrow's "complete"), 0 to 1
    window_start_offset: int | None = None
    window_end_offset: int | None = None


@dataclass(slots=True, frozen=True)
class MemberHealth:
    member_id: str
    client_id: str
    client_host: str
    heartbeat_age_ms: int | None  # None: unknown (no session running)
    commit_age_ms: int | None     # None: no commit seen from it since this node loaded the group


@dataclass(slots=True, frozen=True)
class GroupHealth:
    group: str
    status: str
    evaluated_ms: int
    window_commits: int            # the window's size (group.health.window.commits)
    min_distance_ms: int           # group.health.window.min.distance.ms
    partitions: tuple[PartitionHealth, ...]
    members: tuple[MemberHealth, ...]
    total_lag: int | None = None        # over partitions with a reported end; None when none has one
    partitions_without_end: int = 0     # partitions whose lag is unknown
    complete: float = 1.0               # the share of partitions whose window is full
    group_type: str = "classic"
    counts: dict = field(default_factory=dict)  # partitions per status

    def to_json(self) -> dict:
        """The JSON shape GroupReport, the CLI and the console share (field names as declared here)."""
        return asdict(self)


def partition_status(window: Iterable[WindowCommit], current_lag: int | None, now_ms: int) -> str:
    """Burrow's rules over one partition's window (oldest first) and its lag now (None: unknown)."""
    commits = list(window)
    if not commits:
        return "OK"
    offsets = [c.offset for c in commits]
    rewound = any(b < a for a, b in zip(offsets, offsets[1:]))
    if not current_lag or any(not c.lag for c in commits):  # 0 or unknown now, or caught up within the window
        return "REWIND" if rewound and current_lag is None else "OK"
    if rewound:
        return "REWIND"
    first, last = commits[0].commit_ms, commits[-1].commit_ms
    if now_ms - last > last - first:
        return "STOP"
    if all(o == offsets[0] for o in offsets):
        return "STALL"
    lags = [c.lag for c in commits]
    if all(b >= a for a, b in zip(lags, lags[1:])):
        return "WARN"
    return "OK"


def group_status(partition_statuses: Iterable[str]) -> str:
    """The worst of the partitions, STOP, STALL and REWIND counting as ERR (Burrow's group status)."""
    worst = "OK"
    for status in partition_statuses:
        status = _GROUP_OF[status]
        if GROUP_STATUSES.index(status) > GROUP_STATUSES.index(worst):
            worst = status
    return worst


class HealthMonitor:
    """The commit windows health is judged from, per group and partition, and each member's last commit."""

    def __init__(self, window_commits: int = 10, min_distance_ms: int = 1000) -> None:
        self.window_commits = window_commits
        self.min_distance_ms = min_distance_ms
        self._partitions: dict[str, dict[tuple[str, int], _Partition]] = {}
        self._member_commits: dict[str, dict[str, int]] = {}  # group -> member id -> last commit ms
        self._sampled_at: dict[str, int] = {}  # group -> when its last sample was taken

    def member_committed(self, group: str, member_id: str, now_ms: int) -> None:
        if member_id:
            self._member_commits.setdefault(group, {})[member_id] = now_ms

    def sample(self, group: str, offsets: Iterable[tuple[str, int, int, int]], now_ms: int,
               admin_reset_since: Callable[[int], bool],
               end_offset: Callable[[str, int], int | None] = lambda topic, partition: None) -> None:
        """Add the commits not seen yet of (topic, partition, offset, commit timestamp) to the windows;
        `admin_reset_since(ms)` says whether an admin reset of the group was journaled after that time (the
        windows then start over: a reset is not a consumer going backwards)."""
        last_sample_ms = self._sampled_at.get(group)
        old = self._partitions.get(group, {})
        if last_sample_ms is not None and old and admin_reset_since(last_sample_ms):
            old = {}
        new: dict[tuple[str, int], _Partition] = {}
        for topic, partition, offset, commit_ms in offsets:
            key = (topic, partition)
            seen = old.get(key)
            commit_ms = commit_ms if 0 <= commit_ms <= now_ms else now_ms
            commit = WindowCommit(offset, commit_ms, partition_lag(offset, end_offset(topic, partition)), commit_ms)
            if seen is None or not seen.window:
                new[key] = _Partition(deque((commit,), maxlen=self.window_commits), commit_ms)
                continue
            newest = seen.window[-1]
            if commit_ms < newest.commit_ms or (commit_ms == newest.commit_ms and offset != newest.offset):
                # an older commit than the window knows (the offset was deleted and set again): start over
                new[key] = _Partition(deque((commit,), maxlen=self.window_commits), commit_ms)
                continue
            if commit_ms > newest.commit_ms:
                if offset != newest.offset:
                    seen.moved_ms = commit_ms
                if commit_ms - newest.slot_ms < self.min_distance_ms:
                    seen.window[-1] = WindowCommit(offset, commit_ms, commit.lag, newest.slot_ms)
                else:
                    seen.window.append(commit)
            new[key] = seen
        self._partitions[group] = new
        self._sampled_at[group] = now_ms

    def evaluate(self, group: str, offsets: Iterable[tuple[str, int, int, int]],
                 members: Iterable[tuple[str, str, str, float | None]], now_ms: int,
                 end_offset: Callable[[str, int], int | None] = lambda topic, partition: None,
                 group_type: str = "classic") -> GroupHealth:
        """Health from the windows; `offsets` as for `sample` (the partitions judged, with their last commit
        times), `members` as (member id, client id, host, heartbeat age ms or None), `end_offset(topic,
        partition)` the reported end now (None: unknown)."""
        windows = self._partitions.get(group, {})
        commits = self._member_commits.get(group, {})
        partitions = []
        for topic, partition, offset, commit_ms in offsets:
            kept = windows.get((topic, partition))
            window = tuple(kept.window) if kept is not None else ()
            end = end_offset(topic, partition)
            lag = partition_lag(offset, end)
            status = partition_status(window, lag, now_ms)
            partitions.append(PartitionHealth(
                topic, partition, status, offset, kept.moved_ms if kept is not None else commit_ms, commit_ms,
                end, lag, len(window), len(window) / self.window_commits,
                window[0].offset if window else None, window[-1].offset if window else None))
        partitions.sort(key=lambda p: (p.topic, p.partition))
        counts = dict.fromkeys(PARTITION_STATUSES, 0)
        for p in partitions:
            counts[p.status] += 1
        return GroupHealth(
            group, group_status(p.status for p in partitions), now_ms, self.window_commits, self.min_distance_ms,
            tuple(partitions),
            tuple(MemberHealth(m, client, host, None if age is None else int(age),
                               now_ms - commits[m] if m in commits else None)
                  for m, client, host, age in members),
            total_lag(p.lag for p in partitions), sum(1 for p in partitions if p.lag is None),
            sum(1 for p in partitions if p.complete >= 1) / len(partitions) if partitions else 1.0,
            group_type, counts)

    def groups(self) -> list[str]:
        return list(self._partitions.keys() | self._member_commits.keys())

    def forget(self, groups: Iterable[str]) -> None:
        for group in groups:
            self._partitions.pop(group, None)
            self._member_commits.pop(group, None)
            self._sampled_at.pop(group, None)
