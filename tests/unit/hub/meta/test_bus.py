"""The meta bus's RPC bound: past MAX_RPCS running, a request is answered busy at once."""

from __future__ import annotations

import json

import anyio
import pytest

from core.server.accounts import Account
from core.server.internal import InternalReceiver
from hub.meta import bus as bus_module
from hub.meta.bus import Bus

pytestmark = pytest.mark.anyio


async def test_requests_past_the_bound_are_answered_busy_and_the_running_ones_complete(monkeypatch):
    monkeypatch.setattr(bus_module, "MAX_RPCS", 3)
    account = Account("$SYS")
    bus = Bus(account, "n1")
    release = anyio.Event()

    async def slow(method, body, msg):
        await release.wait()
        return {"ok": body["i"]}

    bus.on_rpc = slow
    bus.start()
    answers = InternalReceiver("test", account, capacity=64)
    answers.subscribe("answers.*")
    async with anyio.create_task_group() as tg:
        tg.start_soon(bus.serve, tg)
        for i in range(5):
            account.publish(
                f"{bus_module.RPC_PREFIX}n1.ping", f"answers.{i}", None, json.dumps({"i": i}).encode()
            )
        got: dict[str, dict] = {}
        with anyio.fail_after(10):
            async for m in answers.inbox:  # the two past the bound, at once
                got[m.subject] = json.loads(m.payload)
                if len(got) == 2:
                    break
            assert {k: v["error"]["code"] for k, v in got.items()} == {"answers.3": 503, "answers.4": 503}
            assert bus.rpcs == 3
            release.set()
            async for m in answers.inbox:
                got[m.subject] = json.loads(m.payload)
                if len(got) == 5:
                    break
        assert [got[f"answers.{i}"] for i in range(3)] == [{"ok": 0}, {"ok": 1}, {"ok": 2}]
        assert bus.rpcs == 0
        bus.close()
        tg.cancel_scope.cancel()
