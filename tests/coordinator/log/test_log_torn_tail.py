"""A crash in the middle of a write leaves a torn last batch: in a log no checkpoint vouches for, every such
tail is cut back to the previous batch, with a warning, and the log goes on from there. Bytes a checkpoint
vouches for are never a tail: missing or damaged, the partition is refused (issue: hardening, item 2)."""
from __future__ import annotations

import logging
import shutil

import pytest
from log_helpers import commit, open_log

from cohort.coordinator.cli.main import main
from cohort.coordinator.log import list_segments
from cohort.coordinator.contracts.store import LogLoadError
from cohort.coordinator.log.batch import iter_batches
from cohort.coordinator.log.journal import CHECKPOINT_NAME, list_journals


def forget_checkpoint(data_dir):
    """What a log written before checkpoints existed looks like: segments only."""
    for path in data_dir.glob(f"*/{CHECKPOINT_NAME}"):
        path.unlink()
    for _, path in list_journals(data_dir):
        path.unlink()


async def _write_three_batches(data_dir):
    log, _ = await open_log(data_dir)
    await log.append(0, [commit("g", "t", 0, 10), commit("g", "t", 1, 11)])
    await log.append(0, [commit("g", "t", 0, 20, "meta")])
    await log.append(0, [commit("g", "t", 0, 30), commit("g", "t", 2, 32), (b"\x00\x02\x00\x01g", None)])
    await log.close()
    [(_, segment)] = list_segments(data_dir)
    return segment


async def test_cut_at_every_byte_of_the_last_batch_recovers_the_previous_batch(tmp_path, caplog):
    original = tmp_path / "original"
    segment = await _write_three_batches(original)
    data = segment.read_bytes()
    last = list(iter_batches(data))[-1]
    expected_state = {commit("g", "t", 0, 20, "meta")[0]: commit("g", "t", 0, 20, "meta")[1],
                      commit("g", "t", 1, 11)[0]: commit("g", "t", 1, 11)[1]}
    assert last.end == len(data)
    for cut in range(last.position, len(data)):
        work = tmp_path / f"cut-{cut}"
        shutil.copytree(original, work)
        work_segment = work / segment.relative_to(original)
        work_segment.write_bytes(data[:cut])
        forget_checkpoint(work)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="cohort.log"):
            log, live = await open_log(work)
        assert live == expected_state, cut
        if cut > last.position:
            assert any("torn tail" in r.getMessage() for r in caplog.records)
        assert work_segment.stat().st_size == last.position
        # The torn batch's offsets are handed out again: the log continues right after batch 2.
        assert await log.append(0, [commit("g", "t", 0, 40)]) == 3
        await log.close()
        shutil.rmtree(work)


@pytest.mark.parametrize("damage", ["zeros", "checksum"])
async def test_an_unfinished_last_batch_is_cut_off(tmp_path, damage):
    segment = await _write_three_batches(tmp_path)
    data = bytearray(segment.read_bytes())
    last = list(iter_batches(bytes(data)))[-1]
    if damage == "zeros":
        # The filesystem grew the file but the data never made it: zeros where the batch should be.
        data += bytes(200)
        expected_size = len(data) - 200
    else:
        # The whole last batch is there but some of its pages are not.
        data[last.end - 3] ^= 0xFF
        expected_size = last.position
    segment.write_bytes(bytes(data))
    forget_checkpoint(tmp_path)
    log, live = await open_log(tmp_path)
    await log.close()
    assert segment.stat().st_size == expected_size
    key, third_batch_value = commit("g", "t", 0, 30)
    assert (live[key] == third_batch_value) == (damage == "zeros")


@pytest.mark.parametrize("damage", ["cut", "flip"])
async def test_bytes_the_checkpoint_covers_are_damage_when_missing_or_changed(tmp_path, caplog, capsys, damage):
    segment = await _write_three_batches(tmp_path)  # closed cleanly: the checkpoint covers all three batches
    data = segment.read_bytes()
    if damage == "cut":
        segment.write_bytes(data[:-5])
    else:
        flipped = bytearray(data)
        flipped[-3] ^= 0xFF
        segment.write_bytes(bytes(flipped))

    with caplog.at_level(logging.WARNING, logger="cohort.log"), pytest.raises(LogLoadError) as refused:
        await open_log(tmp_path)

    assert str(segment) in str(refused.value)
    assert not any("torn tail" in r.getMessage() for r in caplog.records)
    assert any(r.levelno == logging.ERROR and str(segment) in r.getMessage() for r in caplog.records)
    assert segment.read_bytes() == (data[:-5] if damage == "cut" else flipped)  # nothing was cut away
    assert main(["log", "verify", "--data-dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert str(segment) in out and err.startswith("damaged")
