"""JetStream streams with stock nats-py against leafjet and the reference: one scenario, one expectation."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import anyio
import nats.errors
import pytest
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, BadRequestError, KeyNotFoundError, NoStreamResponseError, NotFoundError

from tests.support.jsapi import api, connect, jetstream
from tests.support.raw import exchange

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_create_publish_and_info(js_server):
    async with jetstream(js_server) as (_, js):
        info = await js.add_stream(name="ORDERS", subjects=["orders.>"])
        assert info.config.name == "ORDERS"
        assert info.state.messages == 0 and info.state.last_seq == 0 and info.state.first_seq == 0
        acks = [await js.publish(f"orders.{i % 3}", b"x" * 10) for i in range(5)]
        assert [(a.stream, a.seq, a.duplicate) for a in acks] == [("ORDERS", i, None) for i in range(1, 6)]
        info = await js.stream_info("ORDERS")
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (5, 1, 5)
        assert info.state.bytes > 50
        assert info.config.retention == RetentionPolicy.LIMITS
        assert info.config.storage == StorageType.FILE
        assert info.config.duplicate_window == 120.0
        assert info.config.num_replicas == 1


async def test_file_and_memory_streams_count_bytes_as_the_reference(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="F", subjects=["f.*"], max_bytes=100)
        await js.add_stream(name="M", subjects=["m.*"], storage=StorageType.MEMORY)
        await js.publish("f.a", b"x" * 10)
        await js.publish("m.a", b"x" * 10)
        # the file store counts its record (30 bytes around subject and data), memory 16
        assert (await js.stream_info("F")).state.bytes == 3 + 10 + 30
        assert (await js.stream_info("M")).state.bytes == 3 + 10 + 16
        for _ in range(3):
            await js.publish("f.a", b"x" * 10)
        st = (await js.stream_info("F")).state
        assert (st.messages, st.bytes) == (2, 86), "max_bytes 100 holds two such records"


async def test_publish_without_reply_is_stored(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="S", subjects=["s.*"])
        await nc.publish("s.fire", b"and forget")
        await nc.flush()
        with anyio.fail_after(5):
            while (await js.stream_info("S")).state.messages != 1:
                await anyio.sleep(0.02)
        assert (await js.get_msg("S", 1)).data == b"and forget"


async def test_jetstream_publish_to_a_subject_no_stream_captures_gets_no_responders(js_server):
    async with jetstream(js_server) as (_, js):
        with pytest.raises(NoStreamResponseError):  # nats-py's name for no responders here
            await js.publish("nobody.captures.this", b"x")


async def test_a_publish_to_a_wildcard_subject_leaves_the_stream_working(js_server, server_kind):
    """ "w.*" routes to a stream on "w.>". The reference stores it as a subject; leafjet refuses it
    with an API error (a stored subject is literal). Either way the stream goes on serving."""
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="W", subjects=["w.>"])
        if server_kind == "reference":
            assert (await js.publish("w.*", b"x")).seq == 1
        else:
            with pytest.raises(APIError) as e:
                await js.publish("w.*", b"x")
            assert e.value.code == 503 and "invalid publish subject" in e.value.description
        ack = await js.publish("w.a", b"y")
        assert (await js.get_msg("W", ack.seq)).data == b"y"


async def test_duplicates_are_detected_by_msg_id(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="D", subjects=["d"])
        a1 = await js.publish("d", b"1", headers={"Nats-Msg-Id": "id-1"})
        a2 = await js.publish("d", b"1 again", headers={"Nats-Msg-Id": "id-1"})
        a3 = await js.publish("d", b"2", headers={"Nats-Msg-Id": "id-2"})
        assert (a1.seq, a1.duplicate) == (1, None)
        assert (a2.seq, a2.duplicate) == (1, True)
        assert (a3.seq, a3.duplicate) == (2, None)
        assert (await js.stream_info("D")).state.messages == 2


async def test_duplicate_tracking_survives_restart(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="D", subjects=["d"])
        await js.publish("d", b"1", headers={"Nats-Msg-Id": "keep-me"})
        await js.publish("d", b"2", headers={"Nats-Msg-Id": "other"})
    js_server.restart()
    async with jetstream(js_server) as (_, js):
        ack = await js.publish("d", b"1", headers={"Nats-Msg-Id": "keep-me"})
        assert (ack.seq, ack.duplicate) == (1, True)
        fresh = await js.publish("d", b"3", headers={"Nats-Msg-Id": "new-one"})
        assert fresh.seq == 3


async def test_dedup_survives_a_sigkill_within_the_window(js_server):
    """The window is rebuilt from the stored messages' Nats-Msg-Id headers (no meta row per
    id): after a SIGKILL, an id published before it is still a duplicate, of the same
    sequence, and the last msg id is the last stored message's."""
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="D", subjects=["d.*"])
        await js.publish("d.a", b"0")
        first = await js.publish("d.a", b"1", headers={"Nats-Msg-Id": "X"})
        await js.publish("d.b", b"2", headers={"Nats-Msg-Id": "Y"})
        await js.publish("d.b", b"3", headers={"Nats-Msg-Id": "Z"})
    js_server.restart(kill=True)
    async with jetstream(js_server) as (_, js):
        again = await js.publish("d.a", b"1 again", headers={"Nats-Msg-Id": "X"})
        assert (again.seq, again.duplicate) == (first.seq, True) == (2, True)
        assert (await js.publish("d.b", b"", headers={"Nats-Msg-Id": "Z"})).seq == 4
        ok = await js.publish("d.b", b"4", headers={"Nats-Expected-Last-Msg-Id": "Z"})
        assert (ok.seq, ok.duplicate) == (5, None)
        assert (await js.stream_info("D")).state.messages == 5


async def test_an_expired_msg_id_is_not_kept_after_a_restart(js_server):
    """The rebuilt window keeps each id at its message's time: one older than the window when
    the server comes back is gone, however soon after the restart it is published again."""
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="D", subjects=["d"], duplicate_window=1.0)
        await js.publish("d", b"1", headers={"Nats-Msg-Id": "X"})
        stored_by = time.monotonic()
        await js.publish("d", b"2", headers={"Nats-Msg-Id": "Y"})
    # the condition is time itself: X's message (stored before stored_by) leaves the window
    await anyio.sleep(max(0.0, stored_by + 1.5 - time.monotonic()))
    js_server.restart(kill=True)
    async with jetstream(js_server) as (_, js):
        ack = await js.publish("d", b"1 again", headers={"Nats-Msg-Id": "X"})
        assert (ack.seq, ack.duplicate) == (3, None)
        assert (await js.stream_info("D")).state.messages == 3


async def test_expected_headers(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="E", subjects=["e.*"])
        await js.publish("e.a", b"1", headers={"Nats-Msg-Id": "m1"})
        await js.publish("e.b", b"2")
        with pytest.raises(APIError) as wrong_last:
            await js.publish("e.a", b"x", headers={"Nats-Expected-Last-Sequence": "1"})
        assert wrong_last.value.err_code == 10071
        assert wrong_last.value.description == "wrong last sequence: 2"
        ok = await js.publish("e.a", b"3", headers={"Nats-Expected-Last-Sequence": "2"})
        assert ok.seq == 3
        with pytest.raises(APIError) as wrong_subj:
            await js.publish("e.b", b"x", headers={"Nats-Expected-Last-Subject-Sequence": "1"})
        assert wrong_subj.value.err_code == 10071
        ok = await js.publish("e.b", b"4", headers={"Nats-Expected-Last-Subject-Sequence": "2"})
        assert ok.seq == 4
        with pytest.raises(APIError) as wrong_stream:
            await js.publish("e.a", b"x", headers={"Nats-Expected-Stream": "OTHER"})
        assert wrong_stream.value.err_code == 10060
        with pytest.raises(APIError) as wrong_id:
            await js.publish("e.a", b"x", headers={"Nats-Expected-Last-Msg-Id": "nope"})
        assert wrong_id.value.err_code == 10070


async def test_a_publish_without_msg_id_clears_the_last_msg_id(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="E", subjects=["e.*"])
        await js.publish("e.a", b"1", headers={"Nats-Msg-Id": "m1"})
        assert (await js.publish("e.a", b"2", headers={"Nats-Expected-Last-Msg-Id": "m1"})).seq == 2
        with pytest.raises(APIError) as stale:
            await js.publish("e.a", b"x", headers={"Nats-Expected-Last-Msg-Id": "m1"})
        assert (stale.value.err_code, stale.value.description) == (10070, "wrong last msg ID: ")


async def test_a_no_ack_stream_stores_without_answering(js_server):
    async with jetstream(js_server) as (nc, js):
        await api(nc, "$JS.API.STREAM.CREATE.NA", {"name": "NA", "subjects": ["na"], "no_ack": True})
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request("na", b"x", timeout=0.5)
        assert (await js.stream_info("NA")).state.messages == 1


async def test_max_msgs_discard_old_and_new(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="OLD", subjects=["old"], max_msgs=3)
        for i in range(5):
            await js.publish("old", str(i).encode())
        st = (await js.stream_info("OLD")).state
        assert (st.messages, st.first_seq, st.last_seq) == (3, 3, 5)
        await js.add_stream(name="NEW", subjects=["new"], max_msgs=2, discard=DiscardPolicy.NEW)
        await js.publish("new", b"1")
        await js.publish("new", b"2")
        with pytest.raises(APIError) as full:
            await js.publish("new", b"3")
        assert full.value.err_code == 10077
        assert full.value.description == "maximum messages exceeded"


async def test_max_msgs_per_subject_keeps_the_newest(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="P", subjects=["p.*"], max_msgs_per_subject=2)
        for i in range(4):
            await js.publish("p.a", f"a{i}".encode())
        await js.publish("p.b", b"b0")
        info = await js.stream_info("P", subjects_filter=">")
        assert info.state.messages == 3
        assert info.state.subjects == {"p.a": 2, "p.b": 1}
        assert (await js.get_last_msg("P", "p.a")).data == b"a3"


async def test_max_bytes_discards_oldest(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="B", subjects=["b"], max_bytes=1000)
        for _ in range(20):
            await js.publish("b", b"x" * 100)
        st = (await js.stream_info("B")).state
        assert st.bytes <= 1000
        assert st.last_seq == 20
        assert st.messages >= 5


async def test_purge_variants(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="PU", subjects=["pu.*"])
        for i in range(10):
            await js.publish(f"pu.{'a' if i % 2 else 'b'}", str(i).encode())
        r = await api(nc, "$JS.API.STREAM.PURGE.PU", {"filter": "pu.a", "keep": 1})
        assert r == {"type": "io.nats.jetstream.api.v1.stream_purge_response", "success": True, "purged": 4}
        r = await api(nc, "$JS.API.STREAM.PURGE.PU", {"seq": 5})
        assert r["purged"] == 2  # seqs 1 and 3 (pu.b) are below 5
        st = (await js.stream_info("PU")).state
        assert (st.messages, st.last_seq) == (4, 10)
        r = await api(nc, "$JS.API.STREAM.PURGE.PU")
        assert r["purged"] == 4
        st = (await js.stream_info("PU")).state
        assert (st.messages, st.first_seq, st.last_seq) == (0, 11, 10)
        assert (await js.publish("pu.a", b"after")).seq == 11


async def test_get_and_delete_messages(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="G", subjects=["g.*"])
        await js.publish("g.a", b"one", headers={"X-Trace": "t1"})
        await js.publish("g.b", b"two")
        await js.publish("g.a", b"three")
        m = await js.get_msg("G", 1)
        assert (m.subject, m.seq, m.data, m.headers) == ("g.a", 1, b"one", {"X-Trace": "t1"})
        assert (await js.get_last_msg("G", "g.a")).seq == 3
        with pytest.raises(NotFoundError):
            await js.get_msg("G", 99)
        assert await js.delete_msg("G", 2)
        info = await js.stream_info("G")
        assert (info.state.messages, info.state.num_deleted) == (2, 1)
        raw = await api(nc, "$JS.API.STREAM.INFO.G", {"deleted_details": True})
        assert raw["state"]["deleted"] == [2]
        with pytest.raises(APIError) as gone:
            await js.delete_msg("G", 2)
        assert (gone.value.err_code, gone.value.description) == (10043, "sequence 2 not found")


async def test_direct_get(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="DG", subjects=["dg.*"], allow_direct=True)
        await js.publish("dg.x", b"first")
        await js.publish("dg.y", b"second")
        m = await js.get_msg("DG", seq=2, direct=True)
        assert (m.subject, m.seq, m.data) == ("dg.y", 2, b"second")
        last = await js.get_msg("DG", subject="dg.x", direct=True)
        assert last.seq == 1
        reply = await nc.request("$JS.API.DIRECT.GET.DG.dg.y", b"", timeout=5)
        assert reply.headers["Nats-Sequence"] == "2" and reply.headers["Nats-Stream"] == "DG"
        missing = await nc.request("$JS.API.DIRECT.GET.DG", json.dumps({"seq": 99}).encode(), timeout=5)
        assert missing.headers.get("Status") == "404"


async def test_gets_beyond_the_largest_sequence_find_nothing(js_server):
    """A client may ask for any uint64 sequence; one beyond what a stream can hold finds no
    message (leafjet's stores keep sequences as int64)."""
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="BIG", subjects=["big.*"], allow_direct=True)
        await js.publish("big.a", b"1")
        kv = await js.create_key_value(bucket="BIGKV")
        await kv.put("k", b"v")
        for seq in (2**63, 2**64 - 1):
            got = await api(nc, "$JS.API.STREAM.MSG.GET.BIG", {"seq": seq})
            assert got["error"]["err_code"] == 10037, got
            for body in ({"seq": seq}, {"seq": seq, "next_by_subj": "big.a"}):
                m = await nc.request("$JS.API.DIRECT.GET.BIG", json.dumps(body).encode(), timeout=5)
                assert m.headers.get("Status") == "404", (body, m.headers)
            with pytest.raises(KeyNotFoundError):
                await kv.get("k", revision=seq)
        assert (await js.get_msg("BIG", 1)).data == b"1"


async def test_a_first_sequence_beyond_int64(js_server):
    """The reference creates such a stream and then reports its last sequence below its first;
    leafjet refuses it with an invalid-config error (its sequences are int64)."""
    async with jetstream(js_server) as (nc, js):
        body = {"name": "FS", "subjects": ["fs"], "first_seq": 2**63}
        got = await api(nc, "$JS.API.STREAM.CREATE.FS", body)
        if js_server.kind == "reference":
            assert got["config"]["first_seq"] == 2**63
        else:
            assert got["error"] == {
                "code": 500,
                "err_code": 10052,
                "description": "first sequence must be at most 9223372036854775807",
            }
        top = await api(
            nc, "$JS.API.STREAM.CREATE.TOP", {"name": "TOP", "subjects": ["top"], "first_seq": 2**63 - 1}
        )
        assert top["config"]["first_seq"] == 2**63 - 1
        assert (await js.publish("top", b"x")).seq == 2**63 - 1


async def test_gets_by_start_time(js_server):
    """``start_time`` asks for the first message stored at or after a time (with
    ``next_by_subj``: the first on that subject); ``no_hdr`` leaves the headers out."""
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="GT", subjects=["gt.*"], allow_direct=True)
        await js.publish("gt.a", b"1", headers={"H": "1"})
        await js.publish("gt.b", b"2", headers={"H": "2"})
        await js.publish("gt.a", b"3")
        second = (await api(nc, "$JS.API.STREAM.MSG.GET.GT", {"seq": 2}))["message"]["time"]
        later = "2100-01-01T00:00:00Z"

        async def get(body: dict[str, Any]) -> Any:
            r = await api(nc, "$JS.API.STREAM.MSG.GET.GT", body)
            return r.get("error", {}).get("err_code") or (r["message"]["seq"], "hdrs" in r["message"])

        assert await get({"start_time": "2000-01-01T00:00:00Z"}) == (1, True)
        assert await get({"start_time": second}) == (2, True)
        assert await get({"start_time": second, "next_by_subj": "gt.a"}) == (3, False)
        assert await get({"start_time": later}) == 10037
        assert await get({"seq": 2, "start_time": second}) == 10003, "a sequence and a time conflict"
        assert await get({"seq": 1, "no_hdr": True}) == (1, False)

        async def direct(body: dict[str, Any]) -> tuple[str | None, str | None]:
            m = await nc.request("$JS.API.DIRECT.GET.GT", json.dumps(body).encode(), timeout=5)
            return (m.headers or {}).get("Nats-Sequence"), (m.headers or {}).get("Status")

        assert await direct({"start_time": second}) == ("2", None)
        assert await direct({"start_time": later}) == (None, "404")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(
            "$JS.API.DIRECT.GET.GT", json.dumps({"start_time": second, "batch": 5}).encode(), inbox
        )
        replies = [await sub.next_msg(timeout=5) for _ in range(3)]
        assert [(m.headers.get("Nats-Sequence"), m.headers.get("Status")) for m in replies] == [
            ("2", None),
            ("3", None),
            (None, "204"),
        ]


async def test_direct_get_batch_ends_with_eob(js_server):
    nc, _js = await connect(js_server)
    try:
        js = nc.jetstream()
        await js.add_stream(name="DB", subjects=["db.*"], allow_direct=True)
        for i in range(5):
            await js.publish(f"db.{i}", str(i).encode())
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.DIRECT.GET.DB", json.dumps({"seq": 2, "batch": 3}).encode(), reply=inbox)
        got = [await sub.next_msg(timeout=5) for _ in range(4)]
        assert [m.data for m in got[:3]] == [b"1", b"2", b"3"]
        assert [m.headers["Nats-Num-Pending"] for m in got[:3]] == ["3", "2", "1"]
        assert [m.headers["Nats-Last-Sequence"] for m in got] == ["0", "2", "3", "4"], "the one before"
        assert got[3].headers.get("Status") == "204"
        await nc.publish(
            "$JS.API.DIRECT.GET.DB", b'{"multi_last": ["db.1", "db.3"], "up_to_seq": 4}', reply=inbox
        )
        got = [await sub.next_msg(timeout=5) for _ in range(3)]
        assert [m.headers.get("Nats-Num-Pending") for m in got] == ["1", "0", "0"], (
            "what is left of the answer"
        )
        assert got[2].headers["Nats-UpTo-Sequence"] == "4"
        for body, description in (
            (b'{"multi_last": ["db.zz"]}', "No Results"),
            (b'{"seq": 0}', "Empty Request"),
        ):
            await nc.publish("$JS.API.DIRECT.GET.DB", body, reply=inbox)
            answer = await sub.next_msg(timeout=5)
            assert answer.headers.get("Description") == description
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("suffix", "body", "status"),
    [
        ("", b"", "408 Empty Request"),
        ("", b"{}", "408 Empty Request"),
        ("", b'{"multi_last": []}', "408 Empty Request"),
        ("", b"nope", "408 Malformed Request"),
        ("", b"[1]", "408 Malformed Request"),
        ("", b'{"seq": -1}', "408 Malformed Request"),
        ("", b'{"start_time": ""}', "408 Malformed Request"),
        ("", b'{"seq": 1} {"batch": 2}', "408 Malformed Request"),
        ("", b'{"batch": 2, "last_by_subj": "dr.a"}', "408 Bad Request"),
        ("", b'{"multi_last": ["dr.a"], "next_by_subj": "dr.a"}', "408 Bad Request"),
        (
            "",
            b'{"multi_last": ["dr.a"], "up_to_seq": 1, "up_to_time": "2030-01-01T00:00:00Z"}',
            "408 Bad Request",
        ),
        ("", b'{"multi_last": ["a..x"]}', "404 No Results"),
        ("", b'{"next_by_subj": "a..x", "batch": 2}', "404 Message Not Found"),
        ("", b'{"seq": 1, "bogus": 1}', "seq 1"),  # unknown fields are ignored here
        ("", b'{"seq": 2, "batch": 0}', "seq 2"),
        (".dr.a", b"{}", "seq 3"),
        (".dr.a", b"nope", "408 Malformed Request"),
        (".dr.a", b'{"seq": 1}', "408 Bad Request"),
    ],
)
async def test_direct_get_requests_read_as_the_reference_reads_them(js_server, suffix, body, status):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="DR", subjects=["dr.*"], allow_direct=True)
        for subject in ("dr.a", "dr.b", "dr.a"):
            await js.publish(subject, b"x")
        answer = await nc.request(f"$JS.API.DIRECT.GET.DR{suffix}", body, timeout=5)
        headers = answer.headers or {}
        got = f"seq {headers['Nats-Sequence']}" if "Nats-Sequence" in headers else None
        assert (got or f"{headers.get('Status')} {headers.get('Description')}") == status


async def test_direct_get_batches_stop_at_max_bytes_and_multi_last_counts_every_subject(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="DM", subjects=["dm.*"], allow_direct=True)
        for subject in ("dm.a", "dm.b", "dm.c"):
            await js.publish(subject, b"0123456789", headers={"H": "1"})
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)

        async def ask(body: dict[str, Any]) -> list[dict[str, str]]:
            await nc.publish("$JS.API.DIRECT.GET.DM", json.dumps(body).encode(), reply=inbox)
            replies = [await sub.next_msg(timeout=5)]
            while "Status" not in (replies[-1].headers or {}):
                replies.append(await sub.next_msg(timeout=5))
            return [dict(m.headers or {}) for m in replies]

        got = await ask({"seq": 1, "batch": 3, "max_bytes": 20})  # 4 + 5 + 10 per message
        assert [h.get("Nats-Sequence") or h["Status"] for h in got] == ["1", "204"]
        got = await ask({"multi_last": ["dm.*"], "batch": 1})
        assert (got[0]["Nats-Num-Pending"], got[1]["Nats-Num-Pending"], got[1]["Nats-UpTo-Sequence"]) == (
            "2",
            "2",
            "3",
        )
        got = await ask({"seq": 1, "batch": 1, "no_hdr": True})
        assert got[0] == {} and got[1]["Nats-Num-Pending"] == "3", "no headers at all, and no count"


async def test_names_list_update_delete(js_server):
    async with jetstream(js_server) as (nc, js):
        for n in ("A1", "B2", "C3"):
            await js.add_stream(name=n, subjects=[f"{n.lower()}.>"])
        names = await api(nc, "$JS.API.STREAM.NAMES")
        assert names["total"] == 3 and sorted(names["streams"]) == ["A1", "B2", "C3"]
        filtered = await api(nc, "$JS.API.STREAM.NAMES", {"subject": "b2.x"})
        assert filtered["streams"] == ["B2"]

        async def named(filt: str) -> list[str] | None:
            return (await api(nc, "$JS.API.STREAM.NAMES", {"subject": filt}))["streams"]

        # the filter is matched token by token, not validated first
        assert await named("b2..x") == ["B2"]
        assert await named("*.x") == ["A1", "B2", "C3"]
        assert await named("b2") is None
        assert await named("..x") is None
        listed = await api(nc, "$JS.API.STREAM.LIST")
        assert listed["total"] == 3 and {s["config"]["name"] for s in listed["streams"]} == {"A1", "B2", "C3"}
        info = await js.update_stream(StreamConfig(name="A1", subjects=["a1.>", "extra.>"], max_msgs=10))
        assert info.config.subjects == ["a1.>", "extra.>"] and info.config.max_msgs == 10
        assert (await js.publish("extra.x", b"1")).stream == "A1"
        assert await js.delete_stream("B2")
        with pytest.raises(NotFoundError):
            await js.stream_info("B2")
        assert (await api(nc, "$JS.API.STREAM.NAMES"))["total"] == 2


async def test_account_info_and_domain_in_acks(make_server):
    srv = make_server({"jetstream": {"domain": "edge1"}}, jetstream=True)
    async with jetstream(srv) as (nc, js):
        created = await api(nc, "$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["x"]})
        assert "domain" not in created, "the reference's create response names no domain"
        assert (await api(nc, "$JS.API.STREAM.INFO.X"))["domain"] == "edge1"
        ack = await js.publish("x", b"hello")
        assert ack.domain == "edge1"
        info = await api(nc, "$JS.API.INFO")
        assert info["type"] == "io.nats.jetstream.api.v1.account_info_response"
        assert info["streams"] == 1 and info["domain"] == "edge1"
        via_domain = await api(nc, "$JS.edge1.API.STREAM.INFO.X")
        assert via_domain["state"]["messages"] == 1


async def test_account_info_counts_reserved_bytes_and_api_requests(js_server):
    async with jetstream(js_server) as (nc, _js):
        config = {"name": "F", "subjects": ["f"], "max_bytes": 5000}
        created = await api(nc, "$JS.API.STREAM.CREATE.F", config)
        assert created["did_create"] is True
        assert (await api(nc, "$JS.API.STREAM.CREATE.F", config))["did_create"] is True, (
            "also when it existed"
        )
        m = {"name": "M", "subjects": ["m"], "max_bytes": 1000, "storage": "memory"}
        await api(nc, "$JS.API.STREAM.CREATE.M", m)
        await api(nc, "$JS.API.STREAM.INFO.NOPE")
        info = await api(nc, "$JS.API.INFO")
        assert (info["reserved_memory"], info["reserved_storage"]) == (1000, 5000)
        assert (info["api"]["total"], info["api"]["errors"]) == (4, 1), "the requests before this one"


async def test_streams_and_messages_survive_restart(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="R", subjects=["r.>"], max_msgs_per_subject=5)
        for i in range(10):
            await js.publish(f"r.{i % 2}", str(i).encode())
    js_server.restart()
    async with jetstream(js_server) as (_, js):
        info = await js.stream_info("R")
        assert (info.state.messages, info.state.last_seq) == (10, 10)
        assert info.config.max_msgs_per_subject == 5
        assert (await js.get_msg("R", 7)).data == b"6"
        assert (await js.publish("r.0", b"next")).seq == 11


async def test_max_age_expires_messages(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="AGE", subjects=["age"], max_age=1.0)
        await js.publish("age", b"short-lived")
        assert (await js.stream_info("AGE")).state.messages == 1
        with anyio.fail_after(10):
            while (await js.stream_info("AGE")).state.messages:
                await anyio.sleep(0.1)
        assert (await js.stream_info("AGE")).state.last_seq == 1


async def test_messages_that_ran_out_while_the_server_was_down_are_gone_at_once(js_server):
    """max_age is checked when a stream is loaded: the first read after a restart does not see a
    message that expired while the server was stopped, nor does a consumer deliver it."""
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="AGE", subjects=["age"], max_age=1.0)
        for i in range(3):
            await js.publish("age", b"%d" % i)
        await js.add_consumer("AGE", durable_name="C", ack_policy="explicit")
    js_server.stop()
    await anyio.sleep(1.5)
    js_server.restart()
    async with jetstream(js_server) as (_, js):
        with pytest.raises(NotFoundError):
            await js.get_msg("AGE", 1)
        state = (await js.stream_info("AGE")).state
        assert (state.messages, state.first_seq, state.last_seq) == (0, 4, 3)
        assert (await js.consumer_info("AGE", "C")).num_pending == 0


@pytest.mark.parametrize("how", ["max_age", "ttl"])
async def test_subject_delete_markers_replace_the_last_message_of_a_subject(js_server, how):
    """With subject_delete_marker_ttl, the last message of a subject that ages out (or whose
    TTL runs out) leaves a marker behind, which itself goes after the marker TTL; a message
    that is not the last of its subject just goes."""
    config: dict[str, Any] = {"name": "M", "subjects": ["m.>"], "allow_msg_ttl": True}
    config |= {"subject_delete_marker_ttl": 1_000_000_000, "allow_rollup_hdrs": True}
    if how == "max_age":
        config["max_age"] = 1_000_000_000
    async with jetstream(js_server) as (nc, js):
        assert "error" not in await api(nc, "$JS.API.STREAM.CREATE.M", config)
        headers = {"Nats-TTL": "1s"} if how == "ttl" else None
        for subject in ("m.a", "m.b", "m.b"):  # m.b: 2 is not the last of its subject, 3 is
            await nc.request(subject, b"x", headers=headers, timeout=5)

        async def newest_headers(subject: str) -> tuple[int, str]:
            m = (await api(nc, "$JS.API.STREAM.MSG.GET.M", {"last_by_subj": subject}))["message"]
            return m["seq"], base64.b64decode(m.get("hdrs", "")).decode()

        with anyio.fail_after(10):
            while not all(["Nats-Marker-Reason" in (await newest_headers(s))[1] for s in ("m.a", "m.b")]):
                await anyio.sleep(0.05)
        markers = [await newest_headers(s) for s in ("m.a", "m.b")]
        assert sorted(seq for seq, _ in markers) == [4, 5]
        for line in ("Nats-Marker-Reason: MaxAge", "Nats-TTL: 1s", "Nats-Rollup: sub"):
            assert line in markers[0][1]
        with anyio.fail_after(10):  # the markers go after their own TTL, and leave none behind
            while (await js.stream_info("M")).state.messages:
                await anyio.sleep(0.05)
        assert (await js.stream_info("M")).state.last_seq == 5


async def test_a_ttl_below_the_marker_ttl_is_raised_to_it(js_server):
    config = {"name": "RT", "subjects": ["rt"], "allow_msg_ttl": True, "allow_rollup_hdrs": True}
    async with jetstream(js_server) as (nc, _js):
        await api(nc, "$JS.API.STREAM.CREATE.RT", {**config, "subject_delete_marker_ttl": 2_000_000_000})
        await nc.request("rt", b"x", headers={"Nats-TTL": "1s"}, timeout=5)
        stored = (await api(nc, "$JS.API.STREAM.MSG.GET.RT", {"seq": 1}))["message"]
        assert base64.b64decode(stored["hdrs"]) == b"NATS/1.0\r\nNats-TTL: 2\r\n\r\n"


async def test_a_message_with_ttl_never_outlives_max_age(js_server):
    config = {"name": "NV", "subjects": ["nv"], "allow_msg_ttl": True, "max_age": 1_000_000_000}
    async with jetstream(js_server) as (nc, js):
        await api(nc, "$JS.API.STREAM.CREATE.NV", config)
        await nc.request("nv", b"kept", headers={"Nats-TTL": "never"}, timeout=5)
        await nc.request("nv", b"aged", timeout=5)
        with anyio.fail_after(10):
            while (await js.stream_info("NV")).state.messages > 1:
                await anyio.sleep(0.05)
        await anyio.sleep(1.2)  # past another max_age
        assert (await js.stream_info("NV")).state.messages == 1
        assert (await js.get_msg("NV", 1)).data == b"kept"


async def test_an_update_applies_new_limits_at_once(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="U", subjects=["u.>"], storage=StorageType.MEMORY)  # its byte counts
        for i in range(4):
            await js.publish(f"u.{i}", b"x" * (10 * (i + 1)))
        st = (await js.stream_info("U")).state
        # max_msgs 3 drops the oldest; max_bytes drops one more, counting what max_msgs dropped
        config = {
            "name": "U",
            "subjects": ["u.>"],
            "storage": "memory",
            "max_msgs": 3,
            "max_bytes": st.bytes - 40,
        }
        r = await api(nc, "$JS.API.STREAM.UPDATE.U", config)
        assert (r["state"]["messages"], r["state"]["first_seq"]) == (2, 3)
        await anyio.sleep(1.2)
        r = await api(nc, "$JS.API.STREAM.UPDATE.U", {**config, "max_age": 1_000_000_000})
        assert (r["state"]["messages"], r["state"]["first_seq"]) == (0, 5), "older than max_age: gone"
        r = await api(nc, "$JS.API.STREAM.UPDATE.U", {**config, "max_age": 300_000_000})
        await js.publish("u.x", b"short-lived")
        with anyio.fail_after(2):  # the update's max_age is in force, not the one the stream began with
            while (await js.stream_info("U")).state.messages:
                await anyio.sleep(0.05)


async def test_a_stream_turned_to_interest_keeps_nothing_without_consumers(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="I", subjects=["i.>"], storage=StorageType.MEMORY)
        await js.publish("i.a", b"1")
        await js.publish("i.b", b"2")
        config = {"name": "I", "subjects": ["i.>"], "storage": "memory", "retention": "interest"}
        r = await api(nc, "$JS.API.STREAM.UPDATE.I", config)
        assert "error" not in r, r
        st = (await js.stream_info("I")).state
        assert (st.messages, st.first_seq, st.last_seq) == (0, 3, 2)


async def test_interest_stream_without_consumers_keeps_nothing(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="I", subjects=["i"], retention=RetentionPolicy.INTEREST)
        assert (await js.publish("i", b"1")).seq == 1
        assert (await js.publish("i", b"2")).seq == 2
        st = (await js.stream_info("I")).state
        assert (st.messages, st.last_seq) == (0, 2)


async def test_a_rollup_on_a_full_stream_drops_the_oldest_first(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="RM", subjects=["rm.*"], max_msgs=3, allow_rollup_hdrs=True)
        for subject in ("rm.x", "rm.a", "rm.y"):
            await js.publish(subject, b"1")
        await js.publish("rm.a", b"2", headers={"Nats-Rollup": "sub"})
        info = await js.stream_info("RM", subjects_filter=">")
        assert (info.state.messages, info.state.first_seq) == (2, 3)
        assert info.state.subjects == {"rm.a": 1, "rm.y": 1}


async def test_a_rollup_right_behind_puts_over_the_subject_limit_keeps_the_other_subjects(js_server):
    """A rollup sent in one write with a put over its subject's limit: the put's old message goes
    first, so max_msgs (applied as the rollup is stored) leaves the other subject's message."""
    async with jetstream(js_server) as (_, js):
        await js.add_stream(
            name="RL", subjects=["rl.*"], max_msgs=3, max_msgs_per_subject=1, allow_rollup_hdrs=True
        )
        for subject in ("rl.t", "rl.s"):  # 1, 2
            await js.publish(subject, b"1")
        acks = [
            await js.publish_async("rl.s", b"2"),  # 3: 2 goes
            await js.publish_async("rl.r", b"3", headers={"Nats-Rollup": "sub"}),  # 4
        ]
        await js.publish_async_completed()
        assert [(await a).seq for a in acks] == [3, 4]
        info = await js.stream_info("RL", subjects_filter=">")
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 1, 4)
        assert info.state.subjects == {"rl.t": 1, "rl.s": 1, "rl.r": 1}


async def test_rollup_replaces_subject_history(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="RU", subjects=["ru.*"], allow_rollup_hdrs=True)
        for i in range(3):
            await js.publish("ru.a", str(i).encode())
        await js.publish("ru.b", b"b")
        await js.publish("ru.a", b"snapshot", headers={"Nats-Rollup": "sub"})
        info = await js.stream_info("RU", subjects_filter=">")
        assert info.state.subjects == {"ru.a": 1, "ru.b": 1}
        await js.add_stream(name="NORU", subjects=["noru"])
        with pytest.raises(APIError) as refused:
            await js.publish("noru", b"x", headers={"Nats-Rollup": "all"})
        assert refused.value.err_code == 10111


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("subject", "body", "err_code"),
    [
        ("$JS.API.STREAM.CREATE.BAD", b"{not json", 10025),
        ("$JS.API.STREAM.CREATE.X", {"name": "Y", "subjects": ["y"]}, 10056),
        ("$JS.API.STREAM.CREATE.R3", {"name": "R3", "subjects": ["r3"], "num_replicas": 3}, 10074),
        ("$JS.API.STREAM.INFO.NOPE", None, 10059),
        ("$JS.API.STREAM.DELETE.NOPE", None, 10059),
        ("$JS.API.STREAM.MSG.GET.NOPE", {"seq": 1}, 10059),
        ("$JS.API.STREAM.UPDATE.NOPE", {"name": "NOPE", "retention": "bogus"}, 10025),
    ],
    ids=[
        "malformed_json",
        "name_mismatch",
        "replicas_without_cluster",
        "info_missing",
        "delete_missing",
        "get_from_missing",
        "update_missing_with_a_bad_config",
    ],
)
async def test_bad_requests_get_the_reference_error(js_server, subject, body, err_code):
    nc, _js = await connect(js_server)
    try:
        r = await api(nc, subject, body)
        assert r["error"]["err_code"] == err_code, r
    finally:
        await nc.close()


_SEQ_TYPE = "json: cannot unmarshal number -1 into Go struct field JSApiMsgGetRequest.seq of type uint64"
_LIST, _GET, _DEL = (f"server.JSApi{t}Request" for t in ("StreamList", "MsgGet", "MsgDelete"))
_BAD_REQUEST = {"code": 400, "err_code": 10003, "description": "bad request"}


def _bad_json(err: str, go: bool = True) -> dict[str, Any]:
    """JSInvalidJSONErr with Go's text: ``json: ...`` for a type error (``go``), bare for syntax."""
    return {"code": 400, "err_code": 10025, "description": f"invalid JSON: {'json: ' if go else ''}{err}"}


@pytest.mark.parametrize(
    ("subject", "body", "expected"),
    [
        ("STREAM.INFO.S", {"subjects_filter": "a..b"}, {"total": 0, "offset": 0, "limit": 0}),
        ("STREAM.INFO.S", {"offset": -1}, {"total": 0, "offset": 0, "limit": 0}),
        ("STREAM.NAMES", {"subject": "a..b"}, {"total": 0, "streams": None}),
        ("STREAM.NAMES", {"offset": 10}, {"total": 1, "offset": 1}),
        (
            "STREAM.MSG.GET.S",
            {"seq": -1},
            {"error": {"code": 400, "err_code": 10025, "description": f"invalid JSON: {_SEQ_TYPE}"}},
        ),
        (
            "STREAM.MSG.GET.S",
            {"last_by_subj": "a..b"},
            {"error": {"code": 404, "err_code": 10037, "description": "no message found"}},
        ),
        (
            "STREAM.MSG.GET.NOPE",
            {"seq": 0},
            {"error": {"code": 400, "err_code": 10003, "description": "bad request"}},
        ),
        (
            "STREAM.MSG.DELETE.S",
            {},
            {"error": {"code": 400, "err_code": 10003, "description": "bad request"}},
        ),
        (
            "STREAM.MSG.DELETE.S",
            {"seq": 0},
            {"error": {"code": 500, "err_code": 10057, "description": "no message found"}},
        ),
        (
            "STREAM.MSG.DELETE.S",
            {"seq": 9},
            {"error": {"code": 500, "err_code": 10057, "description": "stream store EOF"}},
        ),
        (
            "STREAM.PURGE.S",
            {"seq": 3, "keep": 1},
            {"error": {"code": 400, "err_code": 10003, "description": "bad request"}, "purged": 0},
        ),
        ("STREAM.PURGE.S", {"filter": "a..b"}, {"success": True, "purged": 0}),
        # an optional body is read only when it is a JSON object or array; other text is no body
        ("STREAM.PURGE.S", b"garbage", {"success": True, "purged": 3}),
        ("STREAM.INFO.S", b"7", {"error": None, "total": 0}),
        ("STREAM.NAMES", b"  x{", {"error": None, "total": 1}),
        (
            "STREAM.LIST",
            b"[1]",
            {"error": _bad_json("cannot unmarshal array into Go value of type " + _LIST)},
        ),
        ("STREAM.INFO.S", {"bogus": 1}, {"error": _bad_json('unknown field "bogus"')}),
        # a required body: empty is a bad request, anything else is decoded (strictly)
        (
            "STREAM.MSG.GET.S",
            b"[1]",
            {"error": _bad_json("cannot unmarshal array into Go value of type " + _GET)},
        ),
        ("STREAM.MSG.GET.S", {"seq": 1, "bogus": 1}, {"error": _bad_json('unknown field "bogus"')}),
        ("STREAM.MSG.GET.S", {"seq": 1, "batch": 2}, {"error": _BAD_REQUEST}),
        (
            "STREAM.MSG.DELETE.S",
            b" ",
            {"error": {"code": 500, "err_code": 10057, "description": "no message found"}},
        ),
        (
            "STREAM.MSG.DELETE.S",
            {"no_erase": True},
            {"error": {"code": 500, "err_code": 10057, "description": "no message found"}},
        ),
        (
            "STREAM.MSG.DELETE.NOPE",
            b"7",
            {"error": _bad_json("cannot unmarshal number into Go value of type " + _DEL)},
        ),
        # Go's own texts for a bad literal, a cut-off one, -0 in an unsigned field, a config
        # that is no object
        (
            "STREAM.MSG.GET.S",
            b"nope",
            {
                "error": _bad_json(
                    "invalid character 'o' in literal null (expecting 'u') at offset 2", go=False
                )
            },
        ),
        ("STREAM.MSG.GET.S", b"tru", {"error": _bad_json("unexpected EOF", go=False)}),
        (
            "STREAM.MSG.DELETE.S",
            b'{"seq":-0}',
            {
                "error": _bad_json(
                    "cannot unmarshal number -0 into Go struct field JSApiMsgDeleteRequest.seq of type uint64"
                )
            },
        ),
        (
            "STREAM.CREATE.S2",
            b"1",
            {"error": _bad_json("cannot unmarshal number into Go value of type server.StreamConfigRequest")},
        ),
    ],
)
async def test_requests_read_as_the_reference_reads_them(js_server, subject, body, expected):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="S", subjects=["s.>"])
        for _ in range(3):
            await js.publish("s.a", b"x")
        r = await api(nc, f"$JS.API.{subject}", body)
        assert {k: r.get(k) for k in expected} == expected, r


@pytest.mark.parametrize(
    "name", ["a.b", "a*", "a>", "a b", "x" * 300], ids=["dot", "star", "gt", "space", "long"]
)
async def test_invalid_stream_names_are_refused(js_server, name):
    nc, _js = await connect(js_server)
    try:
        r = await api(nc, "$JS.API.STREAM.CREATE.ok", {"name": name, "subjects": ["zz"]})
        assert "error" in r
    finally:
        await nc.close()


async def test_overlapping_subjects_are_refused(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="O1", subjects=["o.>"])
        with pytest.raises(BadRequestError) as overlap:
            await js.add_stream(name="O2", subjects=["o.x.*"])
        assert overlap.value.err_code == 10065
        with pytest.raises(BadRequestError) as exists:
            await js.add_stream(name="O1", subjects=["other"])
        assert exists.value.err_code == 10058
        same = await js.add_stream(name="O1", subjects=["o.>"])
        assert same.config.name == "O1", "creating an identical stream again is accepted"


async def test_forbidden_update_is_refused(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="U", subjects=["u"])
        with pytest.raises(APIError) as storage:
            await js.update_stream(StreamConfig(name="U", subjects=["u"], storage=StorageType.MEMORY))
        assert storage.value.err_code == 10052
        assert storage.value.description == "stream configuration update can not change storage type"


async def test_deny_delete_and_deny_purge(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="DD", subjects=["dd"], deny_delete=True, deny_purge=True)
        await js.publish("dd", b"1")
        with pytest.raises(APIError) as no_delete:
            await js.delete_msg("DD", 1)
        assert no_delete.value.err_code == 10057
        with pytest.raises(APIError) as no_purge:
            await js.purge_stream("DD")
        assert no_purge.value.err_code == 10056 or no_purge.value.err_code == 10110


async def test_memory_storage_stream(js_server):
    async with jetstream(js_server) as (_, js):
        info = await js.add_stream(name="MEM", subjects=["mem"], storage=StorageType.MEMORY)
        assert info.config.storage == StorageType.MEMORY
        await js.publish("mem", b"volatile")
        assert (await js.get_msg("MEM", 1)).data == b"volatile"


async def test_first_seq_starts_the_stream_there(js_server):
    async with jetstream(js_server) as (_, js):
        info = await js.add_stream(name="FS", subjects=["fs"], first_seq=100)
        assert (info.state.first_seq, info.state.last_seq) == (100, 99)
        assert (await js.publish("fs", b"x")).seq == 100


async def test_an_empty_stream_reports_first_seq_0_until_one_is_set(js_server):
    """An empty stream reports first_seq 0 only while it never had a first sequence: a first_seq
    in its config (even 1) or a purge of the whole stream sets one; a partial purge does not."""
    async with jetstream(js_server) as (nc, js):

        async def first_last(name: str) -> tuple[int, int]:
            st = (await js.stream_info(name)).state
            return st.first_seq, st.last_seq

        await js.add_stream(name="E0", subjects=["e0"])
        await api(nc, "$JS.API.STREAM.PURGE.E0", {"filter": "e0"})
        assert await first_last("E0") == (0, 0), "a filtered purge sets nothing"
        await api(nc, "$JS.API.STREAM.PURGE.E0", {"seq": 1})
        assert await first_last("E0") == (0, 0), "nor does a purge up to a sequence"
        await api(nc, "$JS.API.STREAM.PURGE.E0")
        assert await first_last("E0") == (1, 0)
        await js.add_stream(name="E1", subjects=["e1"], first_seq=1)
        assert await first_last("E1") == (1, 0)
        await js.publish("e1", b"x")
        await js.purge_stream("E1")
        assert await first_last("E1") == (2, 1)


async def test_max_msg_size_refuses_larger_messages(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="MS", subjects=["ms"], max_msg_size=64)
        await js.publish("ms", b"x" * 64)
        with pytest.raises(APIError) as too_big:
            await js.publish("ms", b"x" * 65)
        assert too_big.value.err_code == 10054


async def test_discard_new_per_subject(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(
            name="DN",
            subjects=["dn.*"],
            max_msgs_per_subject=1,
            discard=DiscardPolicy.NEW,
            discard_new_per_subject=True,
        )
        await js.publish("dn.a", b"1")
        await js.publish("dn.b", b"1")
        with pytest.raises(APIError) as refused:
            await js.publish("dn.a", b"2")
        assert refused.value.err_code == 10077
        # without the flag, discard new does not apply to the per-subject limit
        await js.add_stream(name="DO", subjects=["do.*"], max_msgs_per_subject=1, discard=DiscardPolicy.NEW)
        await js.publish("do.a", b"1")
        assert (await js.publish("do.a", b"2")).seq == 2
        assert (await js.stream_info("DO")).state.messages == 1


async def test_discard_new_takes_a_publish_that_only_replaces_a_message(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(
            name="M", subjects=["m.*"], max_msgs=2, max_msgs_per_subject=1, discard=DiscardPolicy.NEW
        )
        await js.publish("m.a", b"1")
        await js.publish("m.b", b"1")
        assert (await js.publish("m.a", b"2")).seq == 3, "m.a's old message makes room"
        with pytest.raises(APIError) as refused:
            await js.publish("m.c", b"1")
        assert (refused.value.err_code, refused.value.description) == (10077, "maximum messages exceeded")
        st = (await js.stream_info("M")).state
        assert (st.messages, st.first_seq) == (2, 2)


async def test_per_message_ttl(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="NOTTL", subjects=["nottl"])
        with pytest.raises(APIError) as disabled:
            await js.publish("nottl", b"x", headers={"Nats-TTL": "1s"})
        assert disabled.value.err_code == 10166
        await api(
            nc, "$JS.API.STREAM.CREATE.TTL", {"name": "TTL", "subjects": ["ttl"], "allow_msg_ttl": True}
        )
        await js.publish("ttl", b"short", headers={"Nats-TTL": "1s"})
        await js.publish("ttl", b"long")
        with anyio.fail_after(10):
            while (await js.stream_info("TTL")).state.messages != 1:
                await anyio.sleep(0.1)
        assert (await js.get_msg("TTL", 2)).data == b"long"


def _raw_publish(port: int, subject: str, header_block: bytes) -> dict[str, Any]:
    """A publish with a header block sent as it is (nats-py trims header values); its PubAck."""
    hpub = b"HPUB %s _r %d %d\r\n%sx\r\n" % (
        subject.encode(),
        len(header_block),
        len(header_block) + 1,
        header_block,
    )
    connect = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
    out, _closed = exchange(port, b"SUB _r 1\r\n" + hpub, connect=connect)
    _head, _, rest = out.partition(b"MSG _r 1 ")
    assert rest, out
    return json.loads(rest.split(b"\r\n")[1])


_WRONG_LAST = {"code": 400, "err_code": 10071, "description": "wrong last sequence: 1"}
_TTL_OFF = {"code": 400, "err_code": 10166, "description": "per-message TTL is disabled"}
_TTL_BAD = {"code": 400, "err_code": 10165, "description": "invalid per-message TTL"}


@pytest.mark.parametrize(
    ("stream", "headers", "expected"),
    [
        ("N", {"Nats-Msg-Id": "m1", "Nats-Expected-Last-Sequence": "5"}, _WRONG_LAST),  # before dedup
        ("N", {"Nats-Msg-Id": "m1", "Nats-Expected-Last-Subject-Sequence": "5"}, _WRONG_LAST),
        ("N", {"Nats-Msg-Id": "m1", "Nats-TTL": "5s"}, _TTL_OFF),
        ("N", {"Nats-Expected-Last-Sequence": "5", "Nats-TTL": "5s"}, _TTL_OFF),
        ("N", {"Nats-Expected-Last-Subject-Sequence": "9", "Nats-Expected-Last-Msg-Id": "zz"}, _WRONG_LAST),
        ("N", {"Nats-TTL": "abc"}, _TTL_BAD),
        ("N", {"Nats-Expected-Stream": ""}, 2),
        (
            "N",
            {
                "Nats-Expected-Last-Subject-Sequence": "1",
                "Nats-Expected-Last-Subject-Sequence-Subject": "n.a",
            },
            2,
        ),
        (
            "N",
            {"Nats-Expected-Last-Subject-Sequence-Subject": "n.a"},
            {
                "code": 400,
                "err_code": 10193,
                "description": "missing sequence for expected last sequence per subject",
            },
        ),
        ("T", {"Nats-TTL": "1m30s"}, 2),
        ("T", {"Nats-TTL": "1.5s"}, 2),
        ("T", {"Nats-TTL": "500ms"}, _TTL_BAD),
        # beyond Go's int64 Duration; whole seconds wrap as the reference's int64 does
        ("T", {"Nats-TTL": "2562048h"}, _TTL_BAD),
        ("T", {"Nats-TTL": "100000000000s"}, _TTL_BAD),
        ("T", {"Nats-TTL": "9223372036854775808"}, _TTL_BAD),
        ("T", {"Nats-TTL": "18446744073709551617"}, 2),
        ("R", {"Nats-Rollup": "ALL"}, 2),
        (
            "R",
            {"Nats-Rollup": "bad"},
            {"code": 500, "err_code": 10111, "description": 'rollup value invalid: "bad"'},
        ),
        # names match exactly, values are taken as sent (trailing blanks included)
        ("N", {"nats-msg-id": "m1"}, 2),
        ("N", b"NATS/1.0\r\nNats-Msg-Id: m1 \r\n\r\n", 2),  # raw: nats-py strips values
        ("N", {"NATS-EXPECTED-STREAM": "B"}, 2),
        ("T", b"NATS/1.0\r\nNats-TTL: 5s \r\n\r\n", _TTL_BAD),
        # a subject that is no subject has no last sequence
        (
            "N",
            {
                "Nats-Expected-Last-Subject-Sequence": "0",
                "Nats-Expected-Last-Subject-Sequence-Subject": "a..x",
            },
            2,
        ),
        # features a stream has not enabled (leafjet has none of them)
        (
            "N",
            {"Nats-Batch-Id": "b1"},
            {"code": 400, "err_code": 10174, "description": "atomic publish is disabled"},
        ),
        (
            "N",
            {"Nats-Incr": "1"},
            {"code": 400, "err_code": 10168, "description": "message counters is disabled"},
        ),
        (
            "N",
            {"Nats-Schedule": "@at 2030-01-01T00:00:00Z"},
            {"code": 400, "err_code": 10188, "description": "message schedules is disabled"},
        ),
        # a publish that no consumer of an interest stream takes is let go before its TTL is read
        ("I", {"Nats-TTL": "abc"}, 2),
    ],
)
async def test_publish_headers_are_checked_as_the_reference_checks_them(js_server, stream, headers, expected):
    async with jetstream(js_server) as (nc, js):
        extra = {
            "T": {"allow_msg_ttl": True},
            "R": {"allow_rollup_hdrs": True},
            "I": {"retention": "interest"},
        }.get(stream, {})
        lower = stream.lower()
        await api(
            nc, f"$JS.API.STREAM.CREATE.{stream}", {"name": stream, "subjects": [f"{lower}.>"], **extra}
        )
        await js.publish(f"{lower}.a", b"first", headers={"Nats-Msg-Id": "m1"})
        if isinstance(headers, bytes):
            reply = _raw_publish(js_server.port, f"{lower}.a", headers)
        else:
            reply = json.loads((await nc.request(f"{lower}.a", b"x", headers=headers, timeout=5)).data)
        if isinstance(expected, int):
            assert reply == {"stream": stream, "seq": expected}
        else:
            assert reply["error"] == expected


async def test_sealed_stream_refuses_writes_and_deletes(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="SE", subjects=["se"])
        await js.publish("se", b"1")
        sealed = await api(nc, "$JS.API.STREAM.UPDATE.SE", {"name": "SE", "subjects": ["se"], "sealed": True})
        assert sealed["config"]["sealed"] is True
        assert sealed["config"]["deny_delete"] is True and sealed["config"]["deny_purge"] is True
        r = await api(nc, "$JS.API.STREAM.MSG.DELETE.SE", {"seq": 1})
        assert r["error"]["err_code"] in (10057, 10109)


async def test_metadata_is_kept(js_server):
    nc, _js = await connect(js_server)
    try:
        r = await api(
            nc, "$JS.API.STREAM.CREATE.MD", {"name": "MD", "subjects": ["md"], "metadata": {"owner": "ops"}}
        )
        assert r["config"]["metadata"]["owner"] == "ops"
    finally:
        await nc.close()


async def test_unknown_config_field_is_refused(js_server):
    nc, _js = await connect(js_server)
    try:
        r = await api(nc, "$JS.API.STREAM.CREATE.UF", {"name": "UF", "subjects": ["uf"], "bogus_field": 1})
        assert r["error"]["err_code"] == 10025
    finally:
        await nc.close()


async def test_stream_names_are_paged(js_server):
    async with jetstream(js_server) as (nc, js):
        for i in range(5):
            await js.add_stream(name=f"PG{i}", subjects=[f"pg{i}"])
        page = await api(nc, "$JS.API.STREAM.NAMES", {"offset": 3})
        assert (page["total"], page["offset"], len(page["streams"])) == (5, 3, 2)


async def test_api_requests_without_a_reply_are_carried_out(js_server):
    """Fire-and-forget administration: a request without a reply subject is executed (and
    counted) all the same; only a pull request or a direct get needs someone to answer."""
    async with jetstream(js_server) as (nc, js):
        await nc.publish("$JS.API.STREAM.CREATE.A", json.dumps({"name": "A", "subjects": ["a"]}).encode())
        await nc.publish("$JS.API.STREAM.CREATE.B", json.dumps({"name": "B", "subjects": ["b"]}).encode())
        await nc.flush()
        with anyio.fail_after(5):
            while (await api(nc, "$JS.API.STREAM.NAMES"))["streams"] != ["A", "B"]:
                await anyio.sleep(0.02)
        await js.publish("a", b"1")
        await nc.publish("$JS.API.STREAM.PURGE.A", b"")
        await nc.publish("$JS.API.STREAM.DELETE.B", b"")
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.A.nope", b"")  # nobody to answer: nothing
        await nc.flush()
        with anyio.fail_after(5):
            while (await api(nc, "$JS.API.STREAM.NAMES"))["streams"] != ["A"]:
                await anyio.sleep(0.02)
        assert (await js.stream_info("A")).state.messages == 0


async def test_unknown_api_subjects_get_no_answer(js_server):
    """The reference answers every $JS.API subject it listens on, and nothing else: no JSON
    error and no "no responders" (which clients read as JetStream being disabled)."""
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="S", subjects=["s"])
        before = (await api(nc, "$JS.API.INFO"))["api"]
        for subject in (
            "$JS.API.FOO",
            "$JS.API.STREAM.INFO",
            "$JS.API.STREAM.INFO.S.X",
            "$JS.API.CONSUMER.NAMES",
        ):
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request(subject, b"", timeout=0.5)
        after = (await api(nc, "$JS.API.INFO"))["api"]
        assert (after["total"] - before["total"], after["errors"] - before["errors"]) == (1, 0)


async def test_snapshot_and_restore_requests_are_checked(js_server):
    async with jetstream(js_server) as (nc, _js):
        await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]})
        snap = await api(nc, "$JS.API.STREAM.SNAPSHOT.S")
        assert snap["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
        assert snap["error"] == {"code": 400, "err_code": 10003, "description": "bad request"}
        missing = await api(nc, "$JS.API.STREAM.SNAPSHOT.NOPE", {"deliver_subject": "x"})
        assert missing["error"]["err_code"] == 10059
        malformed = await api(nc, "$JS.API.STREAM.SNAPSHOT.S", b"{bad")
        assert malformed["error"]["err_code"] == 10025  # invalid JSON
        bad = await api(nc, "$JS.API.STREAM.SNAPSHOT.S", {"deliver_subject": "a.*"})
        assert bad["error"] == {"code": 400, "err_code": 10015, "description": "deliver subject not valid"}
        restore = await api(nc, "$JS.API.STREAM.RESTORE.S")
        assert restore["error"]["err_code"] == 10003 and restore["deliver_subject"] == ""


RESTORE_CASES = [
    # (stream in the subject, body, err_code): the reference's checks before it restores
    ("R", b"{}", 10003),
    ("R", b"{bad", 10025),
    ("R", b"[]", 10025),
    ("R", b'{"seq":1}', 10025),  # read strictly: an unknown field
    ("R", b'{"config":1}', 10025),
    ("R", b'{"state":{"messages":"x"}}', 10025),
    ("R", b'{"state":{"subjects":{"a":-1}}}', 10025),
    ("R", b'{"config":{"name":"OTHER"}}', 10056),
    ("a/b", b'{"config":{}}', 10128),
    ("S", b'{"config":{"name":"S","subjects":["s"]}}', 10130),
]


async def test_restore_requests_are_checked_as_the_reference_checks_them(js_server):
    """A restore request gets the reference's answer to a request it would not take: an empty
    one, bad JSON (read strictly: an unknown field, a wrong type in the config or the state), a
    name that differs from the subject's, path separators, a name in use; one it takes is
    answered with the subject the backup goes to (tests/integration/test_stream_backup.py)."""
    async with jetstream(js_server) as (nc, _js):
        await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]})
        for stream, body, code in RESTORE_CASES:
            r = await api(nc, f"$JS.API.STREAM.RESTORE.{stream}", body)
            assert r["type"] == "io.nats.jetstream.api.v1.stream_restore_response", r
            assert (r.get("error") or {}).get("err_code") == code, (stream, body, r)
        r = await api(nc, "$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R","subjects":["r"]}}')
        assert "error" not in r and r["deliver_subject"].startswith("$JS.SNAPSHOT.RESTORE.R."), r


@pytest.mark.parametrize(
    ("subject", "missing"),
    [
        ("$JS.API.STREAM.DELETE.S", "$JS.API.STREAM.DELETE.NOPE"),
        ("$JS.API.CONSUMER.DELETE.S.C", "$JS.API.CONSUMER.DELETE.NOPE.C"),
        ("$JS.API.CONSUMER.INFO.S.C", "$JS.API.CONSUMER.INFO.S.NOPE"),
    ],
)
@pytest.mark.parametrize("body", [b'{"a":1}', b"x", b" ", b"null", b"[]"])
async def test_requests_that_take_no_body_refuse_one(js_server, subject, missing, body):
    """Before looking anything up: a destructive request with a body the reference refuses
    deletes nothing."""
    async with jetstream(js_server) as (nc, _js):
        await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]})
        await api(nc, "$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {"durable_name": "C"}})
        got = await api(nc, subject, body)
        assert got["error"] == {
            "code": 400,
            "err_code": 10038,
            "description": "expected an empty request payload",
        }
        assert (await api(nc, "$JS.API.CONSUMER.NAMES.S"))["consumers"] == ["C"]
        assert (await api(nc, missing, body))["error"]["err_code"] == 10038
        assert "error" not in await api(nc, "$JS.API.CONSUMER.INFO.S.C", b"{}")


@pytest.mark.parametrize("kind", ["NAMES", "LIST"])
async def test_stream_names_and_list_errors_keep_an_empty_page(js_server, kind):
    async with jetstream(js_server) as (nc, _js):
        bad = await api(nc, f"$JS.API.STREAM.{kind}", {"offset": "1"})
        assert bad["error"]["err_code"] == 10025
        assert (bad["total"], bad["offset"], bad["limit"]) == (0, 0, 0)
        assert bad["streams"] == (None if kind == "NAMES" else [])
        # a consumer page's body is read before its stream is looked up
        got = await api(nc, f"$JS.API.CONSUMER.{kind}.NOPE", {"offset": "x"})
        assert got["error"]["err_code"] == 10025


async def test_a_header_block_over_64k_is_refused(js_server):
    async with jetstream(js_server) as (nc, _js):
        await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"]})
        # the block is "NATS/1.0\r\nX: <value>\r\n\r\n": 17 bytes around the value
        fits = await nc.request("s", b"x", headers={"X": "v" * (65535 - 17)}, timeout=5)
        assert json.loads(fits.data) == {"stream": "S", "seq": 1}
        over = json.loads((await nc.request("s", b"x", headers={"X": "v" * (65536 - 17)}, timeout=5)).data)
        assert over["error"] == {
            "code": 400,
            "err_code": 10097,
            "description": "header size exceeds maximum allowed of 64k",
        }
        assert (over["stream"], over["seq"]) == ("S", 0)


async def test_a_publish_subject_with_an_empty_token_reaches_no_stream(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="S", subjects=["s.>"])
        for subject in ("s..b", "s.a."):
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request(subject, b"x", timeout=2)
        assert (await js.stream_info("S")).state.messages == 0


async def test_stream_and_consumer_actions_are_advised(js_server):
    async with jetstream(js_server) as (nc, _js):
        streams = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.>")
        consumers = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.*.S.C")
        await nc.flush()
        await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
        await api(nc, "$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s.>"], "max_msgs": 10})
        await api(nc, "$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {"durable_name": "C"}})
        await api(nc, "$JS.API.CONSUMER.DELETE.S.C")
        await api(nc, "$JS.API.STREAM.DELETE.S")
        got = []
        for sub, n in ((streams, 3), (consumers, 2)):
            for _ in range(n):
                m = await sub.next_msg(timeout=3)
                body = json.loads(m.data)
                got.append((m.subject, body["type"].rsplit(".", 1)[1], body["action"], body.get("consumer")))
        assert got == [
            ("$JS.EVENT.ADVISORY.STREAM.CREATED.S", "stream_action", "create", None),
            ("$JS.EVENT.ADVISORY.STREAM.UPDATED.S", "stream_action", "modify", None),
            ("$JS.EVENT.ADVISORY.STREAM.DELETED.S", "stream_action", "delete", None),
            ("$JS.EVENT.ADVISORY.CONSUMER.CREATED.S.C", "consumer_action", "create", "C"),
            ("$JS.EVENT.ADVISORY.CONSUMER.DELETED.S.C", "consumer_action", "delete", "C"),
        ]
