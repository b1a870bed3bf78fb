"""``cohort log dump | verify | compact``: the offsets log for the operator at 3 a.m.

Like Kafka's ``kafka-dump-log.sh``: read the segment files directly, with no
server needed.  ``dump`` and ``verify`` only read (safe beside a running
server); ``compact`` rewrites files and so takes the data-dir lock, refusing
to run while a server holds it.  Every failure is one line on stderr and a
non-zero exit code, never a traceback: 0 = fine, 1 = damage found or refused
(a server holds the data dir), 2 = could not run (bad arguments, unreadable
data dir).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path

EXIT_OK = 0
EXIT_DAMAGE = 1
EXIT_REFUSED = 1  # the same code as the other commands' "refused" (docs/operations.md: exit codes)
EXIT_ERROR = 2

_TYPES = {
    "offset-commit": ("OffsetCommitRecord", "OffsetCommitTombstone"),
    "group-metadata": ("GroupMetadataRecord", "GroupMetadataTombstone"),
    "topic": ("TopicRecord", "TopicTombstone"),
    "end-offset": ("EndOffsetRecord", "EndOffsetTombstone"),  # type 105: a partition's reported end offset
    "scram-credential": ("ScramCredentialRecord", "ScramCredentialTombstone"),
    "acl": ("AclRecord", "AclTombstone"),
    "journal": ("GroupJournalRecord", "GroupJournalTombstone"),  # type 103: rebalances and admin actions
    "commit-source": ("OffsetCommitSourceRecord", "OffsetCommitSourceTombstone"),  # type 104: who committed
    # KIP-848 consumer groups (key types 3, 5-8): group and target epochs, members, target and current assignments
    "consumer-group": tuple(f"ConsumerGroup{kind}{suffix}" for kind in (
        "Metadata", "MemberMetadata", "TargetAssignmentMetadata", "TargetAssignmentMember", "CurrentMemberAssignment")
        for suffix in ("Record", "Tombstone")),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``cohort log`` and its subcommands to the ``cohort`` parser."""
    log_parser = subparsers.add_parser(
        "log", help="inspect, verify or compact the offsets log",
        description="Read the offsets log's segment files directly (no server needed).")
    commands = log_parser.add_subparsers(dest="log_command", metavar="COMMAND", required=True)

    dump = commands.add_parser("dump", help="print the records (JSON lines or a table)",
                               description="Print every record of the offsets log, oldest first per partition.")
    _data_dir_argument(dump)
    dump.add_argument("--group", help="only records of this group")
    dump.add_argument("--type", choices=sorted(_TYPES), help="only records of this type")
    dump.add_argument("--partition", type=int, help="only this offsets partition")
    dump.add_argument("--format", choices=("json", "table"), default="json", help="output format (default json)")
    dump.set_defaults(func=dump_command)

    verify = commands.add_parser(
        "verify", help="check checksums, offsets and record layouts",
        description="Check every batch checksum, that offsets only grow, and that every record decodes. "
        "Prints one line per problem; exit 1 if there is damage. A torn tail, and what a crash left past "
        "the last checkpoint (both cut on the next start), are reported as warnings and fail only with "
        "--strict.")
    _data_dir_argument(verify)
    verify.add_argument("--strict", action="store_true", help="treat the warnings as damage too")
    verify.set_defaults(func=verify_command)

    compact = commands.add_parser(
        "compact", help="compact closed segments now (offline)",
        description="Compact the closed segments of every partition: keep the latest record per key and drop "
        "tombstones older than --delete-retention-ms, keeping every record younger than --history-retention-ms "
        "(the offset history). Refuses to run while a server holds the data dir.")
    _data_dir_argument(compact)
    compact.add_argument("--delete-retention-ms", type=int, default=86400000,
                         help="keep tombstones this long after they were written (default 86400000)")
    compact.add_argument("--history-retention-ms", type=int, default=86400000,
                         help="keep every record this young, not only the latest per key: the offset history "
                              "(default 86400000, as offsets.history.retention.ms; 0 = latest only)")
    compact.add_argument("--segment-bytes", type=int, default=104857600,
                         help="merge small segments up to this size (default 104857600)")
    compact.set_defaults(func=compact_command)


def _data_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=Path("./data"), help="the server's data dir (default ./data)")


def _fail(message: str, code: int = EXIT_ERROR) -> int:
    print(f"cohort log: {message}", file=sys.stderr)
    return code


def _check_data_dir(data_dir: Path) -> str | None:
    if not data_dir.is_dir():
        return f"data dir {data_dir} does not exist or is not a directory"
    from cohort.coordinator.log import list_partitions

    if not list_partitions(data_dir):
        return f"no offsets log in {data_dir} (no __consumer_offsets-* segments)"
    return None


# ------------------------------------------------------------------------------ dump
_SECRET_FIELDS = frozenset({"salt", "stored_key", "server_key"})


def _jsonable(obj: object) -> object:
    import dataclasses
    import uuid

    if dataclasses.is_dataclass(obj):
        # a SCRAM credential's salt and keys are secrets: a dump says they exist, never what they are
        return {f.name: "[hidden]" if f.name in _SECRET_FIELDS else _jsonable(getattr(obj, f.name))
                for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [_jsonable(x) for x in obj]
    if isinstance(obj, bytes):
        return obj.hex()
    if isinstance(obj, uuid.UUID):
        return str(obj)
    return obj


def _type_name(rec: object) -> str:
    name = type(rec).__name__
    for label, classes in _TYPES.items():
        if name in classes:
            return label
    return name


def _dump_rows(args: argparse.Namespace) -> Iterator[dict]:
    from cohort.coordinator.log import list_partitions, read_partition
    from cohort.coordinator.records.types import RecordDecodeError, decode_record

    partitions = list_partitions(args.data_dir)
    if args.partition is not None:
        partitions = [p for p in partitions if p == args.partition]
    wanted = _TYPES.get(args.type) if args.type else None
    for p in partitions:
        for offset, key, value in read_partition(args.data_dir, p):
            try:
                rec = decode_record(key, value)
            except RecordDecodeError as exc:
                if args.group is None and wanted is None:
                    yield {"log_partition": p, "log_offset": offset, "type": "undecodable", "error": str(exc),
                           "key": key.hex(), "value": None if value is None else value.hex()}
                continue
            if wanted is not None and type(rec).__name__ not in wanted:
                continue
            if args.group is not None and getattr(rec, "group", None) != args.group:
                continue
            yield {"log_partition": p, "log_offset": offset, "type": _type_name(rec),
                   "tombstone": value is None, "record": _jsonable(rec)}


def dump_command(args: argparse.Namespace) -> int:
    from cohort.coordinator.log import CorruptLogError

    problem = _check_data_dir(args.data_dir)
    if problem:
        return _fail(problem)
    try:
        if args.format == "json":
            for row in _dump_rows(args):
                print(json.dumps(row, ensure_ascii=False))
        else:
            print(f"{'PART':>4} {'OFFSET':>10} {'TYPE':<15} {'GROUP/TOPIC':<40} VALUE")
            for row in _dump_rows(args):
                print(_table_row(row))
    except CorruptLogError as exc:
        return _fail(f"damaged log: {exc}", EXIT_DAMAGE)
    except BrokenPipeError:
        sys.stderr.close()  # `cohort log dump | head`: not an error
        return EXIT_OK
    except OSError as exc:
        return _fail(f"cannot read {args.data_dir}: {exc.strerror or exc}")
    return EXIT_OK


def _table_row(row: dict) -> str:
    kind = row["type"]
    r = row.get("record", {})
    if kind == "offset-commit":
        what = f"{r['group']} / {r['topic']}-{r['partition']}"
        value = "<tombstone>" if row["tombstone"] else (
            f"offset={r['offset']} epoch={r['leader_epoch']} metadata={r['metadata']!r} "
            f"commit_ts={r['commit_timestamp']} expire_ts={r['expire_timestamp']}")
    elif kind == "group-metadata":
        what = r["group"]
        value = "<tombstone>" if row["tombstone"] else (
            f"generation={r['generation']} protocol_type={r['protocol_type']!r} protocol={r['protocol']!r} "
            f"leader={r['leader']!r} members={len(r['members'])}")
    elif kind == "topic":
        what = r["name"]
        value = "<tombstone>" if row["tombstone"] else f"id={r['topic_id']} partitions={r['partitions']}"
    elif kind == "end-offset":
        what = f"{r['topic']}-{r['partition']}"
        value = "<tombstone>" if row["tombstone"] else (
            f"end_offset={r['end_offset']} topic_id={r['topic_id']} reported_ms={r['reported_ms']}")
    else:
        what = ""
        value = row.get("error", "")
    return f"{row['log_partition']:>4} {row['log_offset']:>10} {kind:<15} {what:<40} {value}"


# ------------------------------------------------------------------------------ verify
def verify_command(args: argparse.Namespace) -> int:
    import logging

    problem = _check_data_dir(args.data_dir)
    if problem:
        return _fail(problem)
    quiet = logging.getLogger("cohort.log")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # verify reports what it finds itself
    try:
        return _verify(args)
    finally:
        quiet.setLevel(level)


def _verify(args: argparse.Namespace) -> int:
    from cohort.coordinator.log import list_partitions
    from cohort.coordinator.log.journal import CheckpointError, list_journals, read_checkpoint, scan_journal
    from cohort.coordinator.log.segments import (
        CorruptLogError,
        list_partition_segments,
        partition_dir,
        recover_segment,
        segment_base,
        segment_name,
    )
    from cohort.coordinator.records.types import RecordDecodeError, decode_record

    damage = 0
    warnings = 0
    batches = records = 0
    holder = _server_holding(args.data_dir)
    if holder is not None:
        print(f"note: {args.data_dir} is in use by a running cohort server{holder}: what it is writing right now "
              "may show as unfinished")
    try:
        marks = read_checkpoint(Path(args.data_dir)) or {}
    except CheckpointError as exc:
        damage += 1
        print(exc)
        marks = {}
    partitions = list_partitions(args.data_dir)
    progress = _Progress(len(partitions))
    live = 0
    for p in partitions:
        progress.show(p, records)
        latest: dict[bytes, bool] = {}  # this partition's keys -> whether their latest value is a tombstone
        pdir = partition_dir(args.data_dir, p)
        leftovers = sorted(n.name for n in pdir.iterdir() if n.name.endswith((".swap", ".cleaned")))
        for name in leftovers:
            warnings += 1
            print(f"warning: {pdir / name}: unfinished compaction (resolved on the next start)")
        segs = list_partition_segments(pdir)
        mark = marks.get(p)
        if mark is not None:
            ends_in = pdir / segment_name(mark.segment)
            size = ends_in.stat().st_size if ends_in.exists() else -1
            if size < 0:
                damage += 1
                print(f"{ends_in}: missing, but the last checkpoint ends in it")
            elif size < mark.size:
                damage += 1
                print(f"{ends_in}: position {size}: {mark.size - size} bytes the last checkpoint covers are missing")
        next_offset = 0
        for i, path in enumerate(segs):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as exc:
                damage += 1
                print(f"{path}: unreadable: {exc.strerror or exc}")
                continue
            try:
                scan, buf, views = recover_segment(path, is_last=i == len(segs) - 1, min_offset=next_offset,
                                                   truncate=False, buf=data)
            except CorruptLogError as exc:
                if exc.position < _unchecked_from(marks.get(p), segment_base(path)):
                    damage += 1
                    print(f"{exc.path}: position {exc.position}: {exc.reason}")
                    continue
                # What a crash leaves past the last checkpoint: recovery cuts it and replays the journal.
                warnings += 1
                print(f"warning: {exc.path}: position {exc.position}: {exc.reason}, after the last "
                      f"checkpoint (cut on the next start; the journal holds what was acknowledged)")
                data = data[:exc.position]  # everything before it checked out
                try:
                    scan, buf, views = recover_segment(path, is_last=True, min_offset=next_offset,
                                                       truncate=False, buf=data)
                except CorruptLogError:
                    continue
            if scan.size < len(data):
                if mark is not None and scan.size < _unchecked_from(mark, segment_base(path)):
                    damage += 1
                    print(f"{path}: position {scan.size}: {len(data) - scan.size} bytes that do not check out, "
                          "inside what the last checkpoint covers")
                else:
                    warnings += 1
                    print(f"warning: {path}: position {scan.size}: torn tail of {len(data) - scan.size} bytes "
                          f"(cut on the next start)")
            next_offset = scan.next_offset
            batches += scan.batches
            records += scan.records
            for v in views:
                keys, values = v.keys_values(buf)
                for offset, key, value in zip(v.offsets(buf), keys, values):
                    latest[key] = value is None
                    try:
                        decode_record(key, value)
                    except RecordDecodeError as exc:
                        damage += 1
                        print(f"{path}: position {v.position}: record at offset {offset}: {exc}")
        live += sum(1 for tombstone in latest.values() if not tombstone)
    progress.done()
    for _, path in list_journals(Path(args.data_dir)):
        try:
            journal = scan_journal(path, _MAX_PARTITIONS)
        except OSError as exc:
            damage += 1
            print(f"{path}: unreadable: {exc.strerror or exc}")
            continue
        for d in journal.damage:  # damage with valid entries after it: acknowledged writes, not a tail
            damage += 1
            print(f"{d}: acknowledged entries that no longer check out")
        # Zeros past the last entry are the journal's preallocated space, not an unfinished write.
        if journal.unfinished_bytes:
            warnings += 1
            print(f"warning: {path}: position {journal.valid_end}: unfinished entry of {journal.unfinished_bytes} "
                  f"bytes (never acknowledged; ignored on the next start)")
        if journal.entries:
            print(f"{path}: {len(journal.entries)} batches after the last checkpoint (replayed on the next start)")
    if args.strict:
        damage += warnings
    status = "damaged" if damage else "ok"
    # "live": the latest value of each key, what a start loads (its "offsets log loaded: … live records" line)
    print(f"{status}: {records} records in {batches} batches checked ({live} live records), {damage} problems, "
          f"{warnings} warnings", file=sys.stderr)
    return EXIT_DAMAGE if damage else EXIT_OK


_MAX_PARTITIONS = 1 << 16  # journal entries name their partition; verify accepts any the format allows


class _Progress:
    """Where a long verify is, on a terminal only (one line rewritten in place on stderr, at most 4 times a
    second, erased at the end); scripts and pipes see nothing of it."""

    def __init__(self, partitions: int) -> None:
        import time

        self._clock = time.monotonic
        self._partitions = partitions
        self._shown_at: float | None = None
        self._enabled = sys.stderr.isatty()

    def show(self, partition: int, records: int) -> None:
        now = self._clock()
        if not self._enabled or (self._shown_at is not None and now - self._shown_at < 0.25):
            return
        self._shown_at = now
        sys.stderr.write(f"\rverifying partition {partition + 1}/{self._partitions}: {records} records so far\x1b[K")
        sys.stderr.flush()

    def done(self) -> None:
        if self._enabled and self._shown_at is not None:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _server_holding(data_dir: Path) -> str | None:
    """`" (pid N)"` (or "") if a server holds the data dir's lock, or a process owns one of its partition
    directories (`--workers`), now; else None.  Never takes a lock for long."""
    from cohort.coordinator.process.daemon import LOCK_FILE_NAME, DataDirLock, StartupError

    if (Path(data_dir) / LOCK_FILE_NAME).exists():
        lock = DataDirLock(Path(data_dir))
        try:
            lock.acquire()
        except StartupError as exc:
            text = str(exc)
            return text[text.rfind(" (pid"):] if " (pid" in text else ""
        lock.release()
    return _partition_owner(data_dir)


def _partition_owner(data_dir: Path) -> str | None:
    """`" (pid N)"` (or "") if a process owns one of the data dir's partition directories now, else None."""
    from cohort.coordinator.log import list_partitions
    from cohort.coordinator.log.partition_lock import partition_in_use
    from cohort.coordinator.log.segments import partition_dir

    for p in list_partitions(data_dir):
        holder = partition_in_use(partition_dir(data_dir, p))
        if holder is not None:
            return holder
    return None


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


def _unchecked_from(mark, base: int) -> float:
    """Where a segment stops being covered by the last checkpoint (inf: all of it is)."""
    if mark is None or base < mark.segment:
        return math.inf
    return mark.size if base == mark.segment else 0


# ------------------------------------------------------------------------------ compact
def compact_command(args: argparse.Namespace) -> int:
    import time

    from cohort.coordinator.process.daemon import DataDirLock, StartupError
    from cohort.coordinator.log import CorruptLogError, compact_closed_segments, list_partitions
    from cohort.coordinator.groups.reports.history import HISTORY_KEY_PREFIXES
    from cohort.coordinator.server.topics import END_OFFSET_HISTORY_KEY_PREFIXES
    from cohort.coordinator.log.journal import CheckpointError, read_checkpoint
    from cohort.coordinator.log.segments import (
        complete_pending_compaction,
        list_partition_segments,
        partition_dir,
        segment_base,
    )

    problem = _check_data_dir(args.data_dir)
    if problem:
        return _fail(problem)
    if args.delete_retention_ms < 0 or args.history_retention_ms < 0 or args.segment_bytes < 1:
        return _fail("--delete-retention-ms and --history-retention-ms must be >= 0 and --segment-bytes > 0")
    lock = DataDirLock(args.data_dir)
    try:
        lock.acquire()
    except StartupError as exc:
        return _fail(f"{exc}; stop it before compacting offline", EXIT_REFUSED)
    owner = _partition_owner(args.data_dir)  # a worker process owning some partitions (`--workers`)
    if owner is not None:
        lock.release()
        return _fail(f"data dir {args.data_dir} is in use by a cohort process{owner}; stop it before "
                     "compacting offline", EXIT_REFUSED)
    try:
        now_ms = int(time.time() * 1000)
        compacted = 0
        active_only: list[int] = []  # partitions whose records all sit in the active segment
        # Segments at or after a partition's checkpoint mark are rebuilt from the journal on the next
        # start: only the ones before it are the server's to keep, and so compactable.
        marks = read_checkpoint(Path(args.data_dir)) or {}
        for p in list_partitions(args.data_dir):
            pdir = partition_dir(args.data_dir, p)
            complete_pending_compaction(pdir)
            segs = list_partition_segments(pdir)
            end = marks[p].segment if p in marks else segment_base(segs[-1]) if segs else 0
            closed = [s for s in segs[:-1] if segment_base(s) < end]
            if not closed:
                if segs and any(s.stat().st_size for s in segs):
                    active_only.append(p)
                continue
            compacted += 1
            result = compact_closed_segments(
                pdir, closed, end, segment_bytes=args.segment_bytes,
                delete_retention_ms=args.delete_retention_ms, now_ms=now_ms,
                history_retention_ms=args.history_retention_ms,
                history_key_prefixes=HISTORY_KEY_PREFIXES + END_OFFSET_HISTORY_KEY_PREFIXES)
            print(f"partition {p}: {result.segments_before} -> {result.segments_after} closed segments, "
                  f"{result.records_before} -> {result.records_after} records, "
                  f"{result.tombstones_dropped} tombstones dropped")
        if active_only:
            # What kafka-dump-log.sh users expect to hear: why records were left as they were.
            print(f"{len(active_only)} partition(s) not compacted ({_ranges(active_only)}): their records are all "
                  f"in the active segment, which is never compacted; a segment closes when it reaches "
                  f"segment.bytes or is offsets.topic.segment.ms old (the server rolls it)")
        if not compacted and not active_only:
            print("nothing to compact: the log holds no records")
        else:
            print(f"compacted {compacted} partition(s)")
    except (CorruptLogError, CheckpointError) as exc:
        return _fail(f"damaged log, not compacted: {exc}", EXIT_DAMAGE)
    except OSError as exc:
        return _fail(f"compaction failed: {exc.filename or args.data_dir}: {exc.strerror or exc}")
    finally:
        lock.release()
    return EXIT_OK
