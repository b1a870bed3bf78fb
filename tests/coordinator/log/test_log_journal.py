"""The commit journal: after a crash, recovery trusts each partition only up to its checkpoint mark and
brings back every acknowledged batch from the journal, whatever the page cache did or did not write back
to the partition files; checkpoints advance the marks and retire journals; damage is reported, never
loaded silently."""
from __future__ import annotations

import asyncio
import random
import threading

import pytest
from bounded_wait import wait_until_async
from log_helpers import reopen, commit, crash_copy, garble_past_marks, open_log

from cohort.coordinator.log import OffsetsLog, list_segments
from cohort.coordinator.contracts.store import LogLoadError
from cohort.coordinator.log import checkpoints as checkpoints_module
from cohort.coordinator.log import commit_rounds
from cohort.coordinator.log.journal import list_journals, read_checkpoint, read_journal
from cohort.coordinator.log.segments import segment_base

PARTITIONS = 4


async def _commit_many(log: OffsetsLog, n: int, seed: int) -> dict[bytes, bytes]:
    """n acknowledged appends spread over the partitions, in concurrent waves; returns the model."""
    rng = random.Random(seed)
    model: dict[bytes, bytes] = {}
    for wave in range(0, n, 16):
        appends = []
        for i in range(wave, min(n, wave + 16)):
            group = rng.randrange(6)  # a group's records always go to its partition
            rec = commit(f"g{group}", "t", rng.randrange(5), i, "m" * rng.randrange(40))
            appends.append((group % PARTITIONS, rec))
        await asyncio.gather(*[log.append(p, [rec]) for p, rec in appends])
        for _, (key, value) in appends:
            model[key] = value
    return model


async def _committed_then_crashed(tmp_path, n: int, seed: int, caught_up: bool = True):
    """n acknowledged appends, then a crash copy of the files; returns the copy's dir and the model.

    `caught_up`: the crash came after the segments caught up with the journal (else before: the
    segments past the marks lack batches the journal holds)."""
    live_dir, crash_dir = tmp_path / "live", tmp_path / "crash"
    log, _ = await open_log(live_dir, num_partitions=PARTITIONS)
    model = await _commit_many(log, n, seed=seed)
    if caught_up:
        log.catch_up()
    crash_copy(live_dir, crash_dir)
    await log.close()
    return crash_dir, model


@pytest.mark.parametrize("caught_up", [True, False], ids=["segments caught up", "segments behind"])
async def test_every_acknowledged_batch_past_the_checkpoint_comes_back_from_the_journal(tmp_path, caplog, monkeypatch,
                                                                                      caught_up):
    if not caught_up:
        monkeypatch.setattr(commit_rounds, "CATCH_UP_S", 3600.0)  # no catch-up before the crash
    crash_dir, model = await _committed_then_crashed(tmp_path, 300, seed=1, caught_up=caught_up)

    garbled = garble_past_marks(crash_dir)  # no checkpoint since the open: everything is past the marks
    assert garbled > 0 if caught_up else garbled == 0
    with caplog.at_level("INFO", logger="cohort.log"):
        live = await reopen(crash_dir, num_partitions=PARTITIONS)
    assert live == model
    assert any("replayed from the journal" in r.getMessage() for r in caplog.records)


async def test_segments_rolled_after_the_checkpoint_are_rebuilt_from_the_journal(tmp_path, monkeypatch):
    """Segments roll every few batches, but no checkpoint completes: the files started since are lost."""
    live_dir, crash_dir = tmp_path / "live", tmp_path / "crash"
    log, _ = await open_log(live_dir, num_partitions=PARTITIONS, segment_bytes=300)
    release = threading.Event()
    real_write_mark = checkpoints_module.write_partition_mark

    def held_write_mark(pdir, mark):
        assert release.wait(20), "the test never released the checkpoint"
        real_write_mark(pdir, mark)

    monkeypatch.setattr(checkpoints_module, "write_partition_mark", held_write_mark)
    model = await _commit_many(log, 200, seed=2)
    crash_copy(live_dir, crash_dir)
    release.set()
    await log.close()

    marks = read_checkpoint(crash_dir)
    rolled_after = [s for p, s in list_segments(crash_dir) if segment_base(s) > marks[p].segment]
    assert rolled_after  # the crash copy has segments the checkpoint does not cover
    garble_past_marks(crash_dir)
    monkeypatch.setattr(checkpoints_module, "write_partition_mark", real_write_mark)
    log2, live = await open_log(crash_dir, num_partitions=PARTITIONS, segment_bytes=300)
    assert live == model
    await log2.close()
    live = await reopen(crash_dir, num_partitions=PARTITIONS, segment_bytes=300)
    assert live == model  # and the rebuilt files stand on their own after the next checkpoint


async def test_an_unfinished_journal_entry_ends_the_journal(tmp_path, caplog):
    crash_dir, model = await _committed_then_crashed(tmp_path, 50, seed=3)

    [(_, journal)] = list_journals(crash_dir)
    _, end = read_journal(journal, PARTITIONS)
    with open(journal, "r+b") as f:
        f.seek(end)  # where the next entry would have gone (the file is zero-filled ahead)
        f.write(bytes([0, 0, 0, 1, 0, 0, 1, 0]) + b"\x13" * 40)  # an entry header and part of its batch
    garble_past_marks(crash_dir)
    with caplog.at_level("WARNING", logger="cohort.log"):
        live = await reopen(crash_dir, num_partitions=PARTITIONS)
    assert live == model
    assert any("not a valid entry" in r.getMessage() for r in caplog.records)


async def test_a_checkpoint_advances_the_marks_and_retires_the_journal(tmp_path):
    log, _ = await open_log(tmp_path, num_partitions=PARTITIONS)
    [(first_seq, _)] = list_journals(tmp_path)
    await _commit_many(log, 40, seed=4)
    await log.checkpoint()
    [(seq, _)] = list_journals(tmp_path)
    assert seq == first_seq + 1
    marks = read_checkpoint(tmp_path)
    assert {p: m.next_offset for p, m in marks.items()} == {p: log.next_offset(p) for p in range(PARTITIONS)}
    assert all(m.journal == seq for m in marks.values())
    await log.close()
    assert list_journals(tmp_path) == []  # a clean close leaves every partition standing on its own


async def test_a_journal_larger_than_its_limit_triggers_a_checkpoint(tmp_path):
    log, _ = await open_log(tmp_path, num_partitions=PARTITIONS, journal_checkpoint_bytes=2000)
    [(first_seq, _)] = list_journals(tmp_path)
    await _commit_many(log, 100, seed=5)
    await wait_until_async(lambda: list_journals(tmp_path)[0][0] != first_seq, 10, "a checkpoint")
    await log.close()


async def test_a_partition_shorter_than_its_checkpoint_with_journal_batches_after_it_is_damage(tmp_path):
    live_dir, crash_dir = tmp_path / "live", tmp_path / "crash"
    log, _ = await open_log(live_dir, num_partitions=1)
    await log.append(0, [commit("g", "t", 0, 1)])
    await log.checkpoint()
    checkpointed = list_segments(live_dir)[0][1].stat().st_size
    await log.append(0, [commit("g", "t", 0, 2)])  # journaled after the checkpoint
    crash_copy(live_dir, crash_dir)
    await log.close()

    [(_, segment)] = list_segments(crash_dir)
    with open(segment, "r+b") as f:
        f.truncate(0)  # the checkpointed batch is gone: the journal's batch has nothing to follow
    assert checkpointed > 0
    with pytest.raises(LogLoadError) as info:
        await open_log(crash_dir, num_partitions=1)
    assert f"{checkpointed} bytes the last checkpoint covers are missing" in str(info.value)
