"""The README, docs/ and the benchmark reports stay true to the tree they describe.

A link to a file or heading that moved, a module named in a docstring that no longer exists, a
one-off script left among the reports, or a diary of how the work went are caught here, not by a
reader.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
REPORTS = REPO / "bench" / "reports"
SOURCE_DIRS = ("protocol", "coordinator", "client", "bench")


def _heading_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors, in_code = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            anchors.add(_heading_anchor(line.lstrip("#")))
    return anchors


def _markdown_files() -> list[Path]:
    return DOCS + sorted(REPORTS.glob("*.md")) + sorted(REPORTS.glob("*/report.md"))


def _local_links(path: Path) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", path.read_text()) if not t.startswith(("http:", "https:"))]


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_local_link_reaches_a_file_and_heading_that_exist(page: Path):
    broken = []
    for link in _local_links(page):
        target, _, anchor = link.partition("#")
        file = (page.parent / target).resolve() if target else page
        if not file.exists():
            broken.append(link)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(link)
    assert broken == []


def test_the_readme_is_for_users_and_short():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 700
    for heading in ("## Web console", "## Security: TLS, SASL, ACLs", "## Cluster mode: several nodes on etcd",
                    "## Admin CLI", "## Performance", "## Quick start"):
        assert re.search(rf"^{re.escape(heading)}", readme, re.M), heading
    assert "./scripts/serve" in readme and "CI=true ./scripts/test" in readme


# Numbered rounds of work, "the old core", and headings dated like a lab notebook's entries (a date in an
# example command is fine).
DIARY = re.compile(r"\b(first|second|third|fourth|fifth|sixth|this|last|previous|next) session\b|\bold core\b"
                   r"|^#.*\b20\d\d-\d\d-\d\d\b", re.I | re.M)


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_docs_describe_the_product_not_how_the_work_went(page: Path):
    assert [m.group(0) for m in DIARY.finditer(page.read_text())] == []


def test_the_reports_keep_results_and_reports_only():
    files = [p for p in REPORTS.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert len(files) <= 150
    assert [p for p in files if p.suffix not in (".md", ".json", ".png", ".txt")] == []
    families = [p for p in REPORTS.iterdir() if p.is_dir()]
    assert [p.name for p in families if not (p / "report.md").exists()] == []
    assert [p.name for p in families if re.search(r"\d{4}-\d\d-\d\d|session", p.name)] == []


def _module_references() -> dict[str, set[str]]:
    """Every dotted ``cohort.…`` name cited in the docs, the reports' index and module docstrings/comments."""
    files = list(DOCS)
    for folder in SOURCE_DIRS:
        files += sorted((REPO / folder).rglob("*.py"))
    found: dict[str, set[str]] = {}
    for path in files:
        for name in re.findall(r"\bcohort\.(?:coordinator|client|protocol)(?:\.[A-Za-z_][A-Za-z0-9_]*)+", path.read_text()):
            found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


LOGGER_NAMES = {"cohort.coordinator.group"}  # logger names, not modules


def test_every_cited_module_and_name_exists():
    missing = {name: sorted(where) for name, where in _module_references().items()
               if name not in LOGGER_NAMES and not _resolves(name)}
    assert missing == {}
