"""Fixtures for the benchmark smoke runs: a real `cohort serve` and a seconds-sized profile.

`bench/` is not an installed package; it runs from the repository root, so the
root goes on sys.path here (as `python -m bench` from the root would have it).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.targets import CohortServer  # noqa: E402
from bench.workloads import Profile  # noqa: E402

# A smoke run: every loop bounded to well under a second of load.
SMOKE = Profile.quick().with_overrides(duration_s=0.4, warmup_s=0.1, storm_initial_delay_ms=100)


@pytest.fixture(scope="module")
def cohort():
    """One `cohort serve` subprocess per test module (join phases short: 100 ms initial delay)."""
    with CohortServer(settings={"group.initial.rebalance.delay.ms": 100}) as server:
        yield server


@pytest.fixture
def smoke_profile() -> Profile:
    return SMOKE
