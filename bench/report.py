"""Turn a results file into a Markdown report, a JSON summary and PNG charts.

    python -m bench.report bench/results/<run>/results.json [--out DIR]

A results file is what `python -m bench run` / `compare` write:
``{"meta": {...}, "results": [Result, ...], "comparisons": [Comparison, ...]}``.
Charts (matplotlib, Agg backend, so no display is needed): throughput vs
connections, latency CDFs, join-storm time vs members, peer ratios.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench.stats import Result

# Per workload variant: the number a reader compares, and which direction is better.
def headline(result: Result) -> tuple[str, float | None, bool]:
    """(metric name, value, higher is better) for a result."""
    w, v = result.workload, result.variant
    if w == "join-storm":
        return "all assigned (s)", result.extra.get("all_assigned_s"), False
    if w == "restart":
        return "load records/s", result.extra.get("load_records_per_s"), True
    if (w == "heartbeat" and v == "fleet") or w == "mixed":
        return "p99 latency (ms)", result.latency_ms.get("p99"), False
    return "throughput (ops/s)", result.throughput_per_s, True


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) < 10:
            return f"{value:.{max(digits, 2)}f}"
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _mib(value) -> str:
    return "–" if value is None else f"{value / 2**20:.1f}"


def load(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    data["results"] = [Result.from_dict(r) for r in data.get("results", [])]
    data.setdefault("comparisons", [])
    return data


def results_table(results: list[Result]) -> list[str]:
    lines = ["| workload | variant | target | ops | ops/s | p50 ms | p99 ms | p99.9 ms | errors | server CPU % | "
             "server RSS MiB | generator CPU % |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for r in results:
        lat = r.latency_ms or {}
        errors = ", ".join(f"{k}: {n}" for k, n in r.errors.items()) or "0"
        lines.append(f"| {r.workload} | {r.variant} | {r.target} | {_fmt(r.operations)} | "
                     f"{_fmt(r.throughput_per_s)} | {_fmt(lat.get('p50'))} | {_fmt(lat.get('p99'))} | "
                     f"{_fmt(lat.get('p999'))} | {errors} | {_fmt(r.server.get('cpu_percent'))} | "
                     f"{_mib(r.server.get('rss_peak_bytes') or r.server.get('rss_end_bytes'))} | "
                     f"{_fmt(r.generator.get('cpu_percent'))} |")
    return lines


def workload_details(results: list[Result]) -> list[str]:
    out = []
    storms = [r for r in results if r.workload == "join-storm"]
    if storms:
        out += ["", "### Join storm", "",
                "| target | members | join phase done s | all assigned s | Stable s | assigned after join phase s | "
                "10 % leave → all reassigned s | rejoins |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in storms:
            e = r.extra
            out.append(f"| {r.target} | {r.params.get('members')} | {_fmt(e.get('join_phase_complete_s'))} | "
                       f"{_fmt(e.get('all_assigned_s'))} | {_fmt(e.get('stable_s'))} | "
                       f"{_fmt(e.get('assigned_after_join_phase_s'))} | {_fmt(e.get('leave_rebalance_s'))} | "
                       f"{e.get('rejoins_during_storm')} / {e.get('rejoins_during_leave')} |")
    restarts = [r for r in results if r.workload == "restart"]
    if restarts:
        out += ["", "### Restart", "",
                "| records | distinct offsets | log MiB | process start → all groups served s | records/s (end to end) | "
                "server-reported load ms | records/s (log replay) | RSS B/offset |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in restarts:
            e = r.extra
            out.append(f"| {_fmt(r.params.get('records'))} | {_fmt(r.params.get('distinct_offsets'))} | "
                       f"{_mib(e.get('log_bytes'))} | {_fmt(e.get('time_to_serve_all_groups_s'))} | "
                       f"{_fmt(e.get('load_records_per_s'))} | {_fmt(e.get('server_reported_load_ms'))} | "
                       f"{_fmt(e.get('server_reported_records_per_s'))} | {_fmt(e.get('rss_bytes_per_offset'))} |")
    mixed = [r for r in results if r.workload == "mixed"]
    if mixed:
        out += ["", "### Mixed fleet: latency by request", "",
                "| target | request | count | p50 ms | p99 ms | p99.9 ms | max ms |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in mixed:
            for api, s in r.extra.get("per_api_ms", {}).items():
                out.append(f"| {r.target} | {api} | {_fmt(s.get('count'))} | {_fmt(s.get('p50'))} | "
                           f"{_fmt(s.get('p99'))} | {_fmt(s.get('p999'))} | {_fmt(s.get('max'))} |")
            signals = r.extra.get("rebalance_signals") or {}
            if signals:
                out.append(f"| {r.target} | rebalance signals | {', '.join(f'{k} {n}' for k, n in signals.items())} "
                           f"| | | | |")
    return out


def comparison_table(comparisons: list[dict]) -> list[str]:
    if not comparisons:
        return []
    out = ["", "## Side by side (A B, B A, A B …, fresh servers each round)", "",
           "| comparison | workload | variant | metric | A | B | A median | B median | ratio per round | median ratio |",
           "|---|---|---|---|---|---|---:|---:|---|---:|"]
    for c in comparisons:
        ratios = ", ".join(_fmt(x, 2) for x in c["ratios"])
        out.append(f"| {c.get('label', '')} | {c['workload']} | {c['variant']} | {c['metric']} | {c['a']} | {c['b']} | "
                   f"{_fmt(c['a_median'])} | {_fmt(c['b_median'])} | {ratios} | **{_fmt(c['median_ratio'], 2)}×** |")
    out.append("")
    out.append("Ratio = how many times better A is than B on the metric (A/B for throughput, B/A for latency "
               "and time).")
    return out


def summarize_comparison(workload: str, variant: str, a: str, b: str,
                         pairs: list[tuple[Result, Result]]) -> dict:
    """Medians and per-round ratios of one variant measured in alternating rounds (A B, B A, …)."""
    metric, _, higher = headline(pairs[0][0])
    a_values = [headline(x)[1] for x, _ in pairs]
    b_values = [headline(y)[1] for _, y in pairs]
    ratios = []
    for x, y in zip(a_values, b_values):
        if x is None or y is None or x == 0 or y == 0:
            ratios.append(None)
        else:
            ratios.append(round(x / y if higher else y / x, 3))
    valid = [r for r in ratios if r is not None]

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    return {"workload": workload, "variant": variant, "metric": metric, "higher_is_better": higher, "a": a, "b": b,
            "a_values": a_values, "b_values": b_values, "a_median": med(a_values), "b_median": med(b_values),
            "ratios": ratios, "median_ratio": round(statistics.median(valid), 3) if valid else None,
            "a_errors": sum(x.error_count for x, _ in pairs), "b_errors": sum(y.error_count for _, y in pairs)}


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _comparison(comparisons: list[dict], workload: str, variant: str, b: str) -> dict | None:
    return next((c for c in comparisons if c["workload"] == workload and c["variant"] == variant and c["b"] == b),
                None)


def targets_table(results: list[Result], comparisons: list[dict]) -> list[dict]:
    """The issue's targets, each with the measured median and whether it was met (None = not measured)."""
    rows = []

    def ratio_row(name: str, workload: str, variant: str, b: str, goal: float) -> None:
        c = _comparison(comparisons, workload, variant, b)
        value = c["median_ratio"] if c else None
        rows.append({"target": name, "goal": f"≥ {goal}×", "measured": None if value is None else f"{value:.2f}×",
                     "met": None if value is None else value >= goal,
                     "detail": "" if c is None else f"{c['a']} {_fmt(c['a_median'])} vs {c['b']} "
                                                    f"{_fmt(c['b_median'])} {c['metric']}, rounds {c['ratios']}"})

    ratio_row("Durable simple commits vs Tansu", "commit", "simple-1p", "tansu", 1.5)
    ratio_row("Durable simple commits vs ZooKeeper", "commit", "simple-1p", "zookeeper", 5.0)
    ratio_row("OffsetFetch vs Tansu", "fetch", "fetch-1p", "tansu", 1.5)
    c = _comparison(comparisons, "commit", "simple-1p", "cohort-never")
    if c:
        kept = (c["a_median"] / c["b_median"]) if c["a_median"] and c["b_median"] else None
        rows.append({"target": "fsync always within 30 % of never (64 committers)", "goal": "≥ 0.70",
                     "measured": None if kept is None else f"{kept:.2f}", "met": None if kept is None else kept >= 0.7,
                     "detail": f"always {_fmt(c['a_median'])} vs never {_fmt(c['b_median'])} ops/s"})
    storms = [r for r in results if r.workload == "join-storm" and r.target == "cohort"
              and r.params.get("members") == 500]
    value = _median([r.extra.get("assigned_after_join_phase_s") for r in storms])
    rows.append({"target": "Join storm, 500 members: all assigned after the initial delay", "goal": "≤ 1 s",
                 "measured": None if value is None else f"{value:.3f} s", "met": None if value is None else value <= 1.0,
                 "detail": "" if not storms else "total from first JoinGroup "
                 f"{_fmt(_median([r.extra.get('all_assigned_s') for r in storms]))} s with a "
                 f"{storms[0].params.get('initial_rebalance_delay_ms_configured')} ms initial delay"})
    fleets = [r for r in results if r.workload == "heartbeat" and r.variant == "fleet" and r.target == "cohort"]
    value = _median([r.latency_ms.get("p99") for r in fleets])
    rows.append({"target": "Heartbeats: fleet at its interval, p99", "goal": "< 10 ms",
                 "measured": None if value is None else f"{value:.2f} ms", "met": None if value is None else value < 10,
                 "detail": "" if not fleets else f"{fleets[0].params.get('members')} members, "
                 f"{fleets[0].params.get('groups')} groups, every {fleets[0].params.get('interval_s')} s"})
    restarts = [r for r in results if r.workload == "restart"]
    value = _median([r.extra.get("server_reported_records_per_s") for r in restarts])
    rows.append({"target": "Log load rate (server-reported replay)", "goal": "≥ 1 M records/s",
                 "measured": None if value is None else f"{value / 1e6:.2f} M/s",
                 "met": None if value is None else value >= 1e6,
                 "detail": "" if not restarts else f"{_fmt(restarts[0].params.get('records'))} records; end to end "
                 f"(process start → all groups served) {_fmt(_median([r.extra.get('load_records_per_s') for r in restarts]))}"
                 " records/s"})
    value = _median([r.extra.get("rss_bytes_per_offset") for r in restarts])
    rows.append({"target": "RSS per committed offset", "goal": "≤ 150 B",
                 "measured": None if value is None else f"{value:.0f} B", "met": None if value is None else value <= 150,
                 "detail": "" if not restarts else f"{_fmt(restarts[0].params.get('distinct_offsets'))} offsets held"})
    return rows


def _targets_markdown(rows: list[dict]) -> list[str]:
    measured = [r for r in rows if r["met"] is not None]
    if not measured:
        return []
    out = ["", "## Targets", "", "| target | goal | measured (median) | met | detail |", "|---|---|---|---|---|"]
    for r in measured:
        out.append(f"| {r['target']} | {r['goal']} | {r['measured']} | {'yes' if r['met'] else '**no**'} | "
                   f"{r['detail']} |")
    return out


def write_report(data: dict, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[Result] = data["results"]
    comparisons = data["comparisons"]
    meta = data.get("meta", {})
    charts = write_charts(results, comparisons, out_dir)
    lines = ["# Cohort load benchmarks", ""]
    machine = meta.get("machine", {})
    if meta:
        lines += [f"- Date: {meta.get('date', '')}",
                  f"- Machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
                  f"{_fmt(machine.get('memory_gib'))} GiB RAM, {machine.get('kernel', '')}; load average at start "
                  f"{machine.get('loadavg_start', '?')}, at end {machine.get('loadavg_end', '?')}",
                  f"- Command: `{meta.get('command', '')}`",
                  f"- Versions: " + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items()),
                  f"- Profile: {'quick (smoke)' if meta.get('quick') else 'full'}"
                  + (f"; generator and servers at nice {meta['nice']}" if meta.get("nice") is not None else ""), ""]
    targets = targets_table(results, comparisons)
    lines += _targets_markdown(targets)
    lines += comparison_table(comparisons)
    failures = meta.get("failures") or []
    if failures:
        lines += ["", "## Runs that failed", ""] + [
            f"- {f['workload']} → {f['target']} (round {f.get('round', '?')}): {f['error']}" for f in failures]
    lines += ["", "## All results", "", *results_table(results), *workload_details(results)]
    if charts:
        lines += ["", "## Charts", ""] + [f"![{c.stem}]({c.name})" for c in charts]
    servers = {}
    for r in results:
        servers.setdefault(r.target, r.target_info)
    if servers:
        lines += ["", "## Servers measured", ""] + [
            f"- **{name}**: {info.get('version', '')} — `{info.get('command', '')}`" for name, info in servers.items()]
    lines.append("")
    report = out_dir / "report.md"
    report.write_text("\n".join(lines))
    summary = {"meta": meta, "targets": targets, "comparisons": comparisons, "results": [
        {"workload": r.workload, "variant": r.variant, "target": r.target, "operations": r.operations,
         "throughput_per_s": r.throughput_per_s, "p50_ms": (r.latency_ms or {}).get("p50"),
         "p99_ms": (r.latency_ms or {}).get("p99"), "p999_ms": (r.latency_ms or {}).get("p999"),
         "errors": r.errors, "headline": headline(r)[:2], "extra": {k: v for k, v in r.extra.items()
                                                                  if k != "server_load_log"}} for r in results]}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return report


def write_charts(results: list[Result], comparisons: list[dict], out_dir: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts = []

    sweep = [r for r in results if r.workload == "commit" and r.variant.startswith("connections-")]
    if sweep:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for target in sorted({r.target for r in sweep}):
            points: dict[int, list[float]] = {}
            for r in sweep:
                if r.target == target:
                    points.setdefault(r.params["connections"], []).append(r.throughput_per_s)
            xs = sorted(points)
            ax.plot(xs, [statistics.median(points[x]) for x in xs], marker="o", label=target)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("connections (each with the same requests in flight)")
        ax.set_ylabel("simple OffsetCommit requests/s")
        ax.set_title("Commit throughput vs connections")
        ax.grid(True, alpha=0.3)
        ax.legend()
        charts.append(_save(fig, out_dir / "throughput_vs_connections.png"))

    cdf_sets = {}
    for r in results:
        if (r.latency_ms or {}).get("cdf") and not r.variant.startswith("connections-"):
            cdf_sets.setdefault(r.workload, []).append(r)
    for workload, rs in cdf_sets.items():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        seen = set()
        for r in rs:
            key = (r.target, r.variant)
            if key in seen:
                continue  # one line per target/variant (first round)
            seen.add(key)
            cdf = r.latency_ms["cdf"]
            ax.plot([p[1] for p in cdf], [p[0] for p in cdf], label=f"{r.target} {r.variant}")
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"Latency CDF: {workload}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        charts.append(_save(fig, out_dir / f"latency_cdf_{workload}.png"))

    storms = [r for r in results if r.workload == "join-storm" and r.extra.get("all_assigned_s") is not None]
    if storms:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for target in sorted({r.target for r in storms}):
            points: dict[int, list[tuple]] = {}
            for r in storms:
                if r.target == target:
                    points.setdefault(r.params["members"], []).append(
                        (r.extra["all_assigned_s"], r.extra.get("assigned_after_join_phase_s")))
            xs = sorted(points)
            ax.plot(xs, [statistics.median(p[0] for p in points[x]) for x in xs], marker="o",
                    label=f"{target}: first JoinGroup → all assigned")
            ax.plot(xs, [statistics.median(p[1] for p in points[x]) for x in xs], marker="x", linestyle="--",
                    label=f"{target}: join phase done → all assigned")
        ax.set_xlabel("members joining one group at once")
        ax.set_ylabel("seconds")
        ax.set_title("Join storm")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        charts.append(_save(fig, out_dir / "join_storm.png"))

    ratios = [c for c in comparisons if c.get("median_ratio")]
    if ratios:
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(ratios)), 4.5))
        labels = [f"{c['workload']}\n{c['variant']}\nvs {c['b']}" for c in ratios]
        values = [c["median_ratio"] for c in ratios]
        bars = ax.bar(range(len(values)), values, color="#3a7bd5")
        for bar, c in zip(bars, ratios):
            spread = [r for r in c["ratios"] if r is not None]
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{c['median_ratio']:.2f}×",
                    ha="center", va="bottom", fontsize=8)
            if len(spread) > 1:
                ax.plot([bar.get_x() + bar.get_width() / 2] * 2, [min(spread), max(spread)], color="black")
        ax.axhline(1.0, color="grey", linewidth=1)
        ax.set_xticks(range(len(values)), labels, fontsize=7)
        ax.set_ylabel("times better than the peer (median of rounds; bar = min–max)")
        ax.set_title("Cohort vs peers")
        charts.append(_save(fig, out_dir / "peer_ratios.png"))
    return charts


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


def merge(parts: list[dict]) -> dict:
    """Several runs as one: results and comparisons concatenated, each run's command kept."""
    if len(parts) == 1:
        return parts[0]
    meta = dict(parts[0].get("meta", {}))
    meta["command"] = " ; ".join(p.get("meta", {}).get("command", "") for p in parts)
    meta["failures"] = [f for p in parts for f in p.get("meta", {}).get("failures", [])]
    machine = dict(meta.get("machine", {}))
    machine["loadavg_end"] = parts[-1].get("meta", {}).get("machine", {}).get("loadavg_end")
    meta["machine"] = machine
    return {"meta": meta, "results": [r for p in parts for r in p["results"]],
            "comparisons": [c for p in parts for c in p["comparisons"]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, nargs="+",
                        help="results.json written by `python -m bench run/compare/suite`; several are merged")
    parser.add_argument("--out", type=Path, help="output directory (default: next to the first results file)")
    args = parser.parse_args(argv)
    try:
        parts = [load(path) for path in args.results]
    except (OSError, ValueError) as exc:
        print(f"cannot read results: {exc}", file=sys.stderr)
        return 2
    data = merge(parts)
    out = args.out or args.results[0].parent
    if len(parts) > 1:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(
            {**data, "results": [r.to_dict() for r in data["results"]]}, indent=1))
    report = write_report(data, out)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
