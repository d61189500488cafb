"""Soak variants (``@pytest.mark.soak``) of the RAFT simulation run only when selected
(``-m soak``) or with ``LEAFJET_SOAK=1``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    soak = "soak" in (config.option.markexpr or "") or os.environ.get("LEAFJET_SOAK") == "1"
    skip = pytest.mark.skip(reason="soak variant: select with -m soak or LEAFJET_SOAK=1")
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents and item.get_closest_marker("soak") and not soak:
            item.add_marker(skip)
