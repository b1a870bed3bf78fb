"""Planning an offset reset the way kafka-consumer-groups.sh --reset-offsets does, on plain data.

Given what the cluster says (committed offsets, each partition's earliest and
latest offsets, offsets found by timestamp), compute the new offset of every
partition in scope for one scenario. Every result is clamped into
[earliest, latest], with a warning per clamped partition. The CSV plan format
is Kafka's: `topic,partition,offset` for one group, `group,topic,partition,offset`
for several.
"""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from cohort.client.topic_partition import TopicPartition


class ResetInputError(ValueError):
    """The user's reset input (a CSV plan, a date, a duration) cannot be used."""


@dataclass(slots=True, frozen=True)
class LogRange:
    earliest: int
    latest: int


@dataclass(slots=True, frozen=True)
class Scenario:
    """One of Kafka's reset scenarios; `value` is the offset, shift, timestamp (ms) or file plan."""

    kind: str  # to-earliest | to-latest | to-offset | shift-by | to-datetime | by-duration | to-current | from-file
    #            | to-commit-at
    value: object = None

    @property
    def needs_timestamps(self) -> bool:
        return self.kind in ("to-datetime", "by-duration")


def clamp(tp: TopicPartition, offset: int, log: LogRange, warnings: list[str]) -> int:
    if offset > log.latest:
        warnings.append(
            f"New offset ({offset}) is higher than latest offset for {tp}. Value will be set to {log.latest}"
        )
        return log.latest
    if offset < log.earliest:
        warnings.append(
            f"New offset ({offset}) is lower than earliest offset for {tp}. Value will be set to {log.earliest}"
        )
        return log.earliest
    return offset


def plan_reset(
    scenario: Scenario,
    partitions: Iterable[TopicPartition],
    committed: Mapping[TopicPartition, int],
    logs: Mapping[TopicPartition, LogRange],
    by_timestamp: Mapping[TopicPartition, int | None] | None = None,
    file_plan: Mapping[TopicPartition, int] | None = None,
) -> tuple[dict[TopicPartition, int], list[str]]:
    """New offset per partition, and the warnings to show. Raises ResetInputError when a scenario can't apply."""
    plan: dict[TopicPartition, int] = {}
    warnings: list[str] = []
    for tp in sorted(set(partitions)):
        log = logs[tp]
        kind = scenario.kind
        if kind == "to-earliest":
            plan[tp] = log.earliest
        elif kind == "to-latest":
            plan[tp] = log.latest
        elif kind == "to-offset":
            plan[tp] = clamp(tp, int(scenario.value), log, warnings)
        elif kind == "shift-by":
            if tp not in committed:
                raise ResetInputError(f"cannot shift the offset of {tp}: it has no committed offset")
            plan[tp] = clamp(tp, committed[tp] + int(scenario.value), log, warnings)
        elif kind in ("to-datetime", "by-duration"):
            found = (by_timestamp or {}).get(tp)
            if found is None or found < 0:
                warnings.append(f"Partition {tp} has no offset at or after the requested time; using its latest offset")
                plan[tp] = log.latest
            else:
                plan[tp] = clamp(tp, found, log, warnings)
        elif kind == "to-current":
            plan[tp] = committed[tp] if tp in committed else log.latest
        elif kind == "from-file":
            plan[tp] = clamp(tp, (file_plan or {})[tp], log, warnings)
        elif kind == "to-commit-at":
            # Exactly what the group had committed then (the undo of a reset), never clamped: Cohort's
            # "latest" is the highest offset committed since start, which a bad reset may have lowered.
            plan[tp] = (file_plan or {})[tp]
        else:
            raise ResetInputError(f"unknown reset scenario {kind!r}")
    return plan, warnings


# ---------------------------------------------------------------- CSV plans

def format_plan_csv(plans: Mapping[str, Mapping[TopicPartition, int]], *, with_group: bool | None = None) -> str:
    """Kafka's export: without a group column when one group was asked for, with it otherwise
    (several groups, or --all-groups: `with_group`; by default, when the plan has several groups)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    several = len(plans) > 1 if with_group is None else with_group
    for group, plan in plans.items():
        for tp, offset in sorted(plan.items()):
            writer.writerow(([group] if several else []) + [tp.topic, tp.partition, offset])
    return out.getvalue()


def parse_plan_csv(text: str) -> dict[str | None, dict[TopicPartition, int]]:
    """Rows of `topic,partition,offset` (key None) or `group,topic,partition,offset`; one clear error otherwise."""
    plans: dict[str | None, dict[TopicPartition, int]] = {}
    width = None
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or all(not field.strip() for field in row):
            continue
        fields = [f.strip() for f in row]
        if len(fields) not in (3, 4):
            raise ResetInputError(
                f"CSV line {number}: expected topic,partition,offset or group,topic,partition,offset, got {len(fields)} fields"
            )
        if width is not None and len(fields) != width:
            raise ResetInputError(f"CSV line {number}: has {len(fields)} fields where earlier lines have {width}")
        width = len(fields)
        group = fields[0] if width == 4 else None
        topic, partition, offset = fields[-3:]
        if not topic or (width == 4 and not group):
            raise ResetInputError(f"CSV line {number}: empty {'group' if width == 4 and not group else 'topic'}")
        try:
            p, o = int(partition), int(offset)
        except ValueError:
            raise ResetInputError(f"CSV line {number}: partition and offset must be integers") from None
        if p < 0:
            raise ResetInputError(f"CSV line {number}: negative partition {p}")
        plans.setdefault(group, {})[TopicPartition(topic, p)] = o
    if not plans:
        raise ResetInputError("the CSV plan has no rows")
    return plans


# ---------------------------------------------------------------- times

_DURATION = re.compile(
    r"^(?P<sign>[-+]?)P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$",
    re.IGNORECASE,
)


def parse_duration(text: str) -> timedelta:
    """ISO-8601 PnDTnHnMnS (as Java's Duration.parse), e.g. P1DT2H, PT30M, PT0.5S."""
    match = _DURATION.match(text.strip())
    if not match or not any(match.group(g) for g in ("days", "hours", "minutes", "seconds")) or text.upper().endswith("T"):
        raise ResetInputError(f"bad duration {text!r}: use ISO-8601 PnDTnHnMnS, e.g. P1DT2H30M")
    try:
        duration = timedelta(
            days=int(match.group("days") or 0),
            hours=int(match.group("hours") or 0),
            minutes=int(match.group("minutes") or 0),
            seconds=float(match.group("seconds") or 0),
        )
    except OverflowError:
        raise ResetInputError(f"duration {text!r} is too long") from None
    return -duration if match.group("sign") == "-" else duration


def parse_datetime_ms(text: str) -> int:
    """'YYYY-MM-DDTHH:mm:SS.sss' (local time) or with a zone ('Z', '+01:00') → epoch milliseconds."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ResetInputError(f"bad date-time {text!r}: use YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as Kafka's tool reads it
    # Negative timestamps mean "earliest"/"latest"/… in ListOffsets: never send one for a date.
    return max(0, int(moment.timestamp() * 1000))


def now_minus_ms(duration: timedelta, now: datetime | None = None) -> int:
    try:
        moment = (now or datetime.now(timezone.utc)) - duration
    except OverflowError:
        return 0
    return max(0, int(moment.timestamp() * 1000))
