"""Where Cohort's answers to the corpus differ from Kafka's on purpose, each with its reason in
docs/conformance.md. A difference matches an entry when its scenario, step and field path match the
entry's patterns (regular expressions, searched); the suite fails on any difference no entry explains
and on any entry that explains nothing (a fixed difference leaves the list).
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    anchor: str  # the section of docs/conformance.md that gives the reason
    scenario: str
    step: str
    path: str

    def explains(self, difference: dict) -> bool:
        return bool(re.search(self.scenario, difference["scenario"]) and re.search(self.step, difference["step"])
                    and re.search(self.path, difference["path"]))


KNOWN = [
    # Cohort keeps offsets for topics outside its topic registry (they live in the systems its groups read).
    Known("commits-for-topics-cohort-does-not-host", r"^commit-errors$",
          r"commit to an unknown topic|commit to a partition the topic lacks", r"error_code$"),
    Known("commits-for-topics-cohort-does-not-host", r"^commit-errors$",
          r"fetch of known and unknown topics", r"topics\[1\]\.partitions\[0\]\.(committed_offset|metadata)$"),
    Known("commits-for-topics-cohort-does-not-host", r"^commit-errors$", r"fetch all topics", r"(^|\.)topics$"),
    Known("commits-for-topics-cohort-does-not-host", r"^delete-and-offset-delete$",
          r"offset delete of an unknown topic", r"error_code$"),
]


def unexplained(differences: list[dict]) -> list[dict]:
    return [d for d in differences if not any(k.explains(d) for k in KNOWN)]


def unused(differences: list[dict]) -> list[Known]:
    return [k for k in KNOWN if not any(k.explains(d) for d in differences)]
