"""A group member in its own process, for tests that kill a member for real (SIGKILL).

Usage: python member_process.py BOOTSTRAP GROUP TOPIC SESSION_MS
Prints one JSON line per completed rebalance: {"member_id", "generation", "partitions"}.
"""
from __future__ import annotations

import asyncio
import json
import sys

from cohort.client.membership import GroupMember, RebalanceListener


class Reporter(RebalanceListener):
    def __init__(self) -> None:
        self.member: GroupMember | None = None

    async def on_partitions_assigned(self, assigned):
        m = self.member
        print(json.dumps({
            "member_id": m.member_id,
            "generation": m.generation.generation_id,
            "partitions": sorted([tp.topic, tp.partition] for tp in m.assignment),
        }), flush=True)


async def main(bootstrap: str, group: str, topic: str, session_ms: int) -> None:
    reporter = Reporter()
    member = GroupMember(bootstrap, group, [topic], session_timeout_ms=session_ms,
                         rebalance_timeout_ms=session_ms, heartbeat_interval_ms=200, listener=reporter)
    reporter.member = member
    await member.start(wait=False)
    await asyncio.sleep(3600)  # the scenario: stay a member until the test kills this process (bounded: 1 h)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
