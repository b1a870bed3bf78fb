"""`cohort serve --workers 3` with unmodified clients: they route themselves, as across Kafka brokers.

Each client library runs the group scenario of every client test (rebalance, commits that survive
it, another group's empty offsets) with its group placed on a worker that is neither the one it
bootstraps from nor (for two of them) the topic registry's, so FindCoordinator, Metadata forwarding
and the controller hand-off are all on the path.
"""
from __future__ import annotations

import asyncio

import pytest
from clients_scenario import LogCapture, run_group_scenario
from test_clients_aiokafka import aiokafka_adapter
from test_clients_aiokafka import create_topic as aiokafka_create_topic
from test_clients_confluent import CLIENT_LOGGER, admin_client, confluent_adapter
from test_clients_confluent import create_topic as confluent_create_topic
from test_clients_kafka_python import create_topic as kafka_python_create_topic
from test_clients_kafka_python import kafka_python_adapter
from workers_harness import WorkersServer, group_on_worker

from cohort.client.connection import BrokerConnection
from cohort.protocol.messages import FindCoordinatorRequest, MetadataRequest

pytestmark = pytest.mark.timeout(240)
WORKERS = 3


@pytest.fixture
def workers_serve(tmp_path):
    server = WorkersServer(tmp_path / "data", WORKERS).start()
    yield server
    assert server.stop() == 0, server.output()


def test_every_worker_sends_each_group_to_its_owner_and_lists_every_worker(workers_serve):
    groups = [group_on_worker("route", k, WORKERS) for k in range(WORKERS)]

    async def ask(worker: int):
        conn = BrokerConnection("127.0.0.1", workers_serve.ports[worker])
        try:
            found = await conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=groups), 4)
            legacy = [await conn.request(FindCoordinatorRequest(key=g, key_type=0), 3) for g in groups]
            meta = await conn.request(MetadataRequest(topics=None), 9)
            return found, legacy, meta
        finally:
            await conn.close()

    for worker in range(WORKERS):
        found, legacy, meta = asyncio.run(ask(worker))
        # Given any worker asked, then each group's coordinator is the worker that owns its partition.
        assert [(c.key, c.error_code, c.node_id, c.port) for c in found.coordinators] == [
            (g, 0, k, workers_serve.ports[k]) for k, g in enumerate(groups)]
        assert [(r.error_code, r.node_id, r.port) for r in legacy] == [
            (0, k, workers_serve.ports[k]) for k in range(WORKERS)]
        # And Metadata lists all the workers, with the registry owner (worker 0) as controller.
        assert sorted((b.node_id, b.port) for b in meta.brokers) == [(k, workers_serve.ports[k]) for k in range(WORKERS)]
        assert meta.controller_id == 0


def test_kafka_python_group_on_another_worker(workers_serve):
    topic, group = "wk-kp-topic", group_on_worker("wk-kp", 1, WORKERS)
    bootstrap = workers_serve.bootstrap_of(2)
    with LogCapture("kafka") as logs:
        kafka_python_create_topic(bootstrap, topic, 6)
        run_group_scenario(kafka_python_adapter(bootstrap, topic), topic, group)
    logs.assert_no_repeated_errors()


def test_confluent_group_on_another_worker(workers_serve):
    topic, group = "wk-ck-topic", group_on_worker("wk-ck", 2, WORKERS)
    bootstrap = workers_serve.bootstrap_of(1)
    with LogCapture("kafka", CLIENT_LOGGER) as logs:
        confluent_create_topic(admin_client(bootstrap), topic, 6)
        run_group_scenario(confluent_adapter(bootstrap, topic), topic, group)
    logs.assert_no_repeated_errors()


def test_aiokafka_group_on_another_worker(workers_serve):
    topic, group = "wk-ak-topic", group_on_worker("wk-ak", 1, WORKERS)
    bootstrap = workers_serve.bootstrap_of(0)
    with LogCapture("aiokafka") as logs:
        asyncio.run(aiokafka_create_topic(bootstrap, topic, 6))
        run_group_scenario(aiokafka_adapter(bootstrap, topic), topic, group)
    logs.assert_no_repeated_errors()


class Bootstrap:
    """What the client tests need of a server: the address clients bootstrap from."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


def test_client_admin_tools_work_from_a_worker_that_is_neither_controller_nor_coordinator(workers_serve):
    # The client libraries' own admin scenarios (list, describe, alter, delete groups and offsets; create,
    # grow and delete topics), each bootstrapping from a worker other than the controller (worker 0).
    import test_clients_aiokafka
    import test_clients_confluent
    import test_clients_kafka_python

    from workers_harness import worker_of

    assert {worker_of(g, WORKERS) for g in ("kp-admin-group", "ck-admin-group", "ak-admin-group")} - {0}
    test_clients_kafka_python.test_kafka_python_admin_lists_describes_alters_and_deletes(
        Bootstrap(workers_serve.bootstrap_of(1)))
    test_clients_kafka_python.test_kafka_python_admin_manages_topics(Bootstrap(workers_serve.bootstrap_of(2)))
    test_clients_confluent.test_confluent_admin_lists_describes_alters_and_deletes(
        Bootstrap(workers_serve.bootstrap_of(2)))
    test_clients_confluent.test_confluent_admin_manages_topics(Bootstrap(workers_serve.bootstrap_of(1)))
    asyncio.run(test_clients_aiokafka.test_aiokafka_admin_lists_describes_and_alters_offsets(
        Bootstrap(workers_serve.bootstrap_of(2))))
