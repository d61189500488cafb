"""Subject transforms and republish, against leafjet and the reference: a stream's own
``subject_transform`` on ingest, ``republish`` (plain and ``headers_only``) as a subscriber sees
it, a source's and a mirror's ``subject_transforms``, and the errors for bad ones."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from core.jetstream.sourcing import get_hash
from tests.support.jsapi import api, jetstream
from tests.support.streams import create_stream as create
from tests.support.streams import stored_messages, wait_last, wait_msgs
from tests.support.streams import stream_info as info

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def stored(nc: Any, name: str) -> list[tuple[int, str, bytes]]:
    return [(m.seq, m.subject, m.data) for m in await stored_messages(nc, name)]


async def test_a_streams_subject_transform_rewrites_subjects_before_storing(js_server):
    async with jetstream(js_server) as (nc, js):
        transform = {"src": "tf.*.*", "dest": "st.$2.{{wildcard(1)}}.{{partition(4,1,2)}}.{{split(1,-)}}"}
        await create(nc, {"name": "TF", "subjects": ["tf.>"], "subject_transform": transform})
        # the last two are not taken by the transform's source: stored as published
        for subject in ("tf.a-b.x", "tf.c.y", "tf.-d--e-.z", "tf.one", "tf.p.q.r"):
            ack = await js.publish(subject, subject.encode())
            assert ack.stream == "TF"
        got = await stored(nc, "TF")
        assert got == [
            (1, "st.x.a-b.1.a.b", b"tf.a-b.x"),
            (2, "st.y.c.1.c", b"tf.c.y"),
            (3, "st.z.-d--e-.2.d.e", b"tf.-d--e-.z"),
            (4, "tf.one", b"tf.one"),
            (5, "tf.p.q.r", b"tf.p.q.r"),
        ]
        # a consumer filters on what was stored
        sub = await js.pull_subscribe("st.*.c.>", durable="C", stream="TF")
        (m,) = await sub.fetch(1, timeout=5)
        assert (m.subject, m.metadata.sequence.stream) == ("st.y.c.1.c", 2)


async def test_a_changed_subject_transform_applies_to_the_next_publish(js_server):
    async with jetstream(js_server) as (nc, js):
        cfg: dict[str, Any] = {"name": "U", "subjects": ["u.*"], "storage": "memory"}
        await create(nc, cfg)
        await js.publish("u.a", b"1")
        cfg["subject_transform"] = {"src": "u.*", "dest": "v.$1"}
        r = await api(nc, "$JS.API.STREAM.UPDATE.U", cfg)
        assert "error" not in r, r
        await js.publish("u.a", b"2")
        assert [s for _q, s, _d in await stored(nc, "U")] == ["u.a", "v.a"]


async def _collect(nc: Any, subject: str, n: int) -> list[Any]:
    got: list[Any] = []
    done = anyio.Event()

    async def cb(msg: Any) -> None:
        got.append(msg)
        if len(got) >= n:
            done.set()

    sub = await nc.subscribe(subject, cb=cb)
    await nc.flush()
    return [sub, got, done]


@pytest.mark.parametrize("headers_only", [False, True], ids=["plain", "headers_only"])
async def test_republish_sends_each_stored_message_with_the_references_headers(js_server, headers_only):
    async with jetstream(js_server) as (nc, js):
        republish: dict[str, Any] = {"src": "rp.*", "dest": "out.$1"}
        if headers_only:
            republish["headers_only"] = True
        await create(nc, {"name": "RP", "subjects": ["rp.>"], "republish": republish})
        sub, got, done = await _collect(nc, "out.>", 3)
        await js.publish("rp.a", b"first")
        await js.publish("rp.x.y", b"not taken by the republish source")
        await js.publish("rp.b", b"second", headers={"X-Mine": "kept"})
        await js.publish("rp.a", b"third")
        with anyio.fail_after(10):
            await done.wait()
        await sub.unsubscribe()
        times = {m.seq: m.time for m in await stored_messages(nc, "RP")}
        expected = [
            ("out.a", "rp.a", 1, 0, b"first"),
            ("out.b", "rp.b", 3, 0, b"second"),
            ("out.a", "rp.a", 4, 1, b"third"),
        ]
        assert len(got) == 3
        for msg, (to, subject, seq, last, payload) in zip(got, expected, strict=True):
            h = msg.headers
            assert msg.subject == to
            assert h["Nats-Stream"] == "RP"
            assert h["Nats-Subject"] == subject
            assert h["Nats-Sequence"] == str(seq)
            assert h["Nats-Last-Sequence"] == str(last)
            assert h["Nats-Time-Stamp"] == times[seq]
            if headers_only:
                assert msg.data == b""
                assert h["Nats-Msg-Size"] == str(len(payload))
            else:
                assert msg.data == payload
                assert "Nats-Msg-Size" not in h
        # the stored headers first, then the reference's, in its order
        order = ["Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Last-Sequence"]
        order += ["Nats-Msg-Size"] if headers_only else []
        assert list(got[0].headers) == order
        assert list(got[1].headers) == ["X-Mine", *order] and got[1].headers["X-Mine"] == "kept"


async def test_an_implicit_republish_follows_the_subject_transform(js_server):
    """republish ``>`` to ``>`` with a transform of the stream's only subject: the reference
    republishes every message on its transformed subject."""
    async with jetstream(js_server) as (nc, js):
        cfg = {
            "name": "IMP",
            "subjects": ["imp.>"],
            "subject_transform": {"src": "imp.>", "dest": "done.>"},
            "republish": {"src": ">", "dest": ">"},
        }
        reply = await create(nc, cfg)
        assert reply["config"]["republish"] == {"src": "done.>", "dest": "done.>"}
        sub, got, done = await _collect(nc, "done.>", 1)
        await js.publish("imp.x.y", b"1")
        with anyio.fail_after(10):
            await done.wait()
        await sub.unsubscribe()
        assert got[0].subject == "done.x.y" and got[0].headers["Nats-Subject"] == "done.x.y"


async def test_a_source_with_a_filter_and_a_transform(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        for subject in ("up.a.1", "up.b.1", "up.a.2", "up.a.x.y"):
            await js.publish(subject, subject.encode())
        src = {"name": "UP", "subject_transforms": [{"src": "up.a.*", "dest": "down.$1"}]}
        await create(nc, {"name": "DOWN", "sources": [src]})
        await wait_msgs(nc, "DOWN", 2)
        await js.publish("up.a.3", b"up.a.3")
        await wait_msgs(nc, "DOWN", 3)
        msgs = await stored_messages(nc, "DOWN")
        ident = get_hash((await info(nc, "UP"))["created"])
        assert [(m.subject, m.data, m.source) for m in msgs] == [
            ("down.1", b"up.a.1", f"UP 1 up.a.* down.$1 up.a.1 {ident}"),
            ("down.2", b"up.a.2", f"UP 3 up.a.* down.$1 up.a.2 {ident}"),
            ("down.3", b"up.a.3", f"UP 5 up.a.* down.$1 up.a.3 {ident}"),
        ]
        (si,) = (await info(nc, "DOWN"))["sources"]
        assert si["subject_transforms"] == [{"src": "up.a.*", "dest": "down.$1"}]


async def test_several_transforms_on_one_source(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        for subject in ("up.a.1", "up.b.1.2", "up.c", "up.d", "up.a.2"):
            await js.publish(subject, subject.encode())
        transforms = [
            {"src": "up.a.*", "dest": "A.{{wildcard(1)}}"},
            {"src": "up.b.>", "dest": "B.>"},
            {"src": "up.c", "dest": ""},  # a filter only: the subject stays
        ]
        await create(
            nc,
            {
                "name": "DOWN",
                "subjects": ["own.>"],
                "sources": [{"name": "UP", "subject_transforms": transforms}],
            },
        )
        await wait_msgs(nc, "DOWN", 4)
        got = [(s, d) for _q, s, d in await stored(nc, "DOWN")]
        assert got == [("A.1", b"up.a.1"), ("B.1.2", b"up.b.1.2"), ("up.c", b"up.c"), ("A.2", b"up.a.2")]
        heads = [m.source for m in await stored_messages(nc, "DOWN")]
        ident = get_hash((await info(nc, "UP"))["created"])
        filters, dests = "up.a.*\fup.b.>\fup.c", "A.{{wildcard(1)}}\fB.>\f>"
        assert heads[0] == f"UP 1 {filters} {dests} up.a.1 {ident}"


async def test_a_source_transform_applies_before_the_streams_own(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        await js.publish("up.a", b"1")
        cfg = {
            "name": "DOWN",
            "subjects": ["d.>"],
            "subject_transform": {"src": "mid.*", "dest": "final.$1"},
            "sources": [{"name": "UP", "subject_transforms": [{"src": "up.*", "dest": "mid.$1"}]}],
        }
        await create(nc, cfg)
        await wait_msgs(nc, "DOWN", 1)
        assert [s for _q, s, _d in await stored(nc, "DOWN")] == ["final.a"]


async def test_a_mirror_with_transforms_keeps_the_upstreams_sequences(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        for subject in ("up.a.1", "up.b", "up.c", "up.a.2"):
            await js.publish(subject, subject.encode())
        transforms = [{"src": "up.a.*", "dest": "m.$1"}, {"src": "up.b", "dest": ""}]
        await create(nc, {"name": "MIR", "mirror": {"name": "UP", "subject_transforms": transforms}})
        await wait_last(nc, "MIR", 4)
        await js.publish("up.a.3", b"up.a.3")
        await wait_last(nc, "MIR", 5)
        assert await stored(nc, "MIR") == [
            (1, "m.1", b"up.a.1"),
            (2, "up.b", b"up.b"),
            (4, "m.2", b"up.a.2"),
            (5, "m.3", b"up.a.3"),
        ]


async def test_a_mirror_with_one_transform(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        for subject in ("up.x", "up.y.z", "up.w"):
            await js.publish(subject, subject.encode())
        mirror = {"name": "UP", "subject_transforms": [{"src": "up.*", "dest": "one.$1"}]}
        await create(nc, {"name": "MIR", "mirror": mirror})
        await wait_last(nc, "MIR", 3)
        assert await stored(nc, "MIR") == [(1, "one.x", b"up.x"), (3, "one.w", b"up.w")]


BAD_CONFIGS = [
    (
        {"subjects": ["b.>"], "subject_transform": {"src": "b..", "dest": "x"}},
        {"code": 400, "err_code": 10155, "description": "stream transform source: invalid subject b.."},
    ),
    (
        {"subjects": ["b.>"], "subject_transform": {"src": "b.*", "dest": "x.{{wildcard(2)}}"}},
        {
            "code": 400,
            "err_code": 10156,
            "description": "stream transform: invalid mapping destination: wildcard index out of range "
            "in {{wildcard(2)}}: [2]",
        },
    ),
    (
        {"subjects": ["b.>"], "subject_transform": {"src": "b.*", "dest": "x.{{nope(1)}}"}},
        {
            "code": 400,
            "err_code": 10156,
            "description": "stream transform: invalid mapping destination: unknown function in {{nope(1)}}",
        },
    ),
    (
        {"subjects": ["b.>"], "subject_transform": {"src": "", "dest": "x"}},
        {"code": 400, "err_code": 10156, "description": "stream transform: invalid subject"},
    ),
    (
        {"subjects": ["b.>"], "subject_transform": {"src": "b.*", "dest": "x.{{random()}}"}},
        {
            "code": 400,
            "err_code": 10156,
            "description": "stream transform: invalid mapping destination: function argument is invalid "
            "or in the wrong format in {{random()}}",
        },
    ),
    (
        {"subjects": ["b.>"], "republish": {"src": "b.*", "dest": "r.$2"}},
        {
            "code": 500,
            "err_code": 10052,
            "description": "stream configuration for republish with transform from 'b.*' to 'r.$2' not valid",
        },
    ),
    (
        {"subjects": ["b.>"], "republish": {"src": "b.>", "dest": "b.x.>"}},
        {
            "code": 500,
            "err_code": 10052,
            "description": "stream configuration for republish destination forms a cycle",
        },
    ),
    (
        {"sources": [{"name": "UP", "subject_transforms": [{"src": "up.*", "dest": "s.{{split(1)}}"}]}]},
        {
            "code": 400,
            "err_code": 10146,
            "description": "source transform: invalid mapping destination: not enough arguments passed to "
            "the function in {{split(1)}}",
        },
    ),
    (
        {"sources": [{"name": "UP", "subject_transforms": [{"src": "up..", "dest": "x"}]}]},
        {"code": 400, "err_code": 10145, "description": "source transform source: invalid subject up.."},
    ),
    (
        {"mirror": {"name": "UP", "subject_transforms": [{"src": "up.*", "dest": "m.*"}]}},
        {"code": 400, "err_code": 10154, "description": "mirror transform: invalid subject"},
    ),
    (
        {"mirror": {"name": "UP", "subject_transforms": [{"src": "up.>", "dest": "m.>.x"}]}},
        {
            "code": 400,
            "err_code": 10154,
            "description": "mirror transform: invalid mapping destination: invalid transform in x",
        },
    ),
]


async def test_bad_transforms_are_refused_with_the_references_errors(js_server):
    async with jetstream(js_server) as (nc, _js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        got = []
        for i, (cfg, _want) in enumerate(BAD_CONFIGS):
            name = f"BAD{i}"
            got.append((await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **cfg})).get("error"))
        assert got == [want for _cfg, want in BAD_CONFIGS]


@pytest.mark.parametrize("several", [False, True], ids=["one", "several"])
async def test_the_source_consumer_create_asks_for_the_transforms_sources(js_server, several):
    """One transform: ``filter_subject`` and the extended create subject; several:
    ``filter_subjects`` on the plain one (as the reference's setupSourceConsumer). A leafjet
    reading a leafjet upstream makes no consumer: its bulk read asks for the same filters."""
    if js_server.kind == "leafjet":
        await _bulk_read_asks_for_the_transforms_sources(js_server, several)
        return
    async with jetstream(js_server) as (nc, _js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        seen: list[tuple[str, dict[str, Any]]] = []
        got = anyio.Event()

        async def watch(msg: Any) -> None:
            seen.append((msg.subject, json.loads(msg.data)["config"]))
            got.set()

        sub = await nc.subscribe("$JS.API.CONSUMER.CREATE.UP.>", cb=watch)
        sub2 = await nc.subscribe("$JS.API.CONSUMER.CREATE.UP", cb=watch)
        await nc.flush()
        transforms = [{"src": "up.a.*", "dest": "A.$1"}]
        if several:
            transforms.append({"src": "up.b", "dest": ""})
        await create(nc, {"name": "DOWN", "sources": [{"name": "UP", "subject_transforms": transforms}]})
        with anyio.fail_after(15):
            await got.wait()
        await sub.unsubscribe()
        await sub2.unsubscribe()
        subject, cfg = seen[0]
        if several:
            assert subject == "$JS.API.CONSUMER.CREATE.UP"
            assert cfg["filter_subjects"] == ["up.a.*", "up.b"] and "filter_subject" not in cfg
        else:
            assert subject == f"$JS.API.CONSUMER.CREATE.UP.{cfg['name']}.up.a.*"
            assert cfg["filter_subject"] == "up.a.*" and "filter_subjects" not in cfg


async def _bulk_read_asks_for_the_transforms_sources(srv: Any, several: bool) -> None:
    async with jetstream(srv) as (nc, _js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        seen: list[dict[str, Any]] = []
        got = anyio.Event()

        async def watch(msg: Any) -> None:
            seen.append(json.loads(msg.data))
            got.set()

        sub = await nc.subscribe("$JS.API.LEAFJET.READ.UP", cb=watch)
        await nc.flush()
        transforms = [{"src": "up.a.*", "dest": "A.$1"}]
        if several:
            transforms.append({"src": "up.b", "dest": ""})
        await create(nc, {"name": "DOWN", "sources": [{"name": "UP", "subject_transforms": transforms}]})
        with anyio.fail_after(15):
            await got.wait()
        await sub.unsubscribe()
        assert seen[0]["filter"] == [t["src"] for t in transforms]
