"""The style rules in pyproject.toml (ruff's lint selection and its formatter, and mypy's type
check), checked on the whole tree so that CI refuses a change that breaks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    # the tool of this environment (installed with the test extra), else one on PATH
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it is part of the test extra (pip install -e '.[test]')")
    return found


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_finds_nothing(args: list[str]) -> None:
    done = subprocess.run([_tool("ruff"), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"ruff {' '.join(args)}:\n{done.stdout}{done.stderr}"


def test_mypy_finds_nothing() -> None:
    # the packages and settings are in pyproject.toml's [tool.mypy]
    done = subprocess.run([_tool("mypy")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mypy:\n{done.stdout}{done.stderr}"
