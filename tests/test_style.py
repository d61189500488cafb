"""The style rules in pyproject.toml (ruff's lint selection and its formatter), checked on the
whole tree so that CI refuses a change that breaks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    # the ruff of this environment (installed with the test extra), else one on PATH
    here = Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: it is part of the test extra (pip install -e '.[test]')")
    return found


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_finds_nothing(args: list[str]) -> None:
    done = subprocess.run([_ruff(), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"ruff {' '.join(args)}:\n{done.stdout}{done.stderr}"
