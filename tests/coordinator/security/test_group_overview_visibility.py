"""GroupOverview (Cohort's private API 10003) under ACLs, over SASL: a principal paging with the smallest
pages learns no group it may not describe (rows, cursors, counts), and a row it may see is summarized over
the topics it may describe only; a cursor the node did not make is refused."""
from __future__ import annotations

import re

import pytest

from cohort.client.admin import Admin, NewTopic, _private_request
from cohort.client.security import ClientSecurity
from cohort.protocol.errors import ErrorCode
from cohort.protocol.framing import decode_response
from cohort.protocol.messages import GroupOverviewRequest
from test_end_offset_corrections import USERS, allow, bootstrap, data, start  # noqa: F401

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient
from confluent_kafka.admin import ResourcePatternType, ResourceType

pytestmark = pytest.mark.timeout(180)

SECRET_GROUPS = [f"secret-{i}" for i in range(12)]


def grant(node, user: str, rtype, name: str, operation) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap(node), "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
                          "sasl.password": USERS["admin"]})
    binding = AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", operation,
                         AclPermissionType.ALLOW)
    for future in client.create_acls([binding]).values():
        future.result(10)


def as_user(node, user: str) -> Admin:
    return Admin(bootstrap(node), security=ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", user, USERS[user]))


async def test_pages_name_no_group_and_count_no_partition_the_principal_may_not_describe(server_factory, data):
    node = start(server_factory, data)
    grant(node, "ops", ResourceType.GROUP, "visible", AclOperation.DESCRIBE)
    grant(node, "ops", ResourceType.TOPIC, "shared", AclOperation.DESCRIBE)
    async with as_user(node, "admin") as admin:
        await admin.create_topics([NewTopic("shared", 2), NewTopic("hidden", 3)])
        await admin.report_end_offsets({("shared", 0): 10, ("shared", 1): 10,
                                        ("hidden", 0): 500, ("hidden", 1): 500, ("hidden", 2): 500})
        offsets = {**{("shared", p): (4, "") for p in range(2)}, **{("hidden", p): (1, "") for p in range(3)}}
        for group in ["visible", *SECRET_GROUPS]:
            await admin.alter_offsets(group, offsets)
        everything = [g["group_id"] for page in [p async for p in admin.group_overview_pages(None, page_size=1)]
                      for g in page["groups"]]
        assert sorted(everything) == sorted(["visible", *SECRET_GROUPS])  # the super user sees every group

    async with as_user(node, "ops") as ops:
        pages = [p async for p in ops.group_overview_pages(None, page_size=1)]
        rows = [g for page in pages for g in page["groups"]]
        assert [g["group_id"] for g in rows] == ["visible"]
        cursors = [page["next_after"] for page in pages]
        assert all(re.fullmatch("[0-9a-f]{16}", c) for c in cursors), cursors
        assert not any(secret in repr(page) for page in pages for secret in SECRET_GROUPS)
        # the visible group's row: only `shared` (2 partitions, lag 2 x 6), never hidden's 3 partitions
        row = rows[0]
        assert row["topics"] == [{"topic": "shared", "partitions": 2, "lag": 12}]
        assert (row["offsets"], row["lag"]) == (2, 12)

        conn = await ops.cluster.any_connection()
        forged = await _private_request(conn, "GroupOverview", GroupOverviewRequest(after="secret-3", limit=1))
        assert forged.error_code == ErrorCode.INVALID_REQUEST


def test_a_principal_asking_for_pages_faster_than_its_rate_waits_then_is_refused(server_factory, raw_client):
    node = server_factory(group_overview_max_pages_per_second=1)
    clients = [raw_client(node.port) for _ in range(3)]
    for client in clients:  # three pages at once from one principal: one now, one a second later, one refused
        client.send(GroupOverviewRequest(after="", limit=10), 0)
    codes = sorted(decode_response(10003, 0, client.receive_frame())[1].error_code for client in clients)
    assert codes == [0, 0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
