"""Admin commands of the `cohort` CLI (`cohort groups …`, `cohort topics …`), built on the client."""
from __future__ import annotations

from cohort.client.cli import groups, topics


def register(subparsers) -> None:
    """Add the `groups` and `topics` commands to the `cohort` parser."""
    groups.register(subparsers)
    topics.register(subparsers)
