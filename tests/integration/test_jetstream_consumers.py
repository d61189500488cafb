"""JetStream consumers with stock nats-py and the raw API against leafjet and the reference.

The values asserted here (error codes, status lines, counters) are the reference's (nats-server 2.15),
observed by running this file with LEAFJET_TEST_SERVERS=reference.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from typing import Any

import anyio
import nats
import nats.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy
from nats.js.errors import NotFoundError

from tests.support.jsapi import api, connect, jetstream
from tests.support.raw import exchange
from tests.support.servers import start_leafjet

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CREATE = "$JS.API.CONSUMER.CREATE"
NS = 1_000_000_000  # nanoseconds in a second: the API's durations are nanoseconds


async def create(nc, stream: str, config: dict, *, subject: str | None = None, **extra: Any) -> dict:
    """A raw consumer create; ``subject`` defaults to ``CONSUMER.CREATE.<stream>.<durable or name>``."""
    name = config.get("durable_name") or config.get("name")
    subject = subject or (f"{CREATE}.{stream}.{name}" if name else f"{CREATE}.{stream}")
    return await api(nc, subject, {"stream_name": stream, "config": config, **extra})


async def make_stream(js, name: str = "S", subjects: list[str] | None = None, n: int = 0, **cfg: Any) -> None:
    """A stream ``name`` on ``<name lower>.>`` with ``n`` messages on ``<lower>.0`` / ``<lower>.1``."""
    lower = name.lower()
    await js.add_stream(name=name, subjects=subjects or [f"{lower}.>"], **cfg)
    for i in range(n):
        await js.publish(f"{lower}.{i % 2}", b"m%d" % (i + 1))


def status(msg: Msg) -> tuple[str | None, str | None]:
    headers = msg.headers or {}
    return headers.get("Status"), headers.get("Description")


def is_status(msg: Msg) -> bool:
    return bool(msg.headers and "Status" in msg.headers)


async def pull(
    nc, stream: str, consumer: str, body: dict | bytes, *, want: int | None = None, timeout: float = 3.0
) -> list[Msg]:
    """A raw ``CONSUMER.MSG.NEXT`` request on its own inbox.

    Collects the replies until ``want`` messages came (default: the request's batch), a terminal status
    arrives (kept, last; a 100 heartbeat is kept and not terminal), or ``timeout`` passes in silence.
    """
    if want is None:
        want = (
            max(1, body.get("batch", 1))
            if isinstance(body, dict) and isinstance(body.get("batch"), int)
            else 1
        )
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", payload, reply=inbox)
    got: list[Msg] = []
    data = 0
    try:
        while data < want:
            try:
                msg = await sub.next_msg(timeout=timeout)
            except nats.errors.TimeoutError:
                break
            got.append(msg)
            if not is_status(msg):
                data += 1
            elif status(msg)[0] != "100":
                break
    finally:
        await sub.unsubscribe()
    return got


async def drain(nc, stream: str, consumer: str) -> list[int]:
    """Every stream sequence a no-wait pull hands out now (the 404 that ends it is checked)."""
    got = await pull(nc, stream, consumer, {"batch": 100, "no_wait": True})
    assert got and status(got[-1]) == ("404", "No Messages"), [status(m) for m in got]
    return [m.metadata.sequence.stream for m in got[:-1]]


async def drain_after_publish(nc, stream: str, consumer: str, timeout: float = 10) -> list[int]:
    """``drain`` once a message just published reached the consumer: the reference tells its
    consumers of a new message after it acknowledged the publish, so a no-wait pull sent at once
    can find nothing yet on a loaded machine."""
    with anyio.fail_after(timeout):
        while not (got := await drain(nc, stream, consumer)):
            await anyio.sleep(0.02)
    return got


async def counters(js, stream: str, consumer: str) -> dict[str, Any]:
    ci = await js.consumer_info(stream, consumer)
    return {
        "delivered": (ci.delivered.consumer_seq, ci.delivered.stream_seq),
        "ack_floor": (ci.ack_floor.consumer_seq, ci.ack_floor.stream_seq),
        "num_pending": ci.num_pending,
        "num_ack_pending": ci.num_ack_pending,
        "num_redelivered": ci.num_redelivered,
        "num_waiting": ci.num_waiting,
    }


async def confirm(nc, msg: Msg, body: bytes = b"+ACK") -> Msg:
    """Send an ack body with a reply subject: the server answers once it processed it (double ack)."""
    return await nc.request(msg.reply, body, timeout=5)


async def eventually(probe, timeout: float = 5.0, interval: float = 0.05):
    """Poll the async ``probe`` until it returns something truthy."""
    with anyio.fail_after(timeout):
        while True:
            value = await probe()
            if value:
                return value
            await anyio.sleep(interval)


# -------------------------------------------------------------------------------------- consumer API


async def test_a_single_server_names_no_cluster_in_consumer_info(js_server):
    """As the reference: consumer create, info and list replies carry no ``cluster`` on a
    server that is not clustered (stream info does)."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        created = await create(nc, "S", {"durable_name": "D", "ack_policy": "explicit"})
        info = await api(nc, "$JS.API.CONSUMER.INFO.S.D")
        listed = (await api(nc, "$JS.API.CONSUMER.LIST.S"))["consumers"]
        assert ["cluster" in r for r in (created, info, *listed)] == [False, False, False]
        assert "cluster" in await api(nc, "$JS.API.STREAM.INFO.S")


async def test_create_with_the_name_in_the_subject_or_only_in_the_config(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=5)
        named = await create(nc, "S", {"durable_name": "D", "ack_policy": "explicit"})
        assert named["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
        assert (named["stream_name"], named["name"]) == ("S", "D")
        cfg = named["config"]
        assert (cfg["durable_name"], cfg["name"]) == ("D", "D")
        assert cfg["deliver_policy"] == "all" and cfg["ack_policy"] == "explicit"
        assert cfg["ack_wait"] == 30 * NS and cfg["max_deliver"] == -1 and cfg["replay_policy"] == "instant"
        assert cfg["max_waiting"] == 512 and cfg["max_ack_pending"] == 1000
        assert "inactive_threshold" not in cfg, "a durable never expires"
        assert named["delivered"] == {"consumer_seq": 0, "stream_seq": 0}
        assert named["ack_floor"] == {"consumer_seq": 0, "stream_seq": 0}
        assert (named["num_pending"], named["num_ack_pending"], named["num_redelivered"]) == (5, 0, 0)
        assert named["num_waiting"] == 0

        # CREATE.<stream> with a name but no durable name: a named ephemeral with the 5 s default threshold
        eph = await create(nc, "S", {"name": "N"}, subject=f"{CREATE}.S")
        assert eph["name"] == "N"
        assert eph["config"]["inactive_threshold"] == 5 * NS and "durable_name" not in eph["config"]
        assert eph["config"]["ack_policy"] == "none", "a consumer created without ack_policy gets none"

        # CREATE.<stream>.<consumer> without a durable name is also an ephemeral
        eph2 = await create(nc, "S", {"name": "E2", "ack_policy": "explicit"})
        assert eph2["config"]["inactive_threshold"] == 5 * NS

        # CREATE.<stream> with no name at all: the server picks one
        anon = await create(nc, "S", {"ack_policy": "explicit"})
        assert anon["name"] and anon["config"]["inactive_threshold"] == 5 * NS

        # CREATE.<stream>.<consumer>.<filter> carries the filter subject
        filtered = await create(
            nc, "S", {"durable_name": "F", "filter_subject": "s.1"}, subject=f"{CREATE}.S.F.s.1"
        )
        assert filtered["config"]["filter_subject"] == "s.1" and filtered["num_pending"] == 2


async def test_legacy_durable_create(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        r = await api(
            nc,
            "$JS.API.CONSUMER.DURABLE.CREATE.S.OLD",
            {"stream_name": "S", "config": {"durable_name": "OLD", "ack_policy": "explicit"}},
        )
        assert r["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
        assert r["name"] == "OLD" and r["config"]["durable_name"] == "OLD" and r["num_pending"] == 3
        assert "inactive_threshold" not in r["config"]


async def test_nats_py_add_info_and_delete_consumer(js_server):
    async with jetstream(js_server) as (_, js):
        await make_stream(js, n=4)
        ci = await js.add_consumer("S", durable_name="PY", filter_subject="s.0", max_ack_pending=7)
        assert (ci.stream_name, ci.name, ci.num_pending) == ("S", "PY", 2)
        assert ci.config.ack_policy == AckPolicy.EXPLICIT and ci.config.max_ack_pending == 7
        info = await js.consumer_info("S", "PY")
        assert info.config.filter_subject == "s.0" and info.config.ack_wait == 30.0
        assert await js.delete_consumer("S", "PY") is True
        with pytest.raises(NotFoundError) as gone:
            await js.consumer_info("S", "PY")
        assert (gone.value.err_code, gone.value.description) == (10014, "consumer not found")
        with pytest.raises(NotFoundError):
            await js.delete_consumer("S", "PY")


async def test_names_list_info_and_delete_by_raw_api(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        for name in ("C3", "A1", "B2"):
            assert "error" not in await create(nc, "S", {"durable_name": name, "ack_policy": "explicit"})
        names = await api(nc, "$JS.API.CONSUMER.NAMES.S")
        assert names["type"] == "io.nats.jetstream.api.v1.consumer_names_response"
        assert (names["total"], names["offset"], names["limit"]) == (3, 0, 1024)
        assert names["consumers"] == ["A1", "B2", "C3"], "names come sorted"
        listed = await api(nc, "$JS.API.CONSUMER.LIST.S")
        assert listed["type"] == "io.nats.jetstream.api.v1.consumer_list_response"
        assert (listed["total"], listed["offset"], listed["limit"]) == (3, 0, 256)
        assert [c["name"] for c in listed["consumers"]] == ["A1", "B2", "C3"]
        assert all(c["stream_name"] == "S" and c["num_pending"] == 2 for c in listed["consumers"])
        info = await api(nc, "$JS.API.CONSUMER.INFO.S.B2")
        assert info["type"] == "io.nats.jetstream.api.v1.consumer_info_response"
        assert info["name"] == "B2" and info["config"]["durable_name"] == "B2"
        deleted = await api(nc, "$JS.API.CONSUMER.DELETE.S.B2")
        assert deleted == {"type": "io.nats.jetstream.api.v1.consumer_delete_response", "success": True}
        assert (await api(nc, "$JS.API.CONSUMER.NAMES.S"))["consumers"] == ["A1", "C3"]
        page = await api(nc, "$JS.API.CONSUMER.NAMES.S", {"offset": 1})
        assert (page["total"], page["offset"], page["consumers"]) == (2, 1, ["C3"])


@pytest.mark.parametrize("kind", ["NAMES", "LIST"])
async def test_names_and_list_errors_keep_an_empty_page(js_server, kind):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        bad = await api(nc, f"$JS.API.CONSUMER.{kind}.S", {"subject": "s.a"})
        assert bad["error"]["err_code"] == 10025
        assert (bad["total"], bad["offset"], bad["limit"], bad["consumers"]) == (0, 0, 0, [])
        empty = await api(nc, "$JS.API.CONSUMER.LIST.S")
        assert "missing" not in empty and empty["consumers"] == []


async def test_the_create_response_shows_the_consumer_before_it_delivers(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="S", subjects=["s.>"])
        for subject in ("s.a", "s.b", "s.a", "s.c"):
            await js.publish(subject, b"x")
        listener = await nc.subscribe("push.here")
        cfg = {"durable_name": "P", "deliver_subject": "push.here", "ack_policy": "explicit"}
        r = await create(nc, "S", {**cfg, "deliver_policy": "last_per_subject", "filter_subject": "s.>"})
        assert (r["delivered"]["consumer_seq"], r["num_pending"], r["num_ack_pending"]) == (0, 3, 0)
        assert len([await listener.next_msg(timeout=5) for _ in range(3)]) == 3


async def test_editable_fields_are_updated_in_place(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        first = await create(nc, "S", {"durable_name": "U", "ack_policy": "explicit", "description": "one"})
        again = await create(nc, "S", {"durable_name": "U", "ack_policy": "explicit", "description": "one"})
        assert "error" not in again, "creating again with the same config is idempotent"
        new_cfg = {
            "durable_name": "U",
            "ack_policy": "explicit",
            "description": "two",
            "max_ack_pending": 50,
            "ack_wait": 5 * NS,
        }
        updated = await create(nc, "S", new_cfg, action="update")
        assert updated["config"]["description"] == "two"
        assert updated["config"]["max_ack_pending"] == 50 and updated["config"]["ack_wait"] == 5 * NS
        assert updated["created"] == first["created"], "an update keeps the consumer"
        # without an action a changed config is an update too
        plain = await create(nc, "S", {**new_cfg, "description": "three"})
        assert plain["config"]["description"] == "three"
        info = await js.consumer_info("S", "U")
        assert (info.config.description, info.config.max_ack_pending, info.config.ack_wait) == (
            "three",
            50,
            5.0,
        )
        # action "create" refuses to change an existing consumer; "update" refuses a missing one
        exists = await create(nc, "S", {**new_cfg, "description": "four"}, action="create")
        assert exists["error"] == {"code": 400, "err_code": 10148, "description": "consumer already exists"}
        missing = await create(nc, "S", {"durable_name": "NOPE", "ack_policy": "explicit"}, action="update")
        assert missing["error"] == {"code": 400, "err_code": 10149, "description": "consumer does not exist"}


async def test_an_updated_filter_applies_from_the_next_undelivered_message(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="S", subjects=["s.>"])
        for subject in ("s.a", "s.b", "s.a", "s.b", "s.a", "s.b"):
            await js.publish(subject, b"x")
        cfg = {"durable_name": "C", "ack_policy": "explicit", "filter_subject": "s.a"}
        await create(nc, "S", cfg)
        assert [m.metadata.sequence.stream for m in await pull(nc, "S", "C", {"batch": 1})] == [1]
        updated = await create(nc, "S", {**cfg, "filter_subject": "s.b"}, action="update")
        assert updated["num_pending"] == 3
        assert await drain(nc, "S", "C") == [2, 4, 6], "nothing of the old filter is still handed out"


async def test_an_updated_ack_wait_applies_to_pending_messages(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        cfg = {"durable_name": "C", "ack_policy": "explicit", "ack_wait": 60 * NS}
        await create(nc, "S", cfg)
        assert len(await pull(nc, "S", "C", {"batch": 1})) == 1
        await create(nc, "S", {**cfg, "ack_wait": NS // 2}, action="update")
        got = await pull(nc, "S", "C", {"batch": 1, "expires": 4 * NS})
        assert [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in got] == [(1, 2)]


@pytest.mark.parametrize(
    ("change", "description"),
    [
        ({"ack_policy": "all"}, "ack policy can not be updated"),
        ({"deliver_policy": "new"}, "deliver policy can not be updated"),
        ({"deliver_subject": "push.here"}, "can not update pull consumer to push based"),
    ],
    ids=["ack_policy", "deliver_policy", "pull_to_push"],
)
async def test_forbidden_edits_are_refused(js_server, change, description):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "U", "ack_policy": "explicit"})
        r = await create(nc, "S", {"durable_name": "U", "ack_policy": "explicit", **change})
        assert r["error"] == {"code": 500, "err_code": 10012, "description": description}
        assert (await js.consumer_info("S", "U")).config.ack_policy == AckPolicy.EXPLICIT


async def test_ephemeral_consumer_disappears_when_unused(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        eph = await create(nc, "S", {"ack_policy": "explicit", "inactive_threshold": NS // 2})
        await create(nc, "S", {"durable_name": "KEEP", "ack_policy": "explicit"})
        assert eph["config"]["inactive_threshold"] == NS // 2
        assert eph["name"] in (await api(nc, "$JS.API.CONSUMER.NAMES.S"))["consumers"]

        async def gone() -> bool:
            return eph["name"] not in (await api(nc, "$JS.API.CONSUMER.NAMES.S"))["consumers"]

        await eventually(gone, timeout=5)
        assert (await api(nc, "$JS.API.CONSUMER.NAMES.S"))["consumers"] == ["KEEP"]
        r = await api(nc, f"$JS.API.CONSUMER.INFO.S.{eph['name']}")
        assert r["error"]["err_code"] == 10014


async def test_a_pull_consumer_with_an_ack_still_due_is_not_inactive(js_server):
    """As the reference: a pull consumer whose client may still ack what it was given stays
    until inactive_threshold after its last ack is due (ack_wait after the delivery)."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        cfg = {"durable_name": "W", "ack_policy": "explicit", "ack_wait": 3 * NS, "inactive_threshold": NS}
        await create(nc, "S", cfg)
        got = await pull(nc, "S", "W", {"batch": 1, "expires": NS})
        assert got[0].metadata.sequence.stream == 1
        await anyio.sleep(2.5)  # past the threshold, not past ack_wait
        assert "error" not in await api(nc, "$JS.API.CONSUMER.INFO.S.W")

        async def gone() -> bool:
            return (await api(nc, "$JS.API.CONSUMER.NAMES.S"))["consumers"] in ([], None)

        await eventually(gone, timeout=20)


async def test_filter_subject_and_filter_subjects(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="F", subjects=["f.>"])
        for subj in ("f.a", "f.b", "f.c", "f.a", "f.b", "f.c"):
            await js.publish(subj, subj.encode())
        one = await create(nc, "F", {"durable_name": "ONE", "ack_policy": "none", "filter_subject": "f.b"})
        assert one["num_pending"] == 2
        assert await drain(nc, "F", "ONE") == [2, 5]
        many = await create(
            nc, "F", {"durable_name": "MANY", "ack_policy": "none", "filter_subjects": ["f.a", "f.c"]}
        )
        assert many["config"]["filter_subjects"] == ["f.a", "f.c"] and many["num_pending"] == 4
        assert await drain(nc, "F", "MANY") == [1, 3, 4, 6]
        sub = await js.pull_subscribe("f.c", durable="PYF", stream="F")
        assert [m.data for m in await sub.fetch(5, timeout=1)] == [b"f.c", b"f.c"]


async def _start_time_of(nc, stream: str, seq: int) -> str:
    return (await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq}))["message"]["time"]


@pytest.mark.parametrize(
    ("policy", "extra", "expected"),
    [
        ("all", {}, [1, 2, 3, 4, 5, 6]),
        ("last", {}, [6]),
        ("new", {}, []),
        ("by_start_sequence", {"opt_start_seq": 4}, [4, 5, 6]),
        ("by_start_time", {}, [4, 5, 6]),  # opt_start_time: the stored time of sequence 4
        ("last_per_subject", {"filter_subject": "dp.*"}, [4, 5, 6]),
    ],
)
async def test_deliver_policies(js_server, policy, extra, expected):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="DP", subjects=["dp.*"])
        for subj in ("dp.a", "dp.b", "dp.a", "dp.b", "dp.c", "dp.a"):  # last per subject: b=4, c=5, a=6
            await js.publish(subj, b"x")
        if policy == "by_start_time":
            extra = {"opt_start_time": await _start_time_of(nc, "DP", 4)}
        r = await create(
            nc, "DP", {"durable_name": "C", "ack_policy": "none", "deliver_policy": policy, **extra}
        )
        assert r["config"]["deliver_policy"] == policy
        assert r["num_pending"] == len(expected)
        assert await drain(nc, "DP", "C") == expected
        await js.publish("dp.z", b"later")
        assert await drain_after_publish(nc, "DP", "C") == [7], "every policy goes on with new messages"


async def test_where_a_new_consumer_starts(js_server):
    """The floors a new consumer reports (ack floor = delivered = its starting sequence - 1)
    follow the reference's starting-sequence rules; what it then delivers is checked too."""
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="SF", subjects=["sf.>"])
        for subj in ("sf.a", "sf.a", "sf.b", "sf.a", "sf.b"):
            await js.publish(subj, b"x")
        await js.add_stream(name="M1", subjects=["m1.>"], max_msgs_per_subject=1)
        for subj in ("m1.a", "m1.b", "m1.a", "m1.c", "m1.b"):  # keeps 3 (a), 4 (c), 5 (b)
            await js.publish(subj, b"x")

        async def start(stream: str, name: str, config: dict) -> tuple[int, int, int, list[int]]:
            r = await create(nc, stream, {"durable_name": name, "ack_policy": "none", **config})
            floors = (r["ack_floor"]["stream_seq"], r["delivered"]["stream_seq"], r["num_pending"])
            return (*floors, await drain(nc, stream, name))

        at_2000 = {"deliver_policy": "by_start_time", "opt_start_time": "2000-01-01T00:00:00Z"}
        assert await start("SF", "T", {**at_2000, "filter_subject": "sf.b"}) == (2, 2, 2, [3, 5])
        lps = {"deliver_policy": "last_per_subject"}
        assert await start("SF", "L0", {**lps, "filter_subject": "sf.zzz"}) == (4, 4, 0, [])
        assert await start("SF", "L1", {"deliver_policy": "last", "filter_subject": "sf.zzz"}) == (
            0,
            0,
            0,
            [],
        )
        assert await start("M1", "P", {**lps, "filter_subject": "m1.b"}) == (2, 2, 1, [5])
        assert await start("M1", "P2", {**lps, "filter_subject": "m1.>"}) == (2, 2, 3, [3, 4, 5])
        await api(nc, "$JS.API.STREAM.PURGE.SF", {"keep": 2})  # first_seq 4
        by_seq = {"deliver_policy": "by_start_sequence", "opt_start_seq": 2}
        assert await start("SF", "Q", by_seq) == (3, 3, 2, [4, 5]), "a start below the first moves up"


async def test_counters_after_a_known_sequence_of_fetches_and_acks(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=10)
        sub = await js.pull_subscribe("s.>", durable="D", stream="S")
        assert await counters(js, "S", "D") == {
            "delivered": (0, 0),
            "ack_floor": (0, 0),
            "num_pending": 10,
            "num_ack_pending": 0,
            "num_redelivered": 0,
            "num_waiting": 0,
        }
        msgs = await sub.fetch(4, timeout=2)
        assert [(m.metadata.sequence.stream, m.metadata.sequence.consumer) for m in msgs] == [
            (1, 1),
            (2, 2),
            (3, 3),
            (4, 4),
        ]
        assert [m.metadata.num_pending for m in msgs] == [9, 8, 7, 6]
        assert [m.metadata.num_delivered for m in msgs] == [1, 1, 1, 1]
        assert [(m.metadata.stream, m.metadata.consumer) for m in msgs] == [("S", "D")] * 4
        assert msgs[0].subject == "s.0" and msgs[0].data == b"m1", "a delivery keeps the stored subject"
        c = await counters(js, "S", "D")
        assert (c["delivered"], c["ack_floor"], c["num_pending"], c["num_ack_pending"]) == (
            (4, 4),
            (0, 0),
            6,
            4,
        )

        await msgs[1].ack_sync()  # acking 2 leaves a gap: the floor stays
        c = await counters(js, "S", "D")
        assert (c["ack_floor"], c["num_ack_pending"]) == ((0, 0), 3)
        await msgs[0].ack_sync()  # acking 1 closes the gap: the floor jumps to 2
        c = await counters(js, "S", "D")
        assert (c["ack_floor"], c["num_ack_pending"]) == ((2, 2), 2)

        await confirm(nc, msgs[2], b"-NAK")  # 3 goes back for redelivery
        again = (await sub.fetch(1, timeout=2))[0]
        assert (again.metadata.sequence.stream, again.metadata.sequence.consumer) == (3, 5)
        assert again.metadata.num_delivered == 2
        assert await counters(js, "S", "D") == {
            "delivered": (5, 4),
            "ack_floor": (2, 2),
            "num_pending": 6,
            "num_ack_pending": 2,
            "num_redelivered": 1,
            "num_waiting": 0,
        }
        await confirm(nc, again)
        await confirm(nc, msgs[3])
        c = await counters(js, "S", "D")
        assert (c["ack_floor"], c["num_ack_pending"], c["num_redelivered"]) == ((5, 4), 0, 0)

        rest = await sub.fetch(10, timeout=2)
        assert [m.metadata.sequence.stream for m in rest] == [5, 6, 7, 8, 9, 10]
        assert [m.metadata.sequence.consumer for m in rest] == [6, 7, 8, 9, 10, 11]
        for m in rest:
            await m.ack_sync()
        assert await counters(js, "S", "D") == {
            "delivered": (11, 10),
            "ack_floor": (11, 10),
            "num_pending": 0,
            "num_ack_pending": 0,
            "num_redelivered": 0,
            "num_waiting": 0,
        }


async def _num_pending_is(js, consumer: str, expected: int) -> bool:
    return (await js.consumer_info("S", consumer)).num_pending == expected


async def test_pending_counts_in_ack_subjects_with_a_filter_that_stops_covering_the_stream(js_server):
    """num_pending in the ack subject and in the info, for a filter that first matches every
    message of the stream and then, after a publish on another subject, no longer does."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        for _ in range(4):
            await js.publish("s.a", b"a")
        await create(nc, "S", {"durable_name": "F", "filter_subject": "s.a", "ack_policy": "none"})
        got = await pull(nc, "S", "F", {"batch": 2})
        assert [m.metadata.num_pending for m in got] == [3, 2]
        await js.publish("s.b", b"b")
        await js.publish("s.a", b"a")
        # the reference counts a new message into its consumers asynchronously after the publish
        # acknowledgement: wait for the count rather than read it once
        await eventually(lambda: _num_pending_is(js, "F", 3), timeout=10)
        got = await pull(nc, "S", "F", {"batch": 5, "no_wait": True})
        assert [m.metadata.num_pending for m in got[:-1]] == [2, 1, 0]
        assert [m.metadata.sequence.stream for m in got[:-1]] == [3, 4, 6]
        assert (await js.consumer_info("S", "F")).num_pending == 0


# ---------------------------------------------------------------------------------------------- pull


async def test_waiting_pull_requests_take_turns(js_server):
    """Several requests waiting on one consumer get the new messages one each in turn, not the
    oldest request filled first (the reference's wait queue)."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        subs = []
        for _ in range(3):
            inbox = nc.new_inbox()
            subs.append(await nc.subscribe(inbox))
            body = json.dumps({"batch": 5, "expires": 3 * NS}).encode()
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.C", body, reply=inbox)
        await nc.flush()
        await anyio.sleep(0.2)
        for i in range(6):
            await js.publish("s.a", b"m%d" % i)
        got = []
        for sub in subs:
            got.append([(await sub.next_msg(timeout=3)).data for _ in range(2)])
        assert got == [[b"m0", b"m3"], [b"m1", b"m4"], [b"m2", b"m5"]]


async def test_a_pull_request_that_expired_on_arrival_reports_what_it_asked(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        got = await pull(nc, "S", "C", {"batch": 5, "expires": -1, "max_bytes": 1000})
        assert len(got) == 1 and status(got[0]) == ("408", "Request Timeout")
        headers = got[0].headers
        assert (headers["Nats-Pending-Messages"], headers["Nats-Pending-Bytes"]) == ("5", "1000")


async def test_pull_subscribe_and_fetch(js_server):
    async with jetstream(js_server) as (_, js):
        await make_stream(js, n=5)
        sub = await js.pull_subscribe("s.>", durable="W", stream="S")
        first = await sub.fetch(3, timeout=2)
        assert [m.data for m in first] == [b"m1", b"m2", b"m3"]
        for m in first:
            await m.ack()
        second = await sub.fetch(10, timeout=2)  # fewer than asked are there: fetch returns those
        assert [m.data for m in second] == [b"m4", b"m5"]
        for m in second:
            await m.ack_sync()
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.5)
        await js.publish("s.x", b"late")
        assert [m.data for m in await sub.fetch(1, timeout=2)] == [b"late"]


async def waiting_request(nc, js, body: bytes):
    """An empty stream S with a pull consumer W, and a request ``body`` waiting on it; its inbox."""
    await make_stream(js)
    await create(nc, "S", {"durable_name": "W", "ack_policy": "explicit"})
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.W", body, reply=inbox)

    async def waiting() -> bool:
        return (await js.consumer_info("S", "W")).num_waiting == 1

    await eventually(waiting)
    return sub


async def test_a_pull_request_whose_requester_left_is_dropped(js_server):
    async with jetstream(js_server) as (nc, js):
        sub = await waiting_request(nc, js, b'{"batch": 5}')
        await sub.unsubscribe()
        await nc.flush()
        for i in range(3):
            await js.publish("s.x", b"m%d" % i)
        c = await counters(js, "S", "W")
        assert (c["delivered"], c["num_ack_pending"], c["num_waiting"]) == ((0, 0), 0, 0)
        assert await drain(nc, "S", "W") == [1, 2, 3], "nothing was handed to the requester that left"


async def test_waiting_pull_gets_a_message_published_later(js_server):
    async with jetstream(js_server) as (nc, js):
        sub = await waiting_request(nc, js, b'{"batch": 1, "expires": 5000000000}')
        await js.publish("s.x", b"now")
        msg = await sub.next_msg(timeout=3)
        assert (msg.subject, msg.data) == ("s.x", b"now")
        assert msg.reply.startswith("$JS.ACK.S.W.1.1.1.")
        assert (await js.consumer_info("S", "W")).num_waiting == 0


async def test_no_wait_pull_on_an_exhausted_consumer_gets_404(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        await create(nc, "S", {"durable_name": "NW", "ack_policy": "explicit"})
        got = await pull(nc, "S", "NW", {"batch": 5, "no_wait": True})
        assert [m.data for m in got[:2]] == [b"m1", b"m2"]
        assert status(got[2]) == ("404", "No Messages") and got[2].data == b""
        got = await pull(nc, "S", "NW", {"batch": 5, "no_wait": True})
        assert len(got) == 1 and status(got[0]) == ("404", "No Messages")


async def test_expired_pull_gets_408_with_pending_headers(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "EX", "ack_policy": "explicit"})
        got = await pull(nc, "S", "EX", {"batch": 10, "expires": NS // 5})
        assert [m.data for m in got[:1]] == [b"m1"]
        end = got[1]
        assert status(end) == ("408", "Request Timeout")
        # the pending headers tell what is left of the request: 9 of 10 messages, no byte budget
        assert end.headers["Nats-Pending-Messages"] == "9" and end.headers["Nats-Pending-Bytes"] == "0"
        got = await pull(nc, "S", "EX", {"batch": 3, "expires": NS // 5, "max_bytes": 4096})
        assert status(got[0]) == ("408", "Request Timeout")
        assert got[0].headers["Nats-Pending-Messages"] == "3"
        assert got[0].headers["Nats-Pending-Bytes"] == "4096"
        # a negative expiry has already passed
        got = await pull(nc, "S", "EX", {"batch": 1, "expires": -1})
        assert status(got[0]) == ("408", "Request Timeout")


async def test_max_bytes_pull(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        for _ in range(5):
            await js.publish("s.x", b"x" * 100)
        await create(nc, "S", {"durable_name": "MB", "ack_policy": "explicit"})
        got = await pull(nc, "S", "MB", {"batch": 10, "max_bytes": 350, "expires": NS})
        data, end = got[:-1], got[-1]
        assert [len(m.data) for m in data] == [100, 100], "a pull stops before its byte budget is spent"
        # when the next message does not fit what is left, the pull ends at once with a 409
        assert status(end) == ("409", "Message Size Exceeds MaxBytes")
        assert end.headers["Nats-Pending-Messages"] == "8"
        # a message costs len(subject) + len(ack reply subject) + len(headers) + len(data)
        spent = sum(len(m.subject) + len(m.reply) + len(m.data) for m in data)
        assert end.headers["Nats-Pending-Bytes"] == str(350 - spent)
        tiny = await pull(nc, "S", "MB", {"batch": 1, "max_bytes": 10})
        assert status(tiny[0]) == ("409", "Message Size Exceeds MaxBytes")
        assert tiny[0].headers["Nats-Pending-Messages"] == "1"
        assert tiny[0].headers["Nats-Pending-Bytes"] == "10"


async def test_a_pull_with_a_byte_budget_ends_as_the_reference_ends_it(js_server):
    """A batch done before its byte budget ends with a 409 "Batch Completed" telling the bytes
    left; a budget spent exactly ends the request with no status; a negative max_bytes is no
    budget at all."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        for _ in range(6):
            await js.publish("s.x", b"x" * 100)
        await create(nc, "S", {"durable_name": "MB", "ack_policy": "explicit"})
        got = await pull(nc, "S", "MB", {"batch": 2, "max_bytes": 1000}, want=3, timeout=1)
        assert [len(m.data) for m in got[:2]] == [100, 100]
        spent = sum(len(m.subject) + len(m.reply) + len(m.data) for m in got[:2])
        assert status(got[2]) == ("409", "Batch Completed")
        assert got[2].headers["Nats-Pending-Messages"] == "0"
        assert got[2].headers["Nats-Pending-Bytes"] == str(1000 - spent)
        one = len(got[1].subject) + len(got[1].reply) + len(got[1].data)  # the next costs the same
        body = {"batch": 3, "max_bytes": one, "expires": NS // 2}
        exact = await pull(nc, "S", "MB", body, want=3, timeout=1)
        assert [(len(m.data), is_status(m)) for m in exact] == [(100, False)], "no 408: the request ended"
        unbounded = await pull(nc, "S", "MB", {"batch": 1, "max_bytes": -5})
        assert [(len(m.data), is_status(m)) for m in unbounded] == [(100, False)]


@pytest.mark.parametrize(
    ("request_body", "description"),
    [
        ({"batch": 4}, "Exceeded MaxRequestBatch of 3"),
        ({"batch": 1, "expires": 3 * NS}, "Exceeded MaxRequestExpires of 2s"),
        ({"batch": 1, "max_bytes": 5000}, "Exceeded MaxRequestMaxBytes of 1000"),
    ],
    ids=["max_batch", "max_expires", "max_bytes"],
)
async def test_pull_beyond_the_consumer_limits_gets_409(js_server, request_body, description):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=5)
        limits = {"max_batch": 3, "max_expires": 2 * NS, "max_bytes": 1000}
        r = await create(nc, "S", {"durable_name": "L", "ack_policy": "explicit", **limits})
        assert all(r["config"][k] == v for k, v in limits.items())
        got = await pull(nc, "S", "L", request_body)
        assert len(got) == 1 and status(got[0]) == ("409", description)
        assert (await js.consumer_info("S", "L")).delivered.stream_seq == 0


async def test_exceeding_max_waiting_gets_409(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        await create(nc, "S", {"durable_name": "MW", "ack_policy": "explicit", "max_waiting": 1})
        inbox = nc.new_inbox()
        held = await nc.subscribe(inbox)
        await nc.publish(
            "$JS.API.CONSUMER.MSG.NEXT.S.MW", b'{"batch": 1, "expires": 5000000000}', reply=inbox
        )

        async def waiting() -> bool:
            return (await js.consumer_info("S", "MW")).num_waiting == 1

        await eventually(waiting)
        got = await pull(nc, "S", "MW", {"batch": 1, "expires": NS})
        assert len(got) == 1 and status(got[0]) == ("409", "Exceeded MaxWaiting")
        got = await pull(nc, "S", "MW", {"batch": 1, "expires": NS, "idle_heartbeat": NS // 4}, timeout=1.5)
        assert got == [], "a refused request that asked for heartbeats hears nothing"
        await js.publish("s.x", b"for the first")
        assert (await held.next_msg(timeout=3)).data == b"for the first"


async def test_a_no_wait_request_at_max_ack_pending_waits_for_room(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit", "max_ack_pending": 1})
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch": 5, "no_wait": true}', reply=inbox)
        first = await sub.next_msg(timeout=5)
        assert first.metadata.sequence.stream == 1
        assert (await counters(js, "S", "C"))["num_waiting"] == 1, "no 404: messages are there, room is not"
        got = await pull(nc, "S", "C", {"batch": 5, "no_wait": True})
        assert [status(m) for m in got] == [("408", "Requests Pending")], "the waiting request asks for more"
        await confirm(nc, first)
        assert (await sub.next_msg(timeout=5)).metadata.sequence.stream == 2


async def test_a_no_wait_request_with_expires_waits_for_a_first_message(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        got = await pull(nc, "S", "C", {"batch": 3, "no_wait": True, "expires": NS // 2})
        assert [status(m) for m in got] == [("408", "Request Timeout")]
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(
            "$JS.API.CONSUMER.MSG.NEXT.S.C",
            b'{"batch": 3, "no_wait": true, "expires": 3000000000}',
            reply=inbox,
        )
        await nc.flush()
        await anyio.sleep(0.3)
        await js.publish("s.x", b"late")
        assert (await sub.next_msg(timeout=5)).data == b"late"
        assert status(await sub.next_msg(timeout=5)) == ("404", "No Messages"), "then it ends at once"


async def test_pull_on_a_push_consumer_gets_409(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "PU", "deliver_subject": "push.nobody"})
        got = await pull(nc, "S", "PU", {"batch": 1})
        assert len(got) == 1 and status(got[0]) == ("409", "Consumer is push based")


async def test_pull_on_a_missing_consumer_gets_no_responders(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        got = await pull(nc, "S", "NOPE", {"batch": 1})
        assert len(got) == 1 and status(got[0])[0] == "503"
        assert got[0].headers["Nats-Subject"] == "$JS.API.CONSUMER.MSG.NEXT.S.NOPE"


async def test_two_pull_subscribers_on_one_durable_get_distinct_messages(js_server):
    nc, js = await connect(js_server)
    nc2 = await nats.connect(js_server.url)
    try:
        await make_stream(js, n=20)
        a = await js.pull_subscribe("s.>", durable="SHARED", stream="S")
        b = await nc2.jetstream(timeout=5).pull_subscribe("s.>", durable="SHARED", stream="S")
        seen: list[int] = []
        for _ in range(5):
            for sub in (a, b):
                for m in await sub.fetch(2, timeout=2):
                    seen.append(m.metadata.sequence.stream)
                    await m.ack_sync()
        assert sorted(seen) == list(range(1, 21)), "each message went to exactly one of them"
        assert (await js.consumer_info("S", "SHARED")).ack_floor.stream_seq == 20
    finally:
        await nc2.close()
        await nc.close()


async def test_long_pull_gets_idle_heartbeats(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "HB", "ack_policy": "explicit"})
        got = await pull(
            nc, "S", "HB", {"batch": 10, "expires": 1_200_000_000, "idle_heartbeat": 300_000_000}
        )
        assert got[0].data == b"m1"
        beats = [m for m in got if status(m) == ("100", "Idle Heartbeat")]
        assert beats, [status(m) for m in got]
        assert beats[0].headers["Nats-Last-Consumer"] == "1" and beats[0].headers["Nats-Last-Stream"] == "1"
        assert beats[0].data == b"" and not beats[0].reply
        assert status(got[-1]) == ("408", "Request Timeout")
        assert got[-1].headers["Nats-Pending-Messages"] == "9"


@pytest.mark.parametrize(
    "request_body",
    [
        {"batch": 1, "expires": NS, "idle_heartbeat": 800_000_000},  # more than half the expiry
        {"batch": 1, "idle_heartbeat": 100_000_000},  # a heartbeat without an expiry
    ],
    ids=["over_half_expires", "without_expires"],
)
async def test_heartbeat_too_large_for_the_pull_gets_400(js_server, request_body):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "HB", "ack_policy": "explicit"})
        got = await pull(nc, "S", "HB", request_body)
        assert len(got) == 1 and status(got[0]) == ("400", "Bad Request - heartbeat value too large")


# ---------------------------------------------------------------------------------------------- push


async def test_push_durable_subscription_delivers(js_server):
    async with jetstream(js_server) as (_, js):
        await make_stream(js, n=5)
        got: list[bytes] = []
        done = anyio.Event()

        async def cb(msg: Msg) -> None:
            got.append(msg.data)
            await msg.ack()
            if len(got) == 6:
                done.set()

        await js.subscribe("s.>", durable="PUSH", stream="S", cb=cb)
        await js.publish("s.x", b"live")
        with anyio.fail_after(5):
            await done.wait()
        assert got == [b"m1", b"m2", b"m3", b"m4", b"m5", b"live"]
        ci = await js.consumer_info("S", "PUSH")
        assert ci.config.deliver_subject and ci.config.durable_name == "PUSH"

        async def all_acked() -> bool:
            return (await js.consumer_info("S", "PUSH")).ack_floor.stream_seq == 6

        await eventually(all_acked)


async def test_deliver_group_splits_messages_between_members(js_server):
    async with jetstream(js_server) as (_, js):
        await make_stream(js)
        seen: dict[str, list[int]] = {"a": [], "b": []}

        def member(name: str):
            async def cb(msg: Msg) -> None:
                seen[name].append(msg.metadata.sequence.stream)
                await msg.ack()

            return cb

        # nats-py names the durable after the queue
        await js.subscribe("s.>", queue="workers", stream="S", cb=member("a"))
        await js.subscribe("s.>", queue="workers", stream="S", cb=member("b"))
        assert (await js.consumer_info("S", "workers")).config.deliver_group == "workers"
        for i in range(40):
            await js.publish("s.x", b"%d" % i)

        async def all_seen() -> bool:
            return len(seen["a"]) + len(seen["b"]) >= 40

        await eventually(all_seen)
        assert sorted(seen["a"] + seen["b"]) == list(range(1, 41)), "each message went to one member"


@pytest.mark.parametrize(
    ("group", "queue", "subject"),
    [("G", None, "d.C"), ("G", "OTHER", "d.C"), (None, "X", "d.C"), (None, None, "d.>"), ("G", "G", "d.*")],
    ids=[
        "group-consumer-plain-sub",
        "group-consumer-other-group",
        "plain-consumer-queue-sub",
        "plain-consumer-wildcard-sub",
        "group-consumer-wildcard-queue-sub",
    ],
)
async def test_push_interest_is_a_subscriber_the_way_the_consumer_delivers(js_server, group, queue, subject):
    """As the reference: a deliver-group consumer counts only a queue subscriber of its group as
    interest, a consumer without one only a plain subscriber, and either only on the deliver
    subject itself, not a wildcard covering it; another subscriber neither binds the consumer
    nor gets anything."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        sub = await nc.subscribe(subject, queue=queue or "")
        await nc.flush()
        config = {"durable_name": "C", "deliver_subject": "d.C", "ack_policy": "explicit"}
        if group:
            config["deliver_group"] = group
        created = await create(nc, "S", config)
        assert "push_bound" not in created
        await anyio.sleep(0.3)
        info = await api(nc, "$JS.API.CONSUMER.INFO.S.C")
        assert "push_bound" not in info
        assert (info["delivered"]["stream_seq"], info["num_pending"]) == (0, 1)
        assert sub.pending_msgs == 0


async def test_a_wildcard_subscriber_gets_deliveries_once_the_deliver_subject_has_interest(js_server):
    """A wildcard subscription does not make a push consumer deliver (nats-py's KV keys() and
    object get() subscribe after creating the consumer, and a monitor on _INBOX.> must not take
    their messages first), but once a subscriber on the deliver subject itself comes, every
    subscription matching it gets the messages."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        monitor = await nc.subscribe("d.>")
        await nc.flush()
        await create(nc, "S", {"durable_name": "C", "deliver_subject": "d.C", "ack_policy": "none"})
        await anyio.sleep(0.3)
        assert monitor.pending_msgs == 0
        exact = await nc.subscribe("d.C")
        got = [(await exact.next_msg(timeout=5)).data, (await monitor.next_msg(timeout=5)).data]
        assert got == [b"m1", b"m1"]


async def test_an_ephemeral_push_consumer_with_only_the_wrong_subscriber_goes_when_inactive(js_server):
    """A deliver-group consumer whose deliver subject only a plain subscriber listens on has no
    interest, so its inactive_threshold runs out as if nobody listened."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await nc.subscribe("d.E")
        await nc.flush()
        config = {"name": "E", "deliver_subject": "d.E", "deliver_group": "G", "inactive_threshold": NS // 2}
        await create(nc, "S", config)

        async def gone() -> bool:
            return (await api(nc, "$JS.API.CONSUMER.NAMES.S"))["consumers"] in (None, [])

        await eventually(gone, timeout=10)


async def test_flow_control_counts_what_goes_on_the_wire(js_server):
    """As the reference: a delivery counts its deliver subject, ack subject, headers and data
    against the 2 MiB window, so with 1000-byte messages the request goes out after the 1000th
    and an unanswered one stalls delivery after the 1998th."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        for i in range(2500):
            await js.publish(f"s.{i}", b"x" * 1000)
        got: list[Msg] = []

        async def cb(msg: Msg) -> None:
            got.append(msg)

        await nc.subscribe("d.C", cb=cb)
        await nc.flush()
        config = {"durable_name": "C", "deliver_subject": "d.C", "ack_policy": "none"}
        await create(nc, "S", {**config, "flow_control": True, "idle_heartbeat": NS})

        def data() -> int:
            return sum(1 for m in got if not is_status(m))

        async def stalled() -> bool:
            return data() >= 1998

        await eventually(stalled)
        await anyio.sleep(0.5)
        requests = [i for i, m in enumerate(got) if m.reply and is_status(m)]
        assert (data(), requests[:1]) == (1998, [1000])


async def test_flow_control_and_heartbeat_consumer_receives_everything(js_server):
    async with jetstream(js_server) as (_, js):
        await make_stream(js)
        payload = b"y" * 8000
        for _ in range(600):  # 4.8 MB: enough for the reference to ask for flow control
            await js.publish("s.x", payload)
        got: list[int] = []
        done = anyio.Event()

        async def cb(msg: Msg) -> None:
            got.append(msg.metadata.sequence.stream)
            if len(got) == 600:
                done.set()

        sub = await js.subscribe("s.>", stream="S", cb=cb, flow_control=True, idle_heartbeat=0.5)
        with anyio.fail_after(10):
            await done.wait()
        assert got == list(range(1, 601))
        ci = await sub.consumer_info()
        assert ci.config.flow_control is True and ci.config.idle_heartbeat == 0.5


async def test_flow_control_requests_and_idle_heartbeats_on_the_wire(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        for _ in range(600):
            await js.publish("s.x", b"y" * 8000)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        r = await create(
            nc,
            "S",
            {
                "durable_name": "FC",
                "deliver_subject": inbox,
                "flow_control": True,
                "idle_heartbeat": 300_000_000,
                "ack_policy": "none",
            },
        )
        assert r["config"]["flow_control"] is True and r["config"]["idle_heartbeat"] == 300_000_000
        data = 0
        fc_requests: list[Msg] = []
        with anyio.fail_after(10):
            while True:
                msg = await sub.next_msg(timeout=5)
                if not is_status(msg):
                    data += 1
                    continue
                if status(msg) == ("100", "FlowControl Request"):
                    assert msg.reply.startswith("$JS.FC.S.FC.") and msg.data == b""
                    fc_requests.append(msg)
                    await nc.publish(msg.reply, b"")
                    continue
                assert status(msg) == ("100", "Idle Heartbeat"), status(msg)
                if data == 600 and "Nats-Consumer-Stalled" not in msg.headers:
                    break
                if "Nats-Consumer-Stalled" in msg.headers:
                    await nc.publish(msg.headers["Nats-Consumer-Stalled"], b"")
        assert data == 600 and fc_requests
        assert msg.headers["Nats-Last-Consumer"] == "600" and msg.headers["Nats-Last-Stream"] == "600"


async def test_unanswered_flow_control_stalls_and_the_heartbeat_names_the_stall(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        for _ in range(600):
            await js.publish("s.x", b"y" * 8000)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        config = {
            "durable_name": "ST",
            "deliver_subject": inbox,
            "flow_control": True,
            "idle_heartbeat": 300_000_000,
            "ack_policy": "none",
        }
        await create(nc, "S", config)
        data = 0
        stalled: list[str] = []
        with anyio.fail_after(10):
            while data < 600:
                msg = await sub.next_msg(timeout=5)
                if not is_status(msg):
                    data += 1
                elif status(msg) == ("100", "Idle Heartbeat") and "Nats-Consumer-Stalled" in msg.headers:
                    stalled.append(msg.headers["Nats-Consumer-Stalled"])
                    await nc.publish(stalled[-1], b"")  # answering the stalled request resumes delivery
        assert stalled and all(s.startswith("$JS.FC.S.ST.") for s in stalled)


async def test_ordered_consumer_receives_1000_messages_in_order(js_server):
    async with jetstream(js_server) as (_, js):
        await make_stream(js)
        for i in range(1000):
            await js.publish("s.x", b"%d" % i)
        got: list[bytes] = []
        done = anyio.Event()

        async def cb(msg: Msg) -> None:
            got.append(msg.data)
            if len(got) == 1000:
                done.set()

        await js.subscribe("s.>", stream="S", cb=cb, ordered_consumer=True)
        with anyio.fail_after(10):
            await done.wait()
        assert got == [b"%d" % i for i in range(1000)]


# ---------------------------------------------------------------------------------------------- acks


async def test_nak_redelivers_with_num_delivered_2(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        sub = await js.pull_subscribe("s.>", durable="N", stream="S")
        first = (await sub.fetch(1, timeout=2))[0]
        assert first.reply.startswith("$JS.ACK.S.N.1.1.1.")  # delivered 1, stream 1, consumer 1
        reply = await confirm(nc, first, b"-NAK")
        assert reply.data == b""
        again = (await sub.fetch(1, timeout=2))[0]
        assert again.data == b"m1" and again.metadata.num_delivered == 2
        assert again.reply.startswith("$JS.ACK.S.N.2.1.2.")  # delivered 2, stream 1, consumer 2
        assert again.metadata.sequence.consumer == 2
        assert (await js.consumer_info("S", "N")).num_redelivered == 1
        # nats-py's plain nak has no reply subject: it may be overtaken by the next pull, so ask for both
        await again.nak()
        got = await pull(nc, "S", "N", {"batch": 2, "expires": 2 * NS})
        assert sorted((m.data, m.metadata.num_delivered) for m in got) == [(b"m1", 3), (b"m2", 1)]


async def test_nak_with_delay_holds_the_redelivery_back(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        await create(nc, "S", {"durable_name": "ND", "ack_policy": "explicit"})
        first = (await pull(nc, "S", "ND", {"batch": 1}))[0]
        start = time.monotonic()
        await confirm(nc, first, b'-NAK {"delay": 1000000000}')
        nxt = await pull(nc, "S", "ND", {"batch": 5, "no_wait": True})
        assert [m.metadata.sequence.stream for m in nxt[:-1]] == [2], "the delayed message is not due yet"
        assert status(nxt[-1]) == ("404", "No Messages")
        again = await pull(nc, "S", "ND", {"batch": 1, "expires": 3 * NS})
        assert again[0].metadata.sequence.stream == 1 and again[0].metadata.num_delivered == 2
        assert time.monotonic() - start >= 0.8, "redelivered no earlier than the delay"


async def test_in_progress_extends_the_ack_wait(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "WPI", "ack_policy": "explicit", "ack_wait": NS // 2})
        msg = (await pull(nc, "S", "WPI", {"batch": 1}))[0]
        for _ in range(6):  # 1.2 s of work: more than twice the ack wait
            await confirm(nc, msg, b"+WPI")
            await anyio.sleep(0.2)
        got = await pull(nc, "S", "WPI", {"batch": 1, "no_wait": True})
        assert status(got[0]) == ("404", "No Messages"), "a message in progress is not redelivered"
        await confirm(nc, msg)
        c = await counters(js, "S", "WPI")
        assert (c["num_redelivered"], c["num_ack_pending"], c["ack_floor"]) == (0, 0, (1, 1))


async def test_term_stops_redelivery(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        await create(nc, "S", {"durable_name": "T", "ack_policy": "explicit", "ack_wait": NS // 2})
        msg = (await pull(nc, "S", "T", {"batch": 1}))[0]
        await confirm(nc, msg, b"+TERM")
        c = await counters(js, "S", "T")
        assert (c["ack_floor"], c["num_ack_pending"]) == ((1, 1), 0), "a terminated message counts as done"
        m2 = (await pull(nc, "S", "T", {"batch": 1, "expires": NS}))[0]
        assert m2.metadata.sequence.stream == 2, "the terminated message is not redelivered"
        await confirm(nc, m2, b"+TERM bad payload")  # a reason after +TERM is allowed
        got = await pull(nc, "S", "T", {"batch": 5, "expires": NS})
        assert len(got) == 1 and status(got[0]) == ("408", "Request Timeout")


@pytest.mark.parametrize(
    ("body", "acked"),
    [(b"+OK", True), (b"", True), (b"+ACKx", False), (b" +ACK", False), (b"+WPI x", False), (b"ACK", False)],
)
async def test_ack_bodies_are_read_as_the_reference_reads_them(js_server, body, acked):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        (msg,) = await pull(nc, "S", "C", {"batch": 1})
        await confirm(nc, msg, body)  # every body sent with a reply is confirmed
        assert (await counters(js, "S", "C"))["num_ack_pending"] == (0 if acked else 1)


async def test_nak_takes_a_go_duration_and_next_takes_a_batch(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=4)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        (first,) = await pull(nc, "S", "C", {"batch": 1})
        await confirm(nc, first, b"-NAK 2s")
        (second,) = await pull(nc, "S", "C", {"batch": 1, "no_wait": True})
        assert second.metadata.sequence.stream == 2, "the NAKed message waits out its delay"
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(second.reply, b'+NXT {"batch":2}', reply=inbox)
        got = [await sub.next_msg(timeout=5) for _ in range(2)]
        assert [m.metadata.sequence.stream for m in got] == [3, 4]


async def test_a_malformed_next_request_in_an_ack_gets_a_bad_request_status(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        (first,) = await pull(nc, "S", "C", {"batch": 1})
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(first.reply, b"+NXT {not json", reply=inbox)
        answer = await sub.next_msg(timeout=5)
        code, description = status(answer)
        assert code == "400" and description.startswith("Bad Request - "), (code, description)
        assert (await counters(js, "S", "C"))["ack_floor"] == (1, 1), "the ack itself counts"


async def test_a_pull_sent_right_behind_a_nak_gets_the_naked_message(js_server):
    """leafjet takes acks and the pull request sent behind them in the order sent: a NAK ahead of
    the request puts its message first in line for it. The reference's consumer reads acks from
    a queue of its own, and there the request often overtakes the NAK (4 runs in 6 here)."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        first = (await pull(nc, "S", "C", {"batch": 1}))[0]
        await nc.publish(first.reply, b"-NAK")  # no reply: nothing to wait for before the pull
        again = [(m.data, m.metadata.num_delivered) for m in await pull(nc, "S", "C", {"batch": 1})]
        if js_server.kind == "reference":
            assert again in ([(b"m1", 2)], [(b"m2", 1)])
        else:
            assert again == [(b"m1", 2)]


async def test_a_pull_sent_right_behind_acks_gets_the_room_they_free(js_server):
    """With max_ack_pending reached, acks sent together with the next pull request free the room
    that request is served from, as if they had been answered one by one."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=4)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit", "max_ack_pending": 2})
        got = await pull(nc, "S", "C", {"batch": 2})
        for m in got:
            await nc.publish(m.reply, b"+ACK")
        again = await pull(nc, "S", "C", {"batch": 2, "expires": 2 * NS})
        assert [m.data for m in again] == [b"m3", b"m4"]
        c = await counters(js, "S", "C")
        assert (c["ack_floor"], c["num_ack_pending"]) == ((2, 2), 2)


async def test_a_naked_message_keeps_its_place_ahead_of_a_later_ack_wait_expiry(js_server):
    """As the reference: redeliveries go in the order they fell due; messages whose ack wait ran
    out together go in sequence order behind what was NAKed before."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=5)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit", "ack_wait": NS})
        got = await pull(nc, "S", "C", {"batch": 4})
        for m in (got[0], got[2]):
            await confirm(nc, m, b"+ACK")
        await confirm(nc, got[3], b"-NAK")
        await anyio.sleep(1.5)  # the ack wait of stream sequence 2 runs out after the NAK
        again = await pull(nc, "S", "C", {"batch": 3})
        assert [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in again] == [
            (4, 2),
            (2, 2),
            (5, 1),
        ]


async def test_a_new_deliver_subject_gets_the_pending_messages_at_once(js_server):
    """As the reference: updating a push consumer's deliver subject redelivers everything pending
    to the new one at once, without waiting for the ack wait."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        old = await nc.subscribe("d.A")
        new = await nc.subscribe("d.B")
        await nc.flush()
        config = {
            "durable_name": "P",
            "deliver_subject": "d.A",
            "ack_policy": "explicit",
            "ack_wait": 30 * NS,
        }
        await create(nc, "S", config)
        first = [await old.next_msg(timeout=3) for _ in range(3)]
        assert [m.metadata.num_delivered for m in first] == [1, 1, 1]
        await old.unsubscribe()  # while the old subject has interest, the update is refused
        await nc.flush()
        await create(nc, "S", {**config, "deliver_subject": "d.B"}, action="update")
        again = [await new.next_msg(timeout=3) for _ in range(3)]
        assert [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in again] == [
            (1, 2),
            (2, 2),
            (3, 2),
        ]
        assert (await counters(js, "S", "P"))["num_redelivered"] == 3


async def test_naked_messages_come_back_in_nak_order_and_keep_their_first_delivery(js_server):
    """NAKed messages are redelivered in NAK order, with new consumer sequences; the ack floor
    counts them by their first delivery's."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        got = await pull(nc, "S", "C", {"batch": 3})
        await confirm(nc, got[1], b"-NAK")
        await confirm(nc, got[0], b"-NAK")
        again = await pull(nc, "S", "C", {"batch": 2})
        assert [(m.metadata.sequence.stream, m.metadata.sequence.consumer) for m in again] == [(2, 4), (1, 5)]
        await confirm(nc, got[2], b"+ACK")
        c = await counters(js, "S", "C")
        assert (c["delivered"], c["ack_floor"]) == ((5, 3), (0, 0))
        await confirm(nc, again[1], b"+ACK")  # stream 1: first delivered as consumer 1
        c = await counters(js, "S", "C")
        assert (c["ack_floor"], c["num_ack_pending"]) == ((1, 1), 1)


async def test_the_ack_floor_waits_for_the_lowest_delivery(js_server):
    """A filtered consumer's later delivery acked while its first is pending moves neither
    number of the ack floor (it moves with the first delivery's ack)."""
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="F", subjects=["f.>"])
        for subj in ("f.x", "f.x", "f.x", "f.c", "f.c"):  # f.c at 4 and 5
            await js.publish(subj, b"m")
        await create(nc, "F", {"durable_name": "C", "ack_policy": "explicit", "filter_subject": "f.c"})
        got = await pull(nc, "F", "C", {"batch": 2})
        await confirm(nc, got[1])
        assert (await counters(js, "F", "C"))["ack_floor"] == (0, 0)
        await confirm(nc, got[0])
        assert (await counters(js, "F", "C"))["ack_floor"] == (2, 5)


async def test_with_ack_all_a_removed_delivery_is_the_floor(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=5)
        await api(nc, "$JS.API.STREAM.MSG.DELETE.S", {"seq": 4})
        await create(nc, "S", {"durable_name": "C", "ack_policy": "all"})
        await pull(nc, "S", "C", {"batch": 4})  # stream 1, 2, 3, 5
        await api(nc, "$JS.API.STREAM.MSG.DELETE.S", {"seq": 3})

        async def floor_moved() -> bool:  # the reference tells its consumers a moment later
            c = await counters(js, "S", "C")
            return (c["ack_floor"], c["num_ack_pending"]) == ((3, 3), 1)

        await eventually(floor_moved)


async def test_a_filtered_purge_moves_the_consumers_it_concerns(js_server):
    """A purge with a filter moves a consumer whose filter lies within it up to what is left
    on it, one that takes more (no filter) up to the stream's first message, and leaves the
    others where they are."""
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="P", subjects=["p.>"])
        for subj in ("p.b", "p.c.e", "p.c.d"):
            await js.publish(subj, b"m")
        for name, filt in (("DISJOINT", "p.a"), ("WITHIN", "p.c.d"), ("ALL", None)):
            config = {"durable_name": name, "ack_policy": "explicit", "deliver_policy": "new"}
            await create(nc, "P", {**config, **({"filter_subject": filt} if filt else {})})
        for subj in ("p.a", "p.b", "p.c.e", "p.c.d"):  # 4 to 7
            await js.publish(subj, b"m")
        r = await api(nc, "$JS.API.STREAM.PURGE.P", {"filter": "p.c.>", "keep": 1})  # 2, 3, 6 go
        assert r["purged"] == 3
        floors = {}
        for name in ("DISJOINT", "WITHIN", "ALL"):
            c = await counters(js, "P", name)
            floors[name] = (c["delivered"][1], c["ack_floor"][1])
        assert floors == {"DISJOINT": (3, 3), "WITHIN": (6, 6), "ALL": (3, 3)}
        await js.add_stream(name="T", subjects=["t.>"])
        for subj in ("t.c.e", "t.c.d", "t.b", "t.c.d"):
            await js.publish(subj, b"m")
        await create(nc, "T", {"durable_name": "D", "ack_policy": "explicit", "filter_subject": "t.a"})
        await api(nc, "$JS.API.STREAM.PURGE.T", {"filter": "t.c.>", "keep": 1})  # first_seq 3
        c = await counters(js, "T", "D")
        assert (c["delivered"], c["ack_floor"]) == ((0, 0), (0, 0)), "a disjoint consumer stays"


async def test_term_is_an_ack_with_an_advisory(js_server):
    """+TERM acknowledges (with ack all, everything below) and sends MSG_TERMINATED about the
    delivery it answered: for a redelivery, that delivery's consumer sequence and count."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.S.*")
        await create(nc, "S", {"durable_name": "T", "ack_policy": "all"})
        got = await pull(nc, "S", "T", {"batch": 3})
        await confirm(nc, got[2], b"+TERM done with it")
        c = await counters(js, "S", "T")
        assert (c["ack_floor"], c["num_ack_pending"]) == ((3, 3), 0), "with ack all, +TERM acks all below"
        event = json.loads((await advisories.next_msg(timeout=5)).data)
        assert event["type"] == "io.nats.jetstream.advisory.v1.terminated"
        assert (event["stream"], event["consumer"], event["stream_seq"], event["consumer_seq"]) == (
            "S",
            "T",
            3,
            3,
        )
        assert (event["deliveries"], event["reason"]) == (1, "done with it")
        await create(nc, "S", {"durable_name": "R", "ack_policy": "explicit"})
        first = await pull(nc, "S", "R", {"batch": 2})
        await confirm(nc, first[0], b"-NAK")
        again = await pull(nc, "S", "R", {"batch": 1})  # stream 1 again, as consumer 3
        await confirm(nc, again[0], b"+TERM")
        event = json.loads((await advisories.next_msg(timeout=5)).data)
        assert (event["consumer"], event["stream_seq"], event["consumer_seq"], event["deliveries"]) == (
            "R",
            1,
            3,
            2,
        )


def _rfc3339_in(seconds: float) -> str:
    """The wall-clock time ``seconds`` from now, as RFC 3339 with microseconds."""
    t = time.time() + seconds
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


async def test_pause_and_resume_a_consumer(js_server):
    """CONSUMER.PAUSE (nats-py's pause_consumer/resume_consumer): a paused consumer delivers
    nothing, resumes when asked or when its pause runs out, and advises each change."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.S.C")
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        paused = await js.pause_consumer("S", "C", _rfc3339_in(60))
        assert paused.paused and paused.pause_remaining
        info = await api(nc, "$JS.API.CONSUMER.INFO.S.C")
        assert info["paused"] and info["pause_remaining"] > 0 and info["config"]["pause_until"]
        assert info["config"]["metadata"]["_nats.req.level"] == "1"
        got = await pull(nc, "S", "C", {"batch": 1, "no_wait": True})
        assert [status(m) for m in got] == [("404", "No Messages")], "nothing while paused"
        resumed = await js.resume_consumer("S", "C")
        assert not resumed.paused and resumed.pause_until == "1970-01-01T00:00:00Z"
        assert await drain(nc, "S", "C") == [1, 2]
        events = [json.loads((await advisories.next_msg(timeout=5)).data) for _ in range(2)]
        assert [(e["type"], e["paused"]) for e in events] == [
            ("io.nats.jetstream.advisory.v1.consumer_pause", True),
            ("io.nats.jetstream.advisory.v1.consumer_pause", False),
        ]
        # a pause that runs out: a waiting request gets the message then, with an advisory
        await js.publish("s.0", b"later")
        await js.pause_consumer("S", "C", _rfc3339_in(1.5))
        got = await pull(nc, "S", "C", {"batch": 1, "expires": 10 * NS}, want=1, timeout=10)
        assert [m.metadata.sequence.stream for m in got] == [3]
        events = [json.loads((await advisories.next_msg(timeout=5)).data) for _ in range(2)]
        assert [e["paused"] for e in events] == [True, False]
        # an empty body resumes too; errors keep the response's zero fields
        r = await api(nc, "$JS.API.CONSUMER.PAUSE.S.C", b"")
        assert (r["paused"], r["pause_until"]) == (False, "0001-01-01T00:00:00Z")
        r = await api(nc, "$JS.API.CONSUMER.PAUSE.S.NOPE", {"pause_until": _rfc3339_in(60)})
        assert (r["error"]["err_code"], r["paused"], r["pause_until"]) == (
            10014,
            False,
            "0001-01-01T00:00:00Z",
        )
        r = await api(nc, "$JS.API.CONSUMER.PAUSE.S.C", {"pause_until": 5})
        assert r["error"]["err_code"] == 10025


async def test_a_consumer_created_paused_sends_heartbeats_until_it_resumes(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.S.P")
        sub = await nc.subscribe("dlv.p")
        config = {
            "durable_name": "P",
            "deliver_subject": "dlv.p",
            "ack_policy": "none",
            "idle_heartbeat": NS // 5,
            "pause_until": _rfc3339_in(2),
        }
        r = await create(nc, "S", config)
        assert r["paused"]
        first = await sub.next_msg(timeout=5)
        assert status(first) == ("100", "Idle Heartbeat"), "paused: heartbeats, no messages"
        seqs: list[int] = []
        while len(seqs) < 2:
            m = await sub.next_msg(timeout=10)
            if not is_status(m):
                seqs.append(m.metadata.sequence.stream)
        assert seqs == [1, 2]
        events = [json.loads((await advisories.next_msg(timeout=5)).data) for _ in range(2)]
        assert [e["paused"] for e in events] == [True, False]


async def test_an_ack_none_consumer_has_no_ack_subscription(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(nc, "S", {"durable_name": "AN", "ack_policy": "none"})
        got = await pull(nc, "S", "AN", {"batch": 1})
        for body in (b"+ACK", b"+NXT"):
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request(got[0].reply, body, timeout=5)
        c = await counters(js, "S", "AN")
        assert (c["delivered"], c["num_pending"]) == ((1, 1), 2), "the +NXT delivered nothing"


def _account_hash(name: str) -> str:
    """The reference's 8-character account hash in its 11-token ack subjects."""
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "".join(digits[b % 62] for b in hashlib.sha256(name.encode()).digest()[:8])


async def test_ack_subjects_of_the_two_forms_only_reach_the_consumer(js_server):
    """As the reference: an ack subject has 9 tokens, or 11 and more with the domain ("_" without
    one) and the account's hash in front; another count has no responder and acks nothing."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        await pull(nc, "S", "C", {"batch": 3})
        for wrong in ("$JS.ACK.S.C.1.1.1.0", "$JS.ACK.S.C.1.1.1.0.0.7", "$JS.ACK.S.C.1.1.1.0.0.7.8"):
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request(wrong, b"+ACK", timeout=5)
        assert (await counters(js, "S", "C"))["num_ack_pending"] == 3
        v2 = f"$JS.ACK._.{_account_hash('$G')}.S.C.1.2.2.0.0"
        assert (await nc.request(v2, b"+ACK", timeout=5)).data == b""
        assert (await nc.request(v2 + ".extra", b"+ACK", timeout=5)).data == b""  # double ack
        c = await counters(js, "S", "C")
        assert (c["num_ack_pending"], c["ack_floor"]) == (2, (0, 0))


async def test_acks_of_undelivered_or_zero_sequences_get_no_confirmation(js_server):
    """As the reference: an ack or +TERM naming a message not delivered yet, and anything naming
    stream sequence 0, is not confirmed (a +TERM still sends its advisory); a sequence that is
    no number names no pending message, and a NAK of it is confirmed."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        terminated = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.S.*")
        await create(nc, "S", {"durable_name": "C", "ack_policy": "all"})
        await pull(nc, "S", "C", {"batch": 1})
        for subject, body in [
            ("$JS.ACK.S.C.1.3.3.0.0", b"+ACK"),
            ("$JS.ACK.S.C.1.999.3.0.0", b""),
            ("$JS.ACK.S.C.1.3.3.0.0", b"+TERM late"),
            ("$JS.ACK.S.C.1.0.1.0.0", b"-NAK"),
            ("$JS.ACK.S.C.1.0.1.0.0", b"+WPI"),
            ("$JS.ACK.S.C.1.x.1.0.0", b"+ACK"),
        ]:
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request(subject, body, timeout=0.5)
        for body in (b"-NAK", b"+WPI", b"bogus"):
            assert (await nc.request("$JS.ACK.S.C.1.x.1.0.0", body, timeout=5)).data == b""
        event = json.loads((await terminated.next_msg(timeout=5)).data)
        fields = ("consumer_seq", "stream_seq", "deliveries", "reason")
        assert [event[f] for f in fields] == [3, 3, 1, "late"]
        c = await counters(js, "S", "C")
        assert (c["ack_floor"], c["num_ack_pending"]) == ((0, 0), 1), "ack all acked nothing past seq 1"


@pytest.mark.parametrize(
    ("body", "redelivery"),
    [
        (b'-NAK {"delay": 5000000000}', "delayed"),
        (b'-NAK {"Delay": 5000000000}', "delayed"),
        (b'-NAK {"DELAY": 5000000000}', "delayed"),
        (b'-NAK {"delay": 5e9}', "at once"),
        (b'-NAK {"delay": 5000000000.0}', "at once"),
        (b'-NAK {"delay": "5s"}', "at once"),
        (b'-NAK {"other": 1.5, "delay": 5000000000}', "delayed"),
        # a delay that parses but is not positive waits for the reference's 10 ms check: too short
        # to tell from "at once" on a loaded machine, so only the redelivery itself is checked
        (b'-NAK {"delay": 0}', "soon"),
        (b'-NAK {"delay": -5}', "soon"),
        (b"-NAK 0s", "soon"),
    ],
)
async def test_a_nak_delay_is_read_as_the_reference_reads_it(js_server, body, redelivery):
    """The JSON delay is a whole number of nanoseconds under a key in any case; a fraction, an
    exponent or a string makes it a plain NAK, redelivered at once (ahead of new messages)."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        (first,) = await pull(nc, "S", "C", {"batch": 1})
        await confirm(nc, first, body)
        if redelivery == "soon":
            got = await pull(nc, "S", "C", {"batch": 2, "expires": 5_000_000_000})
            assert sorted(m.metadata.sequence.stream for m in got) == [1, 2]
            return
        (nxt,) = await pull(nc, "S", "C", {"batch": 1})
        assert nxt.metadata.sequence.stream == (2 if redelivery == "delayed" else 1)


async def test_a_nak_of_a_delivery_outside_the_pending_range_is_ignored(js_server):
    """As the reference: a NAK whose consumer sequence is at or below the ack floor, or past the
    last delivery, neither redelivers nor advises."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        naked = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.*")
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        await pull(nc, "S", "C", {"batch": 1})
        for dseq in (0, 99):
            await nc.request(f"$JS.ACK.S.C.1.1.{dseq}.0.0", b"-NAK", timeout=5)
        (nxt,) = await pull(nc, "S", "C", {"batch": 1})
        assert nxt.metadata.sequence.stream == 2
        with pytest.raises(nats.errors.TimeoutError):
            await naked.next_msg(timeout=0.3)


@pytest.mark.parametrize("how", ["ack_wait", "nak"])
async def test_max_ack_pending_does_not_hold_back_redeliveries(js_server, how):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(
            nc, "S", {"durable_name": "C", "ack_policy": "explicit", "max_ack_pending": 1, "ack_wait": NS}
        )
        (first,) = await pull(nc, "S", "C", {"batch": 1, "expires": NS // 2})
        if how == "nak":
            await confirm(nc, first, b"-NAK")
        got = await pull(nc, "S", "C", {"batch": 1, "expires": 3 * NS})
        assert [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in got] == [(1, 2)]


async def test_unacked_message_is_redelivered_after_ack_wait(js_server):
    async with jetstream(js_server) as (_, js):
        await make_stream(js, n=1)
        sub = await js.pull_subscribe("s.>", durable="AW", stream="S", config=ConsumerConfig(ack_wait=0.5))
        assert (await js.consumer_info("S", "AW")).config.ack_wait == 0.5
        first = (await sub.fetch(1, timeout=2))[0]
        start = time.monotonic()
        again = (await sub.fetch(1, timeout=3))[0]
        assert time.monotonic() - start >= 0.4
        assert again.data == first.data and again.metadata.num_delivered == 2
        assert again.metadata.sequence.consumer == 2 and again.metadata.sequence.stream == 1
        await again.ack_sync()
        c = await counters(js, "S", "AW")
        assert (c["delivered"], c["ack_floor"], c["num_ack_pending"], c["num_redelivered"]) == (
            (2, 1),
            (2, 1),
            0,
            0,
        )


async def test_backoff_spaces_the_redeliveries(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        r = await create(
            nc,
            "S",
            {
                "durable_name": "BO",
                "ack_policy": "explicit",
                "backoff": [100_000_000, 600_000_000],
                "max_deliver": 3,
            },
        )
        assert r["config"]["backoff"] == [100_000_000, 600_000_000]
        assert r["config"]["ack_wait"] == 100_000_000, "ack_wait becomes the first backoff"
        times = []
        for n in (1, 2, 3):
            got = await pull(nc, "S", "BO", {"batch": 1, "expires": 2 * NS})
            assert got[0].metadata.num_delivered == n
            times.append(time.monotonic())
        assert times[2] - times[1] >= 0.5, "the second redelivery waits the second backoff"
        got = await pull(nc, "S", "BO", {"batch": 1, "expires": NS})
        assert status(got[0]) == ("408", "Request Timeout"), "max_deliver 3 ends it"


async def test_a_message_naked_at_max_deliver_is_not_redelivered(js_server):
    """A plain -NAK after the last allowed delivery does not bring the message back: pull or
    push, it reaches max_deliver (one advisory), as it would by ack_wait."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.*")
        naked = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.*")
        await create(nc, "S", {"durable_name": "N", "ack_policy": "explicit", "max_deliver": 2})
        deliveries = []
        for _ in range(3):
            got = await pull(nc, "S", "N", {"batch": 1, "expires": NS})
            if is_status(got[0]):
                assert status(got[0]) == ("408", "Request Timeout")
                break
            deliveries.append(got[0].metadata.num_delivered)
            await nc.publish(got[0].reply, b"-NAK")
        assert deliveries == [1, 2]
        adv = json.loads((await advisories.next_msg(timeout=3)).data)
        assert (adv["consumer"], adv["stream_seq"], adv["deliveries"]) == ("N", 1, 2)
        nak_advisories = [json.loads((await naked.next_msg(timeout=3)).data) for _ in range(2)]
        assert [(a["type"], a["stream_seq"], a["consumer_seq"], a["deliveries"]) for a in nak_advisories] == [
            ("io.nats.jetstream.advisory.v1.nak", 1, 1, 1),
            ("io.nats.jetstream.advisory.v1.nak", 1, 2, 2),
        ]
        c = await counters(js, "S", "N")
        assert (c["num_ack_pending"], c["num_pending"], c["delivered"]) == (0, 0, (2, 1))

        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        push = {"durable_name": "P", "ack_policy": "explicit", "max_deliver": 2, "deliver_subject": inbox}
        await create(nc, "S", push)
        pushed = []
        while True:
            try:
                m = await sub.next_msg(timeout=1)
            except nats.errors.TimeoutError:
                break
            pushed.append(m.metadata.num_delivered)
            await nc.publish(m.reply, b"-NAK")
            assert len(pushed) <= 3, "redelivered past max_deliver"
        assert pushed == [1, 2]
        adv = json.loads((await advisories.next_msg(timeout=3)).data)
        assert (adv["consumer"], adv["deliveries"]) == ("P", 2)


async def test_an_ack_of_a_message_past_max_deliver_leaves_the_floor_to_the_next_ack(js_server):
    """The message that reached max_deliver no longer holds the ack floor once acked, but the
    floor moves only with the next ack of a pending message, as in the reference."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=4)
        await create(nc, "S", {"durable_name": "M", "ack_policy": "explicit", "max_deliver": 2})
        first = (await pull(nc, "S", "M", {"batch": 1, "expires": NS}))[0]
        await confirm(nc, first, b"-NAK")
        again = (await pull(nc, "S", "M", {"batch": 1, "expires": NS}))[0]
        await confirm(nc, again, b"-NAK")
        following = (await pull(nc, "S", "M", {"batch": 1, "expires": NS}))[0]
        assert following.data == b"m2", "m1 reached max_deliver"
        await confirm(nc, first)
        c = await counters(js, "S", "M")
        assert (c["ack_floor"], c["num_ack_pending"], c["num_redelivered"]) == ((0, 0), 1, 0)
        await confirm(nc, following)
        assert (await counters(js, "S", "M"))["ack_floor"] == (3, 2)


async def test_sample_freq_sends_ack_metrics(js_server):
    """sample_freq "100%": every explicit ack of a pending message sends a consumer_ack metric
    naming the delivery it answered; without sample_freq, none."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        metrics = await nc.subscribe("$JS.EVENT.METRIC.CONSUMER.ACK.S.*")
        await create(nc, "S", {"durable_name": "M", "ack_policy": "explicit", "sample_freq": "100%"})
        await create(nc, "S", {"durable_name": "Q", "ack_policy": "explicit"})
        for consumer in ("M", "Q"):
            for m in await pull(nc, "S", consumer, {"batch": 2, "expires": NS}):
                await m.ack_sync()
        got = [json.loads((await metrics.next_msg(timeout=3)).data) for _ in range(2)]
        fields = ("type", "consumer", "stream_seq", "consumer_seq", "deliveries")
        assert [tuple(g[f] for f in fields) for g in got] == [
            ("io.nats.jetstream.metric.v1.consumer_ack", "M", 1, 1, 1),
            ("io.nats.jetstream.metric.v1.consumer_ack", "M", 2, 2, 1),
        ]
        assert all(g["ack_time"] > 0 for g in got)
        with pytest.raises(nats.errors.TimeoutError):
            await metrics.next_msg(timeout=0.5)  # none for Q


async def test_max_deliver_stops_redelivery_with_an_advisory(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.MD")
        await create(
            nc,
            "S",
            {"durable_name": "MD", "ack_policy": "explicit", "ack_wait": 300_000_000, "max_deliver": 2},
        )
        first = await pull(nc, "S", "MD", {"batch": 1, "expires": 2 * NS})
        second = await pull(nc, "S", "MD", {"batch": 1, "expires": 2 * NS})
        assert [first[0].metadata.num_delivered, second[0].metadata.num_delivered] == [1, 2]
        third = await pull(nc, "S", "MD", {"batch": 1, "expires": NS})
        assert len(third) == 1 and status(third[0]) == ("408", "Request Timeout"), "no third delivery"
        # the reference sends the advisory when it would redeliver, i.e. while a pull is waiting
        adv = await advisories.next_msg(timeout=3)
        body = json.loads(adv.data)
        assert body["type"] == "io.nats.jetstream.advisory.v1.max_deliver"
        assert (body["stream"], body["consumer"], body["stream_seq"], body["deliveries"]) == ("S", "MD", 1, 2)
        assert body["id"] and body["timestamp"]
        got = await pull(nc, "S", "MD", {"batch": 1, "no_wait": True})
        assert status(got[0]) == ("404", "No Messages")
        c = await counters(js, "S", "MD")
        # the reference leaves the ack floor where it was and stops counting the message as pending
        assert c == {
            "delivered": (2, 1),
            "ack_floor": (0, 0),
            "num_pending": 0,
            "num_ack_pending": 0,
            "num_redelivered": 1,
            "num_waiting": 0,
        }


async def test_double_ack_is_confirmed_even_when_repeated(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        sub = await js.pull_subscribe("s.>", durable="DA", stream="S")
        msgs = await sub.fetch(2, timeout=2)
        reply = await msgs[0].ack_sync()
        assert reply.data == b""
        c = await counters(js, "S", "DA")
        assert (c["ack_floor"], c["num_ack_pending"]) == ((1, 1), 1)
        again = await confirm(nc, msgs[0])  # acking an acked message is answered and changes nothing
        assert again.data == b""
        assert await counters(js, "S", "DA") == c


async def test_ack_policy_all_acks_everything_up_to_the_acked_message(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=4)
        await create(nc, "S", {"durable_name": "ALL", "ack_policy": "all"})
        got = await pull(nc, "S", "ALL", {"batch": 3})
        assert len(got) == 3
        assert (await counters(js, "S", "ALL"))["num_ack_pending"] == 3
        await confirm(nc, got[2])
        c = await counters(js, "S", "ALL")
        assert (c["ack_floor"], c["num_ack_pending"], c["num_pending"]) == ((3, 3), 0, 1)
        # acking the middle of a fresh batch acks what came before it
        nxt = await pull(nc, "S", "ALL", {"batch": 1})
        await confirm(nc, nxt[0])
        c = await counters(js, "S", "ALL")
        assert (c["delivered"], c["ack_floor"], c["num_ack_pending"]) == ((4, 4), (4, 4), 0)


async def test_ack_policy_all_partial_ack(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(nc, "S", {"durable_name": "AP", "ack_policy": "all"})
        got = await pull(nc, "S", "AP", {"batch": 3})
        await confirm(nc, got[1])
        c = await counters(js, "S", "AP")
        assert (c["delivered"], c["ack_floor"], c["num_ack_pending"]) == ((3, 3), (2, 2), 1)


async def test_ack_policy_none_needs_no_acks(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        r = await create(nc, "S", {"durable_name": "AN", "ack_policy": "none"})
        assert "ack_wait" not in r["config"] and "max_ack_pending" not in r["config"]
        got = await pull(nc, "S", "AN", {"batch": 2})
        assert len(got) == 2
        assert got[0].reply.startswith("$JS.ACK.S.AN.1.1.1."), "even ack-none deliveries carry an ack subject"
        assert await counters(js, "S", "AN") == {
            "delivered": (2, 2),
            "ack_floor": (2, 2),
            "num_pending": 1,
            "num_ack_pending": 0,
            "num_redelivered": 0,
            "num_waiting": 0,
        }


@pytest.mark.parametrize(
    ("subject", "body"),
    [
        ("$JS.ACK.S.NOPE.1.1.1.1.0", b"+ACK"),  # unknown consumer
        ("$JS.ACK.NOPE.BAD.1.1.1.1.0", b"+ACK"),  # unknown stream
        ("$JS.ACK.S.BAD.1", b"+ACK"),  # too few tokens
        ("$JS.ACK.S.BAD.x.y.z.w.v", b"+ACK"),  # tokens that are not numbers
        ("$JS.ACK.S.BAD.1.99.99.1.0", b"+ACK"),  # a sequence never delivered
        (None, b"+BOGUS"),  # an unknown ack body
        (None, b'-NAK {"delay": "soon"}'),  # a malformed nak body
        (None, b"+NXT {not json"),
    ],
    ids=[
        "unknown_consumer",
        "unknown_stream",
        "short",
        "non_numeric",
        "never_delivered",
        "unknown_body",
        "bad_nak_json",
        "bad_next_json",
    ],
)
async def test_bad_acks_do_not_break_the_server(js_server, subject, body):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(nc, "S", {"durable_name": "BAD", "ack_policy": "explicit"})
        first = (await pull(nc, "S", "BAD", {"batch": 1}))[0]
        await nc.publish(subject or first.reply, body)
        await nc.flush()
        nak = body.startswith(b"-NAK")
        overtook = 0  # the reference reads acks and pull requests from two queues: a pull may
        while True:  # be served before the NAK ahead of it is, and get the next message first
            got = await pull(nc, "S", "BAD", {"batch": 1, "expires": 2 * NS})
            assert got and not is_status(got[0]), "a later pull still gets a message"
            seq = got[0].metadata.sequence.stream
            if not nak or seq == 1 or overtook == 2:
                break
            overtook += 1
        # a malformed -NAK body still naks (message 1 comes back); the other bad acks are ignored
        assert seq == (1 if nak else 2)
        await confirm(nc, got[0])
        assert (await js.publish("s.x", b"still fine")).seq == 4
        expected = (3 if nak else 2) - overtook  # what overtook the NAK stays delivered, unacked

        async def pending_reached() -> bool:  # the reference counts a new message a moment later
            return (await js.consumer_info("S", "BAD")).num_pending == expected

        await eventually(pending_reached)


# ------------------------------------------------------------------------------------------ retention


async def test_workqueue_stream_removes_a_message_on_ack(js_server):
    async with jetstream(js_server) as (_, js):
        await make_stream(js, "WQ", n=3, retention=RetentionPolicy.WORK_QUEUE)
        sub = await js.pull_subscribe("wq.>", durable="WORK", stream="WQ")
        msgs = await sub.fetch(3, timeout=2)
        assert (await js.stream_info("WQ")).state.messages == 3, "delivered but unacked stays"
        await msgs[1].ack_sync()

        async def removed() -> bool:
            st = (await js.stream_info("WQ")).state
            return st.messages == 2

        await eventually(removed)
        for m in (msgs[0], msgs[2]):
            await m.ack_sync()

        async def empty() -> bool:
            st = (await js.stream_info("WQ")).state
            return (st.messages, st.first_seq, st.last_seq) == (0, 4, 3)

        await eventually(empty)


@pytest.mark.parametrize(
    ("second", "err_code", "description"),
    [
        (
            {"durable_name": "B", "ack_policy": "explicit"},
            10099,
            "multiple non-filtered consumers not allowed on workqueue stream",
        ),
        (
            {"durable_name": "B", "ack_policy": "explicit", "filter_subject": "wq.a"},
            10100,
            "filtered consumer not unique on workqueue stream",
        ),
    ],
    ids=["unfiltered", "overlapping_filter"],
)
async def test_workqueue_refuses_a_second_overlapping_consumer(js_server, second, err_code, description):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, "WQ", retention=RetentionPolicy.WORK_QUEUE)
        assert "error" not in await create(nc, "WQ", {"durable_name": "A", "ack_policy": "explicit"})
        r = await create(nc, "WQ", second)
        assert r["error"] == {"code": 400, "err_code": err_code, "description": description}


async def test_workqueue_consumer_rules(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, "WQ", retention=RetentionPolicy.WORK_QUEUE)
        r = await create(nc, "WQ", {"durable_name": "A", "ack_policy": "explicit", "filter_subject": "wq.a"})
        assert "error" not in r
        r = await create(nc, "WQ", {"durable_name": "B", "ack_policy": "explicit", "filter_subject": "wq.b"})
        assert "error" not in r, "disjoint filters may share a work queue"
        r = await create(nc, "WQ", {"durable_name": "C", "ack_policy": "none", "filter_subject": "wq.c"})
        assert r["error"]["err_code"] == 10084
        assert (
            r["error"]["description"]
            == "consumer in pull mode requires explicit ack policy on workqueue stream"
        )
        r = await create(
            nc,
            "WQ",
            {
                "durable_name": "D",
                "ack_policy": "explicit",
                "filter_subject": "wq.d",
                "deliver_policy": "last",
            },
        )
        assert r["error"]["err_code"] == 10101
        assert r["error"]["description"] == "consumer must be deliver all on workqueue stream"


async def test_interest_stream_removes_a_message_once_every_consumer_acked(js_server):
    async with jetstream(js_server) as (_, js):
        await make_stream(js, "IN", retention=RetentionPolicy.INTEREST)
        a = await js.pull_subscribe("in.>", durable="A", stream="IN")
        b = await js.pull_subscribe("in.>", durable="B", stream="IN")
        await js.publish("in.x", b"1")
        await js.publish("in.x", b"2")
        assert (await js.stream_info("IN")).state.messages == 2
        for m in await a.fetch(2, timeout=2):
            await m.ack_sync()
        assert (await js.stream_info("IN")).state.messages == 2, "B has not acked yet"
        b_msgs = await b.fetch(2, timeout=2)
        await b_msgs[0].ack_sync()

        async def one_left() -> bool:
            st = (await js.stream_info("IN")).state
            return (st.messages, st.first_seq) == (1, 2)

        await eventually(one_left)
        await b_msgs[1].ack_sync()

        async def none_left() -> bool:
            return (await js.stream_info("IN")).state.messages == 0

        await eventually(none_left)


async def test_interest_stream_keeps_only_what_a_consumer_filter_takes(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, "IN", retention=RetentionPolicy.INTEREST)
        await create(nc, "IN", {"durable_name": "A", "ack_policy": "explicit", "filter_subject": "in.a"})
        ack = await js.publish("in.b", b"nobody filters this")
        st = (await js.stream_info("IN")).state
        assert (ack.seq, st.messages, st.first_seq, st.last_seq) == (1, 0, 2, 1)
        await js.publish("in.a", b"A takes this")
        assert (await js.stream_info("IN")).state.messages == 1


async def emptied(js, stream: str, first_seq: int) -> None:
    """Wait until ``stream`` holds nothing and starts at ``first_seq``."""

    async def empty() -> bool:
        st = (await js.stream_info(stream)).state
        return (st.messages, st.first_seq) == (0, first_seq)

    await eventually(empty)


async def test_a_stream_updated_to_interest_keeps_what_it_holds(js_server):
    async with jetstream(js_server) as (nc, js):
        config = {"name": "B", "subjects": ["b.>"]}
        await api(nc, "$JS.API.STREAM.CREATE.B", config)
        await create(nc, "B", {"durable_name": "C", "ack_policy": "none", "filter_subject": "b.other"})
        await js.publish("b.x", b"1")
        await js.publish("b.y", b"2")
        r = await api(nc, "$JS.API.STREAM.UPDATE.B", {**config, "retention": "interest"})
        assert r["state"]["messages"] == 2, "no consumer takes them, but they stay"
        await js.publish("b.z", b"3")
        st = (await js.stream_info("B")).state
        assert (st.messages, st.last_seq) == (2, 3), "a new one that no consumer takes is not kept"


async def test_interest_stream_drops_what_an_ack_none_consumer_delivered(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, "IN", retention=RetentionPolicy.INTEREST)
        await create(nc, "IN", {"durable_name": "N", "ack_policy": "none"})
        await js.publish("in.x", b"1")
        await js.publish("in.x", b"2")
        assert (await js.stream_info("IN")).state.messages == 2
        assert len(await pull(nc, "IN", "N", {"batch": 2})) == 2
        await emptied(js, "IN", first_seq=3)


async def test_interest_stream_drops_what_only_a_deleted_consumer_still_needed(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, "IN", retention=RetentionPolicy.INTEREST)
        await create(nc, "IN", {"durable_name": "A", "ack_policy": "explicit"})
        await create(nc, "IN", {"durable_name": "B", "ack_policy": "explicit"})
        for i in range(3):
            await js.publish("in.x", b"%d" % i)
        for m in await pull(nc, "IN", "A", {"batch": 3}):
            await confirm(nc, m)
        assert (await js.stream_info("IN")).state.messages == 3, "B still needs them"
        await js.delete_consumer("IN", "B")
        await emptied(js, "IN", first_seq=4)


# ----------------------------------------------------------------------------------------- removals


async def test_a_deleted_pending_message_counts_as_acknowledged(js_server):
    """The reference tells its consumers of a removal asynchronously, so its consumer info may
    briefly lag the delete's reply (seen once in CI); leafjet applies it before replying, so
    it is held to the first answer."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=4)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        got = await pull(nc, "S", "C", {"batch": 3})
        await confirm(nc, got[0])

        async def after_removal(seq: int, keys: tuple[str, ...], want: tuple) -> tuple:
            await js.delete_msg("S", seq)

            async def read() -> tuple:
                c = await counters(js, "S", "C")
                return tuple(c[k] for k in keys)

            if js_server.kind == "reference":
                with contextlib.suppress(TimeoutError):
                    await eventually(lambda: _equals(read, want), timeout=5)
            return await read()

        assert await after_removal(2, ("ack_floor", "num_ack_pending"), ((2, 2), 1)) == ((2, 2), 1)
        keys = ("ack_floor", "num_ack_pending", "num_pending")
        assert await after_removal(3, keys, ((3, 3), 0, 1)) == ((3, 3), 0, 1)


async def _equals(read, want) -> bool:
    return await read() == want


async def test_purged_or_limited_pending_messages_are_no_longer_pending(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, "P", max_msgs_per_subject=2)
        for subject in ("p.a", "p.b", "p.a", "p.b"):
            await js.publish(subject, b"x")
        await create(nc, "P", {"durable_name": "C", "ack_policy": "explicit"})
        assert len(await pull(nc, "P", "C", {"batch": 4})) == 4
        await js.purge_stream("P", subject="p.b")
        assert (await counters(js, "P", "C"))["num_ack_pending"] == 2, "the purged p.b messages went"
        await js.publish("p.a", b"x")  # the subject limit drops seq 1

        async def settled() -> dict | None:
            # the reference may acknowledge the publish before its consumer counts it
            c = await counters(js, "P", "C")
            return c if c["num_pending"] == 1 else None

        c = await eventually(settled)
        assert (c["num_ack_pending"], c["num_pending"]) == (1, 1)


async def test_a_purge_releases_messages_that_reached_max_deliver(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(
            nc, "S", {"durable_name": "C", "ack_policy": "explicit", "max_deliver": 1, "ack_wait": NS // 2}
        )
        assert len(await pull(nc, "S", "C", {"batch": 3})) == 3

        async def all_maxed() -> bool:
            return (await counters(js, "S", "C"))["num_ack_pending"] == 0

        await eventually(all_maxed)
        assert (await counters(js, "S", "C"))["ack_floor"] == (0, 0), "unacked, they hold the floor"
        await js.purge_stream("S")
        c = await counters(js, "S", "C")
        assert (c["delivered"], c["ack_floor"], c["num_redelivered"]) == ((3, 3), (3, 3), 0)


async def test_a_purge_drops_undelivered_last_per_subject_starts(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="S", subjects=["s.>"])
        for subject in ("s.a", "s.b", "s.a", "s.c"):
            await js.publish(subject, b"x")
        cfg = {"durable_name": "C", "ack_policy": "explicit", "deliver_policy": "last_per_subject"}
        assert (await create(nc, "S", {**cfg, "filter_subject": "s.>"}))["num_pending"] == 3
        await js.purge_stream("S")
        assert (await counters(js, "S", "C"))["num_pending"] == 0


# ----------------------------------------------------------------------------------------- durability


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
async def test_memory_stored_consumers_do_not_outlive_the_server(js_server, kill):
    """As the reference: a consumer with mem_storage (nats-py's ordered consumers, so every KV
    watch, keys() and history()) is gone after a restart; a file-stored one stays."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=2)
        await create(nc, "S", {"durable_name": "DMEM", "ack_policy": "explicit", "mem_storage": True})
        await create(nc, "S", {"durable_name": "DFILE", "ack_policy": "explicit"})
        kv = await js.create_key_value(bucket="B")
        await kv.put("k", b"v")
        await kv.keys()
        assert (await js.stream_info("KV_B")).state.consumer_count == 1  # keys() leaves its consumer
    js_server.restart(kill=kill)
    async with jetstream(js_server) as (nc, js):
        assert (await api(nc, "$JS.API.CONSUMER.NAMES.S"))["consumers"] == ["DFILE"]
        assert (await api(nc, "$JS.API.CONSUMER.NAMES.KV_B"))["consumers"] in (None, [])


async def test_a_waiting_pull_request_hears_server_shutdown(js_server):
    """As the reference: a graceful stop answers each waiting pull request with "409 Server
    Shutdown" and what it still asked for, so a client ends its pull at once."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(
            "$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch": 2, "expires": 30000000000}', reply=inbox
        )

        async def waiting() -> bool:
            return (await counters(js, "S", "C"))["num_waiting"] == 1

        await eventually(waiting)
        await anyio.to_thread.run_sync(js_server.stop)  # SIGTERM: a graceful stop
        msg = await sub.next_msg(timeout=5)
        assert status(msg) == ("409", "Server Shutdown")
        assert (msg.headers["Nats-Pending-Messages"], msg.headers["Nats-Pending-Bytes"]) == ("2", "0")


async def test_durable_consumer_state_survives_restart(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=6)
        sub = await js.pull_subscribe(
            "s.>", durable="DUR", stream="S", config=ConsumerConfig(description="keep")
        )
        msgs = await sub.fetch(4, timeout=2)
        for m in msgs[:3]:
            await m.ack_sync()
        before = await counters(js, "S", "DUR")
        assert before["delivered"] == (4, 4) and before["ack_floor"] == (3, 3)
        assert (before["num_pending"], before["num_ack_pending"]) == (2, 1)
    js_server.restart()
    async with jetstream(js_server) as (nc, js):
        after = await counters(js, "S", "DUR")
        assert after["delivered"] == (4, 4) and after["ack_floor"] == (3, 3)
        assert (after["num_pending"], after["num_ack_pending"]) == (2, 1)
        ci = await js.consumer_info("S", "DUR")
        assert ci.config.description == "keep" and ci.config.durable_name == "DUR"
        assert await drain(nc, "S", "DUR") == [5, 6], "delivery resumes after the delivered sequence"


@pytest.mark.skipif(
    "leafjet" not in os.environ.get("LEAFJET_TEST_SERVERS", "leafjet"), reason="runs against leafjet only"
)
async def test_acked_messages_are_not_redelivered_after_sigkill(tmp_path):
    """leafjet only: an acknowledged ack (double ack) is on disk, so a SIGKILL does not undo it.

    The reference is not asked: its file store flushes consumer state lazily, and after a SIGKILL it
    may report an older ack floor and redeliver acknowledged messages (see ../shared/guide/REFERENCE.md).
    """
    srv = start_leafjet(tmp_path)
    try:
        async with jetstream(srv) as (_, js):
            await make_stream(js, n=10)
            # a short ack wait, so that message 6 (delivered, never acked) comes back soon after the restart
            sub = await js.pull_subscribe("s.>", durable="K", stream="S", config=ConsumerConfig(ack_wait=1.0))
            msgs = await sub.fetch(6, timeout=2)
            assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3, 4, 5, 6]
            for m in msgs[:5]:
                await m.ack_sync()  # confirmed: these must never come back
        srv.restart(kill=True)  # SIGKILL, then start again on the same data
        async with jetstream(srv) as (_, js):
            ci = await js.consumer_info("S", "K")
            assert (ci.ack_floor.consumer_seq, ci.ack_floor.stream_seq) == (5, 5), "confirmed acks survive"
            assert ci.delivered.stream_seq in (5, 6)
            sub = await js.pull_subscribe_bind("K", stream="S")
            seen: list[int] = []
            with anyio.fail_after(10):
                while not {6, 7, 8, 9, 10} <= set(seen):
                    try:
                        batch = await sub.fetch(10, timeout=1)
                    except nats.errors.TimeoutError:
                        continue
                    for m in batch:
                        seen.append(m.metadata.sequence.stream)
                        await m.ack_sync()
            assert min(seen) == 6, f"acknowledged messages came back after the kill: {seen}"
            assert (await js.consumer_info("S", "K")).ack_floor.stream_seq == 10
    finally:
        srv.stop()


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("stream", "config", "subject", "err_code", "description"),
    [
        (
            "S",
            {"durable_name": "LP", "deliver_policy": "last_per_subject"},
            None,
            10094,
            "consumer delivery policy is deliver last per subject, but optional filter subject is not set",
        ),
        (
            "S",
            {"durable_name": "BS", "deliver_policy": "by_start_sequence"},
            None,
            10094,
            "consumer delivery policy is deliver by start sequence, but optional start sequence is not set",
        ),
        (
            "S",
            {"durable_name": "BT", "deliver_policy": "by_start_time"},
            None,
            10094,
            "consumer delivery policy is deliver by start time, but optional start time is not set",
        ),
        ("NOSTREAM", {"durable_name": "X"}, None, 10059, "stream not found"),
        (
            "S",
            {"durable_name": "D"},
            f"{CREATE}.S",
            10020,
            "consumer expected to be ephemeral but a durable name was set in request",
        ),
        (
            "S",
            {"durable_name": "Y"},
            f"{CREATE}.S.X",
            10017,
            "consumer name in subject does not match durable name in request",
        ),
        (
            "S",
            {"durable_name": "F", "filter_subject": "s.0"},
            f"{CREATE}.S.F.s.1",
            10131,
            "Consumer create request did not match filtered subject from create subject",
        ),
        (
            "S",
            {},
            "$JS.API.CONSUMER.DURABLE.CREATE.S.D",
            10018,
            "consumer expected to be durable but a durable name was not set",
        ),
        (
            "S",
            {"durable_name": "SN"},
            f"{CREATE}.OTHER.SN",
            10056,
            "stream name in subject does not match request",
        ),
        (
            "S",
            {"durable_name": "FF", "filter_subject": "s.0", "filter_subjects": ["s.1"]},
            None,
            10136,
            "consumer cannot have both FilterSubject and FilterSubjects specified",
        ),
        (
            "S",
            {"durable_name": "OV", "filter_subjects": ["s.0", "s.>"]},
            None,
            10138,
            "consumer subject filters cannot overlap",
        ),
        (
            "S",
            {"durable_name": "PW", "deliver_subject": "push.x", "max_waiting": 5},
            None,
            10080,
            "consumer in push mode can not set max waiting",
        ),
    ],
    ids=[
        "last_per_subject_without_filter",
        "by_start_sequence_without_seq",
        "by_start_time_without_time",
        "missing_stream",
        "durable_on_ephemeral_subject",
        "subject_name_mismatch",
        "filter_mismatch",
        "legacy_durable_without_name",
        "stream_name_mismatch",
        "filter_and_filters",
        "overlapping_filters",
        "push_with_max_waiting",
    ],
)
async def test_bad_consumer_configs_get_the_reference_error(
    js_server, stream, config, subject, err_code, description
):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        r = await create(nc, stream, config, subject=subject)
        assert r["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
        assert r["error"]["err_code"] == err_code, r
        assert r["error"]["description"] == description
        assert r["error"]["code"] == (404 if err_code == 10059 else 400)


async def test_malformed_create_request_gets_10025(js_server):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        r = await api(nc, f"{CREATE}.S.X", b"{nope")
        assert (r["error"]["code"], r["error"]["err_code"]) == (400, 10025)
        assert r["error"]["description"].startswith("invalid JSON")


@pytest.mark.parametrize(
    ("subject", "err_code"),
    [
        ("$JS.API.CONSUMER.INFO.S.NOPE", 10014),
        ("$JS.API.CONSUMER.DELETE.S.NOPE", 10014),
        ("$JS.API.CONSUMER.INFO.NOSTREAM.C", 10059),
        ("$JS.API.CONSUMER.DELETE.NOSTREAM.C", 10059),
        ("$JS.API.CONSUMER.NAMES.NOSTREAM", 10059),
        ("$JS.API.CONSUMER.LIST.NOSTREAM", 10059),
    ],
    ids=["info", "delete", "info_no_stream", "delete_no_stream", "names_no_stream", "list_no_stream"],
)
async def test_missing_consumer_or_stream(js_server, subject, err_code):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js)
        r = await api(nc, subject)
        assert r["error"]["code"] == 404 and r["error"]["err_code"] == err_code
        assert r["error"]["description"] == (
            "consumer not found" if err_code == 10014 else "stream not found"
        )


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        ({"batch": 1, "expires": 10**19}, "400"),  # does not fit a duration
        ({"batch": "ten"}, "400"),  # not a number
        ({"batch": 10**12, "no_wait": True}, "data"),  # an absurd batch is just a big batch
        ({"batch": 0, "no_wait": True}, "data"),  # batch 0 means 1
        ({"batch": 1, "no_wait": True, "deliver_subject": "elsewhere"}, "data"),  # ignored in a pull
        (b"3", "data"),  # a bare number is a batch size
        (b"", "data"),  # an empty request is a batch of 1
    ],
    ids=[
        "huge_expires",
        "string_batch",
        "huge_batch",
        "zero_batch",
        "deliver_subject",
        "bare_number",
        "empty",
    ],
)
async def test_odd_pull_requests(js_server, request_body, expected):
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(nc, "S", {"durable_name": "O", "ack_policy": "explicit"})
        got = await pull(nc, "S", "O", request_body, want=3 if request_body == b"3" else None, timeout=0.5)
        if expected == "400":
            assert len(got) == 1 and status(got[0])[0] == "400"
            assert status(got[0])[1].startswith("Bad Request")
        else:
            assert got and not is_status(got[0]) and got[0].data == b"m1"
            assert got[0].subject == "s.0", "nothing goes to the deliver_subject of a pull request"
            if request_body == b"3":
                assert [m.data for m in got] == [b"m1", b"m2", b"m3"]
        after = await pull(nc, "S", "O", {"batch": 10, "no_wait": True})
        assert status(after[-1]) == ("404", "No Messages"), "the consumer still serves pulls"


async def test_a_name_token_that_is_no_utf8_reads_as_the_replacement_character(js_server):
    """A raw client may send any byte in a subject: the consumer named by ``a\\xff`` is created,
    found and deleted by that subject, and shows as ``a\\ufffd``, as on the reference."""
    async with jetstream(js_server) as (_nc, js):
        await js.add_stream(name="S", subjects=["s.>"])
        body = b'{"stream_name":"S","config":{}}'
        requests = [
            (b"$JS.API.CONSUMER.CREATE.S.a\xff", body),
            (b"$JS.API.CONSUMER.INFO.S.a\xff", b""),
            (b"$JS.API.CONSUMER.DELETE.S.a\xff", b""),
        ]
        replies = []
        for subject, payload in requests:  # one at a time: the reference answers out of order
            data = b"SUB _r 1\r\nPUB %s _r %d\r\n%s\r\n" % (subject, len(payload), payload)
            out, _closed = await anyio.to_thread.run_sync(lambda d=data: exchange(js_server.port, d))
            replies.append(json.loads(out.split(b"MSG _r 1 ")[1].split(b"\r\n")[1]))
        assert [r.get("name", r.get("success")) for r in replies] == ["a\ufffd", "a\ufffd", True], replies


async def test_a_consumer_with_priority_groups(js_server):
    """The reference delivers by the groups' rules; leafjet checks such a config as the
    reference does and then refuses it, rather than create a consumer that ignores them."""
    async with jetstream(js_server) as (nc, _js):
        await nc.request("$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s.>"]}', timeout=5)
        cfg = {"durable_name": "PG", "priority_policy": "overflow", "priority_groups": ["g"]}
        got = await create(nc, "S", cfg)
        if js_server.kind == "reference":
            assert got["config"]["priority_groups"] == ["g"]
        else:
            assert got["error"] == {
                "code": 500,
                "err_code": 10012,
                "description": "priority groups are not supported by this server",
            }
        bad = await create(nc, "S", {"durable_name": "PG2", "priority_policy": "overflow"})
        assert bad["error"]["err_code"] == 10159, "the config's own errors come first, as on the reference"


async def test_a_pull_written_right_behind_the_consumers_delete_is_answered(js_server):
    """The DELETE and a pull request in one write: the pull gets its message (the reference,
    sometimes) or "409 Consumer Deleted"; leafjet never leaves it to the client's timeout. The
    reference, on a loaded machine, sometimes does (seen in CI: the delete answered, then only
    its keepalive PING for the 3 s of quiet), so it is held to the delete's answer only."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=3)
        await create(nc, "S", {"durable_name": "D", "ack_policy": "explicit"})
        data = (
            b"SUB _d 1\r\nSUB _p 2\r\n"
            b"PUB $JS.API.CONSUMER.DELETE.S.D _d 0\r\n\r\n"
            b"PUB $JS.API.CONSUMER.MSG.NEXT.S.D _p 1\r\n1\r\n"
        )
        connect = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
        # quiet=3: on a loaded machine the reference's answer to the pull can trail the
        # delete's by more than the default 0.4 s of silence
        out, _closed = await anyio.to_thread.run_sync(
            lambda: exchange(js_server.port, data, connect=connect, quiet=3.0)
        )
        assert b'"success":true' in out
        delivered = b"MSG s.0 2 " in out  # the message goes out with its own subject on sid 2
        refused = b"HMSG _p 2 " in out and b"409 Consumer Deleted" in out
        assert delivered or refused or js_server.kind == "reference", out


async def test_requests_a_single_server_cannot_serve_are_answered(js_server):
    """A pull on a subject with too few or too many tokens reaches no consumer: no responders.
    Leader stepdowns and peer removal need a cluster: the reference's 503 10010, named by type."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        for subject in ("$JS.API.CONSUMER.MSG.NEXT.S", "$JS.API.CONSUMER.MSG.NEXT.S.C.x"):
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request(subject, b"1", timeout=2)
        for subject, kind in (
            ("$JS.API.STREAM.LEADER.STEPDOWN.S", "stream_leader_stepdown_response"),
            ("$JS.API.CONSUMER.LEADER.STEPDOWN.S.C", "consumer_leader_stepdown_response"),
            ("$JS.API.STREAM.PEER.REMOVE.S", "stream_remove_peer_response"),
        ):
            got = await api(nc, subject, {"peer": "x"} if "PEER" in subject else None)
            need = {"code": 503, "err_code": 10010, "description": "JetStream clustering support required"}
            assert got == {"type": f"io.nats.jetstream.api.v1.{kind}", "error": need}, subject


async def _fetch_seqs(sub, n: int) -> list[int]:
    """Stream sequences of ``n`` messages fetched in batches (acked: explicit consumers)."""
    seqs: list[int] = []
    while len(seqs) < n:
        for m in await sub.fetch(min(100, n - len(seqs)), timeout=5):
            seqs.append(m.metadata.sequence.stream)
            await m.ack()
    return seqs


async def test_a_catch_up_never_delivers_what_was_deleted_mid_way(js_server):
    # a delete behind the consumer's read-ahead (256 messages) and one beyond it, mid catch-up,
    # and publishes meanwhile: nothing deleted comes out, nothing published is skipped
    async with jetstream(js_server) as (_nc, js):
        await make_stream(js, n=600)
        sub = await js.pull_subscribe("s.>", durable="D", stream="S")
        assert await _fetch_seqs(sub, 100) == list(range(1, 101))  # one read-ahead of 256 made
        first = await _fetch_seqs(sub, 156)  # that read-ahead used up
        assert first == list(range(101, 257))
        for seq in (300, 513):
            await js.delete_msg("S", seq)
        for i in range(600, 700):
            await js.publish(f"s.{i % 2}", b"late")
        rest = await _fetch_seqs(sub, 442)
        assert rest == [s for s in range(257, 701) if s not in (300, 513)]


UNPIN_CASES = [
    # (stream, consumer, body, err_code, description or None)
    ("S", "C", b"", 10025, "invalid JSON: unexpected end of JSON input"),
    ("S", "C", b"{bad", 10025, None),
    ("S", "C", b"{}", 10025, "invalid JSON: consumer group not specified"),
    ("S", "C", b"null", 10025, "invalid JSON: consumer group not specified"),
    ("S", "C", b'{"group":"no spaces"}', 10162, None),
    ("S", "C", b'{"group":"seventeen-chars-xx"}', 10162, None),
    ("NOPE", "C", b'{"group":"g"}', 10059, "stream not found"),
    ("S", "NOPE", b'{"group":"g"}', 10014, "consumer not found"),
    ("S", "C", b'{"group":"g"}', 10160, "Provided priority group does not exist for this consumer"),
    ("S", "C", b'{"group":"g","other":1}', 10160, None),  # unknown fields are ignored here
]


async def test_unpin_requests_are_answered_as_the_reference(js_server):
    """``CONSUMER.UNPIN`` (ADR-42) gets the reference's answer: the body (JSON, a group, a valid
    group name) before the stream and the consumer, and for a consumer without that priority
    group 10160 (leafjet has no priority groups, so that is every existing consumer). Before,
    leafjet did not answer at all."""
    async with jetstream(js_server) as (nc, js):
        await make_stream(js, n=1)
        await create(nc, "S", {"durable_name": "C", "ack_policy": "explicit"})
        for stream, consumer, body, code, description in UNPIN_CASES:
            r = await api(nc, f"$JS.API.CONSUMER.UNPIN.{stream}.{consumer}", body)
            assert r["type"] == "io.nats.jetstream.api.v1.consumer_unpin_response", r
            err = r.get("error") or {}
            assert err.get("err_code") == code, (stream, consumer, body, r)
            if description is not None:
                assert err["description"] == description, (body, r)
