"""Fixtures of the Java client tests: one `cohort serve` and one Java peer JVM per test module (a scenario
group), each test with its own group and topic names; a test that needs a JVM to die starts its own."""
from __future__ import annotations

import itertools

import pytest
from cohort_process import CohortServer
from java_peer import JavaPeer

_names = itertools.count(1)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    data = tmp_path_factory.mktemp("cohort") / "data"
    data.mkdir()
    server = CohortServer(data).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    peer = JavaPeer(tmp_path_factory.mktemp("java"))
    try:
        yield peer
    finally:
        peer.close()


@pytest.fixture(scope="module")
def java_admin(java, cohort):
    admin = java.admin("module-admin", {"bootstrap.servers": cohort.bootstrap})
    yield admin
    admin.close()


@pytest.fixture
def names(request):
    """A prefix unique to the test, for its group and topic names."""
    return f"{request.node.name.split('[')[0].removeprefix('test_')[:40]}-{next(_names)}".replace("_", "-")

