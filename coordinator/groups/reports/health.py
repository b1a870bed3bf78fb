"""Burrow-style group health from samples of the committed offsets, judged against reported end offsets.

A group is evaluated per partition from samples of its committed offsets, taken by `HealthMonitor.sample`
(the coordinator samples every group with members periodically, and on every question), and from each
partition's end offset as its source reported it (`topics.TopicRegistry.reported_end`), if any:

* **OK**: the partition is caught up with its reported end (no new data: nothing to consume, however long
  the offset stays put), or its offset moved within `group.health.stall.ms`; a group without members is
  OK while it committed within that window (a standalone consumer) or has no lag anywhere.
* **STALLED**: members alive, data waiting (committed offset below the reported end) and the offset has
  not moved for `stall_ms` (members that commit the same offset again still count: nothing is consumed).
  Without a reported end, data waiting cannot be told from no data: a partition whose offset has not
  moved for `stall_ms` is STALLED, which an idle topic is too. Sources that report their end offsets
  remove that doubt.
* **REWOUND**: some partition's offset went backwards between two samples without an admin reset
  journaled in between; it stays so until the offset moves forward again.
* **STOPPED**: no members, no commit within `stall_ms`, and lag somewhere (or an unknown end).

Group status is the worst of its partitions (STOPPED > REWOUND > STALLED > OK). Each partition carries its
end offset and lag (None where the end is unknown: never 0 for "don't know"). Per member it reports how
long ago it last heartbeated (from its session deadline) and last committed. A partition's last move is
the commit that moved it, so it is never later than its last commit.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from cohort.coordinator.groups.reports.lag import partition_lag

STATUSES = ("OK", "STALLED", "REWOUND", "STOPPED")  # index = the Prometheus gauge value
_RANK = {s: i for i, s in enumerate(STATUSES)}


@dataclass(slots=True)
class _PartitionSample:
    offset: int
    moved_ms: int      # when the offset was last seen to change
    rewound: bool


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
    stall_ms: int
    partitions: tuple[PartitionHealth, ...]
    members: tuple[MemberHealth, ...]
    total_lag: int | None = None        # over partitions with a reported end; None when none has one
    partitions_without_end: int = 0     # partitions whose lag is unknown

    def to_json(self) -> dict:
        """The JSON shape GroupReport, the CLI and the console share (field names as declared here)."""
        return asdict(self)


class HealthMonitor:
    """The samples health is judged from, per group, and the last commit time of each member."""

    def __init__(self, stall_ms: int) -> None:
        self.stall_ms = stall_ms
        self._samples: dict[str, dict[tuple[str, int], _PartitionSample]] = {}
        self._member_commits: dict[str, dict[str, int]] = {}  # group -> member id -> last commit ms
        self._sampled_at: dict[str, int] = {}  # group -> when its last sample was taken

    def member_committed(self, group: str, member_id: str, now_ms: int) -> None:
        if member_id:
            self._member_commits.setdefault(group, {})[member_id] = now_ms

    def sample(self, group: str, offsets: Iterable[tuple[str, int, int, int]], now_ms: int,
               admin_reset_since: Callable[[int], bool]) -> None:
        """Take a sample of (topic, partition, offset, commit timestamp); `admin_reset_since(ms)` says
        whether an admin reset of the group was journaled after that time."""
        old = self._samples.get(group, {})
        new: dict[tuple[str, int], _PartitionSample] = {}
        last_sample_ms = self._sampled_at.get(group)
        for topic, partition, offset, commit_ms in offsets:
            previous = old.get((topic, partition))
            if previous is None:
                # First sight (e.g. after a restart): the last commit is the latest it can have moved.
                new[(topic, partition)] = _PartitionSample(offset, commit_ms if commit_ms >= 0 else now_ms, False)
            elif offset == previous.offset:
                new[(topic, partition)] = previous
            elif offset > previous.offset:
                new[(topic, partition)] = _PartitionSample(offset, _moved_at(commit_ms, now_ms), False)
            else:
                reset = last_sample_ms is not None and admin_reset_since(last_sample_ms)
                new[(topic, partition)] = _PartitionSample(offset, _moved_at(commit_ms, now_ms), not reset)
        self._samples[group] = new
        self._sampled_at[group] = now_ms

    def evaluate(self, group: str, offsets: Iterable[tuple[str, int, int, int]],
                 members: Iterable[tuple[str, str, str, float | None]], now_ms: int,
                 end_offset: Callable[[str, int], int | None] = lambda topic, partition: None) -> GroupHealth:
        """Health from the latest sample; `offsets` as for `sample` (for the last commit times), `members`
        as (member id, client id, host, heartbeat age ms or None), `end_offset(topic, partition)` the
        reported end (None: unknown)."""
        samples = self._samples.get(group, {})
        commits = self._member_commits.get(group, {})
        members = list(members)
        partitions = []
        last_commit = -1
        for topic, partition, offset, commit_ms in offsets:
            last_commit = max(last_commit, commit_ms)
            s = samples.get((topic, partition))
            moved = s.moved_ms if s is not None else commit_ms
            end = end_offset(topic, partition)
            lag = partition_lag(offset, end)
            if s is not None and s.rewound:
                status = "REWOUND"
            elif members and lag != 0 and now_ms - moved >= self.stall_ms:
                status = "STALLED"  # data waiting (or an unknown end) and the group not moving
            else:
                status = "OK"
            partitions.append(PartitionHealth(topic, partition, status, offset, moved, commit_ms, end, lag))
        all_caught_up = bool(partitions) and all(p.lag == 0 for p in partitions)
        if not members and not all_caught_up and (last_commit < 0 or now_ms - last_commit >= self.stall_ms):
            status = "STOPPED"
        else:
            status = max((p.status for p in partitions), key=_RANK.__getitem__, default="OK")
        known = [p.lag for p in partitions if p.lag is not None]
        return GroupHealth(
            group, status, now_ms, self.stall_ms, tuple(sorted(partitions, key=lambda p: (p.topic, p.partition))),
            tuple(MemberHealth(m, client, host, None if age is None else int(age),
                               now_ms - commits[m] if m in commits else None)
                  for m, client, host, age in members),
            sum(known) if known else None, sum(1 for p in partitions if p.lag is None))

    def groups(self) -> list[str]:
        return list(self._samples.keys() | self._member_commits.keys())

    def forget(self, groups: Iterable[str]) -> None:
        for group in groups:
            self._samples.pop(group, None)
            self._member_commits.pop(group, None)
            self._sampled_at.pop(group, None)


def _moved_at(commit_ms: int, now_ms: int) -> int:
    """When an offset seen to change moved: at the commit that changed it (a sample only notices later)."""
    return commit_ms if 0 <= commit_ms <= now_ms else now_ms
