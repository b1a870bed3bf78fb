package cohortpeer;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;

/**
 * One KafkaConsumer on a poll loop of its own, as an application runs it: poll, and between polls do what
 * the test asks (commit, seek, hold off polling as slow processing would, close). A KafkaConsumer may only
 * be touched from the thread that polls it, so every call is queued to that thread; what the tests read
 * (assignment, generation, member id, rebalance callbacks) is a snapshot taken after each poll. Nothing
 * calls wakeup(): it would break a commitSync already running on the loop; a queued call waits for the
 * current poll (100 ms by default) instead.
 */
final class Member implements Runnable {
    final String name;
    private final Properties props;
    private final JsonNode subscription;
    private final long pollMs;
    private final BlockingQueue<Runnable> tasks = new LinkedBlockingQueue<>();
    private final CompletableFuture<Object> created = new CompletableFuture<>();
    private final List<Map<String, Object>> events = new ArrayList<>();
    private final Thread thread;
    private volatile boolean stopping;
    private volatile long holdUntilNanos;
    private volatile Map<String, Object> snapshot = Map.of();
    private KafkaConsumer<byte[], byte[]> consumer;
    private long polls;
    private long records;
    private Throwable lastPollError;

    Member(String name, JsonNode request) {
        this.name = name;
        this.props = Props.of(request.path("props"));
        this.subscription = request.path("subscribe");
        this.pollMs = request.path("poll_ms").asLong(100);
        this.thread = new Thread(this, "consumer-" + name);
        this.thread.setDaemon(true);
    }

    void start() {
        thread.start();
    }

    Object awaitCreated() throws Exception {
        return created.get(60, TimeUnit.SECONDS);
    }

    @Override
    public void run() {
        try {
            consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            subscribe(subscription);
            takeSnapshot();
            created.complete(name);
        } catch (Throwable e) {
            created.completeExceptionally(e);
            return;
        }
        while (!stopping) {
            Runnable task;
            while ((task = tasks.poll()) != null) task.run();
            if (stopping) break;
            if (System.nanoTime() < holdUntilNanos) {
                sleepQuietly(10);
                continue;
            }
            try {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(pollMs));
                records += batch.count();
                lastPollError = null;
            } catch (Throwable e) {
                lastPollError = e;
                event("poll-error", Map.of("error", Errors.describe(e)));
                sleepQuietly(100);
            }
            polls++;
            takeSnapshot();
        }
    }

    private void subscribe(JsonNode spec) {
        Listener listener = new Listener();
        if (spec.has("topics")) {
            consumer.subscribe(Props.stringList(spec.get("topics")), listener);
        } else if (spec.has("pattern")) {
            consumer.subscribe(java.util.regex.Pattern.compile(spec.get("pattern").asText()), listener);
        } else if (spec.has("subscription_pattern")) {
            consumer.subscribe(new SubscriptionPattern(spec.get("subscription_pattern").asText()), listener);
        } else if (spec.has("assign")) {
            consumer.assign(Props.partitions(spec.get("assign")));
        } else {
            throw new IllegalArgumentException("subscribe needs topics, pattern, subscription_pattern or assign");
        }
    }

    private void takeSnapshot() {
        Map<String, Object> state = new LinkedHashMap<>();
        state.put("assignment", Props.names(consumer.assignment()));
        putGroupMetadata(state);
        state.put("polls", polls);
        state.put("records", records);
        state.put("poll_error", lastPollError == null ? null : Errors.describe(lastPollError));
        snapshot = state;
    }

    private void putGroupMetadata(Map<String, Object> state) {
        try {
            ConsumerGroupMetadata meta = consumer.groupMetadata();
            state.put("generation", meta.generationId());
            state.put("member_id", meta.memberId());
            state.put("group_instance_id", meta.groupInstanceId().orElse(null));
        } catch (RuntimeException e) {  // no group (assign()) or a consumer already closed
            state.put("generation", null);
            state.put("member_id", null);
        }
    }

    Map<String, Object> state() {
        Map<String, Object> state = new LinkedHashMap<>(snapshot);
        synchronized (events) {
            state.put("events", new ArrayList<>(events));
        }
        state.put("alive", thread.isAlive() && !stopping);
        return state;
    }

    private void event(String type, Map<String, Object> detail) {
        Map<String, Object> event = new LinkedHashMap<>();
        event.put("type", type);
        event.put("t_ms", Peer.elapsedMs());
        Map<String, Object> meta = new LinkedHashMap<>();
        putGroupMetadata(meta);
        event.put("generation", meta.get("generation"));
        event.putAll(detail);
        synchronized (events) {
            events.add(event);
        }
    }

    private final class Listener implements ConsumerRebalanceListener {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            event("revoked", Map.of("partitions", Props.names(partitions)));
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            event("assigned", Map.of("partitions", Props.names(partitions)));
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            event("lost", Map.of("partitions", Props.names(partitions)));
        }
    }

    /** Run `call` on the poll-loop thread and wait for its result (bounded by args.timeout_ms). */
    Object call(String call, JsonNode args) throws Exception {
        long timeoutMs = args.path("timeout_ms").asLong(60_000);
        Function<KafkaConsumer<byte[], byte[]>, CompletableFuture<Object>> action = action(call, args, timeoutMs);
        CompletableFuture<Object> result = new CompletableFuture<>();
        tasks.add(() -> {
            try {
                action.apply(consumer).whenComplete((value, error) -> {
                    if (error != null) result.completeExceptionally(error);
                    else result.complete(value);
                });
            } catch (Throwable e) {
                result.completeExceptionally(e);
            }
        });
        try {
            return result.get(timeoutMs + 5_000, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            throw new TimeoutException("consumer " + name + ": " + call + " did not finish in " + timeoutMs + " ms");
        }
    }

    private Function<KafkaConsumer<byte[], byte[]>, CompletableFuture<Object>> action(String call, JsonNode args, long timeoutMs) {
        Duration timeout = Duration.ofMillis(timeoutMs);
        switch (call) {
            case "commitSync":
                return c -> {
                    if (args.has("offsets")) c.commitSync(Props.offsets(args.get("offsets")), timeout);
                    else c.commitSync(timeout);
                    return CompletableFuture.completedFuture(null);
                };
            case "commitAsync":
                // The callback runs inside a later poll() of this loop: the answer waits for it.
                return c -> {
                    CompletableFuture<Object> done = new CompletableFuture<>();
                    if (args.has("offsets")) {
                        c.commitAsync(Props.offsets(args.get("offsets")), (offsets, error) -> complete(done, offsets, error));
                    } else {
                        c.commitAsync((offsets, error) -> complete(done, offsets, error));
                    }
                    return done;
                };
            case "committed":
                return c -> CompletableFuture.completedFuture(Props.offsetsJson(c.committed(Props.partitions(args.get("partitions")), timeout)));
            case "seek":
                return c -> {
                    c.seek(Props.partition(args.path("partition").asText()), args.path("offset").asLong());
                    return CompletableFuture.completedFuture(null);
                };
            case "position":
                return c -> CompletableFuture.completedFuture(c.position(Props.partition(args.path("partition").asText()), timeout));
            case "assignment":
                return c -> CompletableFuture.completedFuture(Props.names(c.assignment()));
            case "offsetsForTimes":
                // {"topic:p": timestamp ms} -> {"topic:p": {"offset", "timestamp"} or null (none at or after it)}
                return c -> {
                    Map<TopicPartition, Long> times = new LinkedHashMap<>();
                    args.get("times").fields().forEachRemaining(e -> times.put(Props.partition(e.getKey()), e.getValue().asLong()));
                    Map<String, Object> answer = new TreeMap<>();
                    c.offsetsForTimes(times, timeout).forEach((tp, found) -> answer.put(Props.name(tp), found == null ? null
                        : Map.of("offset", found.offset(), "timestamp", found.timestamp())));
                    return CompletableFuture.completedFuture(answer);
                };
            case "hold":
                // Slow processing: no poll() for this long (the heartbeat thread carries on).
                return c -> {
                    holdUntilNanos = System.nanoTime() + args.path("ms").asLong() * 1_000_000;
                    return CompletableFuture.completedFuture(null);
                };
            case "enforceRebalance":
                return c -> {
                    c.enforceRebalance(args.path("reason").asText("test"));
                    return CompletableFuture.completedFuture(null);
                };
            case "subscribe":
                return c -> {
                    subscribe(args);
                    return CompletableFuture.completedFuture(null);
                };
            case "unsubscribe":
                return c -> {
                    c.unsubscribe();
                    return CompletableFuture.completedFuture(null);
                };
            default:
                throw new IllegalArgumentException("unknown consumer call " + call);
        }
    }

    private static void complete(CompletableFuture<Object> done, Map<TopicPartition, OffsetAndMetadata> offsets, Exception error) {
        if (error != null) done.completeExceptionally(error);
        else done.complete(Props.offsetsJson(offsets));
    }

    /** close(): the consumer's own close (LeaveGroup unless static, or as args.operation says). */
    Object close(JsonNode args) throws Exception {
        CompletableFuture<Object> closed = new CompletableFuture<>();
        tasks.add(() -> {
            try {
                CloseOptions options = CloseOptions.timeout(Duration.ofMillis(args.path("timeout_ms").asLong(30_000)));
                if (args.has("operation")) {
                    options.withGroupMembershipOperation(CloseOptions.GroupMembershipOperation.valueOf(args.get("operation").asText()));
                }
                consumer.close(options);
                closed.complete(null);
            } catch (Throwable e) {
                closed.completeExceptionally(e);
            } finally {
                stopping = true;
            }
        });
        Object result = closed.get(args.path("timeout_ms").asLong(30_000) + 10_000, TimeUnit.MILLISECONDS);
        thread.join(10_000);
        return result;
    }

    void closeQuietly() {
        try {
            close(Peer.JSON.createObjectNode().put("timeout_ms", 5_000));
        } catch (Exception ignored) {
            // the JVM is exiting
        }
    }

    private static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
