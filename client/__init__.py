"""Cohort's thin Kafka-protocol client: membership, assignors, offsets, admin.

It speaks the Kafka wire protocol (via `protocol/`) to any Kafka-compatible
server, not only Cohort. Entry points:

- `cohort.client.membership.GroupMember`: a consumer-group member (join, assign as
  leader, heartbeat, commit, leave) with awaitable rebalance callbacks.
- `cohort.client.admin.Admin`: asyncio admin for groups, committed offsets and topics.
- `cohort.client.blocking.BlockingAdmin`: the same for synchronous code (own loop thread).
- `cohort.client.offsets`: commit/fetch primitives (`commit_offsets`, `fetch_offsets`).
- `cohort.client.assignors`: range, roundrobin, sticky, cooperative-sticky.
- `cohort.client.cli`: the `cohort groups …` / `cohort topics …` commands.
"""
