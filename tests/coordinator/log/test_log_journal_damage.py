"""Damage inside the commit journal is never mistaken for an unfinished write (issue: hardening, item 1).

A journal entry that no longer checks out but is followed by valid entries was durable and acknowledged.
Recovery must not drop it and what follows as a "torn tail" (that rolled acknowledged offsets back):
it refills the damaged batches from the partitions' own segments where they still hold them, and
refuses, with an ERROR naming the file and position, any partition whose acknowledged writes it
cannot account for. `cohort log verify` reports the damage and exits 1.
"""
from __future__ import annotations

import asyncio
import logging

import pytest
from log_helpers import commit, crash_copy, garble_past_marks, open_log

from cohort.coordinator.cli.main import main
from cohort.coordinator.log import OffsetsLog
from cohort.coordinator.contracts.store import LogLoadError
from cohort.coordinator.log.journal import ENTRY_HEADER_SIZE, list_journals, scan_journal

PARTITIONS = 4
KEYS = 40


def partition_of(key_index: int) -> int:
    return key_index % PARTITIONS


async def commits_then_crash(tmp_path, rounds: int = 3):
    """KEYS keys committed `rounds` times each (newest value last), then a copy of the files as a crash leaves them."""
    live_dir, crash_dir = tmp_path / "live", tmp_path / "crash"
    log, _ = await open_log(live_dir, num_partitions=PARTITIONS)
    model: dict[int, dict[bytes, bytes]] = {p: {} for p in range(PARTITIONS)}
    for r in range(rounds):
        appends = []
        for k in range(KEYS):
            key, value = commit(f"g{k}", "t", 0, 100 * r + k)
            appends.append(log.append(partition_of(k), [(key, value)]))
            model[partition_of(k)][key] = value
        await asyncio.gather(*appends)
    log.catch_up()  # the crash comes after the segments caught up with the journal
    crash_copy(live_dir, crash_dir)
    await log.close()
    return crash_dir, model


def flip(path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x10
    path.write_bytes(bytes(data))


def middle_entry(crash_dir):
    [(_, journal)] = list_journals(crash_dir)
    entries = scan_journal(journal, PARTITIONS).entries
    assert len(entries) >= 3 * PARTITIONS  # no checkpoint since the open: every batch is in the journal
    return journal, entries[len(entries) // 2]


async def load(data_dir):
    """Open the log; returns the live records per loaded partition and the partitions refused."""
    live: dict[int, dict[bytes, bytes]] = {}
    log = OffsetsLog(data_dir, num_partitions=PARTITIONS)
    refused = {}
    try:
        await log.open(lambda p, records: live.setdefault(p, {}).update(records))
    except LogLoadError as exc:
        refused = exc.errors
    await log.close()
    return live, refused


@pytest.mark.parametrize("where", ["batch", "entry header"])
async def test_a_flipped_byte_in_the_journal_with_the_segments_lost_refuses_the_partition_never_rolls_back(
        tmp_path, caplog, capsys, where):
    crash_dir, model = await commits_then_crash(tmp_path)
    assert garble_past_marks(crash_dir) > 0  # a power cut: the segments past the checkpoint cannot help
    journal, entry = middle_entry(crash_dir)
    position = entry.view.position + 40 if where == "batch" else entry.view.position - ENTRY_HEADER_SIZE + 5
    flip(journal, position)

    with caplog.at_level(logging.WARNING, logger="cohort.log"):
        live, refused = await load(crash_dir)

    assert refused, "damaged acknowledged entries must not load silently"
    if where == "batch":  # the entry's checksummed header names its partition: only that one is refused
        assert set(refused) == {entry.partition}
    assert entry.partition in refused
    for p, records in live.items():  # whatever loads serves exactly the acknowledged offsets
        assert records == model[p]
    assert set(live) | set(refused) == set(range(PARTITIONS))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(str(journal) in line and "damaged" in line for line in errors)
    assert not any("an unfinished write" in r.getMessage() for r in caplog.records)

    assert main(["log", "verify", "--data-dir", str(crash_dir)]) == 1
    out, _ = capsys.readouterr()
    assert f"{journal}: position " in out and "acknowledged entries that no longer check out" in out


@pytest.mark.parametrize("where", ["batch", "entry header"])
async def test_a_flipped_byte_in_the_journal_is_recovered_from_the_segments_when_they_hold_it(tmp_path, where):
    crash_dir, model = await commits_then_crash(tmp_path)  # a process crash: the page cache reached the segments
    journal, entry = middle_entry(crash_dir)
    position = entry.view.position + 40 if where == "batch" else entry.view.position - ENTRY_HEADER_SIZE + 5
    flip(journal, position)

    live, refused = await load(crash_dir)

    assert not refused
    assert live == model


async def test_verify_on_a_running_servers_data_dir_says_so_and_ignores_the_preallocated_journal(tmp_path, capsys):
    log, _ = await open_log(tmp_path, num_partitions=PARTITIONS)
    try:
        from cohort.coordinator.process.daemon import DataDirLock

        lock = DataDirLock(tmp_path)
        lock.acquire()  # what `cohort serve` holds while it runs
        try:
            await log.append(0, [commit("g", "t", 0, 1)])
            [(_, journal)] = list_journals(tmp_path)
            assert journal.stat().st_size > 1 << 19  # zero-filled ahead of its writes

            code = main(["log", "verify", "--data-dir", str(tmp_path)])
        finally:
            lock.release()
    finally:
        await log.close()
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert out.startswith(f"note: {tmp_path} is in use by a running cohort server (pid ")
    assert "unfinished" not in out.replace("may show as unfinished", "")
