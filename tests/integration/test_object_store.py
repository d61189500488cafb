"""Object stores (ADR-20) with stock nats-py against leafjet and the reference.

A bucket is the stream ``OBJ_<bucket>``; an object is chunks on ``$O.<bucket>.C.<nuid>`` and one
metadata message (rolled up per subject) on ``$O.<bucket>.M.<base64url(name)>``.
"""

from __future__ import annotations

import base64
import hashlib
import os

import pytest
from nats.js.errors import NotFoundError, ObjectNotFoundError

from tests.support.jsapi import connect as _connect
from tests.support.jsapi import jetstream

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CHUNK = 128 * 1024  # nats-py's default chunk size
BIG = 3 * 1024 * 1024 + 1000  # 3 MiB and a bit: 25 chunks, the last one short


async def connect(srv):
    return await _connect(srv, timeout=10)


def digest_of(data: bytes) -> str:
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


async def test_bucket_is_a_stream_with_the_object_store_shape(js_server):
    async with jetstream(js_server, timeout=10) as (_, js):
        await js.create_object_store("FILES", description="blobs")
        cfg = (await js.stream_info("OBJ_FILES")).config
        assert cfg.subjects == ["$O.FILES.C.>", "$O.FILES.M.>"]
        assert cfg.allow_rollup_hdrs is True and cfg.allow_direct is True
        assert cfg.description == "blobs"


async def test_put_and_get_a_chunked_object(js_server):
    async with jetstream(js_server, timeout=10) as (_, js):
        obs = await js.create_object_store("BIG")
        data = os.urandom(BIG)
        info = await obs.put("firmware.bin", data)
        assert (info.name, info.size, info.chunks, info.bucket) == ("firmware.bin", BIG, 25, "BIG")
        assert info.digest == digest_of(data)
        result = await obs.get("firmware.bin")
        assert result.data == data, "the object comes back byte for byte (nats-py also checks the digest)"
        assert result.info.size == BIG and result.info.chunks == 25
        st = (await js.stream_info("OBJ_BIG")).state
        assert st.messages == 26, "25 chunks and one metadata message"
        assert st.bytes > BIG
        chunk = await js.get_msg("OBJ_BIG", 1)
        assert chunk.subject == f"$O.BIG.C.{info.nuid}" and len(chunk.data) == CHUNK
        meta = await js.get_msg("OBJ_BIG", 26)
        name_token = base64.urlsafe_b64encode(b"firmware.bin").decode()
        assert meta.subject == f"$O.BIG.M.{name_token}"
        assert meta.headers["Nats-Rollup"] == "sub"


async def test_info_describes_the_object(js_server):
    async with jetstream(js_server, timeout=10) as (_, js):
        obs = await js.create_object_store("INFO")
        data = b"hello object store"
        await obs.put("greeting.txt", data)
        info = await obs.get_info("greeting.txt")
        assert (info.name, info.size, info.chunks, info.bucket) == ("greeting.txt", len(data), 1, "INFO")
        assert info.digest == digest_of(data)
        assert info.nuid and not info.deleted
        empty = await obs.put("empty", b"")
        assert (empty.size, empty.chunks) == (0, 0)
        assert (await obs.get("empty")).data == b""


async def test_list_objects(js_server):
    async with jetstream(js_server, timeout=10) as (_, js):
        obs = await js.create_object_store("LIST")
        with pytest.raises(NotFoundError):
            await obs.list()
        for name in ("b.txt", "a.txt", "c/d.txt"):
            await obs.put(name, name.encode() * 10)
        listed = await obs.list()
        assert sorted(i.name for i in listed) == ["a.txt", "b.txt", "c/d.txt"]
        assert {i.name: i.size for i in listed}["c/d.txt"] == 70


async def test_delete_an_object(js_server):
    async with jetstream(js_server, timeout=10) as (_, js):
        obs = await js.create_object_store("DEL")
        await obs.put("keep", b"k" * 10)
        await obs.put("drop", os.urandom(3 * CHUNK))
        assert (await js.stream_info("OBJ_DEL")).state.messages == 2 + 3 + 1
        await obs.delete("drop")
        with pytest.raises(ObjectNotFoundError):
            await obs.get("drop")
        with pytest.raises(ObjectNotFoundError):
            await obs.get_info("drop")
        tombstone = await obs.get_info("drop", show_deleted=True)
        assert tombstone.deleted is True and tombstone.size == 0
        st = (await js.stream_info("OBJ_DEL")).state
        assert st.messages == 3, "the chunks are purged; keep's chunk and both metadata remain"
        assert [i.name for i in await obs.list(ignore_deletes=True)] == ["keep"]
        assert (await obs.get("keep")).data == b"k" * 10


async def test_get_of_a_missing_object(js_server):
    async with jetstream(js_server, timeout=10) as (_, js):
        obs = await js.create_object_store("MISS")
        with pytest.raises(ObjectNotFoundError):
            await obs.get("nope")
        with pytest.raises(ObjectNotFoundError):
            await obs.get_info("nope")


async def test_a_second_put_replaces_the_object(js_server):
    async with jetstream(js_server, timeout=10) as (_, js):
        obs = await js.create_object_store("REP")
        first = await obs.put("cfg", os.urandom(2 * CHUNK + 5))
        second_data = b"v2" * 100
        second = await obs.put("cfg", second_data)
        assert second.nuid != first.nuid, "a new put writes its chunks under a new nuid"
        got = await obs.get("cfg")
        assert got.data == second_data and got.info.nuid == second.nuid
        assert got.info.digest == digest_of(second_data)
        st = (await js.stream_info("OBJ_REP")).state
        assert st.messages == 2, "the old chunks are purged and the metadata rolled up"
        assert [i.name for i in await obs.list()] == ["cfg"]


async def test_bucket_status_and_delete(js_server):
    async with jetstream(js_server, timeout=10) as (_, js):
        obs = await js.create_object_store("ST")
        await obs.put("x", b"x" * 1000)
        status = await obs.status()
        assert status.bucket == "ST" and status.size > 1000 and status.sealed is False
        assert await js.delete_object_store("ST") is True
        with pytest.raises(NotFoundError):
            await js.object_store("ST")


async def test_object_survives_restart(js_server):
    nc, js = await connect(js_server)
    data = os.urandom(2 * CHUNK + 17)
    try:
        obs = await js.create_object_store("RS")
        await obs.put("blob", data)
    finally:
        await nc.close()
    js_server.restart()
    async with jetstream(js_server, timeout=10) as (nc, js):
        obs = await js.object_store("RS")
        assert (await obs.get("blob")).data == data
