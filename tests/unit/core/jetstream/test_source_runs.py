"""A leaf link's run of deliveries reaches a source whole (``Account.publish_ack_run``) and the
worker takes it in one pass (``SourceWorker._take_run``): what it stores, the state it leaves
and what it raises must be exactly what the same deliveries give one message at a time."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from core.jetstream.sourcing import (
    Delivery,
    InboundRun,
    SourceWorker,
    _fill_source_batch,
    _Receiver,
    _Recreate,
)
from core.server.accounts import Account, Subscription
from core.server.internal import InboundMsg, InternalReceiver
from core.server.mailbox import Mailbox

from .test_source_pipeline import FakeStream

pytestmark = pytest.mark.anyio

SUB: Any = SimpleNamespace(subject="$JS.S.abcdefgh")
V1 = "$JS.ACK.ORDERS.C.{dc}.{s}.{d}.{ts}.{p}"
V2 = "$JS.ACK.EDGE.HASH8888.ORDERS.C.{dc}.{s}.{d}.{ts}.{p}.tok"


class Capturing(FakeStream):
    def __init__(self) -> None:
        super().__init__(failing=set())
        self.account = SimpleNamespace(name="APP", publish=lambda *a: True)
        self.seen: list[tuple[Any, ...]] = []

    async def submit_sourced(
        self, key: str, msgs: list[Delivery], before: Any, after: int | None = None
    ) -> tuple[int, None, Any]:
        self.seen.extend((d.sseq, d.subject, d.headers, d.payload, d.ts) for d in msgs)
        return await super().submit_sourced(key, msgs, before, after)


def worker(transforms: bool = False) -> tuple[SourceWorker, Capturing, list[tuple[int, int]]]:
    stream = Capturing()
    spec: dict[str, Any] = {"name": "ORDERS"}
    if transforms:
        spec["subject_transforms"] = [{"src": "orders.*", "dest": "agg.{{wildcard(1)}}"}]
    w = SourceWorker(stream, spec, "ORDERS > >", 0)  # type: ignore[arg-type]
    w.cname, w.ident = "C", "ID9"
    gaps: list[tuple[int, int]] = []
    w._gap = lambda after, next_seq, reason: gaps.append((after, next_seq))  # type: ignore[method-assign]
    return w, stream, gaps


def reply(form: str, s: int, d: int, *, dc: int = 1, consumer: str = "C", subject: str | None = None) -> str:
    r = form.format(dc=dc, s=s, d=d, ts=1000 + s, p=100 - d).replace(".C.", f".{consumer}.")
    return f"{r}@{subject if subject is not None else f'orders.{s % 3}'}"


async def outcome(w: SourceWorker, stream: Capturing, gaps: list[Any], items: list[Any]) -> tuple[Any, ...]:
    try:
        await w._handle(items)
        raised = ""
    except _Recreate as e:
        raised = str(e)
    await w._settle()
    return stream.seen, (w.sseq, w.dseq, w.lag), gaps, raised


TAKEN: list[bool] = []  # each _take_run of the last both_ways: whether it took the run whole


async def both_ways(replies: list[str], transforms: bool = False) -> tuple[Any, Any]:
    """The same deliveries as one run and one message at a time, after a first delivery that
    teaches both workers the consumer's ack prefix (the short path needs it)."""
    payloads = [b"p%d" % i for i in range(len(replies))]
    results = []
    TAKEN.clear()
    for whole in (True, False):
        w, stream, gaps = worker(transforms)
        take = w._take_run

        def spy(*args: Any, take: Any = take) -> Any:
            out = take(*args)
            TAKEN.append(out is not None)
            return out

        w._take_run = spy  # type: ignore[method-assign,assignment]
        first = InboundRun(
            "$JS.S.abcdefgh", [reply(V1 if "EDGE" not in replies[0] else V2, 1, 1)], [b"p"], SUB
        )
        await w._handle(first.split())
        assert w._fast_prefix
        run = InboundRun("$JS.S.abcdefgh", replies, payloads, SUB)
        results.append(await outcome(w, stream, gaps, [run] if whole else run.split()))
    return results[0], results[1]


@pytest.mark.parametrize("form", [V1, V2])
async def test_a_run_of_common_deliveries_is_stored_as_one_at_a_time(form: str) -> None:
    run, single = await both_ways([reply(form, s, s) for s in range(2, 40)])
    assert run == single and TAKEN == [True]  # in one pass
    assert len(run[0]) == 39 and run[1] == (39, 39, 100 - 39 - 1)


async def test_a_run_that_starts_past_the_last_taken_reports_one_gap() -> None:
    run, single = await both_ways([reply(V1, s, d) for d, s in enumerate(range(5, 20), start=2)])
    assert run == single and run[2] == [(1, 5)] and TAKEN == [True]


async def test_the_transforms_rewrite_a_runs_subjects_as_one_at_a_time() -> None:
    run, single = await both_ways([reply(V1, s, s) for s in range(2, 10)], transforms=True)
    assert run == single and TAKEN == [True] and {x[1] for x in run[0]} <= {"agg.0", "agg.1", "agg.2"}


@pytest.mark.parametrize(
    "odd",
    [
        lambda s, d: reply(V1, s, d, dc=2),  # redelivered
        lambda s, d: reply(V1, s, d, consumer="OLD"),  # another consumer's
        lambda s, d: reply(V1, s - 1, d),  # not past the last taken
        lambda s, d: reply(V1, s + 3, d),  # a jump inside the run
        lambda s, d: reply(V1, s, d + 2),  # a consumer sequence gap: recreate
        lambda s, d: reply(V1, s, d, subject=""),  # nothing after "@"
        lambda s, d: reply(V1, s, d).split("@")[0],  # no stored subject: the deliver subject
        lambda s, d: f"$JS.ACK.ORDERS.C.1.{s}.{d}..9@orders.1",  # an empty number
        lambda s, d: f"$JS.ACK.ORDERS.C.1.{'9' * 5000}.{d}.1000.9@orders.1",  # past int()'s limit
        lambda s, d: "not.an.ack",
    ],
)
async def test_a_run_with_any_other_delivery_is_taken_as_one_at_a_time(odd: Any) -> None:
    replies = [reply(V1, s, s) for s in range(2, 12)]
    replies[5] = odd(7, 7)
    run, single = await both_ways(replies)
    assert run == single and TAKEN == [False]  # one at a time


async def test_an_at_sign_in_a_stored_subject_is_kept() -> None:
    """Only the first "@" after the ack reply's numbers ends them (``split_ack_subject``)."""
    replies = [reply(V1, s, s, subject="a@b.c" if s == 5 else None) for s in range(2, 9)]
    run, single = await both_ways(replies)
    assert run == single and TAKEN == [True] and dict((x[0], x[1]) for x in run[0])[5] == "a@b.c"


async def test_random_runs_are_stored_as_one_at_a_time() -> None:
    rnd = random.Random(20)
    for _ in range(40):
        replies, s, d = [], 1, 1
        for _ in range(rnd.randint(1, 30)):
            kind = rnd.random()
            s += 1 if kind < 0.8 else rnd.randint(0, 3)
            d += 1 if kind < 0.95 else rnd.randint(0, 2)
            replies.append(reply(V1, s, d, dc=1 if rnd.random() < 0.97 else 2))
        run, single = await both_ways(replies)
        assert run == single


# ------------------------------------------------------------------ routing a run whole


class Plain(InternalReceiver):
    """A receiver without ``deliver_ack_run``: it gets the run message by message."""


def account_with(*receivers: Any, queue: str | None = None) -> Account:
    account = Account("APP")
    for rx in receivers:
        account.subscribe(Subscription(rx, "$JS.S.abcdefgh", queue, "1"))
    return account


def test_the_one_subscriber_that_takes_runs_gets_the_run_whole() -> None:
    account = Account("APP")
    rx = _Receiver("source", account)
    rx.subscribe("$JS.S.abcdefgh")
    replies, payloads = [reply(V1, 1, 1), reply(V1, 2, 2)], [b"a", b"b"]
    assert account.publish_ack_run("$JS.S.abcdefgh", replies, payloads, None)
    item = rx.inbox.receive_nowait()
    assert type(item) is InboundRun and list(item.replies) == replies and list(item.payloads) == payloads
    assert [(m.subject, m.reply) for m in item.split()] == [
        ("orders.1", "$JS.ACK.ORDERS.C.1.1.1.1001.99"),
        ("orders.2", "$JS.ACK.ORDERS.C.1.2.2.1002.98"),
    ]


@pytest.mark.parametrize("case", ["plain receiver", "two subscribers", "queue group", "no subscriber"])
def test_a_run_for_anyone_else_is_left_to_the_caller(case: str) -> None:
    account = Account("APP")
    source = _Receiver("source", account)
    if case == "plain receiver":
        Plain("p", account).subscribe("$JS.S.abcdefgh")
    elif case == "two subscribers":
        source.subscribe("$JS.S.abcdefgh")
        Plain("p", account).subscribe("$JS.S.abcdefgh")
    elif case == "queue group":
        source.subscribe("$JS.S.abcdefgh", queue="q")
    assert not account.publish_ack_run("$JS.S.abcdefgh", [reply(V1, 1, 1)], [b"a"], None)
    assert len(source.inbox) == 0  # nothing routed: the caller routes it as before


def test_a_split_run_is_what_the_link_queued_before() -> None:
    """``InboundRun.split`` gives the InboundMsg each delivery was queued as before runs."""
    replies = [reply(V1, 1, 1), "$JS.ACK.ORDERS.C.1.2.2.5.0", "_INBOX.x"]
    got = InboundRun("$JS.S.abcdefgh", replies, [b"a", b"b", b"c"], SUB).split()
    assert got == [
        InboundMsg("orders.1", "$JS.ACK.ORDERS.C.1.1.1.1001.99", None, b"a", SUB),
        InboundMsg("$JS.S.abcdefgh", "$JS.ACK.ORDERS.C.1.2.2.5.0", None, b"b", SUB),
        InboundMsg("$JS.S.abcdefgh", "_INBOX.x", None, b"c", SUB),
    ]


def test_a_batch_counts_the_messages_of_the_runs_it_takes() -> None:
    """What the worker takes from its queue at once is bounded in messages and bytes, a run
    counting for all of its deliveries (one run past the bound may end a batch)."""
    inbox: Mailbox[Any] = Mailbox(100)
    runs = [InboundRun("$JS.S.abcdefgh", [reply(V1, s, s)] * 10, [b"x"] * 10, SUB) for s in range(5)]
    for run in runs[1:]:
        inbox.send_nowait(run)
    batch: list[Any] = [runs[0]]
    _fill_source_batch(batch, inbox, 25, 1 << 20)
    assert batch == runs[:3] and len(inbox) == 2  # 10, 20, then 30 >= 25: stop
    batch = [inbox.receive_nowait()]
    _fill_source_batch(batch, inbox, 1000, 100)  # a run's bytes: 10 x (reply + payload + subject)
    assert batch == [runs[3]] and len(inbox) == 1


def test_a_sources_queue_bounds_the_messages_of_its_runs() -> None:
    """The queue's capacity counts a run as its deliveries: a run that would take it past the
    bound is dropped whole (a dseq gap), counted per message, and taking a run frees its room."""
    account = Account("APP")
    rx = _Receiver("source", account, 5)
    sub = rx.subscribe("$JS.S.abcdefgh")
    three = [reply(V1, s, s) for s in (1, 2, 3)]
    rx.deliver_ack_run(sub, "$JS.S.abcdefgh", three, [b"a"] * 3)
    rx.deliver_ack_run(sub, "$JS.S.abcdefgh", three, [b"a"] * 3)  # 6 > 5: dropped
    assert len(rx.inbox) == 1 and rx.dropped == 3
    rx.deliver(sub, "orders.4", reply(V1, 4, 4), None, b"b")
    rx.deliver(sub, "orders.5", reply(V1, 5, 5), None, b"b")
    rx.deliver(sub, "orders.6", reply(V1, 6, 6), None, b"b")  # the sixth message: dropped
    assert len(rx.inbox) == 3 and rx.dropped == 4
    assert type(rx.inbox.receive_nowait()) is InboundRun
    rx.deliver_ack_run(sub, "$JS.S.abcdefgh", three, [b"a"] * 3)  # 2 + 3 fit again
    assert len(rx.inbox) == 3 and rx.dropped == 4
