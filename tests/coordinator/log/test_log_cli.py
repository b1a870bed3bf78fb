"""`cohort log dump | verify | compact`: readable output, damage found with file and position, one-line
errors and meaningful exit codes (0 fine, 1 damage or refused, 2 could not run)."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from log_helpers import reopen, commit, crash_copy, garble_past_marks, open_log

from cohort.coordinator.cli.main import main
from cohort.coordinator.process.daemon import DataDirLock
from cohort.coordinator.log import list_segments
from cohort.coordinator.log.batch import iter_batches
from cohort.coordinator.log.journal import CHECKPOINT_NAME, list_journals
from cohort.coordinator.records.types import (
    GroupMemberRecord,
    GroupMetadataRecord,
    OffsetCommitRecord,
    OffsetCommitTombstone,
    TopicRecord,
    encode_record,
)


@pytest.fixture
async def data_dir(tmp_path):
    log, _ = await open_log(tmp_path, num_partitions=2, segment_bytes=250)
    for i in range(8):
        await log.append(1, [encode_record(OffsetCommitRecord("payments", "orders", i % 2, 100 + i, 4, "", 17))])
    await log.append(1, [encode_record(GroupMetadataRecord(
        "payments", "consumer", 7, "range", "m-1", 5,
        [GroupMemberRecord("m-1", "static-1", "client", "/10.0.0.1", 300000, 45000, b"\x00\x01", b"\x00\x02")]))])
    await log.append(0, [encode_record(TopicRecord("orders", uuid.UUID(int=1), 2)),
                         encode_record(OffsetCommitTombstone("billing", "orders", 0))])
    await log.close()
    return tmp_path


def run(capsys, *args):
    code = main(["log", *args])
    out, err = capsys.readouterr()
    return code, out, err


async def test_dump_prints_every_record_as_json_lines_with_filters(data_dir, capsys):
    code, out, _ = run(capsys, "dump", "--data-dir", str(data_dir))
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 11
    assert rows[0] == {"log_partition": 0, "log_offset": 0, "type": "topic", "tombstone": False,
                       "record": {"name": "orders", "topic_id": str(uuid.UUID(int=1)), "partitions": 2}}
    assert rows[1]["tombstone"] is True and rows[1]["record"]["group"] == "billing"

    code, out, _ = run(capsys, "dump", "--data-dir", str(data_dir), "--group", "payments", "--type", "group-metadata")
    [row] = [json.loads(line) for line in out.splitlines()]
    assert row["record"]["generation"] == 7 and row["record"]["members"][0]["group_instance_id"] == "static-1"
    assert row["record"]["members"][0]["assignment"] == "0002"

    code, out, _ = run(capsys, "dump", "--data-dir", str(data_dir), "--format", "table", "--type", "offset-commit")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["PART", "OFFSET", "TYPE"]
    assert "payments / orders-1" in lines[-1] and "offset=107" in lines[-1]
    assert "billing / orders-0" in out and "<tombstone>" in out


async def test_verify_passes_a_healthy_log_and_reports_damage_with_file_and_position(data_dir, capsys):
    code, out, err = run(capsys, "verify", "--data-dir", str(data_dir))
    assert code == 0 and out == "" and err.startswith("ok: 11 records")

    segment = [path for p, path in list_segments(data_dir) if p == 1][0]
    data = bytearray(segment.read_bytes())
    batch = list(iter_batches(bytes(data)))[0]
    data[batch.position + 38] ^= 0x40
    segment.write_bytes(bytes(data))
    code, out, err = run(capsys, "verify", "--data-dir", str(data_dir))
    assert code == 1
    assert out.splitlines() == [f"{segment}: position {batch.position}: " + out.split(": ", 2)[2].splitlines()[0]]
    assert "checksum mismatch" in out and err.startswith("damaged")


async def test_verify_warns_about_a_torn_tail_and_fails_on_it_only_when_strict(data_dir, capsys):
    segment = [path for p, path in list_segments(data_dir) if p == 0][-1]
    segment.write_bytes(segment.read_bytes()[:-3])
    code, out, _ = run(capsys, "verify", "--data-dir", str(data_dir))
    assert code == 1 and "3 bytes the last checkpoint covers are missing" in out  # the checkpoint vouched for them

    for mark in data_dir.glob(f"*/{CHECKPOINT_NAME}"):
        mark.unlink()  # a log no checkpoint vouches for: a short tail may be unfinished
    for _, journal in list_journals(data_dir):
        journal.unlink()
    code, out, _ = run(capsys, "verify", "--data-dir", str(data_dir))
    assert code == 0 and out.startswith(f"warning: {segment}: position 0: torn tail")
    code, _, _ = run(capsys, "verify", "--data-dir", str(data_dir), "--strict")
    assert code == 1
    assert segment.stat().st_size > 0  # verify never repairs


async def test_verify_only_warns_about_what_a_crash_leaves_past_the_last_checkpoint(tmp_path, capsys):
    live_dir, crash_dir = tmp_path / "live", tmp_path / "crash"
    log, _ = await open_log(live_dir, num_partitions=2)
    try:
        for i in range(4):
            await log.append(i % 2, [commit("g", "t", i, i)])
        await log.checkpoint()  # the first 4 are covered by the marks, the next 4 only by the journal
        for i in range(4, 8):
            await log.append(i % 2, [commit("g", "t", i, i)])
        log.catch_up()  # a crash after the segments caught up with the journal: their tails can be garbled
        crash_copy(live_dir, crash_dir)
    finally:
        await log.close()
    assert garble_past_marks(crash_dir) > 0
    code, out, err = run(capsys, "verify", "--data-dir", str(crash_dir))
    assert code == 0, out
    assert out.count("after the last checkpoint (cut on the next start") == 2 and err.startswith("ok: 4 records")
    log, live = await open_log(crash_dir, num_partitions=2)  # and the server recovers every record
    await log.close()
    assert live == dict(commit("g", "t", i, i) for i in range(8))
    garble_past_marks(crash_dir)  # the close checkpointed everything: nothing past the marks now

    segment = [path for p, path in list_segments(crash_dir) if p == 0][0]
    data = bytearray(segment.read_bytes())
    data[40] ^= 0x40  # inside the first batch, which the checkpoint covers: damage
    segment.write_bytes(bytes(data))
    code, out, err = run(capsys, "verify", "--data-dir", str(crash_dir))
    assert code == 1 and f"{segment}: position 0: checksum mismatch" in out and err.startswith("damaged")


async def test_offline_compaction_keeps_the_latest_records_and_refuses_a_locked_data_dir(data_dir, capsys):
    lock = DataDirLock(data_dir)
    lock.acquire()
    try:
        code, _, err = run(capsys, "compact", "--data-dir", str(data_dir))
    finally:
        lock.release()
    assert code == 1 and "in use by another cohort server" in err and len(err.splitlines()) == 1

    code, out, _ = run(capsys, "compact", "--data-dir", str(data_dir), "--delete-retention-ms", "0")
    assert code == 0 and "partition 1:" in out
    assert "1 partition(s) not compacted (0): their records are all in the active segment" in out
    assert out.splitlines()[-1] == "compacted 1 partition(s)"
    live = await reopen(data_dir, num_partitions=2)
    expected = dict(encode_record(OffsetCommitRecord("payments", "orders", p, 106 + p, 4, "", 17)) for p in (0, 1))
    assert {k: v for k, v in live.items() if k in expected} == expected


async def test_compacting_a_log_whose_records_are_all_in_active_segments_says_why_nothing_changed(tmp_path, capsys):
    log, _ = await open_log(tmp_path, num_partitions=3)
    for i in range(107):
        await log.append(i % 2, [encode_record(OffsetCommitRecord("g", "t", 0, i, 1, "", 17))])
    await log.close()

    code, out, err = run(capsys, "compact", "--data-dir", str(tmp_path))

    assert code == 0 and not err
    assert out.splitlines() == [
        "2 partition(s) not compacted (0-1): their records are all in the active segment, which is never "
        "compacted; a segment closes when it reaches segment.bytes or is offsets.topic.segment.ms old (the "
        "server rolls it)",
        "compacted 0 partition(s)",
    ]


def test_errors_are_one_line_with_exit_code_2_and_no_traceback(tmp_path):
    missing = tmp_path / "nope"
    proc = subprocess.run([sys.executable, "-m", "cohort.coordinator.cli.main", "log", "dump", "--data-dir", str(missing)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"cohort log: data dir {missing} does not exist or is not a directory"
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "cohort.coordinator.cli.main", "log", "verify", "--data-dir", str(empty)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no offsets log" in proc.stderr and "Traceback" not in proc.stderr


async def test_verify_counts_the_live_records_a_start_loads(data_dir, capsys):
    code, _, err = run(capsys, "verify", "--data-dir", str(data_dir))
    assert code == 0
    loaded = len(await reopen(data_dir, num_partitions=2))  # the records a start replays
    assert loaded == 4  # orders-0, orders-1, the group, the topic (the tombstone is not live)
    assert err.startswith(f"ok: 11 records in ") and f"({loaded} live records)" in err


def test_verify_shows_its_progress_on_a_terminal_only(data_dir):
    import os
    import pty

    from cohort_process import cohort_command

    leader, follower = pty.openpty()
    try:
        done = subprocess.run(cohort_command("log", "verify", "--data-dir", str(data_dir)), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=follower, timeout=60)
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal's other end is closed: everything was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    text = shown.decode()
    assert done.returncode == 0
    assert "\rverifying partition 1/2: 0 records so far" in text and "ok: 11 records" in text
    piped = subprocess.run(cohort_command("log", "verify", "--data-dir", str(data_dir)), capture_output=True,
                           text=True, timeout=60)
    assert "verifying" not in piped.stderr and piped.stderr.startswith("ok: 11 records")


async def test_dump_shows_reported_end_offsets(tmp_path, capsys):
    from cohort.coordinator.records.types import EndOffsetRecord

    log, _ = await open_log(tmp_path, num_partitions=1)
    await log.append(0, [encode_record(TopicRecord("t", uuid.UUID(int=1), 2)),
                         encode_record(EndOffsetRecord("t", 1, uuid.UUID(int=1), 42, 1000))])
    await log.close()
    code, out, _ = run(capsys, "dump", "--data-dir", str(tmp_path), "--type", "end-offset")
    [row] = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and row["record"] == {"topic": "t", "partition": 1, "topic_id": str(uuid.UUID(int=1)),
                                           "end_offset": 42, "reported_ms": 1000}
    code, out, _ = run(capsys, "dump", "--data-dir", str(tmp_path), "--format", "table")
    assert "t-1" in out.splitlines()[-1] and "end_offset=42" in out.splitlines()[-1]
