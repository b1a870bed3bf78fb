"""`python -m bench.peer_table RESULTS.json`: the Kafka comparison of `bench suite --peer kafka` as one
Markdown table, a row per workload variant: both sides' median, the median of the per-round ratios, each
side's durability, server CPU per operation and RSS (the JVM's whole process for Kafka).

The README's and bench/reports/peers/'s Kafka rows are this table; re-measuring is the suite's command
and then this one.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

DURABILITY = {
    "cohort": "fsync before the answer (`offsets.flush.policy=always`)",
    "cohort-never": "page cache (`offsets.flush.policy=never`)",
    "kafka": "page cache (Kafka's defaults)",
    "kafka-flush": "fsync of every append before the answer (`log.flush.interval.messages=1`)",
}
UNITS = {"throughput (ops/s)": "/s", "p99 latency (ms)": " ms", "all assigned (s)": " s", "load records/s": " s"}


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "–"
    if abs(value) >= 1000:
        text = f"{value:,.0f}".replace(",", " ")
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return text + unit


def _cpu_us_per_op(result: dict) -> float | None:
    cpu = (result.get("server") or {}).get("cpu_seconds")
    ops = result.get("operations") or 0
    if cpu is None or not ops:
        return None
    return cpu / ops * 1e6


def _rss_mib(result: dict) -> float | None:
    server = result.get("server") or {}
    rss = server.get("rss_peak_bytes") or server.get("rss_end_bytes")
    return None if rss is None else rss / 2**20


def _value(comparison: dict, result: dict):
    """The row's figure: the restart row shows seconds until every group serves (the headline is records/s)."""
    if comparison["workload"] == "restart":
        return result["extra"].get("time_to_serve_all_groups_s")
    return None


def rows(data: dict) -> list[dict]:
    results = data["results"]
    out = []
    for c in data["comparisons"]:
        def side(target: str) -> list[dict]:
            return [r for r in results if r["target"] == target and r["workload"] == c["workload"]
                    and r["variant"] == c["variant"] and r["extra"].get("comparison", c.get("label")) == c.get("label")]
        a, b = side(c["a"]), side(c["b"])
        a_value, b_value = c["a_median"], c["b_median"]
        metric = c["metric"]
        if c["workload"] == "restart":
            metric = "time until every group serves (s)"
            a_value = _median([_value(c, r) for r in a])
            b_value = _median([_value(c, r) for r in b])
        out.append({
            "label": c.get("label", ""), "workload": c["workload"], "variant": c["variant"], "metric": metric,
            "a": c["a"], "b": c["b"], "a_value": a_value, "b_value": b_value, "ratio": c["median_ratio"],
            "ratios": c["ratios"], "a_cpu_us": _median([_cpu_us_per_op(r) for r in a]),
            "b_cpu_us": _median([_cpu_us_per_op(r) for r in b]), "a_rss": _median([_rss_mib(r) for r in a]),
            "b_rss": _median([_rss_mib(r) for r in b]), "a_errors": c["a_errors"], "b_errors": c["b_errors"],
            "rounds": min(len(a), len(b)),
        })
    return out


def markdown(data: dict) -> str:
    lines = ["| workload | metric | Cohort (durability) | Kafka 4.4 (durability) | Cohort | Kafka | per-round ratios "
             "| **ratio** (> 1: Cohort ahead) | server CPU µs/op Cohort / Kafka | RSS MiB Cohort / Kafka |",
             "|---|---|---|---|---:|---:|---|---:|---:|---:|"]
    for r in rows(data):
        unit = UNITS.get(r["metric"], " s")
        ratios = ", ".join("–" if x is None else f"{x:.2f}" for x in r["ratios"])
        errors = "" if not (r["a_errors"] or r["b_errors"]) else f" (errors: {r['a_errors']} / {r['b_errors']})"
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}×"
        lines.append(
            f"| {r['workload']} {r['variant']} | {r['metric']} | {r['a']}: {DURABILITY.get(r['a'], '')} "
            f"| {r['b']}: {DURABILITY.get(r['b'], '')} | {_fmt(r['a_value'], unit)} | {_fmt(r['b_value'], unit)} "
            f"| {ratios}{errors} | **{ratio}** "
            f"| {_fmt(r['a_cpu_us'])} / {_fmt(r['b_cpu_us'])} | {_fmt(r['a_rss'])} / {_fmt(r['b_rss'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.peer_table RESULTS.json", file=sys.stderr)
        return 2
    try:
        data = json.loads(Path(args[0]).read_text())
    except (OSError, ValueError) as exc:
        print(f"cannot read {args[0]}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
