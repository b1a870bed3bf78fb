"""`cohort groups import-zookeeper`: migrate offsets kept the pre-0.8.2 way into a Kafka-protocol coordinator.

Old consumers stored offsets in ZooKeeper at
`/consumers/[group]/offsets/[topic]/[partition]` → offset as decimal text (the
layout in Kafka's own documentation). This reads that tree, shows the plan
(dry run by default, like reset-offsets), and with `--execute` commits the
offsets as simple commits, first creating missing topics (or adding
partitions) so that every imported partition exists. Groups that have active
members are refused, as for a reset. A chroot can be given in the connection
string (`host:2181/kafka`).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
from dataclasses import dataclass, field

from cohort.client.admin import Admin, NewTopic
from cohort.client.cli.output import DRY_RUN_WARNING, error, print_json, print_table, warn
from cohort.client.cli.runner import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CommandError,
    add_connection_options,
    run_admin_command,
)
from cohort.client.errors import KafkaError
from cohort.client.topic_partition import TopicPartition

CONSUMERS_PATH = "/consumers"


@dataclass(slots=True)
class ZooKeeperOffsets:
    """What ZooKeeper holds: group → partition → offset."""

    groups: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)

    def partitions_needed(self) -> dict[str, int]:
        """Per topic, the partition count the registry must have for every imported partition to exist."""
        needed: dict[str, int] = {}
        for offsets in self.groups.values():
            for tp in offsets:
                needed[tp.topic] = max(needed.get(tp.topic, 0), tp.partition + 1)
        return needed


def read_zookeeper_offsets(hosts: str, groups: list[str] | None, timeout_s: float) -> ZooKeeperOffsets:
    """Walk /consumers/[group]/offsets/[topic]/[partition]; a malformed node is an error naming its path."""
    try:
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError
        from kazoo.handlers.threading import KazooTimeoutError
    except ImportError:
        raise CommandError("kazoo is not installed (pip install 'cohort[zookeeper]')", EXIT_USAGE) from None

    # kazoo logs every failed connection attempt; the command reports one line itself.
    kazoo_log = logging.getLogger("kazoo")
    kazoo_log.addHandler(logging.NullHandler())
    kazoo_log.propagate = False
    zk = KazooClient(hosts=hosts, timeout=timeout_s, connection_retry={"max_tries": 1}, command_retry={"max_tries": 1})
    try:
        try:
            zk.start(timeout=timeout_s)
        except (KazooTimeoutError, ValueError, OSError) as exc:
            raise CommandError(
                f"cannot connect to ZooKeeper at {hosts}: no session within {timeout_s:g} s ({exc or 'timed out'})",
                EXIT_UNREACHABLE,
            ) from None
        try:
            available = sorted(zk.get_children(CONSUMERS_PATH))
        except NoNodeError:
            available = []
        if groups:
            missing = [g for g in groups if g not in available]
            if missing:
                raise CommandError(f"ZooKeeper has no offsets for group '{missing[0]}' (no {CONSUMERS_PATH}/{missing[0]})")
            chosen = list(dict.fromkeys(groups))
        else:
            chosen = available
        result = ZooKeeperOffsets()
        for group in chosen:
            base = f"{CONSUMERS_PATH}/{group}/offsets"
            try:
                topics = sorted(zk.get_children(base))
            except NoNodeError:
                continue  # a group registered in ZooKeeper that never committed
            offsets: dict[TopicPartition, int] = {}
            for topic in topics:
                for child in sorted(zk.get_children(f"{base}/{topic}"), key=lambda c: (len(c), c)):
                    path = f"{base}/{topic}/{child}"
                    if not child.isdigit():
                        raise CommandError(f"ZooKeeper node {path}: partition name is not a number")
                    data, _ = zk.get(path)
                    text = (data or b"").decode("utf-8", errors="replace").strip()
                    try:
                        offset = int(text)
                    except ValueError:
                        raise CommandError(f"ZooKeeper node {path}: offset {text!r} is not an integer") from None
                    offsets[TopicPartition(topic, int(child))] = offset
            if offsets:
                result.groups[group] = offsets
        return result
    finally:
        try:
            zk.stop()
            zk.close()
        except Exception:  # noqa: BLE001 - closing a failed session must not hide the real error
            pass


def register_import(commands) -> None:
    p = commands.add_parser("import-zookeeper", help="import offsets stored in ZooKeeper by pre-0.8.2 consumers")
    add_connection_options(p)
    p.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/CHROOT]", help="ZooKeeper connection string")
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="only these groups (repeatable)")
    execution = p.add_mutually_exclusive_group()
    execution.add_argument("--dry-run", action="store_true", help="only show what would be imported (the default)")
    execution.add_argument("--execute", action="store_true", help="create missing topics and commit the offsets")
    p.set_defaults(func=lambda args: run_admin_command(args, import_zookeeper))


async def import_zookeeper(args: argparse.Namespace, admin: Admin) -> int:
    found = await asyncio.to_thread(read_zookeeper_offsets, args.zookeeper, args.group or None,
                                    max(1.0, args.timeout / 1000))
    if not found.groups:
        raise CommandError(f"no offsets found under {CONSUMERS_PATH} in ZooKeeper at {args.zookeeper}")
    if not args.execute and not args.dry_run:
        warn(DRY_RUN_WARNING)

    exit_code = EXIT_OK
    descriptions = await admin.describe_groups(list(found.groups))
    importable = {}
    for group, offsets in found.groups.items():
        d = descriptions[group]
        if not d.is_inactive:
            error(f"Offsets can only be imported if the group '{group}' is inactive, but the current state is {d.state}.")
            exit_code = EXIT_FAILED
            continue
        importable[group] = offsets

    needed = ZooKeeperOffsets(importable).partitions_needed()
    topics = await admin.describe_topics(sorted(needed))
    to_create = {t: n for t, n in needed.items() if topics[t].error_code != 0}
    to_grow = {t: n for t, n in needed.items() if topics[t].error_code == 0 and len(topics[t].partitions) < n}

    rows = [[g, tp.topic, tp.partition, o] for g, offsets in importable.items() for tp, o in sorted(offsets.items())]
    if args.output == "json":
        print_json({
            "offsets": [{"group": g, "topic": t, "partition": p, "offset": o} for g, t, p, o in rows],
            "topics_to_create": to_create,
            "topics_to_grow": to_grow,
            "executed": bool(args.execute),
        })
    else:
        for topic, n in sorted(to_create.items()):
            print(f"Topic '{topic}' is missing: {'creating' if args.execute else 'would create'} it with {n} partitions.")
        for topic, n in sorted(to_grow.items()):
            print(f"Topic '{topic}' has {len(topics[topic].partitions)} partitions: "
                  f"{'growing' if args.execute else 'would grow'} it to {n}.")
        if rows:
            print()
            print_table(["GROUP", "TOPIC", "PARTITION", "OFFSET"], rows)

    if not args.execute:
        return exit_code
    if to_create:
        created = await admin.create_topics([NewTopic(t, n) for t, n in sorted(to_create.items())])
        for topic, exc in created.items():
            if exc is not None and exc.name != "TOPIC_ALREADY_EXISTS":
                raise CommandError(f"cannot create topic '{topic}': {exc}")
    if to_grow:
        grown = await admin.create_partitions(to_grow)
        for topic, exc in grown.items():
            if exc is not None:
                raise CommandError(f"cannot add partitions to topic '{topic}': {exc}")
    for group, offsets in importable.items():
        try:
            await admin.alter_offsets(group, {tp: (o, "") for tp, o in offsets.items()})
        except KafkaError as exc:
            error(f"importing offsets of group '{group}' failed: {exc}")
            exit_code = EXIT_FAILED
    return exit_code
