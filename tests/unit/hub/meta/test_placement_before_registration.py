"""The meta leader places a stream among the servers registered in its state. Each member
registers (its name, peer id, tags) once it knows a leader, so just after the cluster forms, or
a leader is elected, a member may not be known yet: a create that no registered server fits
then answers 10008 "try again", not 10005 "no suitable peers" -- the member it needs may be
the one not heard of yet. Once every member is registered, 10005 stands."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import pytest

from hub.meta.api import MetaApi
from hub.meta.peers import node_id, peer_hex
from hub.meta.state import MetaState

pytestmark = pytest.mark.anyio

NAMES = ["n1", "n2", "n3"]


class Leader:
    applied = 5

    def __init__(self) -> None:
        self.voters = frozenset(node_id(n) for n in NAMES)

    def is_leader(self) -> bool:
        return True

    def read_index(self) -> int:
        return self.applied

    async def wait_applied(self, index: int) -> int | None:
        return None

    async def propose(self, data: list[bytes]) -> tuple[int, int]:
        raise AssertionError("nothing fits: nothing is proposed")


def _leader_with(registered: dict[str, list[str]]) -> MetaApi:
    state = MetaState()
    for name, tags in registered.items():
        state.apply(
            {"op": "server", "name": name, "peer": peer_hex(node_id(name)), "tags": tags, "cluster": "C"}
        )
    group: Any = SimpleNamespace(js=None, name="C", me="n1", ready=True, driver=Leader(), state=state)
    group.online = lambda: set(NAMES)
    return MetaApi(group)


async def _create_on(api: MetaApi, tag: str) -> dict[str, Any]:
    cfg = b'{"name":"S","subjects":["s"],"placement":{"tags":["%s"]}}' % tag.encode()
    body = {"kind": "create", "account": "$G", "name": "S", "data": base64.b64encode(cfg).decode()}
    return await api.lead(body)


async def test_a_create_no_registered_server_fits_waits_for_the_members_not_heard_of() -> None:
    answer = await _create_on(_leader_with({"n1": ["az:1"], "n2": ["az:2"]}), "az:3")
    assert answer["error"]["err_code"] == 10008, answer


async def test_with_every_member_registered_no_fit_is_no_suitable_peers() -> None:
    answer = await _create_on(_leader_with({"n1": ["az:1"], "n2": ["az:2"], "n3": ["az:3"]}), "az:4")
    assert answer["error"]["err_code"] == 10005, answer
    assert "tags not matched ['az:4']" in answer["error"]["description"]
