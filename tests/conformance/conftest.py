"""The conformance suite runs from the repository root's view: `bench/` (the Kafka broker launcher, the
wire session) and this folder's modules are importable."""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (HERE.parents[1], HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
