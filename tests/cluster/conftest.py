"""Fixtures of the cluster-mode tests: one real 3-member etcd per test session, wiped and whole again
before every test (members a test killed are restarted)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from etcd_cluster import EtcdCluster  # noqa: E402


@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory):
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def etcd(etcd_cluster: EtcdCluster) -> EtcdCluster:
    """The session's etcd with all members running, healthy and empty."""
    for member in etcd_cluster.members:
        if not member.running():
            etcd_cluster.start_member(member)
    etcd_cluster.wait_healthy()
    etcd_cluster.wipe()
    return etcd_cluster
