"""A mirror stores what its upstream delivered as is -- but a subject that is no UTF-8 (a
reference upstream keeps the raw bytes; the parser hands them over as surrogates) is stored
as the publish path stores it, with U+FFFD, instead of failing every batch for ever."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.jetstream.models import StreamConfig
from core.jetstream.sourced_batch import Delivery
from core.jetstream.stream import Stream
from core.server.accounts import Account
from core.store import SqliteStore

pytestmark = pytest.mark.anyio


async def test_a_mirrored_subject_that_is_no_utf8_is_stored_as_a_publish_stores_it(tmp_path: Path) -> None:
    cfg = StreamConfig.from_json({"name": "M", "mirror": {"name": "ORDERS"}})
    store = await SqliteStore.open(tmp_path / "m.db")
    stream = Stream(cfg, store, time.time_ns(), Account("A"), None)
    try:
        await stream.ingest_mirrored(
            [
                Delivery(1, "orders.a", None, b"1", 5),
                Delivery(2, "orders.\udcff\udcfe", None, b"2", 6),  # b"orders.\xff\xfe"
                Delivery(4, "orders.caf\u00e9", None, b"4", 7),
            ]
        )
        got = [(m.seq, m.subject, m.data) for m in await store.range(1, limit=10)]
        assert got == [(1, "orders.a", b"1"), (2, "orders.\ufffd\ufffd", b"2"), (4, "orders.caf\u00e9", b"4")]
    finally:
        await store.close()
