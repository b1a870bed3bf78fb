"""A compiled module and its pure-Python twin, loaded beside it in one process, to compare their outputs."""
from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from cohort.protocol.compiled import is_extension, source_twin


def compiled_and_pure(name: str) -> tuple[ModuleType, ModuleType]:
    """`name` as the process runs it and its `.py` run fresh (`compiled.source_twin`).

    Skips where `name` is not compiled in this run: the twin would be the same code, and the explicit
    check of tests/test_compiled_path.py says why.
    """
    module = importlib.import_module(name)
    if not is_extension(module.__file__):
        pytest.skip(f"{name} runs from its .py here (pure path): nothing to compare")
    twin = source_twin(name)
    assert not is_extension(twin.__file__)
    return module, twin
