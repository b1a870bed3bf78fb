"""Offset commit values as etcd keeps them: packed into fewer bytes, read back byte for byte."""
from __future__ import annotations

import random
import uuid

from cohort.coordinator.cluster import keys, values
from cohort.coordinator.records.types import (
    GroupMetadataRecord,
    OffsetCommitRecord,
    TopicRecord,
    encode_record,
)


def stored(record) -> tuple[bytes, bytes, bytes]:
    record_key, value = encode_record(record)
    key = keys.etcd_key(7, record_key)
    return key, value, values.for_etcd(key, value)


def test_an_ordinary_commit_takes_under_half_the_bytes_and_reads_back_exactly():
    key, value, packed = stored(OffsetCommitRecord("g", "t", 0, 123_456, commit_timestamp=1_764_000_000_000))
    assert len(value) == 24 and len(packed) == 10  # header 2, offset 3, timestamp 5 (since 2020)
    assert values.from_etcd(packed) == value


def test_every_commit_shape_reads_back_byte_for_byte():
    rng = random.Random(34)
    for _ in range(3000):
        expire = rng.choice([-1, -1, rng.randrange(0, 1 << 62)])
        record = OffsetCommitRecord(
            "group/€", "topic", rng.randrange(0, 1000),
            rng.choice([-1, 0, 1, rng.randrange(0, 1 << 63)]),
            leader_epoch=-1 if expire != -1 else rng.choice([-1, 0, rng.randrange(0, 1 << 31)]),
            metadata=rng.choice(["", "m", "ünïcode metadata " * rng.randrange(0, 40)]),
            commit_timestamp=rng.choice([-1, 0, values.MS_2020 - 1, values.MS_2020, rng.randrange(0, 1 << 63),
                                         1_764_000_000_000 + rng.randrange(0, 1 << 32), (1 << 63) - 1]),
            expire_timestamp=expire)
        key, value, packed = stored(record)
        assert packed[0] >= 0x80 and len(packed) <= len(value)
        assert values.from_etcd(packed) == value, record


def test_values_it_cannot_pack_and_other_records_are_stored_as_they_are():
    key, value, packed = stored(OffsetCommitRecord("g", "t", 0, -5))  # below -1: kept as it is
    assert packed == value and values.from_etcd(packed) == value
    for record in (GroupMetadataRecord("g", "consumer", 1, "range", None), TopicRecord("t", uuid.uuid4(), 3)):
        key, value, packed = stored(record)
        assert packed == value and values.from_etcd(packed) == value


async def test_the_store_writes_commits_packed_and_loads_the_logs_bytes_back(etcd):
    from cohort.coordinator.cluster.etcd import EtcdClient
    from cohort.coordinator.cluster.store import EtcdStore

    from test_store import claim, load_all

    client = EtcdClient(etcd.endpoints, timeout_s=3.0)
    await client.connect()
    try:
        store = EtcdStore(client)
        epoch, _ = await claim(client, 3, 1)
        assert await load_all(store, 3, epoch) == {}
        written = dict(encode_record(OffsetCommitRecord("packed", "events", i, 1000 + i, metadata="m" * i,
                                                        commit_timestamp=1_764_000_000_000)) for i in range(4))
        await store.append(3, list(written.items()))
        kvs, _, _ = await client.range(b"o/3/", b"o/30")
        assert len(kvs) == 4 and all(len(kv.value) == 9 + i for i, kv in enumerate(kvs))
        await store.release(3)
        assert await load_all(EtcdStore(client), 3, epoch) == written
    finally:
        await client.close()


def test_values_in_the_earlier_packed_layout_still_read_back_exactly():
    # stored by the earlier layout (a byte of version, two of lengths, timestamps plus one from 1970)
    earlier = {
        "83306001e241019ab697e801": "0003000000000001e240ffffffff00000000019ab697e800",
        "830100086d657461": "0003ffffffffffffffff0000000700046d657461ffffffffffffffff",
        "81106606019ab697e87c019abbbe447c78":
            "000100000000000000050001780000019ab697e87b0000019abbbe447b",
        "831410018000000001": "000300000000000000007fffffff00000000000000000000",
    }
    for stored, value in earlier.items():
        assert values.from_etcd(bytes.fromhex(stored)) == bytes.fromhex(value)
