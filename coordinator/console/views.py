"""What the console's JSON API answers, built from Kafka admin requests (no HTTP here).

Each function takes the `Admin` acting for the signed-in user and returns plain JSON-able data; a
Kafka refusal (an ACL denial, an unknown group, an active group) comes back as the client's
`KafkaError`, which the HTTP layer turns into a status code.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable

from cohort.client.admin import Admin, GroupDescription
from cohort.client.cli.groups import _log_ranges, log_end_offsets
from cohort.client.cli.offset_reset import Scenario, plan_reset
from cohort.client.cli.runner import CommandError
from cohort.client.errors import ClientError, kafka_error
from cohort.client.topic_partition import TopicPartition
from cohort.protocol.errors import ErrorCode, error_name


async def groups_overview(admin: Admin) -> list[dict]:
    """Every group the user may describe: id, state, type, protocol, member count and health."""
    listings = await admin.list_groups()
    described, health = await asyncio.gather(
        asyncio.gather(*(admin.describe_group(g.group_id) for g in listings), return_exceptions=True),
        asyncio.gather(*(admin.group_report(g.group_id, "health") for g in listings), return_exceptions=True))
    rows = []
    for listing, description, judged in zip(listings, described, health):
        for outcome in (description, judged):
            if isinstance(outcome, BaseException) and not isinstance(outcome, ClientError):
                raise outcome
        if isinstance(description, BaseException):
            description = None  # listed a moment ago, gone or refused now: show what ListGroups said
        rows.append({
            "group_id": listing.group_id,
            "state": description.state if description else listing.state,
            "type": listing.group_type or "classic",
            "protocol_type": listing.protocol_type,
            "protocol": description.protocol if description else "",
            "members": len(description.members) if description else None,
            "health": None if isinstance(judged, BaseException) else judged["status"],
        })
    return rows


async def group_detail(admin: Admin, group_id: str) -> dict:
    """Members with their assignments and the committed offset of every partition (with lag when known)."""
    description, committed = await asyncio.gather(admin.describe_group(group_id), admin.fetch_offsets(group_id))
    if description.state == "Dead" and not committed:
        raise kafka_error(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r}")
    owners = {tp: m.member_id for m in description.members for tp in m.assignment}
    ends = await _log_end_offsets(admin, committed)
    offsets = []
    for tp in sorted(set(committed) | set(owners)):
        entry = committed.get(tp)
        end = ends.get(tp)
        offsets.append({
            "topic": tp.topic, "partition": tp.partition,
            "offset": entry.offset if entry else None,
            "metadata": entry.metadata if entry else None,
            "log_end_offset": end,
            "lag": max(0, end - entry.offset) if entry is not None and end is not None and entry.offset >= 0 else None,
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
            "host": m.host, "assignment": [{"topic": tp.topic, "partition": tp.partition} for tp in m.assignment],
        } for m in description.members],
        "offsets": offsets,
    }


async def delete_offsets(admin: Admin, group_id: str, partitions: Iterable[TopicPartition]) -> dict:
    """OffsetDelete; each partition's outcome by Kafka error name (NONE = deleted)."""
    results = await admin.delete_offsets(group_id, partitions)
    return {"group_id": group_id, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "error": error_name(code)}
        for tp, code in sorted(results.items())]}


async def _log_end_offsets(admin: Admin, committed: dict) -> dict[TopicPartition, int]:
    """Log-end offsets for the lag column, as `cohort groups describe` reads them; none when the user may not."""
    try:
        return await log_end_offsets(admin, committed)
    except ClientError:
        return {}


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
            logs = await _log_ranges(admin, sorted(restorable))
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
