"""Founding asks each peer whether it already runs the meta group (``LOG``); a peer's answer is
its bytes, checked before use: voters that are not peer ids make this server wait (and say so),
never end the meta group's task."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from hub.meta.group import MetaGroup
from hub.meta.peers import node_id, peer_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class FakeBus:
    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.asked = 0

    async def request(self, peer: str, method: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert method == "LOG"
        self.asked += 1
        return self.answer


def _founding_group(tmp_path: Path, bus: FakeBus) -> Any:
    """What ``MetaGroup._founders_if_new`` reads of its group: a server n1 whose mesh to n2 is up."""
    group: Any = SimpleNamespace(me="n1", peer=peer_of("n1"), dir=tmp_path / "meta", bus=bus, _unanswered=0)
    group._mesh_members = lambda: {"n1", "n2"}
    group._peer_logs = functools.partial(MetaGroup._peer_logs, group)
    return group


@pytest.mark.parametrize(
    "voters",
    [[{"peer": 1}], "0123456789abcdef", [12], ["not-a-peer-id"], [["0123456789abcdef"]]],
    ids=["objects", "a-string", "numbers", "not-hex", "nested"],
)
async def test_a_peer_answering_malformed_voters_makes_founding_wait_not_fail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, voters: Any
) -> None:
    bus = FakeBus({"has_log": True, "voters": voters})
    group = _founding_group(tmp_path, bus)
    with caplog.at_level(logging.WARNING, logger="leafjet.meta"):
        with anyio.move_on_after(0.5):
            await MetaGroup._founders_if_new(group)
            pytest.fail("founded (or joined) on a malformed answer")
    assert bus.asked >= 2, "asked again"
    assert "n2 answered whether it runs the group with" in caplog.text
    # once the peer answers properly, the server joins the group it runs
    bus.answer = {"has_log": True, "voters": [peer_of("n1"), peer_of("n2")]}
    with anyio.fail_after(10):
        founders, recovering = await MetaGroup._founders_if_new(group)
    assert founders == sorted([node_id("n1"), node_id("n2")]) and recovering
