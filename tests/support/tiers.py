"""The long test tiers (``chaos``, ``soak``) run when asked for by marker, not in a plain
``pytest`` of their file (the default command already deselects them with ``-m``)."""

from __future__ import annotations

import pytest


def only_when_selected(request: pytest.FixtureRequest, marker: str) -> None:
    if marker not in (request.config.option.markexpr or ""):
        pytest.skip(f"{marker} tier: select it with -m {marker}")
