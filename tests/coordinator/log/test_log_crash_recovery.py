"""kill -9 the real server at random moments under a commit load: after every restart each acknowledged
commit is there (or a later one that was sent), and no partition holds an offset that was never sent.

The load runs in this test process over many raw connections with our protocol codec; the server is
`cohort serve` in a subprocess on the same data dir across all cycles, so every restart also replays
what all the earlier cycles wrote.  COHORT_CRASH_CYCLES sets the number of cycles (default 20).
"""
from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass, field


from cohort_process import CohortServer  # noqa: E402

from cohort.protocol.errors import ErrorCode  # noqa: E402
from cohort.protocol.framing import FrameReader, decode_response, encode_request  # noqa: E402
from cohort.protocol.messages import OffsetCommitRequest, OffsetFetchRequest  # noqa: E402

CYCLES = int(os.environ.get("COHORT_CRASH_CYCLES", "20"))
CONNECTIONS = 12
PARTITIONS = 4
TOPIC = "orders"
COMMIT_VERSION = 8
FETCH_VERSION = 7

CommitTopic = OffsetCommitRequest.OffsetCommitRequestTopic
CommitPartition = CommitTopic.OffsetCommitRequestPartition
FetchTopic = OffsetFetchRequest.OffsetFetchRequestTopic


@dataclass
class History:
    """What the load sent and what the server acknowledged, per (group, partition)."""

    sent: dict[tuple[str, int], dict[int, str]] = field(default_factory=dict)
    acked: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)
    next_seq: dict[str, int] = field(default_factory=dict)
    acks: int = 0


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames = FrameReader(1 << 24)
        self.correlation = 0

    @classmethod
    async def open(cls, port: int) -> "Connection":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def call(self, message, version: int):
        self.correlation += 1
        self.writer.write(encode_request(message, version, self.correlation, "crash-test"))
        await self.writer.drain()
        while True:
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            frames = self.frames.feed(data)
            if frames:
                correlation, response = decode_response(message.API_KEY, version, frames[0])
                assert correlation == self.correlation
                return response

    def close(self) -> None:
        self.writer.close()


async def committer(port: int, group: str, history: History, stop: asyncio.Event) -> None:
    """Commit all partitions of the group again and again, one request at a time, noting every ack."""
    try:
        conn = await Connection.open(port)
    except OSError:
        return
    try:
        while not stop.is_set():
            seq = history.next_seq.get(group, 0)
            history.next_seq[group] = seq + 1
            offsets = {p: seq * 10 + p for p in range(PARTITIONS)}
            metadata = f"seq-{seq}"
            for p, offset in offsets.items():
                history.sent.setdefault((group, p), {})[offset] = metadata
            request = OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=-1, member_id="",
                topics=[CommitTopic(name=TOPIC, partitions=[
                    CommitPartition(partition_index=p, committed_offset=o, committed_metadata=metadata)
                    for p, o in offsets.items()])])
            response = await conn.call(request, COMMIT_VERSION)
            for t in response.topics:
                for part in t.partitions:
                    if part.error_code == ErrorCode.NONE:
                        history.acked[(group, part.partition_index)] = (offsets[part.partition_index], metadata)
                        history.acks += 1
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        pass  # the server was killed: whatever was in flight is "sent, not acknowledged"
    finally:
        conn.close()


async def fetch_committed(port: int, group: str) -> dict[int, tuple[int, str]]:
    """The committed offsets of a group, waiting out COORDINATOR_LOAD_IN_PROGRESS (bounded)."""
    conn = await Connection.open(port)
    try:
        for _ in range(200):
            response = await conn.call(
                OffsetFetchRequest(group_id=group, topics=[FetchTopic(name=TOPIC, partition_indexes=list(range(PARTITIONS)))]),
                FETCH_VERSION)
            if response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                await asyncio.sleep(0.05)
                continue
            assert response.error_code == ErrorCode.NONE, ErrorCode(response.error_code).name
            out = {}
            for t in response.topics:
                for part in t.partitions:
                    assert part.error_code == ErrorCode.NONE, ErrorCode(part.error_code).name
                    out[part.partition_index] = (part.committed_offset, part.metadata)
            return out
        raise AssertionError(f"group {group}: still loading after 10 s")
    finally:
        conn.close()


def check(history: History, group: str, committed: dict[int, tuple[int, str]], cycle: int) -> None:
    for p in range(PARTITIONS):
        offset, metadata = committed.get(p, (-1, ""))
        sent = history.sent.get((group, p), {})
        acked = history.acked.get((group, p))
        where = f"cycle {cycle}, group {group}, partition {p}"
        if offset == -1:
            assert acked is None, f"{where}: acknowledged {acked} but nothing is committed"
            continue
        assert offset in sent, f"{where}: offset {offset} was never sent"
        assert sent[offset] == metadata, f"{where}: offset {offset} with metadata {metadata!r}, sent {sent[offset]!r}"
        if acked is not None:
            assert offset >= acked[0], f"{where}: committed {offset} is older than the acknowledged {acked[0]}"


async def test_every_acknowledged_commit_survives_kill_9(tmp_path):
    data_dir = tmp_path / "data"
    rng = random.Random(int(os.environ.get("COHORT_CRASH_SEED", "4")))
    history = History()
    groups = [f"crash-group-{i}" for i in range(CONNECTIONS)]
    server = None
    try:
        for cycle in range(CYCLES):
            server = CohortServer(data_dir).start(timeout=60)
            # Recovery check of everything the previous cycles did, before new load.
            for group in groups:
                check(history, group, await fetch_committed(server.port, group), cycle)
            stop = asyncio.Event()
            tasks = [asyncio.create_task(committer(server.port, g, history, stop)) for g in groups]
            await asyncio.sleep(rng.uniform(0.05, 0.5))  # the scenario: a random stretch of load before the kill
            server.process.kill()  # SIGKILL: no flush, no goodbye
            server.process.wait(10)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 10)
            server.stop()
        server = CohortServer(data_dir).start(timeout=60)
        for group in groups:
            check(history, group, await fetch_committed(server.port, group), CYCLES)
        assert history.acks > 0
    finally:
        if server is not None and server.process is not None and server.process.poll() is None:
            server.process.kill()
            server.process.wait(10)
