"""Cohort's thin Kafka-protocol client: membership, assignors, offsets, admin.

It speaks the Kafka wire protocol (via `protocol/`) to any Kafka-compatible
server, not only Cohort. Entry points:

- `client.membership.GroupMember`: a consumer-group member (join, assign as
  leader, heartbeat, commit, leave) with awaitable rebalance callbacks.
- `client.admin.Admin`: asyncio admin for groups, committed offsets and topics.
- `client.blocking.BlockingAdmin`: the same for synchronous code (own loop thread).
- `client.offsets`: commit/fetch primitives (`commit_offsets`, `fetch_offsets`).
- `client.assignors`: range, roundrobin, sticky, cooperative-sticky.
- `client.cli`: the `cohort groups …` / `cohort topics …` commands.
"""
