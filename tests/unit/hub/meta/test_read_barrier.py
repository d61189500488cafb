"""Lists and infos are answered from a server's own state only once it has applied every change
acknowledged so far (``MetaApi._read_barrier``): a follower catches up with the leader's read
index, and a leader -- a new one too, whose applied state may lag what the former leader
acknowledged -- with its own (``RaftDriver.read_index``). One that cannot within FORWARD_WAIT
(its apply stuck behind a slow disk, a long snapshot) answers "not available" (10008) instead
of a list missing changes already acknowledged to clients."""

from __future__ import annotations

import base64
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


class NewLeader:
    """A leader whose no-op has not committed yet (no read index) until ``commit`` is called."""

    def __init__(self) -> None:
        self.applied = 3
        self._index: int | None = None
        self._changed = anyio.Event()

    def is_leader(self) -> bool:
        return True

    def read_index(self) -> int | None:
        return self._index

    async def changed(self) -> None:
        await self._changed.wait()

    def commit(self, index: int) -> None:
        self._index = self.applied = index
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_applied(self, index: int) -> int | None:
        assert index <= self.applied
        return None


def _leader_api(driver: NewLeader) -> MetaApi:
    group: Any = SimpleNamespace(js=None, name="C", me="n1", ready=True, driver=driver, state=MetaState())
    group.leader_name = lambda: "n1"
    return MetaApi(group)


async def test_a_new_leader_answers_reads_only_once_an_entry_of_its_term_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = NewLeader()
    api = _leader_api(driver)
    done = anyio.Event()

    async def read() -> None:
        await api._read_barrier()
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.sleep(0.05)
        assert not done.is_set()  # its state may miss what the former leader acknowledged
        driver.commit(5)
        with anyio.fail_after(5):
            await done.wait()
    assert (await api.lead({"kind": "read"})) == {"index": 5}


async def test_a_new_leader_that_cannot_commit_answers_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meta_api, "FORWARD_WAIT", 0.05)
    with pytest.raises(ApiError) as raised:
        await _leader_api(NewLeader())._read_barrier()
    assert raised.value.err_code == 10008


async def test_a_new_leader_decides_no_change_before_an_entry_of_its_term_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # its applied state knows no server yet (the former leader registered them): placing now
    # would refuse the create with 10005 "no suitable peers" instead of "try again" (10008)
    monkeypatch.setattr(meta_api, "LEADER_TIMEOUT", 0.05)
    data = base64.b64encode(b'{"name":"S","subjects":["s"]}').decode()
    body = {"kind": "create", "account": "$G", "name": "S", "data": data}
    answer = await _leader_api(NewLeader()).lead(body)
    assert answer["error"]["err_code"] == 10008, answer
