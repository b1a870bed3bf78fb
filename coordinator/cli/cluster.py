"""``cohort cluster status | import``: look at a cluster in etcd, and move a single node's log into it.

`status` reads etcd: each member's own status first (health, leader, database size, alarms such as
NOSPACE; a member answers it without a quorum, so quorum loss is told as such), then the nodes with their
lease time left (a node whose lease lapsed is `cut-off` if its address still takes a connection, else
`gone`), and per offsets partition its owner, ownership epoch, load state (as the owner publishes it) and
how many groups and committed offsets it holds. `import` copies the live records of a stopped single node's data dir into etcd, each key only
if the cluster does not have it yet, so it is idempotent and never overwrites what the cluster wrote
since; it is a dry run unless ``--execute``. One line on stderr and a non-zero exit for every
failure: 1 refused, 2 could not run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_ERROR = 2
INSTALL_HINT = "cluster mode needs the etcd client: pip install 'cohort[cluster]'"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="cluster mode on etcd: status, import a single node's log",
                                   description="Inspect a Cohort cluster kept in etcd, or import a single node's "
                                   "offsets log into it.")
    commands = parser.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)

    status = commands.add_parser("status", help="etcd members, nodes, and partition -> owner, epoch, load state",
                                 description="etcd's members (health, leader, database size, alarms), the nodes "
                                 "(id, address, state: live, cut-off or gone, lease time left) and, per offsets "
                                 "partition, its owner, ownership epoch, load state (loading, loaded, releasing), "
                                 "groups and committed offsets. Exits 2 when etcd has no quorum.")
    _cluster_argument(status)
    status.add_argument("--output", choices=("table", "json"), default="table", help="output format (default table)")
    status.set_defaults(func=status_command)

    imp = commands.add_parser("import", help="copy a single node's offsets log into the cluster (dry run by default)",
                              description="Copy the offsets, groups and topics of a stopped single node's data "
                              "dir into etcd. Keys the cluster already has are left alone (idempotent). Without "
                              "--execute only prints what it would do. Refuses while any node is running.")
    _cluster_argument(imp)
    imp.add_argument("--data-dir", required=True, type=Path, help="the single node's data dir (server stopped)")
    imp.add_argument("--execute", action="store_true", help="write to etcd (default: dry run)")
    imp.add_argument("--output", choices=("table", "json"), default="table", help="output format (default table)")
    imp.set_defaults(func=import_command)


def _cluster_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default=os.environ.get("COHORT_CLUSTER"),
                        help="etcd://HOST:PORT[,HOST:PORT...] (default: $COHORT_CLUSTER)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for etcd per call (default 5)")


def _fail(message: str, code: int = EXIT_ERROR) -> int:
    print(f"cohort cluster: {message}", file=sys.stderr)
    return code


def _endpoints(args: argparse.Namespace) -> list[str]:
    from cohort.coordinator.config import parse_cluster_url

    if not args.cluster:
        raise ValueError("no cluster given: --cluster etcd://HOST:PORT[,...] or COHORT_CLUSTER")
    return parse_cluster_url(args.cluster)


def _client(args: argparse.Namespace):
    try:
        from cohort.coordinator.cluster.etcd import EtcdClient
    except ImportError:
        raise ValueError(INSTALL_HINT) from None
    return EtcdClient(_endpoints(args), timeout_s=args.timeout)


# --- status ----------------------------------------------------------------------------------------

def status_command(args: argparse.Namespace) -> int:
    try:
        client = _client(args)
    except ValueError as exc:
        return _fail(str(exc))
    from cohort.coordinator.cluster.etcd import EtcdUnavailable
    from cohort.coordinator.cluster.status import cluster_status

    try:
        report = asyncio.run(cluster_status(client))
    except EtcdUnavailable as exc:
        return _fail(str(exc))
    try:
        _print_status(report, args.output)
    except BrokenPipeError:  # `cohort cluster status | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if not report["quorum"]:
        return _fail(f"etcd has no quorum: {report['quorum_detail']}")
    return EXIT_OK


def _print_status(report: dict, output: str) -> None:
    if output == "json":
        print(json.dumps(report, indent=2))
        return
    print(f"{'ETCD MEMBER':<22} {'HEALTH':<10} {'LEADER':<6} {'TERM':>6} {'DB SIZE':>10} {'IN USE':>10}  ALARMS")
    for m in report["members"]:
        print(f"{m['endpoint']:<22} {m['health']:<10} {'yes' if m['leader'] else '-':<6} {m['raft_term'] or '-':>6} "
              f"{_mib(m['db_size']):>10} {_mib(m['db_size_in_use']):>10}  {','.join(m['alarms']) or '-'}")
    for alarm in report["alarms"]:
        print(f"ALARM {alarm}: {_ALARM_HINTS.get(alarm, 'see etcdctl alarm list')}")
    if not report["quorum"]:
        return
    print()
    print(f"{'NODE':>5}  {'ADDRESS':<24} {'STATE':<9} LEASE LEFT")
    for node in report["nodes"]:
        left = node["lease_ttl_s"]
        left = "-" if left is None else f"{left:.2f}s" if node["lease_ttl_exact"] else f"{left:.0f}-{left + 1:.0f}s"
        print(f"{node['node_id']:>5}  {node['address']:<24} {node['state']:<9} {left}")
    print()
    print(f"{'PARTITION':>9}  {'OWNER':>5}  {'EPOCH':>10}  {'LOAD':<12}  {'GROUPS':>6}  {'OFFSETS':>8}")
    for row in report["partitions"]:
        owner, epoch, load = ("-" if row[k] is None else row[k] for k in ("owner", "epoch", "load"))
        print(f"{row['partition']:>9}  {owner:>5}  {epoch:>10}  {load:<12}  {row['groups']:>6}  {row['offsets']:>8}")


_ALARM_HINTS = {
    "NOSPACE": "etcd reached its quota and refuses writes (commits, claims); nothing acknowledged is lost. "
               "Compact, defragment every member, then disarm: docs/cluster-operations.md",
    "CORRUPT": "a member's data differs from the others': replace that member",
}


def _mib(size: int | None) -> str:
    if not size:
        return "-"
    return f"{size / 1024:.0f} KiB" if size < 1 << 20 else f"{size / 1048576:.1f} MiB"


# --- import ----------------------------------------------------------------------------------------

def import_command(args: argparse.Namespace) -> int:
    from cohort.coordinator.process.daemon import DataDirLock, StartupError
    from cohort.coordinator.log import CorruptLogError, list_partitions

    data_dir: Path = args.data_dir
    if not data_dir.is_dir():
        return _fail(f"no data dir at {data_dir}")
    if not list_partitions(data_dir):
        return _fail(f"no offsets log in {data_dir} (no __consumer_offsets-* segments)")
    try:
        client = _client(args)
    except ValueError as exc:
        return _fail(str(exc))
    lock = DataDirLock(data_dir)
    try:
        lock.acquire()
    except StartupError as exc:
        return _fail(f"{exc}: stop it first", EXIT_REFUSED)
    from cohort.coordinator.cluster.etcd import EtcdUnavailable

    try:
        live = _live_records(data_dir)
        report = asyncio.run(_import(client, live, execute=args.execute))
    except CorruptLogError as exc:
        return _fail(f"damaged log, nothing imported: {exc}", EXIT_REFUSED)
    except EtcdUnavailable as exc:
        return _fail(str(exc))
    except _Refused as exc:
        return _fail(str(exc), EXIT_REFUSED)
    finally:
        lock.release()
    if args.output == "json":
        print(json.dumps(report, indent=2))
    else:
        verb = "imported" if args.execute else "would import (dry run; --execute to write)"
        print(f"{'PARTITION':>9}  {'RECORDS':>8}  {'PRESENT':>8}  {'NEW':>8}")
        for row in report["partitions"]:
            print(f"{row['partition']:>9}  {row['records']:>8}  {row['present']:>8}  {row['new']:>8}")
        print(f"{verb}: {report['new']} records ({report['present']} already in the cluster)")
    return EXIT_OK


class _Refused(Exception):
    pass


def _live_records(data_dir: Path) -> dict[int, dict[bytes, bytes]]:
    """Per partition, the latest value of every key whose latest record is not a tombstone."""
    from cohort.coordinator.log import list_partitions, read_partition

    live: dict[int, dict[bytes, bytes]] = {}
    for partition in list_partitions(data_dir):
        latest: dict[bytes, bytes | None] = {}
        for _, key, value in read_partition(data_dir, partition):
            latest[key] = value
        live[partition] = {k: v for k, v in latest.items() if v is not None}
    return live


async def _import(client, live: dict[int, dict[bytes, bytes]], *, execute: bool) -> dict:
    from cohort.coordinator.cluster import keys, values
    from cohort.coordinator.cluster.etcd import ETCD_MAX_TXN_OPS, compare_create_revision, op_put, prefix_end

    await client.connect()
    try:
        nodes, _, _ = await client.range(keys.NODES, prefix_end(keys.NODES), limit=1)
        if execute and nodes:
            raise _Refused("nodes are running in this cluster (they would not see the imported records): "
                           "stop every node, import, then start them")
        rows, total_new, total_present = [], 0, 0
        for partition, records in sorted(live.items()):
            wanted = {key: values.for_etcd(key, v) for key, v in
                      ((keys.etcd_key(partition, k), v) for k, v in records.items())}
            present = set()
            for prefix in [*keys.partition_prefixes(partition), *([keys.TOPICS, keys.SECURITY] if partition == 0 else [])]:
                async for page in client.range_prefix(prefix, keys_only=True):
                    present.update(kv.key for kv in page if kv.key in wanted)
            new = [(k, v) for k, v in wanted.items() if k not in present]
            if execute:
                await _write_if_absent(client, new, ETCD_MAX_TXN_OPS, compare_create_revision, op_put)
            rows.append({"partition": partition, "records": len(wanted), "present": len(present), "new": len(new)})
            total_new += len(new)
            total_present += len(present)
        return {"executed": execute, "new": total_new, "present": total_present, "partitions": rows}
    finally:
        await client.close()


async def _write_if_absent(client, items: list[tuple[bytes, bytes]], max_ops: int, compare_create_revision, op_put):
    """Put each key only if it does not exist (a key created meanwhile is left alone)."""
    budget = 1024 * 1024
    i = 0
    while i < len(items):
        chunk, size = [], 0
        while i < len(items) and len(chunk) < max_ops and (not chunk or size + len(items[i][1]) < budget):
            chunk.append(items[i])
            size += len(items[i][0]) + len(items[i][1])
            i += 1
        held, _, _ = await client.txn([compare_create_revision(k, 0) for k, _ in chunk],
                                      [op_put(k, v) for k, v in chunk])
        if not held:  # someone created one of them meanwhile: one by one
            for k, v in chunk:
                await client.txn([compare_create_revision(k, 0)], [op_put(k, v)])
