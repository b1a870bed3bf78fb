"""Cohort's load-benchmark suite: a pipelined asyncio load generator, server harnesses
(Cohort, Tansu, ZooKeeper), workloads, side-by-side comparison and reports.

Run `python -m bench --help` from the repository root.
"""
