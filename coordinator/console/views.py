"""What the console's JSON API answers, built from Kafka admin requests (no HTTP here).

Each function takes the `Admin` acting for the signed-in user and returns plain JSON-able data; a
Kafka refusal (an ACL denial, an unknown group, an active group) comes back as the client's
`KafkaError`, which the HTTP layer turns into a status code.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable

from cohort.client.admin import Admin, GroupDescription
from cohort.client.cli.groups import log_ranges, log_end_offsets
from cohort.client.cli.offset_reset import ResetInputError, Scenario, now_minus_ms, parse_duration, plan_reset
from cohort.client.cli.runner import CommandError
from cohort.client.errors import ClientError, kafka_error
from cohort.client.topic_partition import TopicPartition
from cohort.coordinator.console.snapshot import GroupSnapshot
from cohort.coordinator.groups.reports.lag import total_lag
from cohort.protocol.errors import ErrorCode, error_name


# What the group list may be sorted by; None (unknown) sorts after every value either way.
GROUP_SORT_KEYS = ("group_id", "state", "type", "members", "lag", "health")
MAX_PAGE = 500


def groups_page(snapshot: GroupSnapshot, *, search: str = "", state: str = "", group_type: str = "",
                health: str = "", sort: str = "group_id", descending: bool = False, offset: int = 0,
                limit: int = 100) -> dict:
    """One page of the group list, searched (id contains, any case), filtered, sorted: at most MAX_PAGE rows."""
    rows = list(snapshot.groups.values())
    if search:
        needle = search.lower()
        rows = [r for r in rows if needle in r["group_id"].lower()]
    states = {s.lower() for s in state.split(",") if s}
    if states:
        rows = [r for r in rows if r["state"].lower() in states]
    if group_type:
        rows = [r for r in rows if r["type"] == group_type.lower()]
    if health:
        rows = [r for r in rows if (r["health"] or "").lower() == health.lower()]
    known = [r for r in rows if r[sort] is not None]
    unknown = [r for r in rows if r[sort] is None]
    known.sort(key=lambda r: r["group_id"])  # ties in id order, whichever way the column sorts
    known.sort(key=lambda r: r[sort].lower() if isinstance(r[sort], str) else r[sort], reverse=descending)
    rows = known + unknown
    limit = max(1, min(limit, MAX_PAGE))
    return {
        "groups": [{**{k: v for k, v in r.items() if k != "topics"}, "topics": len(r["topics"])}
                   for r in rows[offset:offset + limit]],
        "total": len(rows), "offset": offset, "limit": limit, "groups_known": len(snapshot.groups),
        "taken_ms": snapshot.taken_ms,
        "unreachable": [{"node_id": n, "error": why} for n, why in sorted(snapshot.unreachable.items(),
                                                                          key=lambda i: (i[0] is None, i[0] or 0))],
    }


async def group_lag(admin: Admin, group_id: str, since_ms: int | None) -> dict:
    """The group's total lag over time, as its coordinator sampled it, and now."""
    return await admin.group_report(group_id, "lag", since_ms=-1 if since_ms is None else since_ms)


def topics_page(topics: dict, snapshot: GroupSnapshot, *, search: str = "", offset: int = 0, limit: int = 100) -> dict:
    """The topics the user may see: partitions, how many groups consume each and their summed lag."""
    names = [n for n in topics if not search or search.lower() in n.lower()]
    consumers: dict[str, list[int | None]] = {}
    for row in snapshot.groups.values():
        for t in row["topics"]:
            consumers.setdefault(t["topic"], []).append(t["lag"])
    limit = max(1, min(limit, MAX_PAGE))
    return {"topics": [{"topic": n, "partitions": len(topics[n].partitions), "groups": len(consumers.get(n, ())),
                        "lag": total_lag(consumers.get(n, ()))} for n in names[offset:offset + limit]],
            "total": len(names), "offset": offset, "limit": limit, "taken_ms": snapshot.taken_ms}


# A topic page lists at most this many partitions' end offsets (every partition is in its count).
MAX_TOPIC_PARTITIONS_SHOWN = 1000


async def topic_detail(admin: Admin, topic: str, snapshot: GroupSnapshot) -> dict:
    """A topic's partitions with their end offsets, and the groups consuming it with their lag on it."""
    info = (await admin.describe_topics([topic]))[topic]
    if info.error_code:
        raise kafka_error(info.error_code, f"topic {topic!r}")
    partitions = sorted(p.partition for p in info.partitions)
    shown = partitions[:MAX_TOPIC_PARTITIONS_SHOWN]
    # The ends its source reported (none: unknown), as every lag is measured against
    ends = {tp.partition: end for tp, end in (await log_end_offsets(admin, [TopicPartition(topic, p) for p in shown])).items()}
    return {"topic": topic, "topic_id": info.topic_id, "partition_count": len(partitions),
            "partitions": [{"partition": p, "log_end_offset": ends.get(p)} for p in shown],
            "groups": snapshot.consumers_of(topic), "taken_ms": snapshot.taken_ms}


async def cluster_overview(admin: Admin, snapshot: GroupSnapshot, etcd_status=None) -> dict:
    """The brokers (nodes or workers) with the offsets partitions each owns and their load state; in cluster
    mode also what etcd knows (each node's lease time left, each partition's owner, epoch and load)."""
    meta = await admin.cluster.metadata([])
    brokers = []
    for node_id, broker in sorted(meta.brokers.items()):
        states = snapshot.partitions.get(node_id, {})
        brokers.append({"node_id": node_id, "host": broker.host, "port": broker.port,
                        "controller": node_id == meta.controller_id,
                        "reachable": node_id not in snapshot.unreachable,
                        "partitions": {state: sorted(p for p, s in states.items() if s == state)
                                       for state in ("loaded", "loading", "failed")}})
    owners = {p: (node_id, state) for node_id, states in snapshot.partitions.items() for p, state in states.items()}
    return {"cluster_id": meta.cluster_id, "brokers": brokers, "taken_ms": snapshot.taken_ms,
            "partitions": [{"partition": p, "owner": owners[p][0], "load": owners[p][1]} for p in sorted(owners)],
            "etcd": etcd_status}


async def group_detail(admin: Admin, group_id: str) -> dict:
    """Members with their assignments and the committed offset of every partition, with its log end and lag
    as the coordinator computes them (unknown, None, where it knows no end)."""
    description, committed = await asyncio.gather(admin.describe_group(group_id), admin.fetch_offsets(group_id))
    if description.state == "Dead" and not committed:
        raise kafka_error(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r}")
    hidden = await _hidden_topics(admin, {tp.topic for m in description.members for tp in m.assignment}
                                  - {tp.topic for tp in committed})
    owners = {tp: m.member_id for m in description.members for tp in m.assignment if tp.topic not in hidden}
    ends = await _log_end_offsets(admin, group_id)
    offsets = []
    for tp in sorted(set(committed) | set(owners)):
        entry = committed.get(tp)
        end, lag = ends.get(tp, (None, None)) if entry is not None else (None, None)
        offsets.append({
            "topic": tp.topic, "partition": tp.partition,
            "offset": entry.offset if entry else None,
            "metadata": entry.metadata if entry else None,
            "log_end_offset": end,
            "lag": lag,
            "member_id": owners.get(tp),
        })
    return {
        "group_id": group_id,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol,
        "coordinator": _broker(description),
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "host": m.host, "assignment": [{"topic": tp.topic, "partition": tp.partition} for tp in m.assignment
                                           if tp.topic not in hidden],
        } for m in description.members],
        "offsets": offsets,
        "lag": total_lag(o["lag"] for o in offsets),
    }


async def delete_offsets(admin: Admin, group_id: str, partitions: Iterable[TopicPartition]) -> dict:
    """OffsetDelete; each partition's outcome by Kafka error name (NONE = deleted)."""
    results = await admin.delete_offsets(group_id, partitions)
    return {"group_id": group_id, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "error": error_name(code)}
        for tp, code in sorted(results.items())]}


async def _hidden_topics(admin: Admin, topics: set[str]) -> set[str]:
    """Which of `topics` (named in members' assignments, which DescribeGroups hands over as the members sent
    them) the signed-in user may not DESCRIBE: Metadata answers TOPIC_AUTHORIZATION_FAILED for those. The
    page leaves them out, as OffsetFetch leaves out their offsets."""
    if not topics:
        return set()
    described = await admin.describe_topics(sorted(topics))
    return {name for name, info in described.items() if info.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED}


async def _log_end_offsets(admin: Admin, group_id: str) -> dict[TopicPartition, tuple[int | None, int | None]]:
    """(log end, lag) of each committed partition, from the coordinator's lag report; none when refused."""
    try:
        report = await admin.group_report(group_id, "lag")
    except ClientError:
        return {}
    return {TopicPartition(p["topic"], p["partition"]): (p["end_offset"], p["lag"]) for p in report["partitions"]}


def _broker(description: GroupDescription) -> dict | None:
    node = description.coordinator
    return None if node is None else {"node_id": node.node_id, "host": node.host, "port": node.port}


async def group_report(admin: Admin, group_id: str, report: str, **params) -> object:
    """One of the coordinator's own reports (rebalances, history, health) as it sends it; None = not narrowed."""
    return await admin.group_report(group_id, report, **{k: v for k, v in params.items() if v is not None})


async def reset_plan(admin: Admin, group_id: str, at_ms: int) -> dict:
    """The undo of a reset: what the group had committed at `at_ms` (from the server's offset history), planned
    as `cohort groups reset-offsets --to-commit-at` plans it; a partition with no offset then is left as it is."""
    past, current = await asyncio.gather(admin.group_report(group_id, "offsets-at", at_ms=at_ms),
                                         admin.fetch_offsets(group_id))
    then = {TopicPartition(row["topic"], row["partition"]): row["offset"] for row in past["offsets"]}
    restorable = {tp: offset for tp, offset in then.items() if offset is not None}
    committed = {tp: om.offset for tp, om in current.items()}
    plan: dict[TopicPartition, int] = {}
    warnings: list[str] = []
    if restorable:
        topics = await admin.describe_topics(sorted({tp.topic for tp in restorable}))
        if any(info.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED for info in topics.values()):
            # The denied topics are not named: a refusal must not tell what the principal may not see.
            raise kafka_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to describe the group's topics")
        try:
            logs = await log_ranges(admin, sorted(restorable))
        except CommandError as exc:
            raise kafka_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)) from None
        plan, warnings = plan_reset(Scenario("to-commit-at", at_ms), restorable, committed, logs, file_plan=restorable)
    warnings += [f"{tp} had no committed offset at that time; it is left as it is"
                 for tp, offset in sorted(then.items()) if offset is None]
    oldest = past.get("history_from_ms")
    if oldest is not None and at_ms < oldest:
        warnings.append(f"the offset history reaches back only to {oldest} ms (offsets.history.retention.ms "
                        f"{past.get('history_retention_ms')}); older commits may be gone")
    return {"group_id": group_id, "at_ms": at_ms, "history_from_ms": oldest, "warnings": warnings,
            "partitions": [{"topic": tp.topic, "partition": tp.partition, "current": committed.get(tp),
                            "planned": plan.get(tp)} for tp in sorted(set(then) | set(committed))]}


async def reset_to_commit_at(admin: Admin, group_id: str, at_ms: int) -> dict:
    """Execute `reset_plan`: Kafka's rule first (only an inactive group's offsets are reset), then one simple commit;
    `"executed": false` with a reason when the plan restores nothing."""
    description = await admin.describe_group(group_id)
    if not description.is_inactive:
        raise kafka_error(ErrorCode.NON_EMPTY_GROUP, f"Assignments can only be reset if the group '{group_id}' is "
                                                     f"inactive, but the current state is {description.state}.")
    planned = await reset_plan(admin, group_id, at_ms)
    offsets = {TopicPartition(p["topic"], p["partition"]): (p["planned"], "")
               for p in planned["partitions"] if p["planned"] is not None}
    if not offsets:  # e.g. a time before the offset history: committing nothing is not an undo
        reason = f"nothing to restore: the group had no committed offset at {at_ms} ms"
        if planned["history_from_ms"] is not None and at_ms < planned["history_from_ms"]:
            reason += f" that the offset history still holds (it reaches back to {planned['history_from_ms']} ms)"
        return {**planned, "executed": False, "reason": reason}
    await admin.alter_offsets(group_id, offsets)
    return {**planned, "executed": True}


# The console's reset scenarios (`?scenario=`) and the CLI's (`reset-offsets --to-…`) they are.
RESET_SCENARIOS = {"earliest": "to-earliest", "latest": "to-latest", "offset": "to-offset", "shift": "shift-by",
                   "datetime": "to-datetime", "duration": "by-duration"}


def reset_scenario(name: str, value: object) -> Scenario:
    """The CLI's `Scenario` for the console's scenario name and value; ResetInputError when they do not fit
    (an offset or shift that is not a whole number, a duration that is not ISO-8601, a time before 1970)."""
    kind = RESET_SCENARIOS.get(name)
    if kind is None:
        raise ResetInputError(f"scenario must be one of {', '.join(RESET_SCENARIOS)}, not {str(name)[:40]!r}")
    if kind in ("to-earliest", "to-latest"):
        return Scenario(kind)
    if kind == "by-duration":
        if not isinstance(value, str):
            raise ResetInputError("a duration is ISO-8601 PnDTnHnMnS text, e.g. PT1H")
        return Scenario(kind, now_minus_ms(parse_duration(value)))
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ResetInputError(f"{name} needs a whole number, not {value[:40]!r}") from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ResetInputError(f"{name} needs a whole number")
    if kind == "to-datetime" and value < 0:
        raise ResetInputError("the time is milliseconds since the epoch (not negative)")
    if kind == "to-offset" and value < 0:
        raise ResetInputError("an offset is not negative")
    return Scenario(kind, value)


def _inactive_refusal(description: GroupDescription) -> dict | None:
    """Kafka's refusal of an offset reset, said before anything is sent: only an inactive group's offsets move."""
    if description.is_inactive:
        return None
    return {"error": "NON_EMPTY_GROUP",
            "message": f"Assignments can only be reset if the group '{description.group_id}' is inactive, but the "
                       f"current state is {description.state}."}


async def offsets_plan(admin: Admin, group_id: str, scenario: Scenario,
                       partitions: list[TopicPartition] | None) -> dict:
    """A reset planned exactly as `cohort groups reset-offsets --dry-run` plans it (the same ListOffsets, the
    same clamping and warnings), for `partitions` (None: every partition the group has an offset for), with
    the group's state and, for an active group, Kafka's refusal (`refused`), so the page can say it before
    the click."""
    description, current = await asyncio.gather(admin.describe_group(group_id), admin.fetch_offsets(group_id))
    committed = {tp: om.offset for tp, om in current.items()}
    if description.state == "Dead" and not committed:
        raise kafka_error(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group '{group_id}' does not exist.")
    scope = sorted(set(partitions)) if partitions else sorted(committed)
    if not scope:
        raise ResetInputError(f"group '{group_id}' has no committed offsets to reset; name the partitions")
    try:
        logs = await log_ranges(admin, scope)
    except CommandError as exc:
        raise kafka_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)) from None
    by_timestamp = None
    if scenario.needs_timestamps:
        found = await admin.list_partition_offsets({tp: int(scenario.value) for tp in scope})
        by_timestamp = {tp: o.offset for tp, o in found.items()}
    plan, warnings = plan_reset(scenario, scope, committed, logs, by_timestamp)
    return {"group_id": group_id, "state": description.state, "scenario": scenario.kind,
            "value": scenario.value, "refused": _inactive_refusal(description), "warnings": warnings,
            "partitions": [{"topic": tp.topic, "partition": tp.partition, "current": committed.get(tp),
                            "planned": plan[tp], "earliest": logs[tp].earliest, "latest": logs[tp].latest}
                           for tp in scope]}


async def reset_offsets(admin: Admin, group_id: str, scenario: Scenario, partitions: list[TopicPartition] | None) -> dict:
    """Execute `offsets_plan` as `reset-offsets --execute` does (one simple OffsetCommit, journaled by the
    coordinator as an admin reset); an active group is refused with Kafka's NON_EMPTY_GROUP."""
    planned = await offsets_plan(admin, group_id, scenario, partitions)
    if planned["refused"] is not None:
        raise kafka_error(ErrorCode.NON_EMPTY_GROUP, planned["refused"]["message"])
    await admin.alter_offsets(group_id, {TopicPartition(p["topic"], p["partition"]): (p["planned"], "")
                                         for p in planned["partitions"]})
    return {**planned, "executed": True}


async def delete_plan(admin: Admin, group_id: str) -> dict:
    """What deleting the group removes (its committed offsets), and Kafka's refusal when it has members."""
    description, current = await asyncio.gather(admin.describe_group(group_id), admin.fetch_offsets(group_id))
    if description.state == "Dead" and not current:
        raise kafka_error(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group '{group_id}' does not exist.")
    refused = None
    if description.state not in ("Empty", "Dead"):
        refused = {"error": "NON_EMPTY_GROUP",
                   "message": f"Consumer group '{group_id}' could not be deleted: it is not empty "
                              f"({description.state}, {len(description.members)} members)."}
    return {"group_id": group_id, "state": description.state, "refused": refused,
            "partitions": [{"topic": tp.topic, "partition": tp.partition, "current": om.offset}
                           for tp, om in sorted(current.items())]}


async def delete_group(admin: Admin, group_id: str) -> dict:
    """DeleteGroups, as `cohort groups delete` sends it; Kafka's refusal (NON_EMPTY_GROUP, …) is raised."""
    error = (await admin.delete_groups([group_id]))[group_id]
    if error is not None:
        raise error
    return {"group_id": group_id, "deleted": True}
