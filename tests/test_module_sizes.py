"""Every product module stays small enough to read: no module over 1 000 lines, no class over 70 methods.
Past that a module stops having one job: the group coordinator is split as Kafka's (runtime, group
manager, offsets manager, reports), the engines by concern (ClassicGroup / ClassicGroupMember,
ConsumerGroup / ConsumerGroupMember / CurrentAssignmentBuilder). The generated codecs are a build
artifact, not source, and are left out."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "coordinator"
MODULES = sorted(path for folder in ("coordinator", "protocol", "client") for path in (REPO / folder).rglob("*.py")
                 if path.name != "_generated_codecs.py")
MAX_LINES = 1000
MAX_METHODS = 70


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_past_a_thousand_lines_and_no_class_past_seventy_methods(path: Path):
    source = path.read_text()
    assert len(source.splitlines()) <= MAX_LINES
    crowded = {node.name: methods for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)
               for methods in [sum(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for f in node.body)]
               if methods > MAX_METHODS}
    assert crowded == {}


@pytest.mark.parametrize("module, engine", [("classic/engine.py", "ClassicGroup"), ("consumer/engine.py", "ConsumerGroup")])
def test_each_engine_module_opens_with_its_theory_of_operation_and_transition_table(module, engine):
    """The state machine stays readable where it lives (h11's `_state.py`): the story, then the table."""
    tree = ast.parse((ROOT / "groups" / module).read_text())
    assert "Theory of operation" in (ast.get_docstring(tree) or "")
    lines = {ast.unparse(node.target): node.lineno for node in tree.body if isinstance(node, ast.AnnAssign)}
    lines |= {node.name: node.lineno for node in tree.body if isinstance(node, ast.ClassDef)}
    assert lines["TRANSITIONS"] < lines[engine]
