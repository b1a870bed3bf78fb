"""Fixtures for the client tests: a real `cohort serve` subprocess (see `client_harness`)."""
from __future__ import annotations

import pytest

from client_harness import CohortServe


@pytest.fixture
def cohort_server(tmp_path):
    server = CohortServe(tmp_path / "data").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shared_cohort_server(tmp_path_factory):
    """One server for every test that uses distinct group and topic names (saves a start per module)."""
    server = CohortServe(tmp_path_factory.mktemp("cohort") / "data").start()
    try:
        yield server
    finally:
        server.stop()
