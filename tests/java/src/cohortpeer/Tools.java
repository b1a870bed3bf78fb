package cohortpeer;

import org.apache.kafka.common.utils.internals.Exit;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Kafka's command-line tools (what kafka-consumer-groups.sh, kafka-acls.sh and kafka-topics.sh run), called
 * in this JVM instead of one JVM per command: the tool's main() with stdout and stderr captured, stdin
 * empty, and Kafka's Exit hook turned into an exception carrying the exit code, as Kafka's own tool tests
 * do. One run at a time (System.out is the process's).
 */
final class Tools {
    private static final Map<String, String> MAIN_CLASSES = Map.of(
        "kafka-consumer-groups", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "kafka-acls", "org.apache.kafka.tools.AclCommand",
        "kafka-topics", "org.apache.kafka.tools.TopicCommand");

    private Tools() {
    }

    private static final class Exited extends RuntimeException {
        final int code;

        Exited(int code) {
            super("exit " + code, null, false, false);
            this.code = code;
        }
    }

    static synchronized Map<String, Object> run(String tool, String[] args) throws Exception {
        String mainClass = MAIN_CLASSES.get(tool);
        if (mainClass == null) throw new IllegalArgumentException("unknown tool " + tool);
        Method main = Class.forName(mainClass).getMethod("main", String[].class);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        PrintStream savedOut = System.out;
        PrintStream savedErr = System.err;
        InputStream savedIn = System.in;
        int exit = 0;
        Exit.setExitProcedure((code, message) -> {
            throw new Exited(code);
        });
        try (PrintStream toOut = new PrintStream(out, true, StandardCharsets.UTF_8);
             PrintStream toErr = new PrintStream(err, true, StandardCharsets.UTF_8)) {
            System.setOut(toOut);
            System.setErr(toErr);
            System.setIn(new ByteArrayInputStream(new byte[0]));
            try {
                main.invoke(null, (Object) args);
            } catch (InvocationTargetException e) {
                if (e.getCause() instanceof Exited) exit = ((Exited) e.getCause()).code;
                else throw e;
            }
        } finally {
            System.setOut(savedOut);
            System.setErr(savedErr);
            System.setIn(savedIn);
            Exit.resetExitProcedure();
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("exit", exit);
        result.put("out", out.toString(StandardCharsets.UTF_8));
        result.put("err", err.toString(StandardCharsets.UTF_8));
        return result;
    }
}
