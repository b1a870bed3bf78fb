"""`cohort topics …`: the topic registry over the Kafka protocol (create, list, describe, delete, add-partitions),
and `topics end-offsets set|delete|show`: the end offsets sources report to Cohort (its own API; lag is measured
against them)."""
from __future__ import annotations

import sys

from cohort.client.admin import Admin, NewTopic
from cohort.client.cli.group_reports import local_time
from cohort.client.cli.output import MISSING, error, print_json, print_table
from cohort.client.cli.runner import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    OneLineArgumentParser,
    add_connection_options,
    run_admin_command,
)
from cohort.client.errors import KafkaError
from cohort.client.topic_partition import TopicPartition
from cohort.protocol.errors import ErrorCode

END_OFFSET_COLUMNS = ["TOPIC", "PARTITION", "END-OFFSET", "REPORTED"]


def register(subparsers) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe, delete topics and add partitions",
                                   description="Topic administration over the Kafka protocol.")
    parser.set_defaults(func=lambda args: (parser.print_help(sys.stderr), EXIT_USAGE)[1])
    commands = parser.add_subparsers(dest="topics_command", metavar="COMMAND", parser_class=OneLineArgumentParser)

    p = commands.add_parser("create", help="create a topic")
    add_connection_options(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, default=-1, help="partition count (default: the server's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1, help="(default: the server's default)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE", help="a topic config (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed quietly when the topic exists")
    p.add_argument("--validate-only", action="store_true", help="only check that the topic could be created")
    p.set_defaults(func=lambda args: run_admin_command(args, create_topic))

    p = commands.add_parser("list", help="list topic names")
    add_connection_options(p)
    p.add_argument("--exclude-internal", action="store_true", help="leave internal topics out")
    p.set_defaults(func=lambda args: run_admin_command(args, list_topics))

    p = commands.add_parser("describe", help="partitions, leaders and replicas of topics")
    add_connection_options(p)
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable; default: all)")
    p.set_defaults(func=lambda args: run_admin_command(args, describe_topics))

    p = commands.add_parser("delete", help="delete topics")
    add_connection_options(p)
    p.add_argument("--topic", action="append", required=True, help="a topic (repeatable)")
    p.add_argument("--if-exists", action="store_true", help="succeed quietly for topics that do not exist")
    p.set_defaults(func=lambda args: run_admin_command(args, delete_topics))

    p = commands.add_parser("add-partitions", help="grow a topic to a new partition count")
    add_connection_options(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True, help="the new total partition count")
    p.set_defaults(func=lambda args: run_admin_command(args, add_partitions))

    p = commands.add_parser("end-offsets", help="set or show the end offsets sources report (Cohort only)",
                            description="How far each partition's data goes, as its source reported it. Cohort "
                                        "holds no records: LOG-END-OFFSET, LAG and health are measured against "
                                        "these reports.")
    p.set_defaults(func=lambda args: (p.print_usage(sys.stderr), EXIT_USAGE)[1])
    ends = p.add_subparsers(dest="end_offsets_command", metavar="COMMAND", parser_class=OneLineArgumentParser)
    e = ends.add_parser("set", help="report a partition's end offset (needs topic WRITE or ALTER)")
    add_connection_options(e)
    e.add_argument("--topic", required=True)
    e.add_argument("--partition", type=int, required=True)
    e.add_argument("--offset", type=int, required=True, help="the offset after the partition's last record")
    e.add_argument("--force", action="store_true",
                   help="an operator's correction: replace the kept end even when lower (needs topic or cluster ALTER)")
    e.set_defaults(func=lambda args: run_admin_command(args, set_end_offset))
    e = ends.add_parser("delete", help="remove a partition's reported end: its lag is unknown until a source "
                                       "reports again (needs topic or cluster ALTER)")
    add_connection_options(e)
    e.add_argument("--topic", required=True)
    e.add_argument("--partition", type=int, required=True)
    e.set_defaults(func=lambda args: run_admin_command(args, delete_end_offset))
    e = ends.add_parser("show", help="each partition's reported end offset ('-': none reported)")
    add_connection_options(e)
    e.add_argument("--topic", required=True)
    e.set_defaults(func=lambda args: run_admin_command(args, show_end_offsets))


def _configs(pairs: list[str]) -> dict[str, str]:
    configs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CommandError(f"bad --config {pair!r}: expected NAME=VALUE", EXIT_USAGE)
        configs[name] = value
    return configs


async def create_topic(args, admin: Admin) -> int:
    if args.partitions == 0 or args.partitions < -1:
        raise CommandError("--partitions must be at least 1", EXIT_USAGE)
    topic = NewTopic(args.topic, args.partitions, args.replication_factor, _configs(args.config))
    result = (await admin.create_topics([topic], validate_only=args.validate_only))[args.topic]
    if result is not None and result.code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
        result = None
    elif result is not None:
        raise CommandError(f"cannot create topic '{args.topic}': {result}")
    if args.output == "json":
        print_json({"topic": args.topic, "created": not args.validate_only, "validated": True})
    elif args.validate_only:
        print(f"Topic '{args.topic}' can be created.")
    else:
        print(f"Created topic {args.topic}.")
    return EXIT_OK


async def list_topics(args, admin: Admin) -> int:
    topics = await admin.list_topics(include_internal=not args.exclude_internal)
    if args.output == "json":
        print_json([{"topic": name, "partitions": len(info.partitions)} for name, info in topics.items()])
    else:
        for name in topics:
            print(name)
    return EXIT_OK


async def describe_topics(args, admin: Admin) -> int:
    if args.topic:
        topics = await admin.describe_topics(args.topic)
    else:
        topics = await admin.list_topics(include_internal=True)
    exit_code = EXIT_OK
    found = []
    for name, info in topics.items():
        if info.error_code != 0:
            error(f"Topic '{name}' does not exist.")
            exit_code = EXIT_FAILED
            continue
        found.append(info)
    if args.output == "json":
        print_json([
            {
                "topic": t.name, "topic_id": t.topic_id, "partition_count": len(t.partitions),
                "replication_factor": len(t.partitions[0].replicas) if t.partitions else 0,
                "partitions": [
                    {"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isr)}
                    for p in t.partitions
                ],
            }
            for t in found
        ])
        return exit_code
    for t in found:
        replication = len(t.partitions[0].replicas) if t.partitions else 0
        print(f"Topic: {t.name}\tTopicId: {t.topic_id or '-'}\tPartitionCount: {len(t.partitions)}\t"
              f"ReplicationFactor: {replication}")
        for p in t.partitions:
            print(f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
                  f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
    return exit_code


async def delete_topics(args, admin: Admin) -> int:
    results = await admin.delete_topics(args.topic)
    exit_code = EXIT_OK
    rows = []
    for name, exc in results.items():
        if exc is None:
            rows.append({"topic": name, "deleted": True})
            if args.output != "json":
                print(f"Deleted topic {name}.")
        elif exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
            rows.append({"topic": name, "deleted": False})
        else:
            rows.append({"topic": name, "deleted": False, "error": exc.name})
            reason = "it does not exist" if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else str(exc)
            error(f"cannot delete topic '{name}': {reason}")
            exit_code = EXIT_FAILED
    if args.output == "json":
        print_json(rows)
    return exit_code


async def add_partitions(args, admin: Admin) -> int:
    if args.partitions < 1:
        raise CommandError("--partitions must be at least 1", EXIT_USAGE)
    result = (await admin.create_partitions({args.topic: args.partitions}))[args.topic]
    if result is not None:
        reason = "it does not exist" if result.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else str(result)
        raise CommandError(f"cannot add partitions to topic '{args.topic}': {reason}")
    if args.output == "json":
        print_json({"topic": args.topic, "partitions": args.partitions})
    else:
        print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return EXIT_OK


# ---------------------------------------------------------------- end-offsets

async def set_end_offset(args, admin: Admin) -> int:
    if args.partition < 0:
        raise CommandError("--partition must be at least 0", EXIT_USAGE)
    if args.offset < 0:
        raise CommandError("--offset must be at least 0", EXIT_USAGE)
    tp = TopicPartition(args.topic, args.partition)
    result = (await admin.report_end_offsets({tp: args.offset}, force=args.force))[tp]
    if isinstance(result, KafkaError):
        raise CommandError(f"cannot set the end offset of {tp}: {result}")
    if args.output == "json":
        print_json({"topic": tp.topic, "partition": tp.partition, "end_offset": result})
    elif result == args.offset:
        print(f"End offset of {tp} is {result}.")
    else:
        print(f"End offset of {tp} stays {result}: reported end offsets never move back (--force corrects one).")
    return EXIT_OK


async def delete_end_offset(args, admin: Admin) -> int:
    if args.partition < 0:
        raise CommandError("--partition must be at least 0", EXIT_USAGE)
    tp = TopicPartition(args.topic, args.partition)
    result = (await admin.delete_end_offsets([tp]))[tp]
    if isinstance(result, KafkaError):
        raise CommandError(f"cannot delete the end offset of {tp}: {result}")
    if args.output == "json":
        print_json({"topic": tp.topic, "partition": tp.partition, "end_offset": None})
    else:
        print(f"End offset of {tp} removed: its lag is unknown until a source reports again.")
    return EXIT_OK


async def show_end_offsets(args, admin: Admin) -> int:
    result = (await admin.describe_end_offsets([args.topic]))[args.topic]
    if isinstance(result, KafkaError):
        if result.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise CommandError(f"Topic '{args.topic}' does not exist.")
        raise CommandError(f"cannot show the end offsets of '{args.topic}': {result}")
    if args.output == "json":
        print_json([{"topic": args.topic, "partition": p, "end_offset": end.end_offset if end else None,
                     "reported_ms": end.reported_ms if end else None} for p, end in sorted(result.items())])
    else:
        print_table(END_OFFSET_COLUMNS, [[args.topic, p, end.end_offset if end else MISSING,
                                          local_time(end.reported_ms) if end else MISSING]
                                         for p, end in sorted(result.items())])
    return EXIT_OK
