"""Our codec against kafka-python 3.0.12's own schema-driven codec.

For every API, every version we support, requests and responses: hypothesis
draws valid messages from our declarations; our bytes must equal kafka-python's
bytes for the same values, and each side must decode the other's bytes back to
the same values. A second test compares the declarations themselves (field
names, version ranges, nullability, tags, defaults, struct names) with
kafka-python's copy of Kafka's message JSON.

Documented differences (not exclusions of bytes, only of comparisons):
* kafka-python patches its JSON in three places (see declared_messages):
  authorized-operations int32 fields are sets of bits there (and Metadata's
  two are renamed `authorized_operations`), CreatePartitions assignments
  default to null and ListOffsets replica_id to -1. We declare Kafka's JSON;
  the bridge translates names and values, and the declaration test skips
  those defaults.
* kafka-python reads the zero UUID as None and an absent tagged struct as None;
  Kafka's generated code (and ours) use the zero UUID and the default struct.
  The bridge maps between the two (see declared_messages).
* kafka-python writes a tagged struct whenever it is not None; Kafka writes it
  only when it differs from the default struct. The bridge hands kafka-python
  None for a default tagged struct, matching Kafka's rule.
* kafka-python's JSON is Kafka 4.3's. Fields that exist only in versions above
  our ranges (OffsetCommit/OffsetFetch TopicId v10, Metadata ErrorCode v13,
  DescribeGroups ErrorMessage v6, ListOffsets TimeoutMs v10, Fetch
  ReplicaDirectoryId v17 / HighWatermark v18) are not declared by us; the
  declaration test checks every other field. Versions that 4.x removed
  (JoinGroup v0-1, OffsetCommit v0-1, OffsetFetch v0, CreateTopics v0-1,
  DeleteTopics v0, ListOffsets v0, Fetch v0-3) are still encodable with
  kafka-python (it ignores the JSON's minimum version) and their fields are
  still in its JSON (e.g. OffsetCommit CommitTimestamp v1, ListOffsets
  MaxNumOffsets / OldStyleOffsets v0), matching Kafka 3.9's definitions.
"""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from declared_messages import (
    KP_BITFIELDS, KP_PATCHED_DEFAULTS, KP_RENAMES, all_versions, codec_settings, from_kafka_python,
    kafka_python_classes, message_strategy, to_kafka_python,
)
from cohort.protocol.consumer_protocol import (
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, decode_assignment, decode_subscription,
    encode_assignment, encode_subscription,
)
from cohort.protocol.messages import API_SCHEMAS
from cohort.protocol.schema import Array, Struct, UUID, ZERO_UUID

KP = kafka_python_classes()

CASES = [pytest.param(cls, KP[key][i], id=cls.__name__)
         for key, api in sorted(API_SCHEMAS.items()) if key in KP
         for i, cls in enumerate((api.request, api.response))]

# Fields kafka-python's 4.3 JSON has, in versions we do not support.
ABOVE_OUR_RANGES = {
    ("OffsetCommitRequestTopic", "topic_id"), ("OffsetCommitResponseTopic", "topic_id"),
    ("OffsetFetchRequestTopics", "topic_id"), ("OffsetFetchResponseTopics", "topic_id"),
    ("MetadataResponse", "error_code"), ("DescribedGroup", "error_message"),
    ("ListOffsetsRequest", "timeout_ms"), ("FetchPartition", "replica_directory_id"),
    ("FetchPartition", "high_watermark"),
}


def _check_round_trip(cls, kp_cls, version, msg):
    schema = cls.SCHEMA
    flexible = version in schema.flexible
    ours = msg.encode(version)

    kp_msg = to_kafka_python(msg, schema.struct, kp_cls, version, flexible)
    theirs = kp_msg.encode(version=version)
    assert ours == theirs, f"{cls.__name__} v{version}: bytes differ"

    # each side reads the other's bytes back to the same values
    assert cls.decode(theirs, version) == msg
    if cls.__name__ == "ApiVersionsResponse" and msg.error_code != 0:
        # kafka-python reads every ApiVersions response carrying an error as v0;
        # Kafka (and framing.decode_response) do that only for UNSUPPORTED_VERSION.
        return
    kp_decoded = kp_cls.decode(ours, version=version)
    assert from_kafka_python(kp_decoded, schema.struct, version, flexible) == msg
    kp_decoded._header = None
    assert kp_decoded.encode(version=version) == ours


@pytest.mark.parametrize("cls, kp_cls", CASES)
@codec_settings(30)
@given(data=st.data())
def test_every_version_is_byte_identical_to_kafka_python(cls, kp_cls, data):
    # One example draws a message for every version, so each version gets every example.
    for version in all_versions(cls):
        msg = data.draw(message_strategy(cls, version), label=f"v{version}")
        _check_round_trip(cls, kp_cls, version, msg)


@pytest.mark.parametrize("cls, kp_cls", CASES)
def test_default_message_is_byte_identical_to_kafka_python(cls, kp_cls):
    for version in all_versions(cls):
        _check_round_trip(cls, kp_cls, version, cls())


def _kp_default(kp_field):
    value = kp_field.default
    return None if value == [] and kp_field._json.get("default") == "null" else value


def _compare_struct(ours: Struct, kp_struct, low: int, high: int, flexible_low: int, problems: list[str]):
    kp_fields = kp_struct.fields
    versions = range(low, high + 1)
    ours_by_name = {KP_RENAMES.get((ours.name, f.name), f.name): f for f in ours.fields}
    for name, kf in kp_fields.items():
        if name not in ours_by_name:
            if any(kf.for_version_q(v) for v in versions) and (ours.name, name) not in ABOVE_OUR_RANGES:
                problems.append(f"{ours.name}.{name}: in kafka-python, not declared")
            continue
    for f in ours.fields:
        where = f"{ours.name}.{f.name}"
        kf = kp_fields.get(KP_RENAMES.get((ours.name, f.name), f.name))
        if kf is None:
            problems.append(f"{where}: not a kafka-python field name")
            continue
        ours_present = [v for v in versions if v in f.versions]
        kp_present = [v for v in versions if kf.for_version_q(v)]
        if ours_present != kp_present:
            problems.append(f"{where}: versions {ours_present} vs kafka-python {kp_present}")
        if [v for v in ours_present if v in f.nullable] != [v for v in kp_present if kf.nullable_for_version_q(v)]:
            problems.append(f"{where}: nullable versions differ")
        if f.tag != kf.tag:
            problems.append(f"{where}: tag {f.tag} vs {kf.tag}")
        t = f.type.element if isinstance(f.type, Array) else f.type
        if isinstance(t, Struct):
            kp_type = kf.type_str[2:] if kf.type_str.startswith("[]") else kf.type_str
            if t.name != kp_type:
                problems.append(f"{where}: struct {t.name} vs kafka-python {kp_type}")
            nested = kf.array_of if isinstance(f.type, Array) else kf
            _compare_struct(t, nested, low, high, flexible_low, problems)
            continue
        if (ours.name, f.name) in KP_PATCHED_DEFAULTS | KP_BITFIELDS:
            continue
        ours_default = f.default
        if t is UUID and ours_default == ZERO_UUID:
            ours_default = None
        if ours_default != _kp_default(kf):
            problems.append(f"{where}: default {f.default!r} vs kafka-python {kf.default!r}")


@pytest.mark.parametrize("cls, kp_cls", CASES)
def test_declaration_matches_kafka_json(cls, kp_cls):
    """Field names, version ranges, nullability, tags, defaults and struct names."""
    schema = cls.SCHEMA
    problems: list[str] = []
    _compare_struct(schema.struct, kp_cls._struct, schema.valid.low, schema.valid.high, schema.flexible.low,
                    problems)
    kp_flex = kp_cls._flexible_versions
    ours_flex = [v for v in all_versions(cls) if v in schema.flexible]
    theirs_flex = [v for v in all_versions(cls) if kp_flex and kp_flex[0] <= v <= kp_flex[1]]
    if ours_flex != theirs_flex:
        problems.append(f"flexible versions {ours_flex} vs {theirs_flex}")
    assert kp_cls.API_KEY == cls.API_KEY
    assert not problems, "\n".join(problems)


def test_every_declared_class_is_exported():
    import cohort.protocol.messages as messages
    for api in API_SCHEMAS.values():
        assert getattr(messages, api.request.__name__) is api.request
        assert getattr(messages, api.response.__name__) is api.response
        assert api.request.__name__ == api.name + "Request"
        assert api.response.API_KEY == api.key


# ---------------------------------------------------------------- consumer protocol


@pytest.mark.parametrize("cls, encode, decode", [
    (ConsumerProtocolSubscription, encode_subscription, decode_subscription),
    (ConsumerProtocolAssignment, encode_assignment, decode_assignment),
])
@codec_settings(40)
@given(data=st.data())
def test_consumer_protocol_is_byte_identical_to_kafka_python(cls, encode, decode, data):
    from kafka.protocol.consumer import metadata as kp_metadata
    kp_cls = getattr(kp_metadata, cls.__name__)
    for version in range(4):
        msg = data.draw(message_strategy(cls, version), label=f"v{version}")
        ours = encode(msg, version)
        kp_msg = to_kafka_python(msg, cls.SCHEMA.struct, kp_cls, version, False)
        theirs = kp_msg.encode(version=version)  # with kafka-python's int16 version header
        assert ours == theirs
        assert decode(theirs) == msg
        assert from_kafka_python(kp_cls.decode(ours), cls.SCHEMA.struct, version, False) == msg
