"""The meta leader's side of a change (``MetaApi.lead``) takes requests forwarded by other
servers: a field missing or of the wrong type is a 400 bad request with one log line, not an
internal error with a traceback, and nothing is proposed."""

from __future__ import annotations

import base64
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from hub.meta.api import MetaApi
from hub.meta.state import MetaState

pytestmark = pytest.mark.anyio


class NoProposals:
    applied = 0

    def is_leader(self) -> bool:
        return True

    def read_index(self) -> int:
        return 0  # everything committed is applied

    async def wait_applied(self, index: int) -> int | None:
        return None

    async def propose(self, data: list[bytes]) -> tuple[int, int]:
        raise AssertionError("a malformed request was proposed")


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "forget_tombstone", "account": "$G", "name": "S", "created": "yesterday"},
        {"kind": "forget_tombstone", "account": "$G"},
        {"kind": "register", "server": "n9"},
        {"kind": "register", "server": {"op": "remove_server", "name": "n1"}},
        {"kind": "create", "account": "$G", "name": "S", "data": "not base64!"},
        {"kind": "create", "account": "$G", "name": "S"},
    ],
    ids=["created-not-int", "no-name", "server-not-object", "server-with-op", "bad-base64", "no-data"],
)
async def test_a_malformed_change_request_is_a_bad_request(
    body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    group: Any = SimpleNamespace(js=None, name="C", driver=NoProposals(), state=MetaState())
    api = MetaApi(group)
    with caplog.at_level(logging.WARNING, logger="leafjet.meta"):
        answer = await api.lead(body)
    assert answer["error"]["err_code"] == 10003, answer
    assert "refusing a malformed" in caplog.text and "Traceback" not in caplog.text


async def test_a_well_formed_request_still_reaches_its_decision() -> None:
    group: Any = SimpleNamespace(js=None, name="C", driver=NoProposals(), state=MetaState())
    data = base64.b64encode(b'{"name":"S","subjects":["s"]}').decode()
    answer = await MetaApi(group).lead({"kind": "update", "account": "$G", "name": "S", "data": data})
    assert answer["error"]["err_code"] == 10059, answer  # stream not found: decided, not malformed
