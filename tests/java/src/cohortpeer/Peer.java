package cohortpeer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * Apache Kafka's Java consumer, Admin and command-line tools, driven by the test suite (tests/java_peer.py).
 *
 * One JVM runs many consumers (each on its own poll-loop thread, as applications run them), admin clients
 * and in-process runs of Kafka's tools. Requests are JSON lines on stdin, {"id": n, "op": "...", ...};
 * each is handled on a thread of its own so a slow one (a commitSync during a failover) never holds up the
 * others, and its answer is one JSON line on stdout, {"id": n, "ok": true, "result": ...} or
 * {"id": n, "ok": false, "error": {"class": ..., "message": ..., "cause": ...}}. End of stdin closes
 * everything and exits.
 */
public final class Peer {
    static final ObjectMapper JSON = new ObjectMapper();
    private static final PrintStream ANSWERS = System.out;  // kept: the tools' runs replace System.out
    static final long STARTED = System.nanoTime();

    private final Map<String, Member> members = new ConcurrentHashMap<>();
    private final Map<String, AdminClients.Handle> admins = new ConcurrentHashMap<>();
    private final ExecutorService workers = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "peer-request");
        t.setDaemon(true);
        return t;
    });

    public static void main(String[] args) throws Exception {
        new Peer().serve();
    }

    static long elapsedMs() {
        return (System.nanoTime() - STARTED) / 1_000_000;
    }

    private void serve() throws Exception {
        answer(JSON.createObjectNode().put("id", 0).put("ok", true).put("result", "ready"));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            JsonNode request = JSON.readTree(line);
            workers.submit(() -> handle(request));
        }
        for (Member member : members.values()) member.closeQuietly();
        for (AdminClients.Handle admin : admins.values()) admin.close();
        System.exit(0);
    }

    private void handle(JsonNode request) {
        ObjectNode reply = JSON.createObjectNode();
        reply.put("id", request.path("id").asLong());
        try {
            Object result = dispatch(request.path("op").asText(), request);
            reply.put("ok", true);
            reply.set("result", JSON.valueToTree(result));
        } catch (Throwable e) {
            reply.put("ok", false);
            reply.set("error", Errors.describe(e));
        }
        answer(reply);
    }

    private Object dispatch(String op, JsonNode request) throws Exception {
        switch (op) {
            case "ping":
                return "pong";
            case "consumer.start": {
                String name = request.path("name").asText();
                Member member = new Member(name, request);
                if (members.putIfAbsent(name, member) != null) throw new IllegalArgumentException("consumer " + name + " exists");
                member.start();
                return member.awaitCreated();
            }
            case "consumer.state":
                return member(request).state();
            case "consumer.call":
                return member(request).call(request.path("call").asText(), request.path("args"));
            case "consumer.close": {
                Member member = member(request);
                Object result = member.close(request.path("args"));
                members.remove(member.name);
                return result;
            }
            case "admin.create": {
                String name = request.path("name").asText();
                admins.put(name, new AdminClients.Handle(Props.of(request.path("props"))));
                return name;
            }
            case "admin.call": {
                AdminClients.Handle admin = admins.get(request.path("name").asText());
                if (admin == null) throw new IllegalArgumentException("no admin " + request.path("name").asText());
                return AdminClients.call(admin.admin, request.path("call").asText(), request.path("args"));
            }
            case "admin.close": {
                AdminClients.Handle admin = admins.remove(request.path("name").asText());
                if (admin != null) admin.close();
                return null;
            }
            case "tool":
                return Tools.run(request.path("tool").asText(), Props.strings(request.path("args")));
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private Member member(JsonNode request) {
        Member member = members.get(request.path("name").asText());
        if (member == null) throw new IllegalArgumentException("no consumer " + request.path("name").asText());
        return member;
    }

    private static void answer(JsonNode reply) {
        String text;
        try {
            text = JSON.writeValueAsString(reply);
        } catch (Exception e) {
            text = "{\"id\":" + reply.path("id").asLong() + ",\"ok\":false,\"error\":{\"class\":\"JsonError\",\"message\":\"" + e + "\"}}";
        }
        synchronized (ANSWERS) {
            ANSWERS.println(text);
            ANSWERS.flush();
        }
    }
}
