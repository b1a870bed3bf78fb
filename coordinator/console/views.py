"""What the console's JSON API answers, built from Kafka admin requests (no HTTP here).

Each function takes the `Admin` acting for the signed-in user and returns plain JSON-able data; a
Kafka refusal (an ACL denial, an unknown group, an active group) comes back as the client's
`KafkaError`, which the HTTP layer turns into a status code.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable

from cohort.client.admin import LATEST_TIMESTAMP, Admin, GroupDescription
from cohort.client.errors import ClientError, KafkaError, kafka_error
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
    """Log-end offsets for the lag column; empty when the user may not list them or the topics are gone."""
    if not committed:
        return {}
    try:
        listed = await admin.list_partition_offsets({tp: LATEST_TIMESTAMP for tp in committed})
    except (KafkaError, ClientError):
        return {}
    return {tp: o.offset for tp, o in listed.items() if o.offset >= 0}


def _broker(description: GroupDescription) -> dict | None:
    node = description.coordinator
    return None if node is None else {"node_id": node.node_id, "host": node.host, "port": node.port}


async def group_report(admin: Admin, group_id: str, report: str, **params) -> object:
    """One of the coordinator's own reports (rebalances, history, health) as it sends it."""
    return await admin.group_report(group_id, report, **params)


async def reset_plan(admin: Admin, group_id: str, at_ms: int) -> dict:
    """What the group had committed at `at_ms`, next to what it has now (None: no offset)."""
    past, current = await asyncio.gather(admin.group_report(group_id, "offsets-at", at_ms=at_ms),
                                         admin.fetch_offsets(group_id))
    planned = {TopicPartition(o["topic"], o["partition"]): o["offset"] for o in past["offsets"]}
    partitions = [{"topic": tp.topic, "partition": tp.partition,
                   "current": current[tp].offset if tp in current else None, "planned": planned.get(tp)}
                  for tp in sorted(set(planned) | set(current))]
    return {"group_id": group_id, "at_ms": at_ms, "history_from_ms": past.get("history_from_ms"),
            "partitions": partitions}
