"""Imports run downward: no module of the product imports (even lazily, even for type checking) a module
that imports it back, and the console reaches the coordinator only as a Kafka client."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOPS = ("coordinator", "protocol", "client")


def _modules() -> dict[str, Path]:
    found = {}
    for top in TOPS:
        for path in (REPO / top).rglob("*.py"):
            parts = ["cohort", *path.relative_to(REPO).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            if not parts[-1].startswith("_generated"):
                found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Every project module `module` imports anywhere in its file (inside functions and TYPE_CHECKING too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module and not target.startswith(module + "."):
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, set(modules)) for m, p in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_one_that_imports_it_back():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_sees_a_lazy_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_console_reaches_the_coordinator_only_as_a_client():
    """No import of the `cohort` command (cli/), the process (process/), the server or the group engines."""
    graph = _graph()
    console = [m for m in graph if m.startswith("cohort.coordinator.console")]
    assert console
    forbidden = ("cohort.coordinator.cli", "cohort.coordinator.process", "cohort.coordinator.server.node",
                 "cohort.coordinator.server.handlers", "cohort.coordinator.groups.coordinator")
    reached = {(m, t) for m in console for t in graph[m] if t.startswith(forbidden)}
    assert reached == set()
