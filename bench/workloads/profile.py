"""Workload sizes: the full run and the `--quick` smoke run."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace


@dataclass(slots=True)
class Profile:
    # closed-loop throughput (commit, fetch, heartbeat max-rate)
    duration_s: float = 10.0
    warmup_s: float = 1.0
    max_ops: int = 5_000_000
    groups: int = 64
    connections: int = 4
    depth: int = 8
    connection_sweep: tuple[int, ...] = (1, 4, 16, 64)
    variants: tuple[str, ...] = ()        # empty = every variant of the workload
    # heartbeat fleet
    heartbeat_members: int = 5000
    heartbeat_groups: int = 500
    heartbeat_interval_s: float = 3.0
    heartbeat_duration_s: float = 30.0
    heartbeat_connections: int = 50
    # join storm
    storm_sizes: tuple[int, ...] = (100, 500, 1000)
    storm_initial_delay_ms: int = 3000
    storm_leave_fraction: float = 0.1
    # mixed fleet
    mixed_members: int = 2000
    mixed_groups: int = 200
    mixed_duration_s: float = 30.0
    mixed_heartbeat_s: float = 3.0
    mixed_commit_s: float = 5.0
    mixed_churn_every_s: float = 1.0
    mixed_connections: int = 50
    # restart
    restart_records: tuple[int, ...] = (10_000_000,)
    restart_offsets: int = 1_000_000
    restart_repeats: int = 3  # restarts of each filled log (the fill is the slow part)
    # rounds in compare mode
    rounds: int = 3
    extra: dict = field(default_factory=dict)

    @classmethod
    def quick(cls) -> "Profile":
        return cls(duration_s=1.0, warmup_s=0.2, max_ops=200_000, groups=8, connections=2, depth=4,
                   connection_sweep=(1, 2), heartbeat_members=40, heartbeat_groups=8, heartbeat_interval_s=0.5,
                   heartbeat_duration_s=1.5, heartbeat_connections=4, storm_sizes=(10,), storm_initial_delay_ms=300,
                   mixed_members=20, mixed_groups=4, mixed_duration_s=2.0, mixed_heartbeat_s=0.5, mixed_commit_s=0.7,
                   mixed_churn_every_s=0.5, mixed_connections=4, restart_records=(2000,), restart_offsets=2000, restart_repeats=1,
                   rounds=1)

    def with_overrides(self, **overrides) -> "Profile":
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown profile settings: {', '.join(sorted(unknown))}")
        return replace(self, **overrides)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
