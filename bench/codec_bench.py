"""Codec micro-benchmark: our generated codec against kafka-python 3.0.12's, same run.

    python bench/codec_bench.py --runs 5 --out codec.json

For each message (OffsetCommit v8 with 1 topic x 1 partition, Heartbeat v4,
JoinGroup v7 with 3 protocols) it times decode and encode of the same values
with both codecs: each run loops for at least `--min-time` seconds (of this
thread's CPU time by default, so a busy machine does not skew the comparison;
`--clock wall` for elapsed time), a run's figure is microseconds per
operation, and the table shows the median of `--runs` runs (at least 3). Every request the coordinator serves passes through
this code, so it sets the server's ceiling.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cohort.protocol.consumer_protocol import ConsumerProtocolSubscription, encode_subscription  # noqa: E402
from cohort.protocol.messages import HeartbeatRequest, JoinGroupRequest, OffsetCommitRequest  # noqa: E402

MEMBER_ID = "consumer-bench-1-6f1c2a52-93f4-4e0b-8c2a-0c3f2d1b9e77"


def _offset_commit():
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    partition = topic.OffsetCommitRequestPartition
    return OffsetCommitRequest(
        group_id="bench-group", generation_id_or_member_epoch=7, member_id=MEMBER_ID,
        topics=[topic(name="orders", partitions=[
            partition(partition_index=3, committed_offset=1234567, committed_leader_epoch=5, committed_metadata=""),
        ])])


def _heartbeat():
    return HeartbeatRequest(group_id="bench-group", generation_id=7, member_id=MEMBER_ID)


def _join_group():
    metadata = encode_subscription(ConsumerProtocolSubscription(topics=["orders", "payments", "audit"]), 1)
    protocol = JoinGroupRequest.JoinGroupRequestProtocol
    return JoinGroupRequest(
        group_id="bench-group", session_timeout_ms=45000, rebalance_timeout_ms=300000, member_id=MEMBER_ID,
        protocol_type="consumer",
        protocols=[protocol(name=name, metadata=metadata) for name in ("range", "roundrobin", "cooperative-sticky")])


CASES = [
    ("OffsetCommit v8 (1 topic x 1 partition)", _offset_commit, 8),
    ("Heartbeat v4", _heartbeat, 4),
    ("JoinGroup v7 (3 protocols)", _join_group, 7),
]


def _kafka_python_message(msg, version: int):
    """The same values as a kafka-python object (built from the bytes, so nothing is lost)."""
    from kafka.protocol.consumer import group as kp_group
    kp_cls = getattr(kp_group, type(msg).__name__)
    kp_msg = kp_cls.decode(msg.encode(version), version=version)
    kp_msg._header = None
    return kp_cls, kp_msg


CLOCKS = {
    # CPU time of this thread: time spent descheduled by other load on the machine does not count
    "cpu": time.thread_time,
    "wall": time.perf_counter,
}


def _per_op_us(fn: Callable[[], object], min_time: float, clock: Callable[[], float]) -> float:
    """Microseconds per call, looping in batches for at least `min_time` seconds of `clock`."""
    batch = 1000
    calls = 0
    start = clock()
    while True:
        for _ in range(batch):
            fn()
        calls += batch
        elapsed = clock() - start
        if elapsed >= min_time:
            return elapsed / calls * 1e6


def run(runs: int, min_time: float, clock: Callable[[], float]) -> list[dict]:
    rows = []
    for label, build, version in CASES:
        msg = build()
        cls = type(msg)
        data = msg.encode(version)
        kp_cls, kp_msg = _kafka_python_message(msg, version)
        theirs = bytes(kp_msg.encode(version=version))
        if theirs != data:
            raise SystemExit(f"{label}: kafka-python encodes different bytes; refusing to compare")
        ops = {
            ("cohort", "decode"): lambda: cls.decode(data, version),
            ("cohort", "encode"): lambda: msg.encode(version),
            ("kafka-python", "decode"): lambda: kp_cls.decode(data, version=version),
            ("kafka-python", "encode"): lambda: kp_msg.encode(version=version),
        }
        for fn in ops.values():  # warm up: compile, caches
            _per_op_us(fn, 0.05, clock)
        samples: dict[tuple[str, str], list[float]] = {k: [] for k in ops}
        for _ in range(runs):  # interleave the codecs so drift hits both alike
            for key, fn in ops.items():
                samples[key].append(_per_op_us(fn, min_time, clock))
        row = {"message": label, "bytes": len(data)}
        for (codec, op), values in samples.items():
            row[f"{codec} {op} us"] = round(statistics.median(values), 3)
            row[f"{codec} {op} runs"] = [round(v, 3) for v in values]
        rows.append(row)
    return rows


def _table(rows: list[dict]) -> str:
    head = (f"{'message':<42} {'bytes':>5}  {'decode us':>9} {'kafka-py':>9} {'x':>5}  "
            f"{'encode us':>9} {'kafka-py':>9} {'x':>5}")
    lines = [head, "-" * len(head)]
    for r in rows:
        dec, kdec = r["cohort decode us"], r["kafka-python decode us"]
        enc, kenc = r["cohort encode us"], r["kafka-python encode us"]
        lines.append(f"{r['message']:<42} {r['bytes']:>5}  {dec:>9.2f} {kdec:>9.2f} {kdec / dec:>4.1f}x  "
                     f"{enc:>9.2f} {kenc:>9.2f} {kenc / enc:>4.1f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement (median reported; >= 3)")
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds each run loops for")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: this thread's CPU time (robust on a busy machine); wall: elapsed time")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.runs < 3:
        parser.error("--runs must be at least 3")
    import kafka
    rows = run(args.runs, args.min_time, CLOCKS[args.clock])
    print(_table(rows))
    faster = all(r["cohort decode us"] < r["kafka-python decode us"] and
                 r["cohort encode us"] < r["kafka-python encode us"] for r in rows)
    print(f"\ncohort faster than kafka-python {kafka.__version__} on every message and direction: {faster}")
    if args.out:
        args.out.write_text(json.dumps({
            "benchmark": "codec", "python": platform.python_version(), "kafka_python": kafka.__version__,
            "runs": args.runs, "min_time_s": args.min_time, "clock": args.clock,
            "unit": "microseconds per operation (median of runs)",
            "results": rows, "cohort_faster_everywhere": faster,
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
