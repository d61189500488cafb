"""A stream store whose open is still running: the calls made meanwhile wait for it.

A prepared create (prepared.py) answers once the stream has started; the store of the new
stream may still be opening on a pool thread then (1.5-3 ms of SQLite connects, reads and a
folder fsync on a quiet machine, up to 10 under load). ``OpeningStore`` stands in for it, so
that the stream can start, and be announced, at once:

- every call waits until the open has ended, then goes to the open store, in the order the calls
  were made (the waiters resume in the order they began to wait, and each hands its call to the
  store before it yields: the store keeps that order);
- ``state`` is answered without waiting while no call has reached the store yet: a prepared
  store is a new, empty one (no ``first_seq``: such streams are not prepared), so its state is
  known; the create's answer and a stream info right after it need not wait for the open;
- an open that failed fails every call with a ``StoreError`` naming the cause (the engine then
  holds the stream as damaged): nothing waits on a failed open; the open itself is bounded by
  ``SqliteStore.open``'s timeout, so no call waits for ever either.

``settle`` / ``fail`` end the open (``PreparedStreams`` calls them). Once open, a call costs one
test more than a call to the store itself.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

import anyio

from core.errors import StoreError
from core.store.api import (
    MsgColumns,
    Op,
    Result,
    StoredMsg,
    StreamState,
    StreamStore,
    file_msg_size,
    make_state,
)

log = logging.getLogger("leafjet.jetstream")


class OpeningStore:
    """A file store being opened (``StreamStore``); see the module docstring."""

    size_of = staticmethod(file_msg_size)  # as SqliteStore's: known before the open

    def __init__(self, what: str) -> None:
        self._what = what  # the stream, for the error of a failed open
        self._store: StreamStore | None = None
        self._error: str | None = None
        self._ended = anyio.Event()
        self._used = False  # a call has gone (or waits to go) to the store
        self._when_ended: list[Callable[[str | None], None]] = []

    # ------------------------------------------------------------------ the open's outcome

    def settle(self, store: StreamStore) -> None:
        """The open succeeded: the waiting calls go on to ``store``."""
        self._store = store
        self._end()

    def fail(self, reason: str) -> None:
        """The open failed (``reason``): the waiting calls, and all later ones, fail."""
        self._error = reason
        self._end()

    def when_ended(self, fn: Callable[[str | None], None]) -> None:
        """``fn(why the open failed, or None)`` once it has ended (now, if it has)."""
        if self._ended.is_set():
            fn(self._error)
        else:
            self._when_ended.append(fn)

    def _end(self) -> None:
        self._ended.set()
        callbacks, self._when_ended = self._when_ended, []
        for fn in callbacks:
            try:
                fn(self._error)
            except Exception:  # one observer's bug: the open's outcome still reaches the others
                log.exception("a callback on the end of a store's open failed")

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    @property
    def store(self) -> StreamStore | None:
        """The open store (None: still opening, or failed)."""
        return self._store

    @property
    def error(self) -> str | None:
        """Why the open failed (None: it did not, or has not ended)."""
        return self._error

    async def wait_ended(self) -> str | None:
        """Until the open has ended; why it failed, or None."""
        await self._ended.wait()
        return self._error

    async def _open(self) -> StreamStore:
        self._used = True
        store = self._store
        if store is None:
            if not self._ended.is_set():
                await self._ended.wait()
            store = self._store
            if store is None:
                raise StoreError(f"the store of stream {self._what} could not be opened: {self._error}")
        return store

    def __getattr__(self, name: str) -> Any:
        """What a particular store has besides the protocol (``stats``, ``resting``: looked up
        with ``getattr(store, name, default)``), once it is open."""
        store = self.__dict__.get("_store")
        if store is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(store, name)

    # ------------------------------------------------------------------ StreamStore

    async def apply(self, ops: Sequence[Op]) -> list[Result]:
        return await (await self._open()).apply(ops)

    async def submit(self, ops: Sequence[Op]) -> Awaitable[list[Result]]:
        return await (await self._open()).submit(ops)

    async def append(
        self, subject: str, headers: bytes | None, data: bytes, ts: int | None = None
    ) -> tuple[int, int]:
        return await (await self._open()).append(subject, headers, data, ts)

    async def get(self, seq: int) -> StoredMsg | None:
        return await (await self._open()).get(seq)

    async def last_by_subject(self, subject_filter: str) -> StoredMsg | None:
        return await (await self._open()).last_by_subject(subject_filter)

    async def first_after(self, seq: int, subject_filter: str | None = None) -> StoredMsg | None:
        return await (await self._open()).first_after(seq, subject_filter)

    async def range(
        self,
        start_seq: int,
        end_seq: int | None = None,
        limit: int = 1000,
        subject_filter: str | None = None,
    ) -> list[StoredMsg]:
        return await (await self._open()).range(start_seq, end_seq, limit, subject_filter)

    async def read_columns(
        self, start_seq: int, end_seq: int, limit: int, subject_filter: str | None = None
    ) -> tuple[MsgColumns, int]:
        return await (await self._open()).read_columns(start_seq, end_seq, limit, subject_filter)

    async def state(self, with_deleted: bool = False) -> StreamState:
        if self._store is None and not self._used and not self._ended.is_set():
            # new and untouched: empty (the create's answer need not wait for the open); the
            # tests check that this is what SqliteStore reports for a new store
            return make_state(
                msgs=0,
                nbytes=0,
                first_seq=1,
                first_ts=0,
                last_seq=0,
                last_ts=0,
                num_subjects=0,
                deleted=() if with_deleted else None,
            )
        return await (await self._open()).state(with_deleted)

    async def subjects_state(self, subject_filter: str = ">") -> dict[str, int]:
        return await (await self._open()).subjects_state(subject_filter)

    async def msgs_for_subject(self, subject: str) -> int:
        return await (await self._open()).msgs_for_subject(subject)

    async def num_pending(self, from_seq: int, subject_filter: str | None = None) -> int:
        return await (await self._open()).num_pending(from_seq, subject_filter)

    async def meta_get(self, key: str) -> bytes | None:
        return await (await self._open()).meta_get(key)

    async def meta_items(self, prefix: str = "") -> list[tuple[str, bytes]]:
        return await (await self._open()).meta_items(prefix)

    async def source_positions(self) -> dict[str, int]:
        return await (await self._open()).source_positions()

    async def snapshot(
        self, keep_meta: Callable[[str], bool] | None = None, *, check: bool = False
    ) -> AsyncIterator[bytes]:
        it = (await self._open()).snapshot(keep_meta, check=check)
        try:
            async for chunk in it:
                yield chunk
        finally:
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()

    async def restore(
        self, chunks: AsyncIterator[bytes] | Iterable[bytes], *, batch_bytes: int | None = None
    ) -> None:
        await (await self._open()).restore(chunks, batch_bytes=batch_bytes)

    async def flush(self) -> None:
        await (await self._open()).flush()

    async def close(self) -> None:
        """Close the store once its open has ended (a failed open left nothing open)."""
        await self._ended.wait()
        if self._store is not None:
            await self._store.close()
