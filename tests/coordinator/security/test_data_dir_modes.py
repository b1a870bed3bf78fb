"""The data dir holds SCRAM credentials: it is created 0700 and every file in it 0600, even under umask 000."""
from __future__ import annotations

import os
import stat
from contextlib import contextmanager

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from cohort_process import CohortServer, run_cohort

pytestmark = pytest.mark.timeout(120)


@contextmanager
def umask(mask: int):
    """Processes started inside inherit `mask` (the CLI and the server alike)."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(root) -> dict[str, int]:
    found = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for directory, subdirs, files in os.walk(root):
        for name in subdirs + files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


def test_under_umask_000_the_data_dir_and_its_files_are_the_owners_only(tmp_path):
    data = tmp_path / "data"
    secret = tmp_path / "pw"
    secret.write_text("alice-secret\n")
    with umask(0):
        added = run_cohort("users", "add", "alice", "--password-file", str(secret), "--data-dir", str(data))
        assert added.returncode == 0, added.stderr
        server = CohortServer(data).start()
    try:
        consumer = KafkaConsumer(group_id="g", bootstrap_servers=server.bootstrap, enable_auto_commit=False)
        try:
            consumer.commit({TopicPartition("t", 0): OffsetAndMetadata(5, "", -1)})
        finally:
            consumer.close()
    finally:
        assert server.stop() == 0
    found = modes(data)
    assert any(name.endswith(".log") for name in found), found  # segments were written
    loose = {name: oct(mode) for name, mode in found.items() if mode & 0o077}
    assert loose == {}


def test_an_existing_world_readable_data_dir_is_tightened_at_start(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)
    server = CohortServer(data).start()
    try:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
    finally:
        assert server.stop() == 0
