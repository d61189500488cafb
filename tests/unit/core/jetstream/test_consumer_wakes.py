"""A commit wakes only the consumers it can give something to deliver (stream.wake_consumers):
a stream with a thousand filtered consumers made every publish wake each of them (24 ms a
publish against the reference's 0.2). Here, without a server: which consumers ``wants`` what a
commit stored, and the subjects a commit stores (``stored_subjects``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from core.config import JetStreamConfig, ServerConfig
from core.jetstream.consumer import Consumer, PullWaiter
from core.jetstream.consumer_models import ConsumerConfig
from core.jetstream.engine import JetStream
from core.jetstream.models import StreamConfig
from core.jetstream.stream import WAKE_SUBJECTS_MAX, stored_subjects
from core.server.accounts import Account
from core.server.internal import InternalReceiver
from core.server.server import Server
from core.store.api import Append, AppendBatch, DeleteOp, Op, PurgeOp

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def consumer(**cfg: Any) -> Consumer:
    stream = SimpleNamespace(
        name="S",
        domain=None,
        account=Account("A"),
        receiver=SimpleNamespace(backlog=None),
        config=SimpleNamespace(retention="limits"),
    )
    return Consumer(stream, "C", ConsumerConfig(durable_name="C", **cfg), 0)  # type: ignore[arg-type]


def test_a_pull_consumer_nobody_pulls_from_is_not_woken_by_new_messages() -> None:
    c = consumer(ack_policy="explicit")
    assert not c.wants({"orders.1"})
    c.add_waiter(PullWaiter("_INBOX.r", 1, 0, 0, False, 0))
    assert c.wants({"orders.1"})


@pytest.mark.parametrize(
    ("cfg", "wanted", "not_wanted"),
    [
        ({}, {"orders.1"}, set()),
        ({"filter_subject": "orders.*"}, {"orders.1"}, {"orders.1.x", "other"}),
        ({"filter_subjects": ["a.>", "b"]}, {"a.x.y"}, {"c", "bb"}),
    ],
)
def test_a_push_consumer_is_woken_by_what_its_filters_take(
    cfg: dict[str, Any], wanted: set[str], not_wanted: set[str]
) -> None:
    c = consumer(deliver_subject="deliver.here", **cfg)
    assert c.wants(wanted)
    assert c.wants(wanted | not_wanted)
    if not_wanted:
        assert not c.wants(not_wanted)


def test_the_subjects_a_commit_stores() -> None:
    ops: list[Op] = [
        Append("a", None, b"", 1),
        DeleteOp(3),
        AppendBatch(["b", "c", "b"], [None] * 3, [b""] * 3, 1),
        PurgeOp(),
    ]
    assert stored_subjects(ops) == {"a", "b", "c"}
    assert stored_subjects([DeleteOp(1)]) == set()
    many = [Append(f"s.{i}", None, b"", 1) for i in range(WAKE_SUBJECTS_MAX + 1)]
    assert stored_subjects(many) is None  # every consumer is woken rather than each matched
    big = AppendBatch(
        ["s"] * (WAKE_SUBJECTS_MAX + 1), [None] * (WAKE_SUBJECTS_MAX + 1), [b""] * (WAKE_SUBJECTS_MAX + 1), 1
    )
    assert stored_subjects([big]) is None


async def test_a_publish_wakes_only_the_consumers_it_gives_something_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a running engine: a publish to ``s.1`` on a stream with forty pull consumers nobody
    pulls from, one with a request waiting, and push consumers filtered on ``s.1`` and ``s.2``,
    wakes the waiting pull consumer and the push consumer on ``s.1`` (and nothing else)."""
    woken: list[str] = []
    real_wake = Consumer.wake

    def counting_wake(self: Consumer) -> None:
        woken.append(self.name)
        real_wake(self)

    server = Server(ServerConfig(port=0, http_port=0))
    js = JetStream(server, JetStreamConfig(store_dir=str(tmp_path)), tmp_path)
    async with anyio.create_task_group() as tg:
        await tg.start(js.run)
        try:
            ajs = js.accounts["$G"]
            stream = await js.create_stream(ajs, StreamConfig.from_json({"name": "S", "subjects": ["s.>"]}))
            configs = {
                f"P{k}": ConsumerConfig(durable_name=f"P{k}", ack_policy="explicit") for k in range(40)
            }
            configs["WAITING"] = ConsumerConfig(durable_name="WAITING", ack_policy="explicit")
            for name, subject in (("PUSH1", "s.1"), ("PUSH2", "s.2")):
                configs[name] = ConsumerConfig(
                    durable_name=name, deliver_subject=f"d.{name}", filter_subject=subject, ack_policy="none"
                )
            for name, cfg in configs.items():
                await js.start_consumer(stream, await js.create_consumer(stream, name, cfg))
            requester = InternalReceiver("requester", ajs.account)  # a request nobody waits for ends
            requester.subscribe("_INBOX.w")
            stream.consumers["WAITING"].add_waiter(PullWaiter("_INBOX.w", 1, 0, 0, False, 0))
            monkeypatch.setattr(Consumer, "wake", counting_wake)
            ajs.account.publish("s.1", None, None, b"x")
            with anyio.fail_after(10):
                while (await stream.state()).msgs < 1 or not woken:
                    await anyio.sleep(0.01)
            # (one call wakes them all: Stream.wake_consumers, once the commit is settled)
            assert sorted(woken) == ["PUSH1", "WAITING"]
        finally:
            tg.cancel_scope.cancel()
