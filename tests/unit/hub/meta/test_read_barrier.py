"""A server that is not the meta leader answers lists and infos from its own state only once it
has applied what the leader had applied when asked (``MetaApi._read_barrier``). One that cannot
catch up within FORWARD_WAIT (its apply is stuck behind a slow disk, a long snapshot) answers
"not available" (10008) instead of a list missing changes already acknowledged to clients."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from core.api_errors import ApiError
from hub.meta import api as meta_api
from hub.meta.api import MetaApi
from hub.meta.state import MetaState

pytestmark = pytest.mark.anyio


class Follower:
    """A driver that is not the leader and has applied up to ``applied``, for good."""

    def __init__(self, applied: int) -> None:
        self.applied = applied

    def is_leader(self) -> bool:
        return False

    async def wait_applied(self, index: int) -> int | None:
        if self.applied < index:
            await anyio.sleep_forever()
        return None


def _api(applied: int, leader_applied: int) -> MetaApi:
    group: Any = SimpleNamespace(
        js=None, name="C", me="n1", ready=True, driver=Follower(applied), state=MetaState()
    )
    group.leader_name = lambda: "n2"
    api = MetaApi(group)

    async def ask_leader(body: dict[str, Any]) -> dict[str, Any]:
        assert body == {"kind": "read"}
        return {"index": leader_applied}

    api.ask_leader = ask_leader  # type: ignore[method-assign]
    return api


async def test_a_follower_that_cannot_catch_up_answers_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meta_api, "FORWARD_WAIT", 0.05)
    with pytest.raises(ApiError) as raised:
        await _api(applied=4, leader_applied=9)._read_barrier()
    assert raised.value.err_code == 10008


async def test_a_follower_that_has_caught_up_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meta_api, "FORWARD_WAIT", 0.05)
    await _api(applied=9, leader_applied=9)._read_barrier()
