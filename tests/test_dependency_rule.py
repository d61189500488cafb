"""The package dependency rule from the architecture guide, checked on the source.

core imports no role; hub, federation and bridges import only core (and themselves);
agent composes core, federation and hub (the `leafjet hub` role); nothing imports agent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "agent", "hub", "federation", "bridges")
ALLOWED = {
    "core": {"core"},
    "hub": {"core", "hub"},
    "federation": {"core", "federation"},
    "bridges": {"core", "bridges"},
    "agent": {"core", "federation", "hub", "agent", "bridges"},
}


_FROM = re.compile(r"^\s*from\s+([A-Za-z_][\w.]*)\s+import\b", re.MULTILINE)
_IMPORT = re.compile(r"^\s*import\s+([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)", re.MULTILINE)


def imported_packages(path: Path) -> set[str]:
    # A line scan rather than ast.parse: CPython 3.11.7's AST constructor can fail spuriously
    # ("recursion depth mismatch") late in a long test session, and import lines are regular.
    text = path.read_text()
    found = {m.group(1).split(".")[0] for m in _FROM.finditer(text)}
    for m in _IMPORT.finditer(text):
        found.update(name.strip().split(".")[0] for name in m.group(1).split(","))
    return found & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_follow_the_dependency_rule(package):
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        for imported in imported_packages(path) - ALLOWED[package]:
            bad.append(f"{path.relative_to(REPO)} imports {imported}")
    assert bad == []


def test_the_rule_checker_sees_imports(tmp_path):
    probe = tmp_path / "m.py"
    probe.write_text("import agent.cli\nfrom hub.raft import node\nfrom . import sibling\n")
    assert imported_packages(probe) == {"agent", "hub"}
