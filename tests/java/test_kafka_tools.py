"""Apache Kafka 4.4's own command-line tools against Cohort, and `cohort groups …` against them.

kafka-consumer-groups (ConsumerGroupCommand), kafka-topics and kafka-acls run in the module's JVM (their
main(), output captured). For the same groups, `cohort groups …` must print what kafka-consumer-groups
prints: stdout line by line, and the notices it writes on stderr. Every partition here has a reported end,
so LOG-END-OFFSET and LAG are known to both (without one, Kafka's tool shows the end Cohort's ListOffsets
answers and Cohort's CLI '-': README, "What differs from Kafka").
"""
from __future__ import annotations

import pytest
from cohort_process import CohortServer, run_cohort
from java_groups import consumer_props, create_topics, partitions, settled

from bounded_wait import wait_until

from cohort.client.blocking import BlockingAdmin

pytestmark = pytest.mark.timeout(240)

TOPICS = {"orders": 3, "payments": 2}
DESCRIBE_MODES = [(), ("--offsets",), ("--offsets", "--verbose"), ("--members",), ("--members", "--verbose"),
                  ("--state",), ("--state", "--verbose")]


@pytest.fixture(scope="module")
def groups(java, java_admin, cohort):
    """A classic group with two members (one static), an idle group with offsets only, and a KIP-848 group."""
    create_topics(java_admin, **TOPICS)
    every = [p for t, n in TOPICS.items() for p in partitions(t, n)]
    with BlockingAdmin(cohort.bootstrap) as admin:
        ends = admin.report_end_offsets({(t, p): 100 + 10 * p for t, n in TOPICS.items() for p in range(n)})
        assert all(isinstance(v, int) for v in ends.values()), ends
    classic = [java.consumer(c, consumer_props(cohort.bootstrap, "billing", c, **extra), topics=list(TOPICS))
               for c, extra in (("c1", {"group_instance_id": "billing-1"}), ("c2", {}))]
    settled(classic, every)
    classic[0].commit_sync({"orders:0": 5, "orders:1": 7, "payments:0": 3})
    for idle in ("idle-k", "idle-c", "drop-k", "drop-c"):  # pairs: one for Kafka's tool, one for Cohort's
        assert java_admin.alterConsumerGroupOffsets(group=idle, offsets={"orders:0": 20, "orders:2": 40,
                                                                         "payments:1": 90})["all"] == {"ok": None}
    modern = [java.consumer(c, {"bootstrap.servers": cohort.bootstrap, "group.id": "kip848", "client.id": c,
                                "group.protocol": "consumer", "enable.auto.commit": "false"}, topics=["orders"])
              for c in ("k1", "k2")]
    settled(modern, partitions("orders", 3))
    modern[0].commit_sync({"orders:2": 33})
    for group in ("billing", "kip848"):  # every member acknowledged its assignment: the tables stay still
        wait_until(lambda: java_admin.describeConsumerGroups(groups=[group])[group]["ok"]["state"] == "Stable", 30,
                   f"{group} stable")
    yield
    for consumer in classic + modern:
        consumer.close()


def kafka_tool(java, cohort, *args: str):
    return java.tool("kafka-consumer-groups", "--bootstrap-server", cohort.bootstrap, *args)


def cohort_cli(cohort, *args: str):
    return run_cohort("groups", *args, "--bootstrap-server", cohort.bootstrap)


@pytest.mark.parametrize("group", ["billing", "idle-k", "kip848"])
def test_cohort_groups_describe_prints_what_kafka_consumer_groups_prints(java, cohort, groups, group):
    for mode in DESCRIBE_MODES:
        kafka = kafka_tool(java, cohort, "--describe", "--group", group, *mode)
        ours = cohort_cli(cohort, "describe", group, *mode)
        assert (kafka.exit, ours.returncode) == (0, 0), (mode, kafka, ours.stderr)
        assert ours.stdout.splitlines() == kafka.out.splitlines(), (mode, kafka.out, ours.stdout)
        assert ours.stderr == kafka.err, (mode, kafka.err, ours.stderr)


def test_cohort_groups_list_prints_what_kafka_consumer_groups_prints(java, cohort, groups):
    for mode in [(), ("--state",), ("--type",), ("--state", "--type"), ("--state", "Empty")]:
        kafka = kafka_tool(java, cohort, "--list", *mode)
        ours = cohort_cli(cohort, "list", *mode)
        assert ours.returncode == 0, ours.stderr
        kafka_lines, our_lines = kafka.out.splitlines(), ours.stdout.splitlines()
        if mode:  # the same header; rows in the coordinator's order in Kafka's tool, sorted in Cohort's
            assert our_lines[0] == kafka_lines[0]
            kafka_lines, our_lines = kafka_lines[1:], our_lines[1:]
        assert sorted(our_lines) == sorted(kafka_lines), (mode, kafka.out, ours.stdout)
    assert "idle-k" in kafka.out and "billing" not in kafka.out  # --state Empty filtered


def test_an_export_for_two_groups_one_active_has_the_group_column_as_kafka_consumer_groups(java, cohort, groups):
    args = ("--group", "idle-k", "--group", "billing", "--all-topics", "--to-earliest", "--export")
    kafka = kafka_tool(java, cohort, "--reset-offsets", *args)
    ours = cohort_cli(cohort, "reset-offsets", *args)
    refusal = "Assignments can only be reset if the group 'billing' is inactive, but the current state is Stable."
    assert f"Error: {refusal}" in kafka.out.splitlines(), kafka.out  # Kafka's tool says it on stdout
    assert refusal in ours.stderr, ours.stderr  # Cohort's on stderr, its stdout stays the CSV alone
    kafka_rows = sorted(line for line in kafka.out.splitlines() if line and line != f"Error: {refusal}")
    assert sorted(line for line in ours.stdout.splitlines() if line) == kafka_rows, (kafka.out, ours.stdout)
    assert kafka_rows and all(row.startswith("idle-k,") for row in kafka_rows)
    assert ours.stdout.endswith("\n\n") and kafka.out.endswith("\n\n")  # the empty line after the CSV


def test_reset_offsets_plans_and_executes_as_kafka_consumer_groups(java, java_admin, cohort, groups):
    plans = [("--all-topics", "--to-earliest"), ("--all-topics", "--shift-by", "-5", "--dry-run"),
             ("--topic", "orders:0,2", "--to-offset", "25", "--dry-run"), ("--all-topics", "--to-latest", "--export")]
    for plan in plans:
        kafka = kafka_tool(java, cohort, "--reset-offsets", "--group", "idle-k", *plan)
        ours = cohort_cli(cohort, "reset-offsets", "--group", "idle-k", *plan)
        assert ours.returncode == 0, ours.stderr
        kafka_lines, our_lines = kafka.out.splitlines(), ours.stdout.splitlines()
        if "--export" not in plan:
            assert our_lines[:2] == kafka_lines[:2], (plan, kafka.out, ours.stdout)  # blank line, header
        # rows in Kafka's hash order there, by partition here
        assert sorted(our_lines) == sorted(kafka_lines), (plan, kafka.out, ours.stdout)
        if "--dry-run" not in plan and "--export" not in plan:
            assert ours.stderr.splitlines()[0] == kafka.err.splitlines()[0]  # the missing --execute warning

    # --execute: each tool resets its own copy of the same group, and both end the same.
    execute = ("--all-topics", "--shift-by", "-5", "--execute")
    kafka = kafka_tool(java, cohort, "--reset-offsets", "--group", "idle-k", *execute)
    ours = cohort_cli(cohort, "reset-offsets", "--group", "idle-c", *execute)
    assert ours.returncode == 0, ours.stderr
    assert sorted(ours.stdout.replace("idle-c", "idle-k").splitlines()) == sorted(kafka.out.splitlines())
    offsets = [java_admin.listConsumerGroupOffsets(group=g) for g in ("idle-k", "idle-c")]
    assert offsets[0] == offsets[1] == {"orders:0": {"offset": 15, "metadata": "", "leaderEpoch": None},
                                        "orders:2": {"offset": 35, "metadata": "", "leaderEpoch": None},
                                        "payments:1": {"offset": 85, "metadata": "", "leaderEpoch": None}}


def test_delete_offsets_and_delete_as_kafka_consumer_groups(java, java_admin, cohort, groups):
    kafka = kafka_tool(java, cohort, "--delete-offsets", "--group", "drop-k", "--topic", "orders")
    ours = cohort_cli(cohort, "delete-offsets", "--group", "drop-c", "--topic", "orders")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.replace("drop-c", "drop-k") == kafka.out
    assert list(java_admin.listConsumerGroupOffsets(group="drop-c")) == ["payments:1"]

    kafka = kafka_tool(java, cohort, "--delete", "--group", "drop-k")
    ours = cohort_cli(cohort, "delete", "--group", "drop-c")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.replace("drop-c", "drop-k") == kafka.out == "Deletion of requested consumer groups ('drop-k') was successful.\n"
    assert java_admin.listConsumerGroupOffsets(group="drop-c") == {}


def test_kafka_topics_creates_describes_alters_and_deletes_topics_of_cohort(java, java_admin, cohort):
    def topics(*args: str):
        run = java.tool("kafka-topics", "--bootstrap-server", cohort.bootstrap, *args)
        assert run.exit == 0, (args, run)
        return run

    assert topics("--create", "--topic", "tools-t", "--partitions", "2", "--replication-factor", "1").out == \
        "Created topic tools-t.\n"
    assert "tools-t" in topics("--list").out.splitlines()
    topics("--alter", "--topic", "tools-t", "--partitions", "4")
    # (--describe also reads topic configs with DescribeConfigs, which Cohort does not serve: README)
    assert java_admin.describeTopics(topics=["tools-t"])["tools-t"]["ok"]["partitions"] == 4
    topics("--delete", "--topic", "tools-t")
    assert "tools-t" not in java_admin.listTopics()


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory):
    """ACLs on, every connection the super user (PLAINTEXT as User:ANONYMOUS), as kafka-acls is often run."""
    data = tmp_path_factory.mktemp("acls") / "data"
    data.mkdir()
    server = CohortServer(data, "--authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                          "--super.users", "User:ANONYMOUS").start()
    try:
        yield server
    finally:
        server.stop()


def test_kafka_acls_adds_lists_and_removes_acls_that_cohort_enforces_and_lists_alike(java, acl_server):
    def acls(*args: str):
        run = java.tool("kafka-acls", "--bootstrap-server", acl_server.bootstrap, *args)
        assert run.exit == 0, (args, run)
        return run.out

    added = acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders",
                 "--group", "team-", "--resource-pattern-type", "prefixed")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)`" in added
    listed = acls("--list", "--principal", "User:alice")
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed
    assert "ResourcePattern(resourceType=GROUP, name=team-, patternType=PREFIXED)" in listed
    # Cohort's own listing holds the same two bindings, in the lines kafka-acls prints within its blocks.
    ours = run_cohort("acls", "list", "--principal", "User:alice", "--bootstrap-server", acl_server.bootstrap)
    assert ours.returncode == 0, ours.stderr
    assert sorted(ours.stdout.splitlines()) == sorted(
        f"{entry.strip()} on {block.split('`')[1]}" for block in listed.split("Current ACLs for resource ")[1:]
        for entry in block.splitlines()[1:] if entry.strip())

    acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders",
         "--resource-pattern-type", "prefixed")
    left = acls("--list")
    assert "resourceType=TOPIC" not in left and "name=team-" in left
