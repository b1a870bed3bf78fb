"""Work too long for one loop turn, done a slice at a time so other connections are served in between.

One place for the sizes (what counts as large, what one slice holds) and for how a slice ends
(`next_turn`). Nearly every request is far below these sizes and never takes a sliced path.
"""
from __future__ import annotations

import asyncio

# A request (or a group's offsets) over this many partitions is handled in slices (one OffsetFetch of a
# 1 M-partition group held the loop for 5 s) and its answer is encoded off the loop.
LARGE_REQUEST_PARTITIONS = 20_000
# What one slice covers: a request's partitions, records to encode, the groups an expiry pass checks.
PARTITIONS_PER_SLICE = 5_000
# A GroupMetadata record of more members is encoded this many members per slice (the group's later
# writes wait for it); a JoinGroup answer listing more is encoded on a worker thread.
MEMBERS_ENCODED_ON_LOOP = 1_000
# A rebalance journal entry naming this many members (or assignments) is built on a worker thread.
JOURNAL_BUILD_OFF_LOOP = 1_000
# A background walk over every committed offset (the lag history's sampling) yields after this much of a turn.
BACKGROUND_SLICE_S = 0.002


async def next_turn() -> None:
    """End this slice: every other ready callback (other connections' requests) runs before the next one."""
    await asyncio.sleep(0)
