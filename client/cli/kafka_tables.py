"""The tables of `cohort groups …`, character for character as Apache Kafka 4.4's kafka-consumer-groups.sh
prints them (its ConsumerGroupCommand and GroupOffsetsResetter), so a script or a person reading one reads
the other: the same columns, widths (at least 15, or the longest value), padding, blank lines and row order.
tests/java/test_kafka_tools.py runs Kafka's tool and these side by side and compares them line by line.

Each function returns the exact text for stdout; a value of None prints as '-'.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cohort.client.topic_partition import TopicPartition

MISSING = "-"


def _text(value) -> str:
    return MISSING if value is None else str(value)


def _line(values: Iterable, widths: Sequence[int | None]) -> str:
    """Java's printf of '%-{w}s %-{w}s … %s': each value padded to its width (None: not padded)."""
    return " ".join(v if w is None else v.ljust(w) for v, w in zip(map(_text, values), widths))


@dataclass(slots=True, frozen=True)
class OffsetRow:
    group: str
    topic: str | None
    partition: int | None
    leader_epoch: int | None
    current: int | None
    end: int | None
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


def offsets_table(rows: Sequence[OffsetRow], verbose: bool) -> str:
    """--describe [--offsets] [--verbose]: one row per partition."""
    widths = [max([15] + [len(_text(getattr(r, f))) for r in rows]) for f in ("group", "topic", "consumer_id", "host")]
    g, t, c, h = widths
    if verbose:
        layout = [g, t, 10, 15, 15, 15, 15, c, h, None]
        header = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"]
    else:
        layout = [g, t, 10, 15, 15, 15, c, h, None]
        header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]
    lines = [_line(header, layout)]
    for r in rows:
        values = [r.group, r.topic, r.partition, r.current, r.end, r.lag, r.consumer_id, r.host, r.client_id]
        if verbose:
            values.insert(3, r.leader_epoch)
        lines.append(_line(values, layout))
    return "\n" + "\n".join(lines) + "\n"


def offset_row_order(members: Sequence, committed: Iterable[TopicPartition]) -> list[tuple[object | None, TopicPartition]]:
    """Kafka's row order: members that own partitions, most partitions first (ties in the coordinator's
    order), each member's partitions by topic and number; then committed partitions nobody owns. Members
    that own nothing get no row."""
    owners = sorted((m for m in members if m.assignment), key=lambda m: -len(m.assignment))
    order: list[tuple[object | None, TopicPartition]] = []
    owned: set[TopicPartition] = set()
    for member in owners:
        for tp in sorted(member.assignment):
            order.append((member, tp))
            owned.add(tp)
    order += [(None, tp) for tp in sorted(set(committed) - owned)]
    return order


def assignment_text(partitions: Iterable[TopicPartition]) -> str:
    """'orders:0,1;payments:0', or '-' for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    text = ";".join(sorted(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in by_topic.items()))
    return text or MISSING


def members_table(group: str, members: Sequence, verbose: bool, assignment_epoch: int | None) -> str:
    """--describe --members [--verbose]; the header is printed even for a group without members, as Kafka's is."""
    g = max([15, len(group)])
    c = max([15] + [len(m.member_id) for m in members])
    i = max([17] + [len(m.group_instance_id or "") for m in members])
    h = max([15] + [len(m.host) for m in members])
    cl = max([15] + [len(m.client_id) for m in members])
    current = [assignment_text(m.assignment) for m in members]
    target = [assignment_text(m.target_assignment or ()) for m in members]
    ca = max([20] + [len(a) for a in current])
    ta = max([20] + [len(a) for a in target])
    with_instance = any(m.group_instance_id for m in members)
    upgraded = [getattr(m, "upgraded", None) for m in members]
    migrating = False in upgraded and True in upgraded  # classic and consumer-protocol members in one group
    base = [g, c, i, h, cl, 15] if with_instance else [g, c, h, cl, 15]
    extra = [15, ca, 15, ta, None] if migrating else [15, ca, 15, ta]

    def line(values: list, verbose_values: list) -> str:
        text = _line(values, base) + " "  # Kafka's format ends '%-15s ': a space after #PARTITIONS
        if verbose:
            text += _line(verbose_values, extra)
        return text

    header = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if with_instance else []), "HOST", "CLIENT-ID",
              "#PARTITIONS"]
    lines = [line(header, ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT",
                           *(["UPGRADED"] if migrating else [])])]
    for m, now, then, up in zip(members, current, target, upgraded):
        values = [group, m.member_id, *([m.group_instance_id or ""] if with_instance else []), m.host, m.client_id,
                  len(m.assignment)]
        epochs = [getattr(m, "member_epoch", None), now, assignment_epoch, then,
                  *([MISSING if up is None else str(up).lower()] if migrating else [])]
        lines.append(line(values, epochs))
    return "\n" + "\n".join(lines) + "\n"


def state_table(group: str, coordinator: str, strategy: str, state: str, members: int, verbose: bool,
                group_epoch: int | None = None, assignment_epoch: int | None = None) -> str:
    """--describe --state [--verbose]; `coordinator` is 'host:port  (id)' (two spaces, as Kafka prints it)."""
    g, c = max(15, len(group)), max(25, len(coordinator))
    if verbose:
        layout = [g, c, 20, 20, 15, 25, None]
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                  "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        row = [group, coordinator, strategy or MISSING, state, group_epoch, assignment_epoch, members]
    else:
        layout = [g, c, 20, 20, None]
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        row = [group, coordinator, strategy or MISSING, state, members]
    return "\n" + _line(header, layout) + "\n" + _line(row, layout) + "\n"


def coordinator_text(host: str, port: int, node_id: int) -> str:
    return f"{host}:{port}  ({node_id})"


def group_list_table(rows: Sequence[tuple[str, ...]], include_type: bool, include_state: bool) -> str:
    """--list with --type and/or --state: GROUP, then TYPE ('Classic', 'Consumer'), then STATE."""
    width = max([15] + [len(r[0]) for r in rows]) + 10
    layout = [width] + [20] * (include_type + include_state)
    header = ["GROUP"] + (["TYPE"] if include_type else []) + (["STATE"] if include_state else [])
    return "".join(_line(r, layout) + "\n" for r in [header, *rows])


def reset_plan_table(plan: Sequence[tuple[str, TopicPartition, int]]) -> str:
    """--reset-offsets: GROUP TOPIC PARTITION NEW-OFFSET (nothing at all for an empty plan)."""
    if not plan:
        return ""
    g = max([15] + [len(group) for group, _, _ in plan])
    t = max([15] + [len(tp.topic) for _, tp, _ in plan])
    layout = [g, t, 10, None]
    lines = [_line(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], layout)]
    lines += [_line([group, tp.topic, tp.partition, offset], layout) for group, tp, offset in plan]
    return "\n" + "\n".join(lines) + "\n"


def delete_offsets_table(results: Sequence[tuple[TopicPartition, str]]) -> str:
    """--delete-offsets: TOPIC PARTITION STATUS, rows in Kafka's order (topic and number as one string)."""
    t = max([15] + [len(tp.topic) for tp, _ in results])
    layout = [t, 10, 15]
    ordered = sorted(results, key=lambda r: f"{r[0].topic}{r[0].partition}")
    lines = [_line(["TOPIC", "PARTITION", "STATUS"], layout)]
    lines += [_line([tp.topic, tp.partition, status], layout) for tp, status in ordered]
    return "\n" + "\n".join(lines) + "\n"
