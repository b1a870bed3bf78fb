package cohortpeer;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberAssignment;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

/**
 * Kafka's Admin client, call by call. Results are plain JSON; a call whose answer is per item (per group,
 * topic, partition, ACL binding, user) answers {"ok": value} or {"error": {...}} for each item, so a test sees
 * exactly which item Kafka's client reported as failed and with which exception.
 */
final class AdminClients {
    private static final long WAIT_S = 60;

    private AdminClients() {
    }

    static final class Handle {
        final Admin admin;

        Handle(Properties props) {
            this.admin = Admin.create(props);
        }

        void close() {
            admin.close(Duration.ofSeconds(5));
        }
    }

    static Object call(Admin admin, String call, JsonNode args) throws Exception {
        switch (call) {
            case "listGroups": {
                ListGroupsOptions options = args.path("consumer").asBoolean(false) ? ListGroupsOptions.forConsumerGroups() : new ListGroupsOptions();
                if (args.has("types")) options.withTypes(Props.stringList(args.get("types")).stream().map(GroupType::parse).collect(Collectors.toSet()));
                if (args.has("states")) options.inGroupStates(Props.stringList(args.get("states")).stream().map(GroupState::parse).collect(Collectors.toSet()));
                List<Map<String, Object>> result = new ArrayList<>();
                for (GroupListing g : admin.listGroups(options).all().get(WAIT_S, TimeUnit.SECONDS)) {
                    Map<String, Object> row = new LinkedHashMap<>();
                    row.put("groupId", g.groupId());
                    row.put("type", g.type().map(GroupType::toString).orElse(null));
                    row.put("protocol", g.protocol());
                    row.put("state", g.groupState().map(GroupState::toString).orElse(null));
                    row.put("simple", g.isSimpleConsumerGroup());
                    result.add(row);
                }
                result.sort((a, b) -> ((String) a.get("groupId")).compareTo((String) b.get("groupId")));
                return result;
            }
            case "listConsumerGroups": {
                @SuppressWarnings("deprecation")
                java.util.Collection<ConsumerGroupListing> listings = admin.listConsumerGroups().all().get(WAIT_S, TimeUnit.SECONDS);
                List<Map<String, Object>> result = new ArrayList<>();
                for (ConsumerGroupListing g : listings) {
                    Map<String, Object> row = new LinkedHashMap<>();
                    row.put("groupId", g.groupId());
                    row.put("state", g.groupState().map(GroupState::toString).orElse(null));
                    row.put("type", g.type().map(GroupType::toString).orElse(null));
                    row.put("simple", g.isSimpleConsumerGroup());
                    result.add(row);
                }
                result.sort((a, b) -> ((String) a.get("groupId")).compareTo((String) b.get("groupId")));
                return result;
            }
            case "describeConsumerGroups":
                return perItem(admin.describeConsumerGroups(Props.stringList(args.get("groups"))).describedGroups(), AdminClients::group);
            case "listConsumerGroupOffsets": {
                Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(args.path("group").asText()).partitionsToOffsetAndMetadata().get(WAIT_S, TimeUnit.SECONDS);
                return Props.offsetsJson(offsets);
            }
            case "alterConsumerGroupOffsets": {
                var result = admin.alterConsumerGroupOffsets(args.path("group").asText(), Props.offsets(args.get("offsets")));
                Map<String, Object> answer = new TreeMap<>();
                for (TopicPartition tp : Props.offsets(args.get("offsets")).keySet()) answer.put(Props.name(tp), outcome(result.partitionResult(tp), v -> null));
                answer.put("all", outcome(result.all(), v -> null));
                return answer;
            }
            case "deleteConsumerGroupOffsets": {
                Set<TopicPartition> partitions = Props.partitions(args.get("partitions"));
                var result = admin.deleteConsumerGroupOffsets(args.path("group").asText(), partitions);
                Map<String, Object> answer = new TreeMap<>();
                for (TopicPartition tp : partitions) answer.put(Props.name(tp), outcome(result.partitionResult(tp), v -> null));
                answer.put("all", outcome(result.all(), v -> null));
                return answer;
            }
            case "deleteConsumerGroups":
                return perItem(admin.deleteConsumerGroups(Props.stringList(args.get("groups"))).deletedGroups(), v -> null);
            case "createTopics": {
                List<NewTopic> topics = new ArrayList<>();
                for (JsonNode t : args.get("topics")) {
                    NewTopic topic = new NewTopic(t.path("name").asText(), Optional.ofNullable(t.has("partitions") ? t.get("partitions").asInt() : null),
                        Optional.ofNullable(t.has("replicationFactor") ? (short) t.get("replicationFactor").asInt() : null));
                    if (t.has("configs")) {
                        Map<String, String> configs = new HashMap<>();
                        t.get("configs").fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));
                        topic.configs(configs);
                    }
                    topics.add(topic);
                }
                return perItem(admin.createTopics(topics).values(), v -> null);
            }
            case "createPartitions": {
                Map<String, NewPartitions> increases = new HashMap<>();
                args.get("topics").fields().forEachRemaining(e -> increases.put(e.getKey(), NewPartitions.increaseTo(e.getValue().asInt())));
                return perItem(admin.createPartitions(increases).values(), v -> null);
            }
            case "listTopics":
                return new ArrayList<>(new java.util.TreeSet<>(admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS)));
            case "describeTopics":
                return perItem(admin.describeTopics(Props.stringList(args.get("topics"))).topicNameValues(), AdminClients::topic);
            case "listOffsets": {
                Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
                OffsetSpec spec = "earliest".equals(args.path("spec").asText()) ? OffsetSpec.earliest() : OffsetSpec.latest();
                for (TopicPartition tp : Props.partitions(args.get("partitions"))) specs.put(tp, spec);
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> all = admin.listOffsets(specs).all().get(WAIT_S, TimeUnit.SECONDS);
                Map<String, Object> answer = new TreeMap<>();
                all.forEach((tp, info) -> answer.put(Props.name(tp), info.offset()));
                return answer;
            }
            case "createAcls": {
                List<AclBinding> bindings = new ArrayList<>();
                for (JsonNode b : args.get("bindings")) bindings.add(binding(b));
                Map<AclBinding, KafkaFuture<Void>> values = admin.createAcls(bindings).values();
                List<Object> answer = new ArrayList<>();
                for (AclBinding b : bindings) answer.add(outcome(values.get(b), v -> null));
                return answer;
            }
            case "describeAcls": {
                List<Map<String, Object>> result = new ArrayList<>();
                for (AclBinding b : admin.describeAcls(filter(args.path("filter"))).values().get(WAIT_S, TimeUnit.SECONDS)) result.add(bindingJson(b));
                result.sort((a, b) -> a.toString().compareTo(b.toString()));
                return result;
            }
            case "deleteAcls": {
                List<AclBindingFilter> filters = new ArrayList<>();
                for (JsonNode f : args.get("filters")) filters.add(filter(f));
                var values = admin.deleteAcls(filters).values();
                List<Object> answer = new ArrayList<>();
                for (AclBindingFilter f : filters) {
                    answer.add(outcome(values.get(f), r -> r.values().stream().map(m -> m.exception() != null
                        ? Map.of("error", Errors.describe(m.exception()))
                        : bindingJson(m.binding())).collect(Collectors.toList())));
                }
                return answer;
            }
            case "describeUserScramCredentials": {
                var result = args.has("users") ? admin.describeUserScramCredentials(Props.stringList(args.get("users"))) : admin.describeUserScramCredentials();
                Map<String, Object> answer = new TreeMap<>();
                if (args.has("users")) {
                    for (String user : Props.stringList(args.get("users"))) answer.put(user, outcome(result.description(user), AdminClients::credentials));
                } else {
                    for (String user : result.users().get(WAIT_S, TimeUnit.SECONDS)) answer.put(user, outcome(result.description(user), AdminClients::credentials));
                }
                return answer;
            }
            case "alterUserScramCredentials": {
                List<UserScramCredentialAlteration> alterations = new ArrayList<>();
                for (JsonNode u : args.path("upsertions")) {
                    alterations.add(new UserScramCredentialUpsertion(u.path("user").asText(),
                        new ScramCredentialInfo(ScramMechanism.fromMechanismName(u.path("mechanism").asText()), u.path("iterations").asInt(4096)),
                        u.path("password").asText()));
                }
                for (JsonNode d : args.path("deletions")) {
                    alterations.add(new UserScramCredentialDeletion(d.path("user").asText(), ScramMechanism.fromMechanismName(d.path("mechanism").asText())));
                }
                return perItem(admin.alterUserScramCredentials(alterations).values(), v -> null);
            }
            default:
                throw new IllegalArgumentException("unknown admin call " + call);
        }
    }

    private static <V> Map<String, Object> perItem(Map<String, KafkaFuture<V>> futures, java.util.function.Function<V, Object> convert) {
        Map<String, Object> answer = new TreeMap<>();
        futures.forEach((key, future) -> answer.put(key, outcome(future, convert)));
        return answer;
    }

    private static <V> Map<String, Object> outcome(KafkaFuture<V> future, java.util.function.Function<V, Object> convert) {
        Map<String, Object> result = new LinkedHashMap<>();
        try {
            result.put("ok", convert.apply(future.get(WAIT_S, TimeUnit.SECONDS)));
        } catch (Exception e) {
            result.put("error", Errors.describe(e));
        }
        return result;
    }

    private static Object group(ConsumerGroupDescription d) {
        Map<String, Object> g = new LinkedHashMap<>();
        g.put("groupId", d.groupId());
        g.put("simple", d.isSimpleConsumerGroup());
        g.put("state", d.groupState() == null ? null : d.groupState().toString());
        g.put("type", d.type() == null ? null : d.type().toString());
        g.put("partitionAssignor", d.partitionAssignor());
        g.put("coordinator", node(d.coordinator()));
        g.put("groupEpoch", d.groupEpoch().orElse(null));
        g.put("targetAssignmentEpoch", d.targetAssignmentEpoch().orElse(null));
        List<Map<String, Object>> members = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            Map<String, Object> member = new LinkedHashMap<>();
            member.put("consumerId", m.consumerId());
            member.put("groupInstanceId", m.groupInstanceId().orElse(null));
            member.put("clientId", m.clientId());
            member.put("host", m.host());
            member.put("assignment", assignment(m.assignment()));
            member.put("targetAssignment", m.targetAssignment().map(AdminClients::assignment).orElse(null));
            member.put("memberEpoch", m.memberEpoch().orElse(null));
            member.put("upgraded", m.upgraded().orElse(null));
            members.add(member);
        }
        members.sort((a, b) -> String.valueOf(a.get("clientId")).compareTo(String.valueOf(b.get("clientId"))));
        g.put("members", members);
        return g;
    }

    private static List<String> assignment(MemberAssignment assignment) {
        return Props.names(assignment.topicPartitions());
    }

    private static Object node(Node node) {
        if (node == null) return null;
        Map<String, Object> n = new LinkedHashMap<>();
        n.put("id", node.id());
        n.put("host", node.host());
        n.put("port", node.port());
        return n;
    }

    private static Object topic(TopicDescription t) {
        Map<String, Object> topic = new LinkedHashMap<>();
        topic.put("name", t.name());
        topic.put("partitions", t.partitions().size());
        topic.put("internal", t.isInternal());
        return topic;
    }

    private static Object credentials(UserScramCredentialsDescription d) {
        List<Map<String, Object>> infos = new ArrayList<>();
        for (ScramCredentialInfo info : d.credentialInfos()) infos.add(Map.of("mechanism", info.mechanism().mechanismName(), "iterations", info.iterations()));
        infos.sort((a, b) -> a.get("mechanism").toString().compareTo(b.get("mechanism").toString()));
        return infos;
    }

    /** {"resourceType": "TOPIC", "name": "t", "patternType": "LITERAL", "principal": "User:a", "host": "*", "operation": "READ", "permission": "ALLOW"} */
    private static AclBinding binding(JsonNode b) {
        return new AclBinding(
            new ResourcePattern(ResourceType.fromString(b.path("resourceType").asText()), b.path("name").asText(), PatternType.fromString(b.path("patternType").asText("LITERAL"))),
            new AccessControlEntry(b.path("principal").asText(), b.path("host").asText("*"),
                AclOperation.fromString(b.path("operation").asText()), AclPermissionType.fromString(b.path("permission").asText("ALLOW"))));
    }

    /** The same fields as a binding, each optional (ANY when left out). */
    private static AclBindingFilter filter(JsonNode f) {
        return new AclBindingFilter(
            new ResourcePatternFilter(ResourceType.fromString(f.path("resourceType").asText("ANY")), f.has("name") ? f.get("name").asText() : null,
                PatternType.fromString(f.path("patternType").asText("ANY"))),
            new AccessControlEntryFilter(f.has("principal") ? f.get("principal").asText() : null, f.has("host") ? f.get("host").asText() : null,
                AclOperation.fromString(f.path("operation").asText("ANY")), AclPermissionType.fromString(f.path("permission").asText("ANY"))));
    }

    private static Map<String, Object> bindingJson(AclBinding b) {
        Map<String, Object> json = new LinkedHashMap<>();
        json.put("resourceType", b.pattern().resourceType().toString());
        json.put("name", b.pattern().name());
        json.put("patternType", b.pattern().patternType().toString());
        json.put("principal", b.entry().principal());
        json.put("host", b.entry().host());
        json.put("operation", b.entry().operation().toString());
        json.put("permission", b.entry().permissionType().toString());
        return json;
    }
}
