"""The benchmark workloads. Each is an async function `(target, profile) -> list[Result]`.

`Profile` holds the knobs; `--quick` shrinks them to a smoke run of seconds.
"""
from __future__ import annotations

from bench.workloads.profile import Profile

WORKLOADS = ("commit", "fetch", "heartbeat", "join-storm", "mixed", "restart")


def workload_function(name: str):
    """The coroutine function that runs workload `name` (imported lazily)."""
    if name == "commit":
        from bench.workloads.offsets import run_commit
        return run_commit
    if name == "fetch":
        from bench.workloads.offsets import run_fetch
        return run_fetch
    if name == "heartbeat":
        from bench.workloads.heartbeat import run_heartbeat
        return run_heartbeat
    if name == "join-storm":
        from bench.workloads.join_storm import run_join_storm
        return run_join_storm
    if name == "mixed":
        from bench.workloads.mixed import run_mixed
        return run_mixed
    if name == "restart":
        from bench.workloads.restart import run_restart
        return run_restart
    raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")


__all__ = ["WORKLOADS", "Profile", "workload_function"]
