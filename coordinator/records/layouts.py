"""The key and value layouts of the offsets log's records, each declared once.

They are Kafka's ``__consumer_offsets`` shapes (group-coordinator's
``*Key.json``/``*Value.json`` in ``group-coordinator/src/main/resources/common/message``), written with the protocol
layer's schema machinery, so every version's codec is generated from these
field lists.  A key schema's versions are the record types it is written
under (the key's int16 prefix); a value schema's versions are the value
versions (the value's int16 prefix).  Field names are the typed records'
(`cohort.coordinator.records.types`), which are derived from these lists too.

Adding a record type is one key and one value declaration here and one line
in `cohort.coordinator.records.types.RECORD_TYPES`.
"""
from __future__ import annotations

from cohort.protocol.schema import BYTES, INT8, INT32, INT64, STRING, UUID, Array, F, message
from cohort.protocol.schema import Struct as SchemaStruct

# OffsetCommitKey.json: types 0 and 1 share one layout; Kafka writes 1.
OffsetCommitKey = message("OffsetCommitKey", None, "0-1", "none", [
    F("group", STRING),
    F("topic", STRING),
    F("partition", INT32),
])

# OffsetCommitValue.json.  Kafka declares no default for commitTimestamp: it is on the wire in every
# version, so -1 ("unknown", as for the other timestamps) only matters to records built in memory.
OffsetCommitValue = message("OffsetCommitValue", None, "0-4", "4+", [
    F("offset", INT64),
    F("leader_epoch", INT32, "3+", default=-1),
    F("metadata", STRING),
    F("commit_timestamp", INT64, default=-1),
    F("expire_timestamp", INT64, "1", default=-1),
])

# GroupMetadataKey.json
GroupMetadataKey = message("GroupMetadataKey", None, "2", "none", [
    F("group", STRING),
])

# GroupMetadataValue.json (a 10 000-member record is one of the largest things the coordinator writes).
GroupMetadataValue = message("GroupMetadataValue", None, "0-4", "4+", [
    F("protocol_type", STRING),
    F("generation", INT32),
    F("protocol", STRING, nullable="0+", default=None),
    F("leader", STRING, nullable="0+", default=None),
    F("current_state_timestamp", INT64, "2+", default=-1),
    F("members", Array(SchemaStruct("MemberMetadata", [
        F("member_id", STRING),
        F("group_instance_id", STRING, "3+", nullable="3+", default=None),
        F("client_id", STRING),
        F("client_host", STRING),
        F("rebalance_timeout", INT32, "1+", default=-1),
        F("session_timeout", INT32),
        F("subscription", BYTES),
        F("assignment", BYTES),
    ]))),
])

# Cohort's topic registry (Kafka keeps topics elsewhere): type 100, far from Kafka's own types (0-15).
TopicKey = message("TopicKey", None, "100", "none", [
    F("name", STRING),
])

TopicValue = message("TopicValue", None, "0", "none", [
    F("topic_id", UUID),
    F("partitions", INT32),
])

# How far a topic partition's data goes, as its source reported it (Kafka's log end offset, which a
# coordinator holding no records cannot know): type 105, with the topic registry. Keyed by partition, so
# compaction keeps each partition's latest report; the topic id ties a report to one incarnation of the
# topic (a topic deleted and created again starts with no reported ends).
EndOffsetKey = message("EndOffsetKey", None, "105", "none", [
    F("topic", STRING),
    F("partition", INT32),
])

EndOffsetValue = message("EndOffsetValue", None, "0", "none", [
    F("topic_id", UUID),
    F("end_offset", INT64),
    F("reported_ms", INT64),
])

# A SCRAM credential (Kafka's UserScramCredentialRecord, keyed here by user and mechanism): type 101.
# Never the password: the salt, the iteration count and the two keys RFC 5802 derives from it.
ScramCredentialKey = message("ScramCredentialKey", None, "101", "none", [
    F("user", STRING),
    F("mechanism", INT8),  # Kafka's ScramMechanism code: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512
])

ScramCredentialValue = message("ScramCredentialValue", None, "0", "none", [
    F("salt", BYTES),
    F("stored_key", BYTES),
    F("server_key", BYTES),
    F("iterations", INT32),
])

# An ACL binding: type 102.  The whole binding is the key (a binding exists or not; deleting it is a
# tombstone), in Kafka's wire codes (AclBinding: resource type, pattern type, operation, permission).
AclKey = message("AclKey", None, "102", "none", [
    F("resource_type", INT8),
    F("resource_name", STRING),
    F("pattern_type", INT8),
    F("principal", STRING),
    F("host", STRING),
    F("operation", INT8),
    F("permission", INT8),
])

AclValue = message("AclValue", None, "0", "none", [
    F("created_ms", INT64, default=-1),  # when the binding was added (for operators; -1 = unknown)
])

# KIP-848 consumer groups (group-coordinator's ConsumerGroup*Key/Value.json), key types 3 and 5-8.
# Type 4 (ConsumerGroupPartitionMetadata) is not written: the subscribed topics' metadata is rebuilt from
# the topic registry when a group loads, and a difference from what the group last assigned bumps its epoch.
ConsumerGroupMetadataKey = message("ConsumerGroupMetadataKey", None, "3", "none", [
    F("group", STRING),
])

ConsumerGroupMetadataValue = message("ConsumerGroupMetadataValue", None, "0", "0+", [
    F("epoch", INT32),
    F("metadata_hash", INT64, tag=0, default=0),  # KIP-1101; Cohort writes 0 ("unknown")
])

ConsumerGroupMemberMetadataKey = message("ConsumerGroupMemberMetadataKey", None, "5", "none", [
    F("group", STRING),
    F("member_id", STRING),
])

ConsumerGroupMemberMetadataValue = message("ConsumerGroupMemberMetadataValue", None, "0", "0+", [
    F("instance_id", STRING, nullable="0+", default=None),
    F("rack_id", STRING, nullable="0+", default=None),
    F("client_id", STRING),
    F("client_host", STRING),
    F("subscribed_topic_names", Array(STRING)),
    F("subscribed_topic_regex", STRING, nullable="0+", default=None),
    F("rebalance_timeout_ms", INT32, default=-1),
    F("server_assignor", STRING, nullable="0+", default=None),
    # set for a member speaking the classic protocol inside a consumer group (online migration)
    F("classic_member_metadata", SchemaStruct("ClassicMemberMetadata", [
        F("session_timeout_ms", INT32),
        F("supported_protocols", Array(SchemaStruct("ClassicProtocol", [
            F("name", STRING),
            F("metadata", BYTES),
        ]))),
    ]), nullable="0+", tag=0, default=None),
])

ConsumerGroupTargetAssignmentMetadataKey = message("ConsumerGroupTargetAssignmentMetadataKey", None, "6", "none", [
    F("group", STRING),
])

ConsumerGroupTargetAssignmentMetadataValue = message("ConsumerGroupTargetAssignmentMetadataValue", None, "0", "0+", [
    F("assignment_epoch", INT32),
])

ConsumerGroupTargetAssignmentMemberKey = message("ConsumerGroupTargetAssignmentMemberKey", None, "7", "none", [
    F("group", STRING),
    F("member_id", STRING),
])

ConsumerGroupTargetAssignmentMemberValue = message("ConsumerGroupTargetAssignmentMemberValue", None, "0", "0+", [
    F("topic_partitions", Array(SchemaStruct("TopicPartition", [
        F("topic_id", UUID),
        F("partitions", Array(INT32)),
    ]))),
])

ConsumerGroupCurrentMemberAssignmentKey = message("ConsumerGroupCurrentMemberAssignmentKey", None, "8", "none", [
    F("group", STRING),
    F("member_id", STRING),
])

_TOPIC_PARTITIONS = SchemaStruct("TopicPartitions", [
    F("topic_id", UUID),
    F("partitions", Array(INT32)),
])

ConsumerGroupCurrentMemberAssignmentValue = message("ConsumerGroupCurrentMemberAssignmentValue", None, "0", "0+", [
    F("member_epoch", INT32),
    F("previous_member_epoch", INT32),
    F("state", INT8),  # Kafka's MemberState code: 0 stable, 1 unrevoked, 2 unreleased, 127 unknown
    F("assigned_partitions", Array(_TOPIC_PARTITIONS)),
    F("partitions_pending_revocation", Array(_TOPIC_PARTITIONS)),
])

# One entry of a group's operator journal (a rebalance, or an admin action): type 103.  The key is
# (group, slot) with slot = sequence mod `group.journal.max.entries`, so compaction itself keeps a group's
# last N entries.  Engine-neutral: `epoch_*` is the classic generation or a consumer group's epoch.
GroupJournalKey = message("GroupJournalKey", None, "103", "none", [
    F("group", STRING),
    F("slot", INT32),
])

GroupJournalValue = message("GroupJournalValue", None, "0", "none", [
    F("sequence", INT64),
    F("kind", STRING),             # "rebalance" | "admin"
    F("group_type", STRING),       # "classic" | "consumer"
    F("started_ms", INT64),
    F("ended_ms", INT64),
    F("epoch_before", INT32),
    F("epoch_after", INT32),
    F("trigger", STRING),          # rebalance trigger or admin action (reports.journal.TRIGGERS / ADMIN_ACTIONS)
    F("client_reason", STRING, nullable="0+", default=None),
    F("detail", STRING),
    F("state_after", STRING),
    F("principal", STRING, nullable="0+", default=None),  # admin actions: who
    F("members", Array(SchemaStruct("JournalMember", [
        F("member_id", STRING),
        F("group_instance_id", STRING, nullable="0+", default=None),
        F("client_id", STRING),
        F("client_host", STRING),
        F("role", STRING),         # reports.journal.MEMBER_ROLES
    ]))),
    F("moves", Array(SchemaStruct("PartitionMove", [
        F("topic", STRING),
        F("partition", INT32),
        F("from_member", STRING, nullable="0+", default=None),
        F("to_member", STRING, nullable="0+", default=None),
    ]))),
    F("moves_total", INT32),       # all moves; `moves` holds at most the first 1000
])

# Who made the offset commits that follow it (the offset history's member, client and
# generation): type 104, written with a group's commit when its committer changed, while
# `offsets.history.retention.ms` > 0 (a commit belongs to the last source before it).  Keyed by
# group, so compaction keeps only the latest once it is older than the history window.
OffsetCommitSourceKey = message("OffsetCommitSourceKey", None, "104", "none", [
    F("group", STRING),
])

OffsetCommitSourceValue = message("OffsetCommitSourceValue", None, "0", "none", [
    F("member_id", STRING),
    F("generation", INT32),
    F("client_id", STRING),
    F("client_host", STRING),
    F("commit_timestamp", INT64),
])
