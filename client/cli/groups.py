"""`cohort groups …`: kafka-consumer-groups.sh, for any Kafka-protocol coordinator.

Conventions follow Kafka's tool: the same column names, "has no active
members" for inactive groups, dry-run by default for resets with the same
warning, `--export` CSV plans that `--from-file` reads back, and resets
refused unless the group is inactive (Empty or Dead).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from cohort.client.admin import EARLIEST_TIMESTAMP, GROUP_STATES, LATEST_TIMESTAMP, Admin, GroupDescription
from cohort.client.cli.offset_reset import (
    LogRange,
    ResetInputError,
    Scenario,
    format_plan_csv,
    now_minus_ms,
    parse_datetime_ms,
    parse_duration,
    parse_plan_csv,
    plan_reset,
)
from cohort.client.cli.group_reports import describe_health, local_time, register_reports
from cohort.client.cli import kafka_tables
from cohort.client.cli.output import DRY_RUN_WARNING, MISSING, error, print_json, warn
from cohort.client.cli.zookeeper_import import register_import
from cohort.client.cli.runner import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    OneLineArgumentParser,
    add_connection_options,
    run_admin_command,
)
from cohort.client.errors import KafkaError, UnsupportedApi
from cohort.client.topic_partition import TopicPartition
from cohort.protocol.errors import ErrorCode

OFFSETS_COLUMNS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
MEMBERS_COLUMNS = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
MEMBERS_VERBOSE_COLUMNS = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
STATE_COLUMNS = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
# KIP-848 consumer groups (Kafka 4's tool): epochs, and each member's current vs target assignment
CONSUMER_STATE_COLUMNS = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                          "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
CONSUMER_MEMBERS_VERBOSE_COLUMNS = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                    "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
GROUP_TYPES = ("classic", "consumer")



def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "groups", help="list, describe, reset, delete consumer groups (kafka-consumer-groups.sh conventions)",
        description="Consumer-group administration over the Kafka protocol.",
    )
    parser.set_defaults(func=lambda args: _usage(parser))
    commands = parser.add_subparsers(dest="groups_command", metavar="COMMAND", parser_class=OneLineArgumentParser)

    p = commands.add_parser("list", help="list groups")
    add_connection_options(p)
    p.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE]",
                   help="show the type and state columns; with states, only groups in them (e.g. stable,empty)")
    p.add_argument("--type", nargs="?", const="", metavar="TYPE[,TYPE]",
                   help="show the type column; with types, only groups of them (classic, consumer)")
    p.set_defaults(func=lambda args: run_admin_command(args, list_groups))

    p = commands.add_parser("describe", help="offsets, members or state of groups")
    add_connection_options(p)
    _add_group_selection(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--offsets", action="store_true", help="committed offsets and lag per partition (default)")
    mode.add_argument("--members", action="store_true", help="the members and their partition counts")
    mode.add_argument("--state", action="store_true", help="coordinator, assignment strategy, state, #members")
    mode.add_argument("--health", action="store_true",
                      help="Cohort only: Burrow's OK/WARN/STALL/STOP/REWIND per partition (group OK/WARN/ERR), member heartbeat and commit ages")
    p.add_argument("--verbose", action="store_true",
                   help="with --offsets: leader epochs; --members: epochs and assignments; --state: epochs")
    p.set_defaults(func=lambda args: run_admin_command(args, describe_groups))

    p = commands.add_parser("reset-offsets", help="plan (dry run) or execute an offset reset of inactive groups")
    add_connection_options(p)
    _add_group_selection(p)
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has an offset for")
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P…]", help="a topic, or some of its partitions; repeatable")
    scenario = p.add_mutually_exclusive_group(required=True)
    scenario.add_argument("--to-earliest", action="store_true")
    scenario.add_argument("--to-latest", action="store_true")
    scenario.add_argument("--to-offset", type=int, metavar="N")
    scenario.add_argument("--shift-by", type=int, metavar="N", help="current offset plus N (N may be negative)")
    scenario.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    scenario.add_argument("--by-duration", metavar="PnDTnHnMnS")
    scenario.add_argument("--to-current", action="store_true")
    scenario.add_argument("--from-file", metavar="CSV", help="a plan as written by --export")
    scenario.add_argument("--to-commit-at", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                          help="Cohort only: what the group had committed at that moment (the undo of a reset)")
    execution = p.add_mutually_exclusive_group()
    execution.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    execution.add_argument("--execute", action="store_true", help="apply the plan")
    p.add_argument("--export", action="store_true", help="print the plan as CSV (topic,partition,offset)")
    p.set_defaults(func=lambda args: run_admin_command(args, reset_offsets))

    p = commands.add_parser("delete", help="delete inactive groups and their offsets")
    add_connection_options(p)
    _add_group_selection(p)
    p.set_defaults(func=lambda args: run_admin_command(args, delete_groups))

    p = commands.add_parser("delete-offsets", help="delete a group's committed offsets for some topics")
    add_connection_options(p)
    p.add_argument("--group", required=True, metavar="GROUP")
    p.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P…]")
    p.set_defaults(func=lambda args: run_admin_command(args, delete_offsets))

    register_import(commands)
    register_reports(commands)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _add_group_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("groups", nargs="*", metavar="GROUP", help="group ids")
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="a group id (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every group")


async def selected_groups(args, admin: Admin) -> list[str]:
    groups = list(dict.fromkeys(list(args.groups) + list(args.group)))
    if args.all_groups:
        if groups:
            raise CommandError("give group ids or --all-groups, not both", EXIT_USAGE)
        return [g.group_id for g in await admin.list_groups()]
    if not groups:
        raise CommandError("name at least one group (or use --all-groups)", EXIT_USAGE)
    return groups


def parse_topic_specs(specs: Iterable[str]) -> list[tuple[str, list[int] | None]]:
    """'t' → (t, None: all partitions); 't:0,2' → (t, [0, 2])."""
    result = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise CommandError(f"bad topic {spec!r}: expected TOPIC or TOPIC:P,P", EXIT_USAGE)
        if not sep:
            result.append((topic, None))
            continue
        try:
            numbers = sorted({int(p) for p in parts.split(",") if p.strip()})
        except ValueError:
            raise CommandError(f"bad partitions in {spec!r}: expected integers like {topic}:0,1", EXIT_USAGE) from None
        if not numbers or numbers[0] < 0:
            raise CommandError(f"bad partitions in {spec!r}", EXIT_USAGE)
        result.append((topic, numbers))
    return result


# ---------------------------------------------------------------- list

async def list_groups(args, admin: Admin) -> int:
    states = None
    if args.state:
        states = [s.strip() for s in args.state.split(",") if s.strip()]
        known = {s.lower(): s for s in GROUP_STATES}
        unknown = [s for s in states if s.lower() not in known]
        if unknown:
            raise CommandError(f"unknown state {unknown[0]!r} (valid: {', '.join(GROUP_STATES)})", EXIT_USAGE)
    types = None
    if args.type:
        types = [t.strip().lower() for t in args.type.split(",") if t.strip()]
        unknown = [t for t in types if t not in GROUP_TYPES]
        if unknown:
            raise CommandError(f"unknown group type {unknown[0]!r} (valid: {', '.join(GROUP_TYPES)})", EXIT_USAGE)
    listings = await admin.list_groups(states, types)
    if args.state is not None and any(g.state is None for g in listings):
        described = await admin.describe_groups([g.group_id for g in listings])
        state_of = {g: d.state for g, d in described.items()}
    else:
        state_of = {g.group_id: g.state for g in listings}
    type_of = {g.group_id: g.group_type or "classic" for g in listings}
    if args.output == "json":
        print_json([{"group": g.group_id, "type": type_of[g.group_id], "state": state_of[g.group_id],
                     "protocol_type": g.protocol_type} for g in listings])
    elif args.state is not None or args.type is not None:
        with_type, with_state = args.type is not None, args.state is not None
        rows = [(g.group_id, *([type_of[g.group_id].capitalize()] if with_type else []),
                 *([state_of[g.group_id]] if with_state else [])) for g in listings]
        sys.stdout.write(kafka_tables.group_list_table(rows, with_type, with_state))
    else:
        for g in listings:
            print(g.group_id)
    return EXIT_OK


# ---------------------------------------------------------------- describe

async def log_end_offsets(admin: Admin, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Log end offsets of the partitions that exist and have a known end (deleted topics are simply absent).

    Cohort holds no records: its ends are the ones sources reported (`topics end-offsets`), and a partition
    without a report has no known end (absent here, so LOG-END-OFFSET and LAG show '-', never a guess). Any
    other Kafka server: ListOffsets (latest)."""
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    try:
        reported = await admin.describe_end_offsets(sorted({tp.topic for tp in wanted}))
    except UnsupportedApi:
        reported = None  # not Cohort: a log with records, whose latest offset is its end
    if reported is not None:
        ends = {}
        for tp in wanted:
            by_partition = reported.get(tp.topic)
            end = by_partition.get(tp.partition) if isinstance(by_partition, dict) else None
            if end is not None:
                ends[tp] = end.end_offset
        return ends
    existing = await admin.describe_topics(sorted({tp.topic for tp in wanted}))
    present = [
        tp for tp in wanted
        if existing[tp.topic].error_code == 0 and any(p.partition == tp.partition for p in existing[tp.topic].partitions)
    ]
    listed = await admin.list_partition_offsets({tp: LATEST_TIMESTAMP for tp in present})
    return {tp: o.offset for tp, o in listed.items() if o.offset >= 0}


def lag_of(current: int | None, end: int | None) -> int | None:
    """LAG: end minus committed, 0 at or past the end; None ('-') when either is unknown (the coordinator's
    `group_health.partition_lag`, restated for other Kafka servers' ends)."""
    if current is None or end is None or current < 0:
        return None
    return max(0, end - current)


async def describe_groups(args, admin: Admin) -> int:
    groups = await selected_groups(args, admin)
    if args.health:
        reports = await describe_health(args, admin, groups)
        if args.output == "json":
            print_json(reports)
        return EXIT_OK
    descriptions = await admin.describe_groups(groups)
    exit_code = EXIT_OK
    results = []
    for group in sorted(groups):  # by group id, as Kafka's tool prints them
        d = descriptions[group]
        if not d.exists:
            error(f"Consumer group '{group}' does not exist.")
            exit_code = EXIT_FAILED
            continue
        if args.output == "json":
            results.extend(await _json_rows(admin, d, args))
            continue
        # What Kafka's tool says on stderr before the table (a blank line first, as it prints it).
        if d.state == "Empty":
            print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
        elif d.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
            print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
        if args.members:
            text = kafka_tables.members_table(group, d.members, args.verbose, d.assignment_epoch)
        elif args.state:
            c = d.coordinator
            coordinator = kafka_tables.coordinator_text(c.host, c.port, c.node_id) if c else MISSING
            text = kafka_tables.state_table(group, coordinator, d.protocol, d.state, len(d.members), args.verbose,
                                            d.group_epoch, d.assignment_epoch)
        else:
            rows = await _offset_rows(admin, d)
            text = kafka_tables.offsets_table(rows, args.verbose) if rows else ""
        sys.stdout.write(text)
    if args.output == "json":
        print_json(results)
    return exit_code


async def _json_rows(admin: Admin, d: GroupDescription, args) -> list[dict]:
    consumer = d.group_type == "consumer"
    if args.members:
        rows = _member_rows(d, args.verbose)
        columns = MEMBERS_COLUMNS if not args.verbose else (
            CONSUMER_MEMBERS_VERBOSE_COLUMNS if consumer else MEMBERS_VERBOSE_COLUMNS)
    elif args.state:
        rows = [_state_row(d)]
        columns = CONSUMER_STATE_COLUMNS if consumer else STATE_COLUMNS
    else:
        rows = [[r.group, r.topic, r.partition, r.current, r.end, r.lag, r.consumer_id, r.host, r.client_id]
                for r in await _offset_rows(admin, d)]
        rows += [[d.group_id, None, None, None, None, None, m.member_id, m.host, m.client_id]
                 for m in d.members if not m.assignment]  # members without partitions, for scripts
        columns = OFFSETS_COLUMNS
    return [dict(zip(_json_keys(columns), row), type=d.group_type) for row in rows]


def _json_keys(columns: list[str]) -> list[str]:
    names = {"COORDINATOR (ID)": "coordinator", "#PARTITIONS": "partitions", "#MEMBERS": "members"}
    return [names.get(c, c.lower().replace("-", "_")) for c in columns]


async def _offset_rows(admin: Admin, d: GroupDescription) -> list[kafka_tables.OffsetRow]:
    """One row per owned or committed partition, in the order Kafka's tool prints them."""
    committed = await admin.fetch_offsets(d.group_id)
    order = kafka_tables.offset_row_order(d.members, committed)
    ends = await log_end_offsets(admin, [tp for _, tp in order])
    rows = []
    for m, tp in order:
        current = committed[tp].offset if tp in committed else None
        epoch = committed[tp].leader_epoch if tp in committed else -1
        end = ends.get(tp)
        rows.append(kafka_tables.OffsetRow(
            d.group_id, tp.topic, tp.partition, epoch if epoch >= 0 else None, current, end, lag_of(current, end),
            m.member_id if m else None, m.host if m else None, m.client_id if m else None))
    return rows


def _assignment_text(partitions) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items())) or MISSING


def _member_rows(d: GroupDescription, verbose: bool) -> list[list]:
    rows = []
    for m in sorted(d.members, key=lambda m: m.member_id):
        if verbose and d.group_type == "consumer":
            # KIP-848: the epoch the member is at and what it owns, vs the group's target for it
            rows.append([d.group_id, m.member_id, m.group_instance_id, m.host, m.client_id, len(m.assignment),
                         m.member_epoch, _assignment_text(m.assignment), d.assignment_epoch,
                         _assignment_text(m.target_assignment or ())])
        elif verbose:
            rows.append([d.group_id, m.member_id, m.group_instance_id, m.host, m.client_id, len(m.assignment),
                         _assignment_text(m.assignment)])
        else:
            rows.append([d.group_id, m.member_id, m.host, m.client_id, len(m.assignment)])
    return rows


def _state_row(d: GroupDescription) -> list:
    c = d.coordinator
    coordinator = f"{c.host}:{c.port} ({c.node_id})" if c else None
    if d.group_type == "consumer":
        return [d.group_id, coordinator, d.protocol or None, d.state, d.group_epoch, d.assignment_epoch,
                len(d.members)]
    return [d.group_id, coordinator, d.protocol or None, d.state, len(d.members)]


# ---------------------------------------------------------------- reset-offsets

def _scenario(args) -> Scenario:
    if args.to_earliest:
        return Scenario("to-earliest")
    if args.to_latest:
        return Scenario("to-latest")
    if args.to_offset is not None:
        return Scenario("to-offset", args.to_offset)
    if args.shift_by is not None:
        return Scenario("shift-by", args.shift_by)
    if args.to_datetime is not None:
        return Scenario("to-datetime", parse_datetime_ms(args.to_datetime))
    if args.by_duration is not None:
        return Scenario("by-duration", now_minus_ms(parse_duration(args.by_duration)))
    if args.to_current:
        return Scenario("to-current")
    if args.to_commit_at is not None:
        return Scenario("to-commit-at", parse_datetime_ms(args.to_commit_at))
    return Scenario("from-file", args.from_file)


def _read_plan_file(path: str) -> dict[str | None, dict[TopicPartition, int]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    except UnicodeDecodeError:
        raise ResetInputError(f"{path} is not a UTF-8 text file") from None
    try:
        return parse_plan_csv(text)
    except ResetInputError as exc:
        raise ResetInputError(f"{path}: {exc}") from None


async def _offsets_at(admin: Admin, group: str, at_ms: int, args) -> dict[TopicPartition, int]:
    """What the group had committed at `at_ms`, from the server's offset history, for the partitions in
    scope; partitions it had no offset for then are left as they are (with a warning)."""
    report = await admin.group_report(group, "offsets-at", at_ms=at_ms)
    wanted = None if args.all_topics else parse_topic_specs(args.topic)
    plan: dict[TopicPartition, int] = {}
    for row in report["offsets"]:
        tp = TopicPartition(row["topic"], row["partition"])
        if wanted is not None and not any(t == tp.topic and (ps is None or tp.partition in ps) for t, ps in wanted):
            continue
        if row["offset"] is None:
            warn(f"group '{group}' had no committed offset for {tp} at that time; it is left as it is")
        else:
            plan[tp] = row["offset"]
    oldest = report.get("history_from_ms")
    if oldest is not None and at_ms < oldest:
        warn(f"the offset history of group '{group}' reaches back only to {local_time(oldest)} "
             f"(offsets.history.retention.ms {report['history_retention_ms']}); older commits may be gone")
    return plan


async def _partitions_in_scope(admin: Admin, args, committed, file_plan) -> list[TopicPartition]:
    if file_plan is not None:
        return sorted(file_plan)
    if args.all_topics:
        return sorted(committed)
    specs = parse_topic_specs(args.topic)
    topics = await admin.describe_topics(sorted({t for t, _ in specs}))
    partitions = []
    for topic, numbers in specs:
        info = topics[topic]
        if info.error_code != 0 or not info.partitions:
            raise CommandError(f"topic '{topic}' does not exist")
        existing = {p.partition for p in info.partitions}
        if numbers is None:
            numbers = sorted(existing)
        missing = [n for n in numbers if n not in existing]
        if missing:
            raise CommandError(f"topic '{topic}' has no partition {missing[0]} (it has {len(existing)})")
        partitions.extend(TopicPartition(topic, n) for n in numbers)
    return sorted(set(partitions))


async def log_ranges(admin: Admin, partitions: list[TopicPartition]) -> dict[TopicPartition, LogRange]:
    topics = await admin.describe_topics(sorted({tp.topic for tp in partitions}))
    for tp in partitions:
        info = topics[tp.topic]
        if info.error_code != 0 or all(p.partition != tp.partition for p in info.partitions):
            raise CommandError(f"partition {tp} does not exist")
    earliest = await admin.list_partition_offsets({tp: EARLIEST_TIMESTAMP for tp in partitions})
    latest = await admin.list_partition_offsets({tp: LATEST_TIMESTAMP for tp in partitions})
    return {tp: LogRange(earliest[tp].offset, latest[tp].offset) for tp in partitions}


async def reset_offsets(args, admin: Admin) -> int:
    scenario = _scenario(args)
    file_plans = _read_plan_file(args.from_file) if scenario.kind == "from-file" else None
    if file_plans is None and not args.all_topics and not args.topic:
        raise CommandError("choose the partitions: --all-topics or --topic TOPIC[:P,P…]", EXIT_USAGE)
    groups = await selected_groups(args, admin)
    if not args.execute and not args.dry_run and not args.export:
        warn(DRY_RUN_WARNING)
    plans: dict[str, dict[TopicPartition, int]] = {}
    exit_code = EXIT_OK
    descriptions = await admin.describe_groups(groups)
    for group in groups:
        d = descriptions[group]
        if not d.is_inactive:
            error(f"Assignments can only be reset if the group '{group}' is inactive, but the current state is {d.state}.")
            exit_code = EXIT_FAILED
            continue
        file_plan = None
        if file_plans is not None:
            file_plan = file_plans.get(group, file_plans.get(None))
            if file_plan is None:
                warn(f"the plan file has no rows for group '{group}'; skipping it")
                continue
        committed = {tp: om.offset for tp, om in (await admin.fetch_offsets(group)).items()}
        if scenario.kind == "to-commit-at":
            file_plan = await _offsets_at(admin, group, int(scenario.value), args)
        partitions = await _partitions_in_scope(admin, args, committed, file_plan)
        if not partitions:
            raise CommandError(f"group '{group}' has no committed offsets to reset; name the partitions with --topic")
        logs = await log_ranges(admin, partitions)
        by_timestamp = None
        if scenario.needs_timestamps:
            found = await admin.list_partition_offsets({tp: int(scenario.value) for tp in partitions})
            by_timestamp = {tp: o.offset for tp, o in found.items()}
        plan, warnings = plan_reset(scenario, partitions, committed, logs, by_timestamp, file_plan)
        for w in warnings:
            warn(w)
        plans[group] = plan

    if args.export:
        # The CSV, then an empty line, as Kafka's tool prints it; the group column unless one --group was given.
        print(format_plan_csv(plans, with_group=len(groups) != 1 or args.all_groups))
    elif args.output == "json":
        print_json([
            {"group": g, "topic": tp.topic, "partition": tp.partition, "new_offset": o}
            for g, plan in plans.items() for tp, o in sorted(plan.items())
        ])
    else:
        rows = [(g, tp, o) for g, plan in plans.items() for tp, o in sorted(plan.items())]
        sys.stdout.write(kafka_tables.reset_plan_table(rows))

    if args.execute:
        for group, plan in plans.items():
            try:
                await admin.alter_offsets(group, {tp: (offset, "") for tp, offset in plan.items()})
            except KafkaError as exc:
                error(f"resetting offsets of group '{group}' failed: {exc}")
                exit_code = EXIT_FAILED
    return exit_code


# ---------------------------------------------------------------- delete, delete-offsets

def _explain(group: str, exc: KafkaError) -> str:
    if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
        return f"Consumer group '{group}' does not exist."
    if exc.code == ErrorCode.NON_EMPTY_GROUP:
        return f"Consumer group '{group}' could not be deleted: it is not empty (NON_EMPTY_GROUP)."
    return f"Consumer group '{group}' could not be deleted: {exc.name}."


async def delete_groups(args, admin: Admin) -> int:
    groups = await selected_groups(args, admin)
    results = await admin.delete_groups(groups)
    deleted = [g for g, e in results.items() if e is None]
    failed = {g: e for g, e in results.items() if e is not None}
    if args.output == "json":
        print_json([{"group": g, "deleted": e is None, "error": None if e is None else e.name} for g, e in results.items()])
    elif deleted:
        print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in deleted)}) was successful.")
    for group, exc in failed.items():
        error(_explain(group, exc))
    return EXIT_FAILED if failed else EXIT_OK


async def delete_offsets(args, admin: Admin) -> int:
    group = args.group
    specs = parse_topic_specs(args.topic)
    wanted: list[TopicPartition] = []
    unknown_topics = [t for t, ns in specs if ns is None]
    described = await admin.describe_topics(unknown_topics) if unknown_topics else {}
    committed = None
    for topic, numbers in specs:
        if numbers is None:
            info = described[topic]
            if info.error_code == 0 and info.partitions:
                numbers = [p.partition for p in info.partitions]
            else:
                if committed is None:
                    committed = await admin.fetch_offsets(group)
                numbers = sorted(tp.partition for tp in committed if tp.topic == topic)
                if not numbers:
                    raise CommandError(f"topic '{topic}' does not exist and group '{group}' has no offsets for it")
        wanted.extend(TopicPartition(topic, n) for n in numbers)
    try:
        results = await admin.delete_offsets(group, wanted)
    except KafkaError as exc:
        if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise CommandError(f"Consumer group '{group}' does not exist.") from None
        if exc.code == ErrorCode.NON_EMPTY_GROUP:
            raise CommandError(f"Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty.") from None
        raise
    failed = {tp: code for tp, code in results.items() if code != 0}
    if args.output == "json":
        print_json([
            {"topic": tp.topic, "partition": tp.partition, "status": "Successful" if code == 0 else _code_name(code)}
            for tp, code in sorted(results.items())
        ])
    else:
        if not failed:
            print(f"Request succeeded for deleting offsets from group {group}.")
        sys.stdout.write(kafka_tables.delete_offsets_table(
            [(tp, "Successful" if code == 0 else f"Error: {_code_name(code)}") for tp, code in results.items()]))
    if failed:
        tp, code = next(iter(sorted(failed.items())))
        reason = "the group is subscribed to the topic" if code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC else _code_name(code)
        error(f"{len(failed)} of {len(results)} partitions kept their offsets ({tp}: {reason})")
        return EXIT_FAILED
    return EXIT_OK


def _code_name(code: int) -> str:
    return KafkaError(code).name
