"""`cohort groups rebalances|history` and `describe --health`: Cohort's own reports on a group.

Kafka has no API for them; they come from Cohort's private GroupReport API (`Admin.group_report`), as
the JSON the console shows too. Times print as local ISO date-times, like `--to-datetime` takes them.
"""
from __future__ import annotations

from datetime import datetime

from cohort.client.admin import Admin
from cohort.client.errors import KafkaError
from cohort.protocol.errors import ErrorCode
from cohort.client.cli.offset_reset import ResetInputError, now_minus_ms, parse_datetime_ms, parse_duration
from cohort.client.cli.output import MISSING, print_json, print_table
from cohort.client.cli.runner import EXIT_OK, CommandError, add_connection_options, run_admin_command

REBALANCE_COLUMNS = ["ENDED", "KIND", "TRIGGER", "GENERATION", "DURATION-MS", "MEMBERS", "MOVED", "DETAIL"]
HISTORY_COLUMNS = ["TIME", "TOPIC", "PARTITION", "OFFSET", "CONSUMER-ID", "CLIENT-ID", "HOST", "GENERATION"]
HEALTH_COLUMNS = ["GROUP", "TOPIC", "PARTITION", "STATUS", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "WINDOW", "LAST-MOVED",
                  "LAST-COMMIT"]
# Said under a health table when some partition has no reported end offset (its LAG is '-').
UNKNOWN_END_NOTE = ("LAG is unknown ('-') for {count} partition(s): no source reported their end offset "
                    "(cohort topics end-offsets set); without it a partition is judged OK unless it goes backwards (REWIND).")
HEALTH_MEMBER_COLUMNS = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "HEARTBEAT-AGE-MS", "COMMIT-AGE-MS"]


def register_reports(commands) -> None:
    p = commands.add_parser("rebalances", help="a group's rebalance journal (and admin actions on it)")
    add_connection_options(p)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--since", metavar="YYYY-MM-DDTHH:mm:SS.sss|PnDTnHnMnS",
                   help="only entries that ended at or after this time (a duration: that long ago)")
    p.set_defaults(func=lambda args: run_admin_command(args, rebalances))

    p = commands.add_parser("history", help="a group's offset commits within offsets.history.retention.ms")
    add_connection_options(p)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--topic", metavar="TOPIC[:P]", help="only this topic, or one of its partitions")
    p.add_argument("--since", metavar="YYYY-MM-DDTHH:mm:SS.sss|PnDTnHnMnS",
                   help="only commits at or after this time (a duration: that long ago)")
    p.set_defaults(func=lambda args: run_admin_command(args, history))


def parse_since(text: str | None) -> int:
    """A date-time (local unless it has a zone) or an ISO duration back from now -> epoch ms; -1 for None."""
    if text is None:
        return -1
    if text.strip().lstrip("+-").upper().startswith("P"):
        return now_minus_ms(parse_duration(text))
    return parse_datetime_ms(text)


def local_time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return MISSING
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="milliseconds")


def _members_cell(entry: dict) -> str:
    return ",".join(f"{m['role']}:{m['member_id'] or m['client_id']}@{m['client_host']}" for m in entry["members"])


async def group_report(admin: Admin, group: str, report: str, **options):
    """`Admin.group_report`, with a missing group worded as everywhere else in `cohort groups`."""
    try:
        return await admin.group_report(group, report, **options)
    except KafkaError as exc:
        if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise CommandError(f"Consumer group '{group}' does not exist.") from None
        raise


async def rebalances(args, admin: Admin) -> int:
    entries = await group_report(admin, args.group, "rebalances", since_ms=parse_since(args.since))
    return _show(args, entries, "no journal entries", REBALANCE_COLUMNS, lambda e: [
        local_time(e["ended_ms"]), e["kind"], e["trigger"], f"{e['epoch_before']}->{e['epoch_after']}",
        e["duration_ms"], _members_cell(e), e["moves_total"],
        e["detail"] + (f" (principal {e['principal']})" if e.get("principal") else "")])


def _show(args, items: list[dict], nothing: str, columns: list[str], row) -> int:
    """JSON as the server sent it, or a table (one row per item), or one line saying there is nothing."""
    if args.output == "json":
        print_json(items)
    elif not items:
        print(f"Consumer group '{args.group}' has {nothing}" + (" since then." if args.since else "."))
    else:
        print_table(columns, [row(item) for item in items])
    return EXIT_OK


async def history(args, admin: Admin) -> int:
    topic, partition = None, -1
    if args.topic:
        topic, _, number = args.topic.rpartition(":") if ":" in args.topic else (args.topic, "", "")
        if number:
            try:
                partition = int(number)
            except ValueError:
                raise ResetInputError(f"bad partition in --topic {args.topic!r}: use TOPIC or TOPIC:P") from None
            if partition < 0:
                raise ResetInputError(f"bad partition in --topic {args.topic!r}: it must be >= 0")
        if not topic:
            raise ResetInputError(f"bad --topic {args.topic!r}: use TOPIC or TOPIC:P")
    events = await group_report(admin, args.group, "history", since_ms=parse_since(args.since), topic=topic,
                                partition=partition)
    return _show(args, events, "no commits in its history", HISTORY_COLUMNS, lambda e: [
        local_time(e["time_ms"]), e["topic"], e["partition"], "deleted" if e["offset"] is None else e["offset"],
        e["member_id"], e["client_id"], e["client_host"], e["generation"]])


def _age(now_ms: int, ms: int | None) -> str:
    return MISSING if ms is None or ms < 0 else f"{max(now_ms - ms, 0) / 1000:.1f}s ago"


async def describe_health(args, admin: Admin, groups: list[str]) -> list[dict]:
    """Each group's health document (printed as tables unless --output json)."""
    reports = [await group_report(admin, g, "health") for g in groups]
    if args.output == "json":
        return reports
    for r in reports:
        now = r["evaluated_ms"]
        print()
        print(f"Consumer group '{r['group']}' is {r['status']} (Burrow's rules over the last "
              f"{r['window_commits']} commits of each partition, at least {r['min_distance_ms']} ms apart).")
        if r["partitions"]:
            print()
            print_table(HEALTH_COLUMNS, [
                [r["group"], p["topic"], p["partition"], p["status"], p["offset"], p.get("end_offset"), p.get("lag"),
                 f"{p['window_commits']}/{r['window_commits']}", _age(now, p["last_moved_ms"]),
                 _age(now, p["last_commit_ms"])] for p in r["partitions"]])
            if r.get("partitions_without_end"):
                print()
                print(UNKNOWN_END_NOTE.format(count=r["partitions_without_end"]))
        if r["members"]:
            print()
            print_table(HEALTH_MEMBER_COLUMNS, [
                [r["group"], m["member_id"], m["client_host"], m["client_id"], m["heartbeat_age_ms"], m["commit_age_ms"]]
                for m in r["members"]])
    return reports
