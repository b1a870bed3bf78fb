"""Record Apache Kafka's answers to the conformance corpus as the fixture CI checks Cohort against.

    .venv/bin/python tests/conformance/record_kafka_answers.py          # writes tests/conformance/fixtures/kafka-<version>.json
    .venv/bin/python tests/conformance/record_kafka_answers.py --cohort # Cohort's answers and their differences, printed

Starts a fresh Kafka broker (bench/kafka_broker.py, Maven Central's jars) with the corpus's server
settings, runs every scenario of conformance_corpus.py against it with raw frames, and writes the normalised
exchanges. Re-record after changing the corpus or moving to another Kafka version.
"""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (HERE.parents[1], HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench.kafka_broker import KAFKA_VERSION, KafkaBroker  # noqa: E402
from conformance_corpus import SCENARIOS, SERVER_SETTINGS  # noqa: E402
from conformance_wire import differences, exchange_count, run_corpus  # noqa: E402

FIXTURE = HERE / "fixtures" / f"kafka-{KAFKA_VERSION}.json"


def record_kafka() -> list[dict]:
    """The corpus against a fresh Kafka broker."""
    with KafkaBroker(settings=SERVER_SETTINGS, topics={}) as kafka:
        return asyncio.run(run_corpus(kafka.host, kafka.port, SCENARIOS))


def record_cohort() -> list[dict]:
    """The corpus against a fresh Cohort (node id 1, as the Kafka broker's)."""
    from bench.targets import CohortServer
    with CohortServer(settings={**SERVER_SETTINGS, "node.id": 1}) as cohort:
        return asyncio.run(run_corpus(cohort.host, cohort.port, SCENARIOS))


def load_fixture() -> list[dict]:
    return json.loads(FIXTURE.read_text())["scenarios"]


def main(argv: list[str]) -> int:
    if argv == ["--cohort"]:
        for d in differences(load_fixture(), record_cohort()):
            print(json.dumps(d))
        return 0
    recordings = record_kafka()
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps({"kafka": KAFKA_VERSION, "server_settings": SERVER_SETTINGS,
                                   "exchanges": exchange_count(recordings), "scenarios": recordings},
                                  indent=1) + "\n")
    print(f"{exchange_count(recordings)} exchanges in {len(recordings)} scenarios → {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
