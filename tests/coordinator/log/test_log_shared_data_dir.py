"""Several log instances share one data dir, each owning some partitions (`cohort serve --workers N`):
one owner per partition directory (a lock), journals and marks per owner, and a layout that does not
depend on the split, so a partition's next owner (after a release, a crash, or a new split) replays
its acknowledged writes from whichever owner journaled them; a journal goes only when no partition
needs it any more."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from log_helpers import crash_copy, garble_past_marks, reopen
from log_owner_process import committed

from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle
from cohort.coordinator.log import OffsetsLog
from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.log.journal import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_NAME,
    journal_name,
    list_owner_journals,
    read_checkpoint,
)
from cohort.coordinator.log.partition_lock import partition_in_use
from cohort.coordinator.log.segments import partition_dir
from cohort.protocol.errors import ErrorCode

PARTITIONS = 8
OWNER_SCRIPT = Path(__file__).with_name("log_owner_process.py")


def key(p: int, n: int) -> tuple[bytes, bytes]:
    return f"k{p}".encode(), str(n).encode()


async def owner(data_dir, partitions, **kwargs) -> OffsetsLog:
    log = OffsetsLog(data_dir, num_partitions=PARTITIONS, partitions=partitions, **kwargs)
    await log.open()
    return log


async def loaded(log: OffsetsLog, p: int) -> dict[bytes, bytes]:
    live: dict[bytes, bytes] = {}
    async for chunk in log.load(p, 0):
        live.update(chunk)
    return live


async def test_a_partition_has_one_owner_and_its_next_owner_sees_every_acknowledged_write(tmp_path):
    a = await owner(tmp_path, [0, 1, 2, 3])
    b = await owner(tmp_path, [4, 5, 6, 7])
    await asyncio.gather(*(log.append(p, [key(p, 1)]) for log, ps in ((a, range(4)), (b, range(4, 8))) for p in ps))
    c = await owner(tmp_path, [])
    with pytest.raises(StorageError) as refused:
        await loaded(c, 2)
    assert refused.value.error_code == ErrorCode.NOT_COORDINATOR and "owned by another process" in str(refused.value)
    assert partition_in_use(partition_dir(tmp_path, 2)) is not None

    await a.append(2, [key(2, 2)])
    await a.release(2)
    with pytest.raises(StorageError) as late:
        await a.append(2, [key(2, 3)])
    assert late.value.error_code == ErrorCode.NOT_COORDINATOR
    assert a.partition_state(2) is PartitionLifecycle.UNOWNED and partition_in_use(partition_dir(tmp_path, 2)) is None

    assert await loaded(c, 2) == dict([key(2, 2)])
    await c.append(2, [key(2, 4)])
    for log in (a, b, c):
        await log.close()
    assert await reopen(tmp_path, num_partitions=PARTITIONS) == {**dict(key(p, 1) for p in range(8)), **dict([key(2, 4)])}
    assert list_owner_journals(tmp_path) == []  # every partition was checkpointed on its own by its last owner


async def test_after_a_crash_a_new_split_replays_every_owners_journal_and_journals_go_only_when_unneeded(tmp_path):
    live_dir, crash_dir = tmp_path / "live", tmp_path / "crash"
    a = await owner(live_dir, [0, 1, 2, 3])
    b = await owner(live_dir, [4, 5, 6, 7])
    for n in range(1, 21):
        await asyncio.gather(*(log.append(p, [key(p, n)]) for log, ps in ((a, range(4)), (b, range(4, 8))) for p in ps))
    crash_copy(live_dir, crash_dir)  # both owners "die" here: their last writes are only in their journals
    old_owners = {j.owner for j in list_owner_journals(crash_dir)}
    assert old_owners == {a.owner, b.owner}
    for log in (a, b):
        await log.close()

    evens = await owner(crash_dir, [0, 2, 4, 6])  # the new split takes half of each old owner's partitions
    # The odd partitions still need both old journals: nothing may delete them yet, even at a checkpoint.
    await evens.checkpoint()
    assert old_owners <= {j.owner for j in list_owner_journals(crash_dir)}
    odds = await owner(crash_dir, [1, 3, 5, 7])
    await odds.checkpoint()
    await evens.checkpoint()
    assert not old_owners & {j.owner for j in list_owner_journals(crash_dir)}
    for p in range(PARTITIONS):
        await (evens if p % 2 == 0 else odds).append(p, [key(p, 21)])
    await evens.close()
    await odds.close()
    assert await reopen(crash_dir, num_partitions=PARTITIONS) == dict(key(p, 21) for p in range(8))


async def test_a_data_dir_of_the_single_checkpoint_layout_is_read_and_then_moved_to_per_partition_marks(tmp_path):
    live_dir, old_dir = tmp_path / "live", tmp_path / "old"
    log = await owner(live_dir, range(PARTITIONS))
    for n in range(1, 6):
        await asyncio.gather(*(log.append(p, [key(p, n)]) for p in range(PARTITIONS)))
    crash_copy(live_dir, old_dir)
    await log.close()
    # Rewrite the copy the way the earlier version laid it out: one checkpoint.json, journal-<seq>.wal.
    marks = read_checkpoint(old_dir)
    [journal] = list_owner_journals(old_dir)
    journal.path.rename(old_dir / journal_name(journal.seq))
    import json
    (old_dir / CHECKPOINT_NAME).write_text(json.dumps({"format": CHECKPOINT_FORMAT, "partitions": {
        str(p): {"segment": m.segment, "size": m.size, "next_offset": m.next_offset, "journal": m.journal}
        for p, m in marks.items()}}))
    for p in range(PARTITIONS):
        (partition_dir(old_dir, p) / CHECKPOINT_NAME).unlink()

    assert await reopen(old_dir, num_partitions=PARTITIONS) == dict(key(p, 5) for p in range(8))
    assert not (old_dir / CHECKPOINT_NAME).exists() and list_owner_journals(old_dir) == []


def _start_owner(data_dir: Path, partitions: list[int]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(OWNER_SCRIPT), str(data_dir), str(PARTITIONS),
                             ",".join(map(str, partitions))], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _acked_until_killed(proc: subprocess.Popen, appends: int) -> dict[int, int]:
    """Read acknowledgements until `appends` arrived, kill -9 the owner, then read what it printed before."""
    acked: dict[int, int] = {}
    seen = 0
    while seen < appends:
        line = proc.stdout.readline()
        assert line, "the owner process stopped on its own"
        p, n = map(int, line.split())
        acked[p] = n
        seen += 1
    os.kill(proc.pid, signal.SIGKILL)
    for line in proc.stdout:  # acknowledged before the kill, still in the pipe
        if line.count(" ") == 1:
            p, n = map(int, line.split())
            acked[p] = n
    proc.wait(10)
    return acked


@pytest.mark.timeout(120)
async def test_owner_processes_killed_under_appends_lose_nothing_acknowledged_under_a_new_split(tmp_path):
    first = _start_owner(tmp_path, [0, 1, 2, 3])
    second = _start_owner(tmp_path, [4, 5, 6, 7])
    try:
        acked = await asyncio.to_thread(_acked_until_killed, first, 3000)
        acked.update(await asyncio.to_thread(_acked_until_killed, second, 3000))
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert sorted(acked) == list(range(PARTITIONS))

    # A crashed owner restarted owns the same partitions; a different split works the same way.
    restarted = _start_owner(tmp_path, [0, 1, 2, 3])
    try:
        more = await asyncio.to_thread(_acked_until_killed, restarted, 400)
    finally:
        if restarted.poll() is None:
            restarted.kill()
            restarted.wait(10)
    for p, n in more.items():
        assert n > acked[p]  # it went on from (at least) what the crashed owner had acknowledged
    acked.update(more)

    three_way = [await owner(tmp_path, [p for p in range(PARTITIONS) if p % 3 == k]) for k in range(3)]
    for log in three_way:
        await log.close()
    state = await reopen(tmp_path, num_partitions=PARTITIONS)
    for p in range(PARTITIONS):
        assert committed(p, state) >= acked[p], f"partition {p} lost acknowledged appends"
    assert list_owner_journals(tmp_path) == []
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.timeout(60)
async def test_log_tools_work_on_a_shared_data_dir_and_compact_refuses_while_an_owner_runs(tmp_path, capsys):
    from cohort.coordinator.cli.main import main

    first = _start_owner(tmp_path, [0, 1, 2, 3])
    try:
        second = _start_owner(tmp_path, [4, 5, 6, 7])
        try:
            acked = await asyncio.to_thread(_acked_until_killed, second, 500)  # a crashed owner's files stay
            assert main(["log", "compact", "--data-dir", str(tmp_path)]) == 1
            err = capsys.readouterr().err
            assert f"(pid {first.pid})" in err and len(err.splitlines()) == 1
            main(["log", "verify", "--data-dir", str(tmp_path)])
            out = capsys.readouterr().out
            assert out.startswith(f"note: {tmp_path} is in use by a running cohort server (pid {first.pid})")
        finally:
            if second.poll() is None:
                second.kill()
                second.wait(10)
    finally:
        first.kill()
        first.wait(10)
    assert main(["log", "verify", "--data-dir", str(tmp_path)]) == 0
    assert "batches after the last checkpoint" in capsys.readouterr().out  # the dead owners' journals
    assert main(["log", "compact", "--data-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["log", "dump", "--data-dir", str(tmp_path), "--group", "g5"]) == 0
    assert '"group": "g5"' in capsys.readouterr().out
    state = await reopen(tmp_path, num_partitions=PARTITIONS)
    for p in range(4, 8):
        assert committed(p, state) >= acked[p]


async def test_a_load_given_up_half_way_leaves_the_partition_free_for_the_next_owner(tmp_path):
    a = await owner(tmp_path, range(PARTITIONS))
    await a.append(3, [key(3, 1)])
    await a.close()
    b = await owner(tmp_path, [])
    loading = asyncio.ensure_future(loaded(b, 3))
    await asyncio.sleep(0)  # recovery runs on a writer thread now
    loading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loading
    await b.release(3)
    c = await owner(tmp_path, [])
    for _ in range(200):  # the abandoned recovery finishes on its thread, then lets the directory go
        try:
            assert await loaded(c, 3) == dict([key(3, 1)])
            break
        except StorageError:
            await asyncio.sleep(0.01)
    else:
        pytest.fail("the partition stayed locked after its load was given up")
    for log in (b, c):
        await log.close()


async def test_a_partition_taken_back_while_its_release_runs_waits_for_it_and_loses_nothing(tmp_path):
    live_dir, crash_dir = tmp_path / "live", tmp_path / "crash"
    a = await owner(live_dir, range(PARTITIONS))
    appends = [asyncio.ensure_future(a.append(3, [key(3, n)])) for n in range(1, 51)]
    await asyncio.sleep(0)
    releasing = asyncio.ensure_future(a.release(3))
    await asyncio.sleep(0)
    assert await loaded(a, 3) == dict([key(3, 50)])  # every append accepted before the release is there
    await releasing
    assert all(f.done() and f.exception() is None for f in appends)
    await a.append(3, [key(3, 51)])
    await asyncio.sleep(0.2)  # whatever the release had left to do is done by now
    crash_copy(live_dir, crash_dir)
    garble_past_marks(crash_dir)  # a power cut: only what marks vouch for and what journals hold survive
    await a.close()
    assert (await reopen(crash_dir, num_partitions=PARTITIONS))[key(3, 0)[0]] == b"51"
