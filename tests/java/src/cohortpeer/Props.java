package cohortpeer;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;

/** Conversions between the requests' JSON and Kafka's types. A partition is "topic:partition". */
final class Props {
    private Props() {
    }

    static Properties of(JsonNode object) {
        Properties props = new Properties();
        Iterator<Map.Entry<String, JsonNode>> fields = object.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> field = fields.next();
            props.put(field.getKey(), field.getValue().asText());
        }
        return props;
    }

    static String[] strings(JsonNode array) {
        List<String> values = new ArrayList<>();
        array.forEach(v -> values.add(v.asText()));
        return values.toArray(new String[0]);
    }

    static List<String> stringList(JsonNode array) {
        List<String> values = new ArrayList<>();
        array.forEach(v -> values.add(v.asText()));
        return values;
    }

    static TopicPartition partition(String text) {
        int colon = text.lastIndexOf(':');
        return new TopicPartition(text.substring(0, colon), Integer.parseInt(text.substring(colon + 1)));
    }

    static String name(TopicPartition tp) {
        return tp.topic() + ":" + tp.partition();
    }

    static Set<TopicPartition> partitions(JsonNode array) {
        Set<TopicPartition> result = new java.util.HashSet<>();
        array.forEach(v -> result.add(partition(v.asText())));
        return result;
    }

    static List<String> names(java.util.Collection<TopicPartition> partitions) {
        Set<String> sorted = new TreeSet<>();
        for (TopicPartition tp : partitions) sorted.add(name(tp));
        return new ArrayList<>(sorted);
    }

    /** {"t:p": 12} or {"t:p": {"offset": 12, "metadata": "m", "leaderEpoch": 3}}. */
    static Map<TopicPartition, OffsetAndMetadata> offsets(JsonNode object) {
        Map<TopicPartition, OffsetAndMetadata> result = new LinkedHashMap<>();
        Iterator<Map.Entry<String, JsonNode>> fields = object.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> field = fields.next();
            JsonNode value = field.getValue();
            OffsetAndMetadata offset;
            if (value.isObject()) {
                Optional<Integer> epoch = value.has("leaderEpoch") ? Optional.of(value.get("leaderEpoch").asInt()) : Optional.empty();
                offset = new OffsetAndMetadata(value.path("offset").asLong(), epoch, value.path("metadata").asText(""));
            } else {
                offset = new OffsetAndMetadata(value.asLong());
            }
            result.put(partition(field.getKey()), offset);
        }
        return result;
    }

    /** {"t:p": {"offset", "metadata", "leaderEpoch"} | null}, sorted by partition name. */
    static Map<String, Object> offsetsJson(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Object> result = new java.util.TreeMap<>();
        offsets.forEach((tp, om) -> {
            if (om == null) {
                result.put(name(tp), null);
            } else {
                Map<String, Object> entry = new LinkedHashMap<>();
                entry.put("offset", om.offset());
                entry.put("metadata", om.metadata());
                entry.put("leaderEpoch", om.leaderEpoch().orElse(null));
                result.put(name(tp), entry);
            }
        });
        return result;
    }
}
