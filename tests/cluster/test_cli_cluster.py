"""`cohort cluster status` and `cohort cluster import` as an operator runs them, against real etcd."""
from __future__ import annotations

import asyncio
import json

from bounded_wait import wait_until_async
from cohort_process import CohortServer, clean_env, run_cohort
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from cohort.coordinator.cluster import keys, values
from cohort.coordinator.cluster.etcd import EtcdClient, prefix_end
from cohort.coordinator.cluster.ownership import EtcdOwnership
from cohort.coordinator.cluster.store import EtcdStore
from cohort.coordinator.contracts.ownership import Node
from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle
from cohort.coordinator.records.types import GroupMetadataRecord, OffsetCommitRecord, decode_record, encode_record
from cohort.protocol.partitioning import partition_for

from test_ownership import Events, Member, eventually, preferred_owner


async def test_status_lists_nodes_owners_epochs_and_groups_and_import_refuses_while_nodes_run(etcd, tmp_path):
    client = EtcdClient(etcd.endpoints)
    store = EtcdStore(client)
    ownership = EtcdOwnership(client, Node(7, "10.0.0.7", 9092), store=store, lease_ttl_ms=2000)
    events = Events(store)
    await ownership.start(events)
    try:
        await eventually(lambda: len(events.serving) == 50 and not events.loads, 10, "node 7 owns all")
        p = partition_for("status-group", 50)
        await store.append(p, [encode_record(GroupMetadataRecord("status-group", "consumer", 1, "range", None)),
                               encode_record(OffsetCommitRecord("status-group", "t", 0, 5))])
        result = await asyncio.to_thread(run_cohort, "cluster", "status", "--cluster", etcd.url, "--output", "json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert [(n["node_id"], n["address"]) for n in report["nodes"]] == [(7, "10.0.0.7:9092")]
        assert 0 < report["nodes"][0]["lease_ttl_s"] <= 2
        rows = {row["partition"]: row for row in report["partitions"]}
        assert len(rows) == 50 and all(row["owner"] == 7 for row in rows.values())
        assert rows[p]["epoch"] == events.serving[p]
        assert (rows[p]["groups"], rows[p]["offsets"]) == (1, 1)
        assert all(row["load"] in ("loading", "loaded") for row in rows.values())
        await eventually_status(etcd, lambda rows: all(row["load"] == "loaded" for row in rows.values()),
                                "every partition published as loaded")
        table = await asyncio.to_thread(run_cohort, "cluster", "status", "--cluster", etcd.url)
        assert table.returncode == 0 and "10.0.0.7:9092" in table.stdout
        assert "LOAD" in table.stdout and " loaded " in table.stdout
        # Importing while a node runs would hide the imported records from it: refused.
        data_dir = tmp_path / "empty-node"
        data_dir.mkdir()
        (data_dir / "__consumer_offsets-0").mkdir()
        (data_dir / "__consumer_offsets-0" / "00000000000000000000.log").write_bytes(b"")
        refused = await asyncio.to_thread(run_cohort, "cluster", "import", "--cluster", etcd.url,
                                          "--data-dir", str(data_dir), "--execute")
        assert refused.returncode == 1 and "nodes are running" in refused.stderr, refused.stderr
    finally:
        await ownership.stop()
        await client.close()


async def status_rows(etcd) -> dict[int, dict]:
    result = await asyncio.to_thread(run_cohort, "cluster", "status", "--cluster", etcd.url, "--output", "json")
    assert result.returncode == 0, result.stderr
    return {row["partition"]: row for row in json.loads(result.stdout)["partitions"]}


async def eventually_status(etcd, predicate, what: str, timeout: float = 15) -> dict[int, dict]:
    async def status_if_it_holds():
        rows = await status_rows(etcd)
        return rows if predicate(rows) else None
    return await wait_until_async(status_if_it_holds, timeout, what, interval=0.2)


class NeverLoads(Events):
    """A listener that takes partitions but never reads them from the store: they stay loading."""

    async def _load_partition_now(self, partition: int, epoch: int) -> None:
        await asyncio.Event().wait()


async def test_status_shows_loading_until_the_store_delivered_and_releasing_while_a_handoff_drains(etcd):
    slow = Member(etcd.endpoints, 5)
    slow.events = NeverLoads(slow.store)
    await slow.start()
    watcher = EtcdClient(etcd.endpoints)
    await watcher.connect()
    seen: list[tuple[int, str, int]] = []  # (partition, state or "deleted", lease) in etcd's order

    async def watch(revision: int) -> None:
        async for events in watcher.watch_prefix(keys.LOADS, revision):
            for kind, kv in events:
                seen.append((keys.id_of(kv.key, keys.LOADS), "deleted" if kind == 1 else kv.value.decode(), kv.lease))

    fast = None
    watching = None
    try:
        await eventually(lambda: len(slow.events.serving) == 50, 10, "node 5 owns all")
        rows = await status_rows(etcd)
        assert {row["owner"] for row in rows.values()} == {5}
        assert {row["load"] for row in rows.values()} == {"loading"}  # nothing was read from the store
        assert {slow.ownership.partition_state(p) for p in range(50)} == {PartitionLifecycle.LOADING}
        _, _, revision = await watcher.range(keys.LOADS, prefix_end(keys.LOADS))
        watching = asyncio.create_task(watch(revision + 1))
        # Node 6 joins: node 5 hands its share over (publishing releasing), node 6 loads it.
        fast = await Member(etcd.endpoints, 6).start()
        moved = {p for p in range(50) if preferred_owner(p, [5, 6]) == 6}
        rows = await eventually_status(
            etcd, lambda rows: all(rows[p]["owner"] == 6 and rows[p]["load"] == "loaded" for p in moved),
            "node 6 loaded its share")
        assert all(rows[p]["owner"] == 5 and rows[p]["load"] == "loading" for p in set(range(50)) - moved)
        assert all(fast.ownership.partition_state(p) is PartitionLifecycle.LOADED for p in moved)
        assert all(slow.ownership.partition_state(p) is PartitionLifecycle.UNOWNED for p in moved)
        slow_lease, fast_lease = slow.ownership.lease.lease_id, fast.ownership.lease.lease_id
        for p in moved:
            states = [(state, lease) for q, state, lease in seen if q == p]
            assert states == [("releasing", slow_lease), ("deleted", 0), ("loading", fast_lease),
                              ("loaded", fast_lease)], (p, states)
    finally:
        if watching is not None:
            watching.cancel()
        await watcher.close()
        if fast is not None:
            await fast.stop()
        await slow.stop()


def test_status_without_etcd_is_one_line_and_exit_2():
    result = run_cohort("cluster", "status", "--cluster", "etcd://127.0.0.1:1", "--timeout", "1")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_import_copies_a_single_nodes_log_idempotently_and_dry_run_by_default(etcd, tmp_path):
    server = CohortServer(tmp_path / "data").start()
    try:
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="imported", enable_auto_commit=False)
        consumer.commit({TopicPartition("orders", i): OffsetAndMetadata(100 + i, "m", -1) for i in range(3)})
        consumer.close()
        refused = run_cohort("cluster", "import", "--cluster", etcd.url, "--data-dir", str(server.data_dir))
        assert refused.returncode == 1 and "in use" in refused.stderr  # the server holds the data dir
    finally:
        assert server.stop() == 0

    args = ("cluster", "import", "--cluster", etcd.url, "--data-dir", str(server.data_dir), "--output", "json")
    dry = run_cohort(*args)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["new"] >= 3 and not json.loads(dry.stdout)["executed"]
    assert asyncio.run(_data_keys(etcd)) == {}

    done = run_cohort(*args, "--execute")
    assert done.returncode == 0, done.stderr
    imported = asyncio.run(_data_keys(etcd))
    p = partition_for("imported", 50)
    offsets = {}
    for key, value in imported.items():
        record = decode_record(keys.record_key(key), values.from_etcd(value))
        if isinstance(record, OffsetCommitRecord):
            assert key.startswith(b"o/%d/" % p)
            offsets[(record.topic, record.partition)] = record.offset
    assert offsets == {("orders", i): 100 + i for i in range(3)}

    again = run_cohort(*args, "--execute")
    assert again.returncode == 0 and json.loads(again.stdout)["new"] == 0
    assert asyncio.run(_data_keys(etcd)) == imported


async def _data_keys(etcd) -> dict[bytes, bytes]:
    client = EtcdClient(etcd.endpoints)
    await client.connect()
    try:
        found = {}
        for prefix in keys.DATA_PREFIXES:
            kvs, _, _ = await client.range(prefix, prefix_end(prefix))
            found.update((kv.key, kv.value) for kv in kvs)
        return found
    finally:
        await client.close()


def test_serve_with_unreachable_etcd_or_a_bad_cluster_url_exits_with_one_line(tmp_path):
    from cohort_process import free_port

    base = ("serve", "--listen", "127.0.0.1:0", "--metrics", f"127.0.0.1:{free_port()}",
            "--data-dir", str(tmp_path / "unused"))
    unreachable = run_cohort(*base, "--cluster", "etcd://127.0.0.1:1")
    assert unreachable.returncode != 0
    assert unreachable.stderr.strip().splitlines()[-1].startswith("cohort: error: cannot start: EtcdUnavailable")
    assert "Traceback" not in unreachable.stderr
    assert not (tmp_path / "unused").exists()  # cluster mode never touches a data dir
    bad = run_cohort(*base, "--cluster", "http://127.0.0.1:2379")
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "etcd://HOST:PORT" in bad.stderr
    with_workers = run_cohort(*base, "--cluster", "etcd://127.0.0.1:2379", "--workers", "2")
    assert with_workers.returncode != 0 and "cluster mode runs one coordinator process" in with_workers.stderr
