"""The pure parts of `--workers`: the partition -> worker split and the merged /metrics exposition."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from cohort.coordinator.metrics import CoordinatorMetrics
from cohort.coordinator.contracts.ownership import Node
from cohort.coordinator.server.static_ownership import StaticOwnership, partitions_of_worker
from cohort.coordinator.process.supervisor import label_exposition
from cohort.protocol.partitioning import partition_for

NUM_PARTITIONS = 50


def nodes_of(ports: list[int], base_id: int) -> list[Node]:
    return [Node(base_id + k, "127.0.0.1", port) for k, port in enumerate(ports)]


@given(workers=st.integers(1, NUM_PARTITIONS), base_id=st.integers(0, 1000),
       ports=st.lists(st.integers(1, 65535), min_size=NUM_PARTITIONS, max_size=NUM_PARTITIONS, unique=True))
def test_every_partition_has_one_owner_shares_are_even_and_only_n_decides(workers, base_id, ports):
    nodes = nodes_of(ports[:workers], base_id)
    views = [StaticOwnership(node, nodes, NUM_PARTITIONS) for node in nodes]
    owned = [set(view.owned()) for view in views]
    # Kafka's rule of one leader per partition: the shares are disjoint and cover every partition,
    assert sorted(p for share in owned for p in share) == list(range(NUM_PARTITIONS))
    # every node agrees on every owner, and each node owns what the others say it owns,
    for p in range(NUM_PARTITIONS):
        answers = {view.owner(p) for view in views}
        assert len(answers) == 1
        (owner,) = answers
        assert p in owned[nodes.index(owner)]
    # the shares differ by at most one partition,
    assert max(map(len, owned)) - min(map(len, owned)) <= 1
    # and the split depends on N alone (not on ports or node ids): what a restart with other ports finds.
    assert owned == [set(partitions_of_worker(k, workers, NUM_PARTITIONS)) for k in range(workers)]
    # The registry's partition has one owner too, which every node names as controller.
    assert {view.owner(0) for view in views} == {views[0].local}


@given(group=st.text(max_size=40), workers=st.integers(1, 16))
def test_a_group_goes_to_the_owner_of_its_kafka_partition(group, workers):
    nodes = nodes_of([9092 + k for k in range(workers)], 0)
    view = StaticOwnership(nodes[0], nodes, NUM_PARTITIONS)
    partition = partition_for(group, NUM_PARTITIONS)
    assert partition in set(StaticOwnership(view.owner(partition), nodes, NUM_PARTITIONS).owned())


@settings(max_examples=25, deadline=None)
@given(counts=st.lists(st.lists(st.tuples(st.sampled_from([0, 1, 8, 9, 10, 12]), st.integers(0, 30)),
                                max_size=6), min_size=1, max_size=4))
def test_merged_metrics_keep_every_workers_samples_under_a_worker_label(counts):
    expositions = []
    for requests in counts:
        metrics = CoordinatorMetrics(process_metrics=False)
        for api_key, version in requests:
            metrics.observe_request(api_key, version, 0.001)
        expositions.append(metrics.exposition().decode())
    families: dict[str, list[str]] = {}
    order: list[str] = []
    for worker, text in enumerate(expositions):
        label_exposition(text, worker, families, order)
    merged = "\n".join(line for name in order for line in families[name + "\0meta"] + families[name]) + "\n"

    def samples(text: str, extra: dict) -> list:
        return sorted((s.name, tuple(sorted({**s.labels, **extra}.items())), s.value)
                      for f in text_string_to_metric_families(text) for s in f.samples)

    expected = sorted(x for worker, text in enumerate(expositions) for x in samples(text, {"worker": str(worker)}))
    assert samples(merged, {}) == expected
    assert all(merged.count(f"# TYPE {name} ") <= 1 for name in order)
