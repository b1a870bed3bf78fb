"""The `cohort` sink against a 3-node cluster on a real 3-member etcd: kill -9 of the group's coordinator
mid-stream. The query goes on by itself, and etcd's history of the group's offset keys shows every
batch's commit exactly once, in batch order, none missing.
"""
from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest
from bounded_wait import wait_until
from cohort_process import CohortServer, run_cohort
from kafka import KafkaAdminClient

from cohort.client.spark.commit_plan import CommitMarker
from cohort.coordinator.cluster import keys, values
from cohort.coordinator.cluster.etcd import EtcdClient
from cohort.coordinator.records.types import OffsetCommitRecord, decode_record
from cohort.protocol.partitioning import partition_for

CLUSTER_TESTS = str(Path(__file__).resolve().parents[1] / "cluster")
if CLUSTER_TESTS not in sys.path:
    sys.path.insert(0, CLUSTER_TESTS)

from etcd_cluster import EtcdCluster  # noqa: E402

pytestmark = [pytest.mark.usefixtures("stop_queries"), pytest.mark.timeout(300)]

TTL_MS = 2000
TOPICS = "orders:2,payments:1"
ALL_PARTITIONS = [("orders", 0), ("orders", 1), ("payments", 0)]
BATCHES = 30  # one row per partition per batch: batch b commits offset b + 1 everywhere


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def nodes(etcd, tmp_path):
    started = [CohortServer(tmp_path / f"node{i}", "--cluster", etcd.url, "--node-id", str(i),
                            "--cluster.lease.ttl.ms", str(TTL_MS)).start() for i in (1, 2, 3)]
    yield started
    for node in started:
        if node.process.poll() is None:
            node.stop()


def partition_rows(etcd) -> list[dict]:
    result = run_cohort("cluster", "status", "--cluster", etcd.url, "--output", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["partitions"]


async def commit_history(etcd, group: str, expected_last: int, timeout: float = 20) -> dict:
    """Every value the group's offset keys ever had, in etcd's order (the test's etcd never compacts)."""
    prefix = b"o/%d/%s/" % (partition_for(group, 50), group.encode())
    client = EtcdClient(etcd.endpoints)
    await client.connect()
    history: dict[tuple[str, int], list[tuple[int, int]]] = {}

    async def read() -> None:
        async for events in client.watch_prefix(prefix, 1):
            for kind, kv in events:
                assert kind == 0, f"an offset key was deleted: {kv.key!r}"
                record = decode_record(keys.record_key(kv.key), values.from_etcd(kv.value))
                assert isinstance(record, OffsetCommitRecord)
                marker = CommitMarker.decode(record.metadata)
                history.setdefault((record.topic, record.partition), []).append((record.offset, marker.batch_id))
            if len(history) == len(ALL_PARTITIONS) and all(h[-1][1] == expected_last for h in history.values()):
                return

    try:
        await asyncio.wait_for(read(), timeout)
    finally:
        await client.close()
    return history


def test_the_sink_keeps_exactly_once_by_batch_id_across_a_kill_9_of_the_groups_coordinator(spark, etcd, nodes,
                                                                                          tmp_path):
    wait_until(lambda: all(row["owner"] is not None and row["load"] == "loaded" for row in partition_rows(etcd)),
               30, "the 50 partitions owned and loaded")
    group = "spark-failover"
    owner_id = partition_rows(etcd)[partition_for(group, 50)]["owner"]
    victim = next(node for node in nodes if node.args[node.args.index("--node-id") + 1] == str(owner_id))
    bootstrap = ",".join(node.bootstrap for node in nodes)

    df = (spark.readStream.format("kafka-shaped").option("topics", TOPICS).option("rowsPerBatch", 1)
          .option("endOffset", BATCHES).load())
    query = (df.writeStream.format("cohort").option("checkpointLocation", str(tmp_path / "ckpt"))
             .option("bootstrap", bootstrap).option("group", group).trigger(availableNow=True).start())

    def batches_done() -> int:
        progress = query.lastProgress
        return -1 if progress is None else progress["batchId"]

    # Mid-stream: a few batches committed, most still to come.
    wait_until(lambda: batches_done() >= 3 or not query.isActive, 120, "the query committed its first batches")
    assert query.isActive and batches_done() < BATCHES - 10, "the query ended before the kill"
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    killed_during = batches_done()

    assert query.awaitTermination(180), "the query did not finish after the failover"
    assert query.exception() is None, query.exception()
    assert batches_done() == BATCHES - 1

    new_owner = partition_rows(etcd)[partition_for(group, 50)]["owner"]
    assert new_owner not in (None, owner_id)
    survivors = ",".join(node.bootstrap for node in nodes if node is not victim)
    admin = KafkaAdminClient(bootstrap_servers=survivors, request_timeout_ms=15000)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    final = CommitMarker(str(query.id), BATCHES - 1)
    assert {(tp.topic, tp.partition): (om.offset, CommitMarker.decode(om.metadata)) for tp, om in offsets.items()} \
        == {tp: (BATCHES, final) for tp in ALL_PARTITIONS}

    # etcd's history: each batch's commit exactly once and in order, across the kill. The only repeat
    # allowed is the same batch's identical value written again because its acknowledgement died with
    # the killed node (the client re-sent it; offsets did not move, no batch ran twice).
    history = asyncio.run(commit_history(etcd, group, BATCHES - 1))
    expected = [(batch + 1, batch) for batch in range(BATCHES)]
    for tp in ALL_PARTITIONS:
        values = history[tp]
        distinct = [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]
        assert distinct == expected, (tp, values)
        assert len(values) - len(distinct) <= 1, (tp, values)
    assert 3 <= killed_during < BATCHES - 1
