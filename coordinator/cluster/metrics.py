"""Cluster mode's Prometheus series, read from the store's and the ownership's counters when scraped.

Register with ``metrics.registry.register(ClusterCollector(store, ownership))``; nothing is recorded
on the write path beyond the plain counters `EtcdStore.stats` and `EtcdOwnership.stats` keep.
"""
from __future__ import annotations

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily


class ClusterCollector:
    def __init__(self, store, ownership) -> None:
        self.store = store
        self.ownership = ownership

    def describe(self):
        return list(self.collect())

    def collect(self):
        s, o = self.store.stats, self.ownership.stats
        yield GaugeMetricFamily("cohort_cluster_owned_partitions", "Offsets partitions this node owns now.",
                                value=len(self.ownership.owned()))
        yield GaugeMetricFamily("cohort_cluster_nodes", "Live nodes this node sees in etcd.",
                                value=len(self.ownership.nodes()))
        yield GaugeMetricFamily("cohort_cluster_lease_remaining_seconds",
                                "How long this node's etcd lease is certainly still valid.",
                                value=max(0.0, self.ownership.lease.deadline - time.monotonic()))
        yield CounterMetricFamily("cohort_cluster_ownership_changes", "Partitions gained or given up by this node.",
                                  value=o.ownership_changes)
        yield CounterMetricFamily("cohort_cluster_partition_claims", "Partitions this node won by claiming.",
                                  value=o.claims)
        yield CounterMetricFamily("cohort_cluster_partition_handoffs",
                                  "Partitions this node handed to their preferred owner.", value=o.handoffs)
        yield CounterMetricFamily("cohort_cluster_partition_losses",
                                  "Partitions taken from this node (lease lapsed, fenced, key gone).", value=o.losses)
        yield CounterMetricFamily("cohort_cluster_lease_moves",
                                  "Times this node moved its etcd keys to a lease of a new etcd raft term.",
                                  value=o.lease_moves)
        yield CounterMetricFamily("cohort_cluster_fenced_writes",
                                  "Writes refused because another node owns the partition now.", value=s.fenced_writes)
        yield GaugeMetricFamily("cohort_cluster_etcd_nospace",
                                "1 while etcd refuses this node's writes with its NOSPACE alarm (quota reached).",
                                value=1 if self.store.etcd.no_space else 0)
        yield CounterMetricFamily("cohort_cluster_etcd_errors", "etcd calls of the store that failed or timed out.",
                                  value=s.etcd_errors)
        yield SummaryMetricFamily("cohort_cluster_etcd_transaction_seconds",
                                  "Latency of the store's etcd transactions (commit rounds).",
                                  count_value=s.transactions, sum_value=s.transaction_seconds)
