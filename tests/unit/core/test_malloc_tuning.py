"""core/malloc_tuning.py: glibc takes the thresholds; an operator's environment variable wins.

Each case runs in a fresh interpreter: the settings are process-wide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
_PROBE = "from core.malloc_tuning import tune_malloc; print(tune_malloc())"


def _tune(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=REPO,
        env={**clean, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_glibc_takes_the_thresholds():
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert _tune() == "True"


def test_an_operators_malloc_variable_is_left_alone():
    assert _tune(MALLOC_TRIM_THRESHOLD_="131072") == "False"
    assert _tune(MALLOC_MMAP_THRESHOLD_="131072") == "False"
