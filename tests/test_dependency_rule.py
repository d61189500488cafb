"""The package dependency rule from the architecture guide, checked on the source.

core imports no role; hub, federation and bridges import only core (and themselves);
agent composes core and federation; nothing imports agent.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "agent", "hub", "federation", "bridges")
ALLOWED = {
    "core": {"core"},
    "hub": {"core", "hub"},
    "federation": {"core", "federation"},
    "bridges": {"core", "bridges"},
    "agent": {"core", "federation", "agent", "bridges"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
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
