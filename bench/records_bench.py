"""Record codec micro-benchmark: the commit path's encoder and the start-up bulk load.

    python bench/records_bench.py --runs 3

Cases (each run in this process, CPU time of this thread, median of `--runs`):

* **encode**: `--commits` offset commits through `encode_offset_commit` (the
  OffsetCommit write path): 100 groups x 10 topics x 100 partitions, metadata "" (most
  clients), then the same with metadata "m" and with an expire timestamp.
* **encode_record**: the same commits as typed records through `encode_record`.
* **bulk load**: `--records` live commit records (value v3, metadata "", the
  common case) through `decode_for_load`, as a coordinator's start-up does.
* **decode**: `--commits` commits with metadata through `decode_records`
  (the load path's per-record fallback) and `decode_record` (the Spark reader).

Only the public API of `cohort.coordinator.records.types` is used, so the same
script measures any revision of the module: `--module FILE` loads it from FILE
(e.g. `git show REV:coordinator/records/types.py > /tmp/records_rev.py`).
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import importlib.util  # noqa: E402
from types import ModuleType  # noqa: E402


def load_records(path: Path | None) -> ModuleType:
    """The records module of this tree, or the one in `path` standing in for it."""
    name = "cohort.coordinator.records.types"
    if path is None:
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _commit_args(n: int, metadata: str = "", expire: int = -1) -> list[tuple]:
    """A consumer commits all its partitions together: groups x 10 topics x 100 partitions, in that order."""
    return [(f"consumer-group-{i // 1000}", f"topic-{(i // 100) % 10}", i % 100, 1_000_000 + i, 7, metadata,
             1_700_000_000_000 + i, expire) for i in range(n)]


def _cpu(fn: Callable[[], object]) -> float:
    gc.collect()
    gc.disable()
    try:
        t0 = time.thread_time()
        fn()
        return time.thread_time() - t0
    finally:
        gc.enable()


def run(r: ModuleType, commits: int, records: int, runs: int) -> dict[str, float]:
    encode_offset_commit, encode_record = r.encode_offset_commit, r.encode_record
    decode_for_load, decode_records, decode_record = r.decode_for_load, r.decode_records, r.decode_record
    plain = _commit_args(commits)
    with_metadata = _commit_args(commits, "m")
    expiring = _commit_args(commits, "", 1_800_000_000_000)
    typed = [r.OffsetCommitRecord(*a) for a in plain]
    live = [encode_offset_commit(*a) for a in _commit_args(records)]
    mixed = [encode_offset_commit(*a) for a in with_metadata]

    def drain(items) -> None:
        for _ in items:
            pass

    cases: dict[str, Callable[[], object]] = {
        f"encode_offset_commit x{commits} (metadata '')": lambda: [encode_offset_commit(*a) for a in plain],
        f"encode_offset_commit x{commits} (metadata 'm')": lambda: [encode_offset_commit(*a) for a in with_metadata],
        f"encode_offset_commit x{commits} (expire ts, v1)": lambda: [encode_offset_commit(*a) for a in expiring],
        f"encode_record x{commits}": lambda: [encode_record(r) for r in typed],
        f"decode_for_load x{records} (v3, metadata '')": lambda: drain(decode_for_load(live)),
        f"decode_records x{commits} (metadata 'm')": lambda: drain(decode_records(mixed)),
        f"decode_record x{commits} (metadata 'm')": lambda: [decode_record(k, v) for k, v in mixed],
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, fn in cases.items():
            samples[name].append(_cpu(fn))
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the medians (seconds) as JSON here")
    parser.add_argument("--module", type=Path, help="measure the records module in this file instead")
    args = parser.parse_args()
    result = run(load_records(args.module), args.commits, args.records, max(args.runs, 1))
    for name, seconds in result.items():
        print(f"{seconds * 1000:9.1f} ms  {name}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
