"""A hostile or wrong reported end (2^63-1) cannot break lag anywhere, and an operator with ALTER corrects it.

Over SASL with ACLs: a source with topic WRITE reports the largest offset on both partitions of a topic a
group consumes. The lag sampler, GroupReport "lag" and "health" keep answering (lags saturate at 2^63-1,
the samples stay aligned); then `cohort topics end-offsets set --force` and `delete` by a principal with
topic ALTER correct it (the source's WRITE is not enough), audited, and the correction survives a restart.
"""
from __future__ import annotations

import asyncio
import logging
import time

import pytest

from cohort_process import add_scram_users, run_cohort

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient
from confluent_kafka.admin import ResourcePatternType, ResourceType

from cohort.client.admin import Admin, NewTopic
from cohort.client.errors import KafkaError
from cohort.client.security import ClientSecurity
from cohort.client.topic_partition import TopicPartition
from cohort.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(180)

USERS = {"admin": "admin-secret", "source": "source-secret", "ops": "ops-secret"}
TOPIC, GROUP = "events", "victims"
LARGEST = (1 << 63) - 1


@pytest.fixture
def data(tmp_path):
    data = tmp_path / "data"
    add_scram_users(data, USERS)
    return data


def start(server_factory, data):
    return server_factory(data, listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="SCRAM-SHA-512",
                          authorizer_class_name="acl", super_users="User:admin",
                          group_health_window_min_distance_ms=100)


def bootstrap(node) -> str:
    return f"127.0.0.1:{node.server.ports['SASL_PLAINTEXT']}"


def admin_as(node, user: str) -> Admin:
    return Admin(bootstrap(node), security=ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", user, USERS[user]))


def command_config(tmp_path, user: str) -> str:
    path = tmp_path / f"{user}.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{USERS[user]}";\n')
    return str(path)


def allow(node, user: str, operation) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap(node), "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
                          "sasl.password": USERS["admin"], "logger": logging.getLogger("tests.confluent_kafka")})
    binding = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, f"User:{user}", "*", operation,
                         AclPermissionType.ALLOW)
    for future in client.create_acls([binding]).values():
        future.result(10)


async def test_the_largest_end_saturates_lag_and_an_operator_with_alter_corrects_it(server_factory, data, tmp_path,
                                                                                    caplog):
    node = start(server_factory, data)
    allow(node, "source", AclOperation.WRITE)
    allow(node, "ops", AclOperation.ALTER)
    async with admin_as(node, "admin") as admin:
        await admin.create_topics([NewTopic(TOPIC, 2)])
        await admin.alter_offsets(GROUP, {(TOPIC, 0): (5, ""), (TOPIC, 1): (7, "")})
    async with admin_as(node, "source") as source:
        reported = await source.report_end_offsets({TopicPartition(TOPIC, 0): LARGEST,
                                                    TopicPartition(TOPIC, 1): LARGEST})
        assert set(reported.values()) == {LARGEST}
        reported_at_ms = time.time() * 1000  # lag samples from here on know the ends
        # a source only moves ends forward, and its WRITE cannot force one back
        refused = await source.report_end_offsets({TopicPartition(TOPIC, 0): 10}, force=True)
        assert isinstance(refused[TopicPartition(TOPIC, 0)], KafkaError)
        assert refused[TopicPartition(TOPIC, 0)].code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    async with admin_as(node, "admin") as admin:
        # the lag sampler runs every 3 health samples (300 ms here): several samples taken since the report, each
        # a saturated total (one taken between the commit and the report knows no end yet: no lag)
        deadline = time.monotonic() + 30
        while True:
            lag = await admin.group_report(GROUP, "lag")
            since = [sample for sample in lag["samples"] if sample[0] >= reported_at_ms]
            if len(since) >= 3 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert len(since) >= 3, lag
        assert all(len(sample) == 2 for sample in lag["samples"]), lag["samples"]
        assert all(sample[1] == LARGEST for sample in since), (reported_at_ms, lag["samples"])
        assert lag["total_lag"] == LARGEST
        assert {p["partition"]: p["lag"] for p in lag["partitions"]} == {0: LARGEST - 5, 1: LARGEST - 7}
        health = await admin.group_report(GROUP, "health")
        assert health["total_lag"] == LARGEST
        summaries = [g for page in [p async for p in admin.group_overview_pages(None)] for g in page["groups"]]
        assert [g["lag"] for g in summaries if g["group_id"] == GROUP] == [LARGEST]

    offsets = run_cohort("groups", "describe", "--group", GROUP, "--offsets", "--bootstrap-server", bootstrap(node),
                         "--command-config", command_config(tmp_path, "admin"))
    assert offsets.returncode == 0, offsets.stderr
    assert str(LARGEST - 5) in offsets.stdout and str(LARGEST - 7) in offsets.stdout

    ops = command_config(tmp_path, "ops")
    caplog.set_level(logging.INFO, logger="cohort.audit")
    corrected = run_cohort("topics", "end-offsets", "set", "--topic", TOPIC, "--partition", "0", "--offset", "40",
                           "--force", "--bootstrap-server", bootstrap(node), "--command-config", ops)
    assert corrected.returncode == 0, corrected.stderr
    assert "is 40" in corrected.stdout
    deleted = run_cohort("topics", "end-offsets", "delete", "--topic", TOPIC, "--partition", "1",
                         "--bootstrap-server", bootstrap(node), "--command-config", ops)
    assert deleted.returncode == 0, deleted.stderr
    without_force = run_cohort("topics", "end-offsets", "set", "--topic", TOPIC, "--partition", "0", "--offset", "9",
                               "--bootstrap-server", bootstrap(node), "--command-config", ops)
    assert without_force.returncode == 0 and "stays 40" in without_force.stdout, without_force.stdout
    audited = [r for r in caplog.records if r.name == "cohort.audit" and r.getMessage() == "end offset corrected"]
    assert [(r.principal, r.partition, r.end_before, r.end_after) for r in audited] == [
        ("User:ops", 0, LARGEST, 40), ("User:ops", 1, LARGEST, None)]

    async with admin_as(node, "admin") as admin:
        ends = (await admin.describe_end_offsets([TOPIC]))[TOPIC]
        assert (ends[0].end_offset, ends[1]) == (40, None)
        lag = await admin.group_report(GROUP, "lag")
        assert (lag["total_lag"], lag["partitions_without_end"]) == (35, 1)

    node.stop()
    node = start(server_factory, data)
    async with admin_as(node, "admin") as admin:
        ends = (await admin.describe_end_offsets([TOPIC]))[TOPIC]
        assert (ends[0].end_offset, ends[1]) == (40, None)
