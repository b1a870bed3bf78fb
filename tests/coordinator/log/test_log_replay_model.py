"""Whatever happens (commits, deletes, group writes, compactions, time, restarts, crashes), a reopened log replays
exactly the latest live record of every key, as a plain dict model says."""
from __future__ import annotations

import asyncio
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from log_helpers import garble_past_marks

from cohort.coordinator.log import OffsetsLog
from cohort.coordinator.records.types import (
    GroupMemberRecord,
    GroupMetadataRecord,
    GroupMetadataTombstone,
    OffsetCommitRecord,
    OffsetCommitTombstone,
    decode_records,
    encode_record,
)
from cohort.protocol.partitioning import partition_for

PARTITIONS = 3
RETENTION_MS = 1000
groups = st.sampled_from(["alpha", "beta", "gamma", "delta"])
topics = st.sampled_from(["orders", "clicks"])
parts = st.integers(0, 3)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class OffsetsLogMachine(RuleBasedStateMachine):
    @initialize()
    def start(self):
        self.dir = tempfile.mkdtemp(prefix="cohort-log-model-")
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.model: dict[bytes, bytes] = {}
        self.last_offsets = [-1] * PARTITIONS
        self.log = None
        self._open()

    def _open(self):
        self.loaded: dict[int, list] = {}
        self.log = OffsetsLog(self.dir, num_partitions=PARTITIONS, segment_bytes=400, clock=self.clock,
                              delete_retention_ms=RETENTION_MS, cleaner_backoff_ms=3_600_000)
        self.loop.run_until_complete(self.log.open(lambda p, live: self.loaded.__setitem__(p, live)))

    def _append(self, group: str, recs: list):
        pairs = [encode_record(r) for r in recs]
        p = partition_for(group, PARTITIONS)
        last = self.loop.run_until_complete(self.log.append(p, pairs))
        assert last == self.last_offsets[p] + len(pairs)
        self.last_offsets[p] = last
        for k, v in pairs:
            if v is None:
                self.model.pop(k, None)
            else:
                self.model[k] = v

    @rule(g=groups, t=topics, p=parts, offset=st.integers(0, 10**12), md=st.sampled_from(["", "x"]))
    def commit(self, g, t, p, offset, md):
        self._append(g, [OffsetCommitRecord(g, t, p, offset, 3, md, int(self.clock.now * 1000))])

    @rule(g=groups, t=topics, n=st.integers(1, 4), offset=st.integers(0, 10**6))
    def commit_many_partitions(self, g, t, n, offset):
        self._append(g, [OffsetCommitRecord(g, t, p, offset + p, -1, "", 1) for p in range(n)])

    @rule(g=groups, t=topics, p=parts)
    def delete_offset(self, g, t, p):
        self._append(g, [OffsetCommitTombstone(g, t, p)])

    @rule(g=groups, gen=st.integers(0, 50), n=st.integers(0, 2))
    def write_group(self, g, gen, n):
        members = [GroupMemberRecord(f"m{i}", None, "c", "/h", 300, 100, b"s", b"a" * i) for i in range(n)]
        self._append(g, [GroupMetadataRecord(g, "consumer", gen, "range" if n else None,
                                             "m0" if n else None, 5, members)])

    @rule(g=groups)
    def delete_group(self, g):
        doomed = [OffsetCommitTombstone(g, t, p) for t in ("orders", "clicks") for p in range(4)]
        self._append(g, doomed + [GroupMetadataTombstone(g)])

    @rule(seconds=st.sampled_from([0.1, 0.6, 2.0]))
    def time_passes(self, seconds):
        self.clock.now += seconds

    @rule()
    def compact(self):
        self.loop.run_until_complete(self.log.compact())

    @rule()
    def restart(self):
        self.loop.run_until_complete(self.log.close())
        self._open()
        replayed = {k: v for live in self.loaded.values() for k, v in live}
        assert replayed == self.model
        # Every live record is decodable, and lands in the partition of its group.
        for p, live in self.loaded.items():
            for rec in decode_records(live):
                assert partition_for(rec.group, PARTITIONS) == p

    @rule(garble=st.booleans())
    def crash(self, garble):
        """The files as a crash finds them, and (garble) what a power cut may leave past the checkpoint."""
        # A copy is not atomic: take it between checkpoints (and the first marks written at load).
        while self.log._checkpoint is not None or any(p.marking is not None for p in self.log._parts):
            self.loop.run_until_complete(asyncio.wait([f for f in [self.log._checkpoint,
                                                                   *(p.marking for p in self.log._parts)] if f]))
        crashed = tempfile.mkdtemp(prefix="cohort-log-crash-")
        shutil.copytree(self.dir, crashed, dirs_exist_ok=True)
        self.loop.run_until_complete(self.log.close())
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = crashed
        if garble:
            garble_past_marks(crashed)
        self._open()
        assert {k: v for live in self.loaded.values() for k, v in live} == self.model

    @precondition(lambda self: self.log is not None)
    @invariant()
    def offsets_keep_growing(self):
        for p in range(PARTITIONS):
            assert self.log.next_offset(p) == self.last_offsets[p] + 1

    def teardown(self):
        if getattr(self, "log", None) is not None:
            self.loop.run_until_complete(self.log.close())
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)


OffsetsLogMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=40, deadline=None)
test_reopened_log_replays_the_model = OffsetsLogMachine.TestCase
