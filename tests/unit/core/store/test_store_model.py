"""Property: the SQLite store and the memory store are the same stream under any sequence of calls.

Random calls (appends with and without explicit sequences, every purge shape, deletes, expiry, skips,
metadata) go to both stores, with the SQLite one reopened part-way; every result and every observable
read must agree."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import StoreError
from core.store import (
    Append,
    AppendBatch,
    DeleteOp,
    DelMetaOp,
    ExpireOp,
    MemoryStore,
    Op,
    PurgeOp,
    SetMetaOp,
    SkipOp,
    SourcePosOp,
    SqliteStore,
    StreamState,
    StreamStore,
)

SUBJECTS = ["a.1", "a.2", "b.1", "b.2.x", "c"]
FILTERS = [">", "a.*", "a.>", "b.1", "*.1", "*.*", "b.*.x", "zz"]

appends = st.builds(
    Append,
    subject=st.sampled_from(SUBJECTS),
    headers=st.sampled_from([None, b"", b"NATS/1.0\r\nK: v\r\n\r\n"]),
    data=st.binary(max_size=20),
    ts=st.integers(0, 10),
    seq=st.one_of(st.none(), st.none(), st.integers(1, 40)),
)
# a source's batch as columns, with its conditional position (refused unless it matches)
append_batches = st.lists(
    st.tuples(
        st.sampled_from(SUBJECTS),
        st.sampled_from([None, b"", b"NATS/1.0\r\nK: v\r\n\r\n"]),
        st.binary(max_size=20),
    ),
    min_size=1,
    max_size=5,
).map(lambda rows: AppendBatch([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], 7))
positions = st.builds(
    SourcePosOp, key=st.just("S > >"), seq=st.integers(0, 4), expect=st.one_of(st.none(), st.integers(0, 4))
)
purges = st.one_of(
    st.builds(PurgeOp, subject=st.sampled_from([None, *FILTERS]), keep=st.sampled_from([None, 1, 2, 5])),
    st.builds(PurgeOp, subject=st.sampled_from([None, *FILTERS]), up_to_seq=st.integers(1, 45)),
)
ops = st.one_of(
    appends,
    appends,
    appends,
    append_batches,
    positions,
    purges,
    st.builds(DeleteOp, seq=st.integers(1, 30), erase=st.booleans()),
    st.builds(ExpireOp, up_to_ts=st.integers(0, 10)),
    st.builds(SkipOp, seq=st.integers(1, 40), ts=st.one_of(st.none(), st.integers(0, 10))),
    st.builds(SetMetaOp, key=st.sampled_from(["k1", "k2", "x/k3"]), value=st.binary(max_size=8)),
    st.builds(DelMetaOp, key=st.sampled_from(["k1", "k2", "x/k3"])),
)
# A batch of KV puts: appends, then each key trimmed to the bucket's history (the SQLite store
# runs such a run of trims as one statement).
trims = st.builds(PurgeOp, subject=st.sampled_from(SUBJECTS), keep=st.sampled_from([1, 1, 2]))
kv_batches = st.builds(
    lambda a, t: a + t, st.lists(appends, max_size=6), st.lists(trims, min_size=2, max_size=5)
)
calls = st.lists(st.one_of(st.lists(ops, min_size=1, max_size=6), kv_batches), min_size=1, max_size=12)


async def comparable_state(store: StreamStore) -> StreamState:
    """The state with ``bytes`` checked against the store's own count of its messages, then left
    out: the two stores count sizes as the reference's memory and file stores do."""
    state = await store.state(with_deleted=True)
    msgs = await store.range(0, limit=10_000)
    assert state.bytes == sum(store.size_of(m.subject, m.headers, m.data) for m in msgs)
    return dataclasses.replace(state, bytes=0)


async def observe(store: StreamStore) -> dict[str, object]:
    seen: dict[str, object] = {
        "state": await comparable_state(store),
        "msgs": await store.range(0, limit=10_000),
        "subjects": await store.subjects_state(),
        "meta": await store.meta_items(),
        "meta_x": await store.meta_items("x/"),
    }
    last = (await store.state()).last_seq
    for f in FILTERS:
        seen[f"last {f}"] = await store.last_by_subject(f)
        seen[f"count {f}"] = await store.msgs_for_subject(f)
        seen[f"subj {f}"] = await store.subjects_state(f)
        for s in (0, 3, last // 2, last):
            seen[f"first_after {s} {f}"] = await store.first_after(s, f)
            seen[f"pending {s} {f}"] = await store.num_pending(s, f)
            seen[f"range {s} {f}"] = await store.range(s, s + 10, limit=4, subject_filter=f)
    return seen


async def apply_both(mem: StreamStore, sql: StreamStore, call: list[Op]) -> None:
    outcomes = []
    for store in (mem, sql):
        try:
            outcomes.append(("ok", await store.apply(call)))
        except StoreError as e:
            outcomes.append(("error", type(e)))
    assert outcomes[0] == outcomes[1], call


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=calls, reopen_at=st.integers(0, 12))
def test_sqlite_and_memory_stores_agree_on_any_history(calls: list[list[Op]], reopen_at: int) -> None:
    async def run() -> None:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "model.db"
            mem = MemoryStore()
            sql = await SqliteStore.open(path)
            try:
                for i, call in enumerate(calls):
                    if i == reopen_at:
                        await sql.close()
                        sql = await SqliteStore.open(path)
                    await apply_both(mem, sql, call)
                    assert await comparable_state(sql) == await comparable_state(mem), call
                assert await observe(sql) == await observe(mem)
                chunks = [c async for c in sql.snapshot()]
                assert chunks == [c async for c in mem.snapshot()]
            finally:
                await sql.close()

    anyio.run(run, backend="asyncio")
