package cohortpeer;

import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/** A Java exception as the tests see it: its class, message and cause chain (futures' wrappers removed). */
final class Errors {
    private Errors() {
    }

    static Throwable unwrap(Throwable e) {
        while ((e instanceof ExecutionException || e instanceof CompletionException) && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    static ObjectNode describe(Throwable e) {
        e = unwrap(e);
        ObjectNode node = Peer.JSON.createObjectNode();
        node.put("class", e.getClass().getName());
        node.put("message", e.getMessage());
        Throwable cause = e.getCause();
        if (cause != null && cause != e) node.set("cause", describe(cause));
        return node;
    }
}
