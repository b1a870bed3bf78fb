"""What the Java client tests wait for and check about a group of Java consumers."""
from __future__ import annotations

from bounded_wait import wait_until


def consumer_props(bootstrap: str, group: str, client_id: str, **overrides) -> dict:
    """A classic consumer that commits by hand and notices rebalances quickly (heartbeats every 250 ms);
    `overrides` use underscores for dots (session_timeout_ms=6000)."""
    props = {
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
        "enable.auto.commit": "false", "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000, "heartbeat.interval.ms": 250, "max.poll.interval.ms": 30000,
        "retry.backoff.ms": 50, "reconnect.backoff.ms": 50,
    }
    props.update({key.replace("_", "."): value for key, value in overrides.items()})
    return props


def create_topics(admin, **counts: int) -> None:
    """Create topics through Kafka's Admin (name=partition count)."""
    answer = admin.createTopics(topics=[{"name": t, "partitions": n, "replicationFactor": 1} for t, n in counts.items()])
    assert all("ok" in r for r in answer.values()), answer


def partitions(topic: str, count: int) -> list[str]:
    return [f"{topic}:{p}" for p in range(count)]


def settled(consumers, expected: list[str], timeout: float = 30, what: str = "the group settled") -> dict:
    """Wait until `consumers` own `expected` between them, each partition once, all in one generation;
    return each consumer's state by name."""
    want = sorted(expected)

    def check():
        states = {c.name: c.state() for c in consumers}
        owned = sorted(p for s in states.values() for p in s["assignment"])
        generations = {s["generation"] for s in states.values()}
        if owned == want and len(generations) == 1 and None not in generations:
            return states
        return None

    return wait_until(check, timeout, f"{what}: {[c.name for c in consumers]} own {want}")


def rebalance_events(state: dict, since: int = 0) -> list[tuple[str, list[str]]]:
    """(type, partitions) of the consumer's rebalance callbacks, from the `since`-th on."""
    return [(e["type"], e["partitions"]) for e in state["events"][since:] if e["type"] in ("assigned", "revoked", "lost")]
