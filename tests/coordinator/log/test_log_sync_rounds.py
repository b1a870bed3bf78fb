"""Policy `always`: the appends of one loop turn, over any number of partitions, share one fsync of the
commit journal (a turn of many appends, two: one started mid-turn); a write made while a round runs is
acknowledged only by a later round, and never before an earlier one; a failed journal fsync fails every
append of its round and of the rounds after it, and keeps none of them; a partition that must roll waits
for its unacknowledged writes. An append's continuation runs in the turn its round returns (before any
done-callback), and `hurry` starts a round before the turn ends.

The journal fsync runs on a writer thread here (`fsync_process=False`) so the spy sees every call; that
the helper process does the same fsyncs is test_log_fsync_process.py's business."""
from __future__ import annotations

import asyncio
import errno
import os
import threading

import pytest
from log_helpers import reopen, commit, open_log, wait_for

from cohort.coordinator.log import list_segments, read_segment
from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.log.batch import iter_batches
from cohort.coordinator.log.journal import list_journals, read_journal


class FdatasyncSpy:
    """Wraps os.fdatasync: counts calls per inode, can fail for chosen inodes and hold (and then fail) the
    first call."""

    def __init__(self, real) -> None:
        self.real = real
        self.calls: dict[int, int] = {}
        self.returned: dict[int, int] = {}  # calls that completed without error, per inode
        self.failing: set[int] = set()
        self.hold_first = False
        self.fail_held = False
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        ino = os.fstat(fd).st_ino
        with self._lock:
            self.calls[ino] = self.calls.get(ino, 0) + 1
            hold, self.hold_first = self.hold_first, False
        if hold:
            self.held.set()
            assert self.release.wait(10), "the test never released the held fsync"
        if ino in self.failing or (hold and self.fail_held):
            raise OSError(errno.EIO, "Input/output error")
        self.real(fd)
        with self._lock:
            self.returned[ino] = self.returned.get(ino, 0) + 1


def _segments_by_partition(data_dir) -> dict[int, list]:
    out: dict[int, list] = {}
    for p, path in list_segments(data_dir):
        out.setdefault(p, []).append(path)
    return out


def _journal_inode(data_dir) -> int:
    [(_, path)] = list_journals(data_dir)
    return path.stat().st_ino


async def test_appends_to_many_partitions_in_one_turn_share_one_journal_fsync(tmp_path, monkeypatch):
    log, _ = await open_log(tmp_path, num_partitions=10, fsync_process=False)
    journal = _journal_inode(tmp_path)
    spy = FdatasyncSpy(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", spy)

    appends = [(i % 10, [commit(f"g{i}", "t", 0, i)]) for i in range(30)]
    lasts = await asyncio.gather(*[log.append(p, recs) for p, recs in appends])
    monkeypatch.setattr(os, "fdatasync", spy.real)
    assert spy.calls == {journal: 1}  # one fsync made 10 partitions' writes durable; no partition file fsynced
    await log.close()

    segments = _segments_by_partition(tmp_path)
    for p in range(10):
        [segment] = segments[p]
        assert len(list(iter_batches(segment.read_bytes()))) == 1  # the turn's appends: one batch
    assert sorted(lasts) == sorted([0, 1, 2] * 10)


async def test_a_turn_of_many_appends_starts_a_round_before_it_ends_and_another_at_its_end(tmp_path, monkeypatch):
    log, _ = await open_log(tmp_path, num_partitions=4, fsync_process=False)
    journal = _journal_inode(tmp_path)
    spy = FdatasyncSpy(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", spy)

    lasts = await asyncio.gather(*[log.append(i % 4, [commit(f"g{i}", "t", 0, i)]) for i in range(64)])
    monkeypatch.setattr(os, "fdatasync", spy.real)
    assert spy.calls == {journal: 2}  # 32 appends went to a round mid-turn, the other 32 to one at its end
    await log.close()

    for p, [segment] in _segments_by_partition(tmp_path).items():
        assert len(list(iter_batches(segment.read_bytes()))) == 2
    assert sorted(lasts) == sorted(list(range(16)) * 4)
    live = await reopen(tmp_path, num_partitions=4)
    assert live == dict(commit(f"g{i}", "t", 0, i) for i in range(64))


async def test_a_write_made_during_a_sync_round_is_acknowledged_only_by_the_next_round(tmp_path, monkeypatch):
    log, _ = await open_log(tmp_path, fsync_process=False)
    journal = _journal_inode(tmp_path)
    spy = FdatasyncSpy(os.fdatasync)
    spy.hold_first = True
    monkeypatch.setattr(os, "fdatasync", spy)

    first = asyncio.ensure_future(log.append(0, [commit("g", "t", 0, 1)]))
    await wait_for(spy.held.is_set)  # round 1 is fsyncing the journal
    second = asyncio.ensure_future(log.append(0, [commit("g", "t", 1, 1)]))
    await wait_for(lambda: log.next_offset(0) == 2)  # the second batch is written...
    await asyncio.sleep(0.01)  # (the scenario: a window for a wrong early acknowledgement to show up)
    assert not first.done() and not second.done()  # ...but nothing is acknowledged before its fsync

    spy.release.set()
    assert await asyncio.wait_for(first, 10) == 0
    assert await asyncio.wait_for(second, 10) == 1
    assert spy.calls == {journal: 2}  # round 1, then round 2 for the write made meanwhile
    monkeypatch.setattr(os, "fdatasync", spy.real)
    await log.close()


async def test_a_round_whose_fsync_succeeded_still_fails_when_an_earlier_round_failed(tmp_path, monkeypatch):
    log, _ = await open_log(tmp_path, num_partitions=2, fsync_process=False)
    await log.append(0, [commit("g", "t", 0, 1)])
    sizes = {p: paths[-1].stat().st_size for p, paths in _segments_by_partition(tmp_path).items()}
    journal = _journal_inode(tmp_path)
    spy = FdatasyncSpy(os.fdatasync)
    spy.hold_first = spy.fail_held = True
    monkeypatch.setattr(os, "fdatasync", spy)

    first = asyncio.ensure_future(log.append(0, [commit("g", "t", 0, 2)]))
    await wait_for(spy.held.is_set)  # round 1 is fsyncing the journal (and will fail)
    second = asyncio.ensure_future(log.append(1, [commit("h", "t", 0, 2)]))
    await wait_for(lambda: spy.returned.get(journal) == 1)  # round 2 started meanwhile and its fsync returned...
    await asyncio.sleep(0.01)  # (the scenario: a window for a wrong early acknowledgement to show up)
    assert not second.done()  # ...but it is not acknowledged before round 1

    spy.release.set()
    results = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 10)
    monkeypatch.setattr(os, "fdatasync", spy.real)
    assert all(isinstance(r, StorageError) and r.errno == errno.EIO for r in results)
    assert log.next_offset(0) == 1 and log.next_offset(1) == 0
    for p, paths in _segments_by_partition(tmp_path).items():
        assert paths[-1].stat().st_size == sizes.get(p, 0)  # both rounds' batches were cut off
    await log.close()
    live = await reopen(tmp_path, num_partitions=2)
    assert live == dict([commit("g", "t", 0, 1)])


async def test_a_failed_journal_fsync_fails_every_append_of_the_round_and_keeps_none(tmp_path, monkeypatch):
    log, _ = await open_log(tmp_path, num_partitions=3, fsync_process=False)
    for p in range(3):
        await log.append(p, [commit(f"g{p}", "t", 0, 1)])
    log.catch_up()  # the acknowledged batches in their segments now, not by a timed catch-up during the round
    segments = _segments_by_partition(tmp_path)
    sizes = {p: paths[-1].stat().st_size for p, paths in segments.items()}
    [(_, journal_path)] = list_journals(tmp_path)
    journal_entries = len(read_journal(journal_path, 3)[0])
    spy = FdatasyncSpy(os.fdatasync)
    spy.failing.add(journal_path.stat().st_ino)
    monkeypatch.setattr(os, "fdatasync", spy)

    results = await asyncio.gather(*[log.append(p, [commit(f"g{p}", "t", 0, 2)]) for p in range(3)],
                                   return_exceptions=True)
    monkeypatch.setattr(os, "fdatasync", spy.real)
    assert all(isinstance(r, StorageError) and r.errno == errno.EIO for r in results)
    for p in range(3):
        assert segments[p][-1].stat().st_size == sizes[p]  # the unacknowledged batches were cut off
        assert log.next_offset(p) == 1
    assert len(read_journal(journal_path, 3)[0]) == journal_entries  # and their journal entries

    assert await log.append(1, [commit("g1", "t", 0, 3)]) == 1  # the disk is back: the same offset again
    await log.close()
    live = await reopen(tmp_path, num_partitions=3)
    assert live == dict([commit("g0", "t", 0, 1), commit("g1", "t", 0, 3), commit("g2", "t", 0, 1)])


async def test_a_partition_that_must_roll_while_its_writes_are_unacknowledged_waits_for_the_round(tmp_path, monkeypatch):
    log, _ = await open_log(tmp_path, segment_bytes=1, fsync_process=False)  # every batch fills its segment
    spy = FdatasyncSpy(os.fdatasync)
    spy.hold_first = True
    monkeypatch.setattr(os, "fdatasync", spy)

    first = asyncio.ensure_future(log.append(0, [commit("g", "t", 0, 1)]))  # fills the segment
    await wait_for(spy.held.is_set)
    second = asyncio.ensure_future(log.append(0, [commit("g", "t", 1, 1)]))  # must roll first
    await asyncio.sleep(0.01)  # (the scenario: a window for a wrong early write to show up)
    assert log.next_offset(0) == 1  # held back: the round's file stays open and unreplaced
    spy.release.set()
    assert await asyncio.wait_for(first, 10) == 0
    assert await asyncio.wait_for(second, 10) == 1
    monkeypatch.setattr(os, "fdatasync", spy.real)
    await log.close()

    segments = [path for _, path in list_segments(tmp_path)]
    assert [[o for o, _, _ in read_segment(s)] for s in segments] == [[0], [1]]


async def test_an_appends_continuation_runs_in_the_turn_its_round_returns_before_any_done_callback(tmp_path):
    # A done-callback runs a loop turn after the future settles; the continuation runs in the round's own
    # callback, so a commit is answered in the turn its fsync came back (issue 15: turns are long in a flood).
    log, _ = await open_log(tmp_path, fsync_process=False)
    seen: list[str] = []
    fut = log.append(0, [commit("g", "t", 0, 1)])
    fut.add_done_callback(lambda f: seen.append("done-callback"))
    fut.continuation = lambda f: seen.append(f"continuation {f.result()}")
    await wait_for(fut.done)
    assert seen[:1] == ["continuation 0"]
    await wait_for(lambda: len(seen) == 2)
    assert seen == ["continuation 0", "done-callback"]
    await log.close()


async def test_a_continuation_may_append_again_and_that_append_becomes_durable_in_the_next_round(tmp_path, monkeypatch):
    log, _ = await open_log(tmp_path, num_partitions=2, fsync_process=False)
    journal = _journal_inode(tmp_path)
    spy = FdatasyncSpy(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", spy)
    second: list[asyncio.Future] = []
    first = log.append(0, [commit("g", "t", 0, 1)])
    first.continuation = lambda f: second.append(log.append(1, [commit("h", "t", 0, 2)]))
    await wait_for(lambda: second and second[0].done())
    monkeypatch.setattr(os, "fdatasync", spy.real)
    assert second[0].result() == 0 and spy.calls == {journal: 2}
    await log.close()
    assert await reopen(tmp_path, num_partitions=2) == dict([commit("g", "t", 0, 1), commit("h", "t", 0, 2)])


@pytest.mark.parametrize("hurry", [True, False])
async def test_hurry_starts_the_round_of_what_is_queued_before_the_turn_ends(tmp_path, monkeypatch, hurry):
    log, _ = await open_log(tmp_path, fsync_process=False)
    spy = FdatasyncSpy(os.fdatasync)
    spy.hold_first = True
    monkeypatch.setattr(os, "fdatasync", spy)
    fut = log.append(0, [commit("g", "t", 0, 1)])
    if hurry:
        log.hurry()
        assert spy.held.wait(10)  # without yielding to the loop: the round is already with the writer thread
    else:
        assert not spy.held.wait(0.2)  # (the loop is not yielded to: nothing else can start the round)
        await wait_for(spy.held.is_set)  # the end of the turn does
    spy.release.set()
    assert await fut == 0
    monkeypatch.setattr(os, "fdatasync", spy.real)
    await log.close()
