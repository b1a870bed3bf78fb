"""Shared by every test folder: `cohort_process`, the one launcher of `cohort serve` processes, is
importable from each of them."""
from __future__ import annotations

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
