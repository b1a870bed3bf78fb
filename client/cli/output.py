"""How the admin commands print: aligned tables for people, JSON for scripts, one-line errors."""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

MISSING = "-"

# What kafka-consumer-groups.sh prints when a change runs without --execute (a dry run).
DRY_RUN_WARNING = (
    "No action will be performed as the --execute option is missing. In version 5.0, this command will require "
    "either --dry-run or --execute to be specified. You should add the --dry-run option explicitly if you are "
    "scripting this command and want to keep the current default behavior without prompting."
)


def cell(value: Any) -> str:
    return MISSING if value is None or value == "" else str(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, two spaces apart, like kafka-consumer-groups.sh."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO | None = None) -> None:
    print(render_table(headers, rows), file=out or sys.stdout)


def print_json(value: Any, out: TextIO | None = None) -> None:
    json.dump(value, out or sys.stdout, indent=2, sort_keys=False, default=str)
    (out or sys.stdout).write("\n")


def warn(message: str) -> None:
    print(f"WARN: {message}", file=sys.stderr)


def error(message: str) -> None:
    """Errors are exactly one line on stderr."""
    print("Error: " + " ".join(str(message).split()), file=sys.stderr)
