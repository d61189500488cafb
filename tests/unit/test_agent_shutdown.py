"""A stopping hub's hand-over of the meta leadership (agent/app.py) never holds up or breaks the
shutdown: one that fails is logged, one that hangs is cut at its bound. (The meta group is
stood in for: the faults are the point, and a real group's hand-over is tested in
tests/integration/test_meta_group.py.)"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import anyio
import pytest

from agent import app

pytestmark = pytest.mark.anyio


def _meta(leave):  # type: ignore[no-untyped-def]
    return SimpleNamespace(api=SimpleNamespace(leave_leadership=leave))


async def test_a_failing_hand_over_is_logged_and_the_shutdown_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def leave() -> str | None:
        raise RuntimeError("broken")

    with caplog.at_level(logging.ERROR):
        await app._leave_meta_leadership(_meta(leave))  # type: ignore[arg-type]
    assert "handing leadership over before stopping failed" in caplog.text


async def test_a_hand_over_that_hangs_is_cut_at_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "LEAVE_LEADERSHIP_TIMEOUT", 0.05)

    async def leave() -> str | None:
        await anyio.sleep_forever()
        return None

    with anyio.fail_after(5):
        await app._leave_meta_leadership(_meta(leave))  # type: ignore[arg-type]
