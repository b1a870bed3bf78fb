"""The objects a request goes through keep the attribute layout CPython specializes.

CPython 3.11 keeps up to 30 attributes of an instance beside its class's shared keys; past that the
instance gets a plain dict, and every `self.x` and `self.method()` on it takes the unspecialized path (a
method call measured ~18 against ~33 ns). The group coordinator had 36 attributes, the offsets log and
the metrics 40: about 2.5 % of a durable commit's CPU. Such classes
declare `__slots__`; this test finds any object of ours with an instance dict past the limit in a server
that is serving a connection.
"""
from __future__ import annotations

import gc

from cohort.protocol import messages as m

INLINE_ATTRIBUTES = 30  # CPython's SHARED_KEYS_MAX_SIZE


def _crowded_objects() -> dict[str, int]:
    found: dict[str, int] = {}
    for obj in gc.get_objects():
        cls = type(obj)
        # (by its type only: `isinstance` would ask a dead weakref proxy that earlier tests left behind for
        # its __class__, and raise ReferenceError)
        if issubclass(cls, type) or not str(getattr(cls, "__module__", "")).startswith("cohort."):
            continue
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict) and len(attributes) > INLINE_ATTRIBUTES:
            found[f"{cls.__module__}.{cls.__qualname__}"] = len(attributes)
    return found


def test_no_object_of_a_serving_server_has_more_attributes_than_cpython_keeps_inline(server, raw_client):
    client = raw_client(server.port)
    T = m.OffsetCommitRequest.OffsetCommitRequestTopic
    committed = client.request(m.OffsetCommitRequest(group_id="layout", generation_id_or_member_epoch=-1, member_id="",
                                                     topics=[T(name="t", partitions=[T.OffsetCommitRequestPartition(
                                                         partition_index=0, committed_offset=1,
                                                         committed_metadata="")])]), 2)
    assert committed.topics[0].partitions[0].error_code == 0

    assert server.run(_crowded_objects) == {}
