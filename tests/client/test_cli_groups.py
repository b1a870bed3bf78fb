"""`cohort groups …` run as a real subprocess against a real `cohort serve`."""
from __future__ import annotations

import asyncio
import json

import pytest

from cohort.client.admin import Admin, NewTopic
from cohort.client.membership import GroupMember
from cohort.client.topic_partition import TopicPartition
from client_harness import assert_one_line_error, free_port, run_cli

pytestmark = pytest.mark.timeout(120)

OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]


def cli(server, *args):
    return run_cli(*args, "--bootstrap-server", server.bootstrap)


async def cli_many(server, *commands):
    """Run independent CLI commands concurrently (each is its own `cohort` process)."""
    return await asyncio.gather(*(asyncio.to_thread(cli, server, *command) for command in commands))


def table(stdout: str) -> list[list[str]]:
    """The rows of the first table in `stdout` (header first), split on runs of spaces."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    start = next(i for i, words in enumerate(lines) if words and words[0] == "GROUP" or words[:1] == ["TOPIC"])
    return lines[start:]


async def seed(server, group: str, topic: str, partitions: int, offsets: dict[int, int]) -> None:
    async with Admin(server.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions)])
        if offsets:
            await admin.alter_offsets(group, {(topic, p): (o, "seed") for p, o in offsets.items()})


async def committed(server, group: str) -> dict[TopicPartition, int]:
    async with Admin(server.bootstrap) as admin:
        return {tp: om.offset for tp, om in (await admin.fetch_offsets(group)).items()}


@pytest.fixture
async def active_member(shared_cohort_server):
    """A live member of group 'cli-active' owning both partitions of 'cli-active-t'."""
    await seed(shared_cohort_server, "cli-active-hw", "cli-active-t", 2, {0: 10, 1: 3})  # high watermarks 10 and 3
    async with Admin(shared_cohort_server.bootstrap) as admin:  # partition 0's source reported its end
        await admin.report_end_offsets({TopicPartition("cli-active-t", 0): 10})
    member = GroupMember(shared_cohort_server.bootstrap, "cli-active", ["cli-active-t"], client_id="cli-test-client",
                         session_timeout_ms=10000, heartbeat_interval_ms=300)
    await member.start(timeout=15)
    await member.commit({("cli-active-t", 0): 4})
    yield member
    await member.close()


async def test_describe_active_group_shows_offsets_lag_and_owners(shared_cohort_server, active_member):
    result = await asyncio.to_thread(cli, shared_cohort_server, "groups", "describe", "cli-active")
    assert result.returncode == 0, result.stderr
    rows = table(result.stdout)
    assert rows[0] == OFFSETS_HEADER
    by_partition = {row[2]: row for row in rows[1:]}
    # no source reported an end offset for partition 1: its end is unknown, not the highest commit
    assert by_partition["0"][:6] == ["cli-active", "cli-active-t", "0", "4", "10", "6"]
    assert by_partition["1"][:6] == ["cli-active", "cli-active-t", "1", "-", "-", "-"]
    for row in by_partition.values():
        assert row[6:] == [active_member.member_id, "/127.0.0.1", "cli-test-client"]

    members, verbose, state, as_json = await cli_many(
        shared_cohort_server,
        ("groups", "describe", "cli-active", "--members"),
        ("groups", "describe", "cli-active", "--members", "--verbose"),
        ("groups", "describe", "cli-active", "--state"),
        ("groups", "describe", "cli-active", "--output", "json"),
    )
    assert table(members.stdout) == [
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
        ["cli-active", active_member.member_id, "/127.0.0.1", "cli-test-client", "2"],
    ]
    assert table(verbose.stdout) == [  # Kafka 4's columns (the epochs are a KIP-848 group's)
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
         "TARGET-EPOCH", "TARGET-ASSIGNMENT"],
        ["cli-active", active_member.member_id, "/127.0.0.1", "cli-test-client", "2", "-", "cli-active-t:0,1", "-", "-"],
    ]
    assert table(state.stdout) == [
        ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        ["cli-active", shared_cohort_server.bootstrap, "(0)", "range", "Stable", "1"],  # 'host:port  (id)' 
    ]
    parsed = json.loads(as_json.stdout)
    assert {(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in parsed} == {(0, 4, 10, 6), (1, None, None, None)}


async def test_active_group_cannot_be_reset_or_deleted(shared_cohort_server, active_member):
    reset = await asyncio.to_thread(
        cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-active", "--all-topics", "--to-earliest", "--execute"
    )
    assert_one_line_error(reset, 1, "Assignments can only be reset if the group 'cli-active' is inactive, "
                                    "but the current state is Stable.")
    assert (await committed(shared_cohort_server, "cli-active"))[TopicPartition("cli-active-t", 0)] == 4
    delete = await asyncio.to_thread(cli, shared_cohort_server, "groups", "delete", "--group", "cli-active")
    assert_one_line_error(delete, 1, "cli-active", "NON_EMPTY_GROUP")
    offsets = await asyncio.to_thread(cli, shared_cohort_server, "groups", "delete-offsets", "--group", "cli-active",
                                      "--topic", "cli-active-t:0")
    assert offsets.returncode == 1
    assert table(offsets.stdout) == [["TOPIC", "PARTITION", "STATUS"], ["cli-active-t", "0", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"]]


async def test_list_groups_with_and_without_states(shared_cohort_server, active_member):
    await seed(shared_cohort_server, "cli-list-empty", "cli-list-t", 1, {0: 1})
    plain = await asyncio.to_thread(cli, shared_cohort_server, "groups", "list")
    assert {"cli-active", "cli-list-empty"} <= set(plain.stdout.split())
    with_state = await asyncio.to_thread(cli, shared_cohort_server, "groups", "list", "--state")
    rows = table(with_state.stdout)
    assert rows[0] == ["GROUP", "STATE"]  # TYPE only with --type, as in Kafka's tool
    assert ["cli-active", "Stable"] in rows and ["cli-list-empty", "Empty"] in rows
    stable = await asyncio.to_thread(cli, shared_cohort_server, "groups", "list", "--state", "stable", "--output", "json")
    listed = json.loads(stable.stdout)
    assert {"group": "cli-active", "type": "classic", "state": "Stable", "protocol_type": "consumer"} in listed
    assert all(g["state"] == "Stable" for g in listed)
    bogus = await asyncio.to_thread(cli, shared_cohort_server, "groups", "list", "--state", "sleepy")
    assert_one_line_error(bogus, 2, "unknown state 'sleepy'")
    typed = await asyncio.to_thread(cli, shared_cohort_server, "groups", "list", "--type", "classic")
    assert ["cli-active", "Classic"] in table(typed.stdout)
    none = await asyncio.to_thread(cli, shared_cohort_server, "groups", "list", "--type", "consumer")
    assert "cli-active" not in none.stdout
    bogus = await asyncio.to_thread(cli, shared_cohort_server, "groups", "list", "--type", "share")
    assert_one_line_error(bogus, 2, "unknown group type 'share'")


async def test_describe_inactive_and_unknown_groups(shared_cohort_server):
    await seed(shared_cohort_server, "cli-idle", "cli-idle-t", 2, {0: 7, 1: 2})
    async with Admin(shared_cohort_server.bootstrap) as admin:
        await admin.report_end_offsets({TopicPartition("cli-idle-t", 0): 7})
    result = await asyncio.to_thread(cli, shared_cohort_server, "groups", "describe", "cli-idle")
    assert result.returncode == 0
    assert result.stderr == "\nConsumer group 'cli-idle' has no active members.\n"  # on stderr, as Kafka's tool
    rows = table(result.stdout)
    assert rows[1:] == [  # caught up where the end is known; unknown (not 0) where no source reported one
        ["cli-idle", "cli-idle-t", "0", "7", "7", "0", "-", "-", "-"],
        ["cli-idle", "cli-idle-t", "1", "2", "-", "-", "-", "-", "-"],
    ]
    unknown = await asyncio.to_thread(cli, shared_cohort_server, "groups", "describe", "cli-no-such-group")
    assert_one_line_error(unknown, 1, "Consumer group 'cli-no-such-group' does not exist.")
    usage = await asyncio.to_thread(cli, shared_cohort_server, "groups", "describe")
    assert_one_line_error(usage, 2, "--all-groups")


async def test_describe_all_groups(shared_cohort_server):
    await seed(shared_cohort_server, "cli-all-a", "cli-all-t", 1, {0: 1})
    await seed(shared_cohort_server, "cli-all-b", "cli-all-t", 1, {0: 2})
    result = await asyncio.to_thread(cli, shared_cohort_server, "groups", "describe", "--all-groups", "--state")
    assert result.returncode == 0, result.stderr
    states = {words[0]: words for words in (line.split() for line in result.stdout.splitlines()) if words}
    assert states["cli-all-a"][-2:] == ["Empty", "0"] and states["cli-all-b"][-2:] == ["Empty", "0"]


async def test_reset_is_a_dry_run_unless_executed(shared_cohort_server):
    await seed(shared_cohort_server, "cli-hw", "cli-reset-t", 3, {0: 50, 1: 50, 2: 50})  # log ends at 50
    await seed(shared_cohort_server, "cli-reset", "cli-reset-t", 3, {0: 20, 1: 30, 2: 40})

    dry = await asyncio.to_thread(cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-reset",
                                  "--all-topics", "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert "WARN: No action will be performed as the --execute option is missing." in dry.stderr
    assert table(dry.stdout) == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        ["cli-reset", "cli-reset-t", "0", "0"], ["cli-reset", "cli-reset-t", "1", "0"], ["cli-reset", "cli-reset-t", "2", "0"],
    ]
    assert list((await committed(shared_cohort_server, "cli-reset")).values()) == [20, 30, 40]

    explicit = await asyncio.to_thread(cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-reset",
                                       "--all-topics", "--to-earliest", "--dry-run")
    assert "WARN" not in explicit.stderr and explicit.returncode == 0

    scenarios = [
        (["--to-earliest"], [0, 0, 0]),
        (["--to-latest"], [50, 50, 50]),
        (["--shift-by", "-15"], [5, 15, 25]),
        (["--to-offset", "45"], [45, 45, 45]),
        (["--shift-by", "40"], [50, 50, 50]),  # clamped to the log end
        (["--to-current"], [20, 30, 40]),
        (["--to-datetime", "2020-01-01T00:00:00.000"], [50, 50, 50]),  # no records: not found → latest
        (["--by-duration", "P1DT2H"], [50, 50, 50]),
    ]
    plans = await cli_many(shared_cohort_server, *(
        ("groups", "reset-offsets", "--group", "cli-reset", "--topic", "cli-reset-t", *flags, "--dry-run", "--output", "json")
        for flags, _ in scenarios
    ))
    for (flags, expected), result in zip(scenarios, plans):
        assert result.returncode == 0, (flags, result.stderr)
        assert [row["new_offset"] for row in json.loads(result.stdout)] == expected, flags
    assert list((await committed(shared_cohort_server, "cli-reset")).values()) == [20, 30, 40]

    for flags, expected in [(["--to-offset", "45"], [45, 45, 45]), (["--shift-by", "-5"], [40, 40, 40])]:
        done = await asyncio.to_thread(cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-reset",
                                       "--topic", "cli-reset-t", *flags, "--execute")
        assert done.returncode == 0, (flags, done.stderr)
        assert list((await committed(shared_cohort_server, "cli-reset")).values()) == expected, flags
    clamped = await asyncio.to_thread(cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-reset",
                                      "--topic", "cli-reset-t:1", "--to-offset", "999", "--execute")
    assert "New offset (999) is higher than latest offset for cli-reset-t-1. Value will be set to 50" in clamped.stderr


async def test_export_then_from_file_round_trip(shared_cohort_server, tmp_path):
    await seed(shared_cohort_server, "cli-exp-hw", "cli-exp-t", 2, {0: 100, 1: 100})
    await seed(shared_cohort_server, "cli-exp-a", "cli-exp-t", 2, {0: 10, 1: 11})
    await seed(shared_cohort_server, "cli-exp-b", "cli-exp-t", 2, {0: 20, 1: 21})

    one = await asyncio.to_thread(cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-exp-a",
                                  "--all-topics", "--shift-by", "5", "--export", "--dry-run")
    assert one.stdout == "cli-exp-t,0,15\ncli-exp-t,1,16\n\n"  # an empty line after the CSV, as Kafka's tool
    plan = tmp_path / "plan.csv"
    plan.write_text(one.stdout)
    applied = await asyncio.to_thread(cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-exp-a",
                                      "--from-file", str(plan), "--execute")
    assert applied.returncode == 0, applied.stderr
    assert list((await committed(shared_cohort_server, "cli-exp-a")).values()) == [15, 16]

    several = await asyncio.to_thread(cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-exp-a",
                                      "--group", "cli-exp-b", "--all-topics", "--shift-by", "-1", "--export")
    assert several.stdout == "cli-exp-a,cli-exp-t,0,14\ncli-exp-a,cli-exp-t,1,15\ncli-exp-b,cli-exp-t,0,19\ncli-exp-b,cli-exp-t,1,20\n\n"
    plan.write_text(several.stdout)
    applied = await asyncio.to_thread(cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-exp-a",
                                      "--group", "cli-exp-b", "--from-file", str(plan), "--execute", "--output", "json")
    assert applied.returncode == 0, applied.stderr
    assert len(json.loads(applied.stdout)) == 4
    assert list((await committed(shared_cohort_server, "cli-exp-a")).values()) == [14, 15]
    assert list((await committed(shared_cohort_server, "cli-exp-b")).values()) == [19, 20]


async def test_export_has_the_group_column_unless_one_group_was_asked_for(shared_cohort_server, active_member):
    await seed(shared_cohort_server, "cli-exp-c", "cli-exp-ct", 1, {0: 7})
    # two groups asked for, one refused (it is active): Kafka's tool still writes the group column
    done = await asyncio.to_thread(cli, shared_cohort_server, "groups", "reset-offsets", "--group", "cli-exp-c",
                                   "--group", "cli-active", "--all-topics", "--to-earliest", "--export")
    assert "can only be reset if the group 'cli-active' is inactive" in done.stderr
    assert done.stdout == "cli-exp-c,cli-exp-ct,0,0\n\n"


async def test_malformed_csv_is_one_clear_line(shared_cohort_server, tmp_path):
    cases = [
        ("cli-bad-t,0\n", "CSV line 1"),
        ("cli-bad-t,zero,5\n", "must be integers"),
        ("cli-bad-t,0,5\ng,cli-bad-t,1,5\n", "CSV line 2"),
        ("", "no rows"),
    ]
    paths = []
    for i, (content, _) in enumerate(cases):
        paths.append(tmp_path / f"bad-{i}.csv")
        paths[-1].write_text(content)
    missing = tmp_path / "missing.csv"
    results = await cli_many(shared_cohort_server, *(
        ("groups", "reset-offsets", "--group", "cli-bad", "--from-file", str(path), "--execute")
        for path in paths + [missing]
    ))
    for (_, fragment), result in zip(cases + [(None, "cannot read")], results):
        assert_one_line_error(result, 2, fragment)
    assert await committed(shared_cohort_server, "cli-bad") == {}


async def test_bad_reset_input(shared_cohort_server):
    await seed(shared_cohort_server, "cli-badin", "cli-badin-t", 1, {})
    cases = [
        (["--topic", "cli-badin-t", "--to-datetime", "yesterday"], 2, "bad date-time"),
        (["--topic", "cli-badin-t", "--by-duration", "1 day"], 2, "bad duration"),
        (["--topic", "cli-badin-t", "--shift-by", "1"], 2, "no committed offset"),
        (["--topic", "cli-badin-t:7", "--to-earliest"], 1, "has no partition 7"),
        (["--topic", "cli-no-such-topic", "--to-earliest"], 1, "does not exist"),
        (["--to-earliest"], 2, "--all-topics or --topic"),
        (["--all-topics", "--to-earliest"], 1, "no committed offsets"),
    ]
    results = await cli_many(shared_cohort_server, *(
        ("groups", "reset-offsets", "--group", "cli-badin", *flags, "--dry-run") for flags, _, _ in cases
    ))
    for (_, code, fragment), result in zip(cases, results):
        assert_one_line_error(result, code, fragment)


async def test_delete_groups_and_offsets(shared_cohort_server):
    await seed(shared_cohort_server, "cli-del", "cli-del-t", 2, {0: 1, 1: 2})
    await seed(shared_cohort_server, "cli-del-off", "cli-del-t", 2, {0: 1, 1: 2})
    deleted = await asyncio.to_thread(cli, shared_cohort_server, "groups", "delete", "--group", "cli-del")
    assert deleted.returncode == 0
    assert deleted.stdout.strip() == "Deletion of requested consumer groups ('cli-del') was successful."
    again = await asyncio.to_thread(cli, shared_cohort_server, "groups", "delete", "--group", "cli-del")
    assert_one_line_error(again, 1, "Consumer group 'cli-del' does not exist.")

    offsets = await asyncio.to_thread(cli, shared_cohort_server, "groups", "delete-offsets", "--group", "cli-del-off",
                                      "--topic", "cli-del-t:1")
    assert offsets.returncode == 0, offsets.stderr
    assert table(offsets.stdout) == [["TOPIC", "PARTITION", "STATUS"], ["cli-del-t", "1", "Successful"]]
    assert await committed(shared_cohort_server, "cli-del-off") == {TopicPartition("cli-del-t", 0): 1}
    unknown = await asyncio.to_thread(cli, shared_cohort_server, "groups", "delete-offsets", "--group", "cli-nobody",
                                      "--topic", "cli-del-t")
    assert_one_line_error(unknown, 1, "Consumer group 'cli-nobody' does not exist.")


def test_unreachable_server_is_one_line_and_exit_3():
    result = run_cli("groups", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}")
    assert_one_line_error(result, 3, "cannot connect to 127.0.0.1", "connection refused")
    result = run_cli("groups", "describe", "g", "--bootstrap-server", "not a host:port")
    assert_one_line_error(result, 2, "bad port")
