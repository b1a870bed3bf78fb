"""Model test: partitions move between two log instances sharing a data dir (release on one, load on the
other), checkpoints happen anywhere, and a power cut may strike at any step. Whatever the history of
owners, reopening under any split gives back exactly the latest acknowledged value of every key."""
from __future__ import annotations

import asyncio
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from log_helpers import crash_copy, garble_past_marks

from cohort.coordinator.log import OffsetsLog

PARTITIONS = 4


class SharedDataDirMachine(RuleBasedStateMachine):
    @initialize(split=st.lists(st.integers(0, 1), min_size=PARTITIONS, max_size=PARTITIONS))
    def start(self, split):
        self.dir = tempfile.mkdtemp(prefix="cohort-owners-model-")
        self.loop = asyncio.new_event_loop()
        self.model: dict[bytes, bytes] = {}
        self.counter = 0
        self._open(split)

    def _open(self, split):
        self.owner_of = list(split)
        self.logs = []
        for k in (0, 1):
            log = OffsetsLog(self.dir, num_partitions=PARTITIONS, segment_bytes=1000,
                             cleaner_backoff_ms=3_600_000, partitions=[p for p in range(PARTITIONS) if split[p] == k])
            self.loop.run_until_complete(log.open(lambda p, live: self._check(p, live)))
            # Owners start at different times: the first may checkpoint (and drop the journals it no
            # longer needs) before the second has loaded anything.
            self.loop.run_until_complete(log.checkpoint())
            self.logs.append(log)

    def _check(self, p, live):
        expected = {k: v for k, v in self.model.items() if int(k.split(b"/")[0]) == p}
        assert dict(live) == expected, f"partition {p}"

    @rule(p=st.integers(0, PARTITIONS - 1), key=st.integers(0, 3), tombstone=st.booleans())
    def append(self, p, key, tombstone):
        self.counter += 1
        k = f"{p}/{key}".encode()
        v = None if tombstone else str(self.counter).encode()
        self.loop.run_until_complete(self.logs[self.owner_of[p]].append(p, [(k, v)]))
        if v is None:
            self.model.pop(k, None)
        else:
            self.model[k] = v

    @rule(p=st.integers(0, PARTITIONS - 1))
    def move(self, p):
        old, new = self.owner_of[p], 1 - self.owner_of[p]

        async def hand_over():
            await self.logs[old].release(p)
            live = {}
            async for chunk in self.logs[new].load(p, 0):
                live.update(chunk)
            return live

        self._check(p, self.loop.run_until_complete(hand_over()))
        self.owner_of[p] = new

    @rule(k=st.integers(0, 1))
    def checkpoint(self, k):
        self.loop.run_until_complete(self.logs[k].checkpoint())

    @rule(split=st.lists(st.integers(0, 1), min_size=PARTITIONS, max_size=PARTITIONS), garble=st.booleans())
    def power_cut_then_restart_under_another_split(self, split, garble):
        for log in self.logs:  # a copy is not atomic: take it between checkpoints and first marks
            while log._checkpoint is not None or any(p.marking is not None for p in log._parts):
                self.loop.run_until_complete(asyncio.wait(
                    [f for f in [log._checkpoint, *(p.marking for p in log._parts)] if f]))
        crashed = tempfile.mkdtemp(prefix="cohort-owners-crash-")
        shutil.rmtree(crashed)
        crash_copy(self.dir, crashed)
        for log in self.logs:
            self.loop.run_until_complete(log.close())
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = crashed
        if garble:
            garble_past_marks(crashed)
        self._open(split)  # _check: every partition replays exactly the model

    @invariant()
    def one_owner_each(self):
        for p in range(PARTITIONS):
            assert [log.partition_state(p).value for log in self.logs].count("loaded") == 1

    def teardown(self):
        for log in getattr(self, "logs", []):
            self.loop.run_until_complete(log.close())
        if hasattr(self, "loop"):
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)


SharedDataDirMachine.TestCase.settings = settings(max_examples=12, stateful_step_count=25, deadline=None)
test_partitions_moving_between_owners_keep_every_acknowledged_value = SharedDataDirMachine.TestCase
