"""MemoryStore: the StreamStore contract in process memory (``storage: memory`` streams, tests, models).

Structures: ``seq -> StoredMsg``; the sorted list of live sequences (appends go to the end, so it stays
sorted in O(1) per append); and a per-subject list of sequences (also append-only sorted), which makes
``last_by_subject``, per-subject counts and filtered scans cheap. Nothing here blocks, so every method
finishes without yielding to the event loop; the methods are ``async`` only to honour the contract.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from bisect import bisect_left, bisect_right
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from itertools import islice

from core.errors import StoreError
from core.store.api import (
    SOURCE_POS_PREFIX,
    Append,
    AppendBatch,
    DeleteOp,
    DelMetaOp,
    ExpireOp,
    InvalidOperation,
    Op,
    PurgeOp,
    Result,
    SetMetaOp,
    SkipOp,
    SourcePosOp,
    StoreClosed,
    StoredMsg,
    StreamState,
    check_ops,
    check_positions,
    decode_source_positions,
    make_state,
    msg_size,
    normalize_filter,
)
from core.store.columns import MsgColumns, columns_of, covered_by
from core.store.snapshot import SnapshotEncoder, SnapshotHeader, restore_into
from core.subjects import has_wildcard, match


class MemoryStore:
    """A StreamStore kept in memory. ``apply`` is atomic per call; nothing survives the process."""

    def __init__(self, *, wall_clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = wall_clock
        self._msgs: dict[int, StoredMsg] = {}
        self._seqs: list[int] = []
        self._subj: dict[str, list[int]] = {}
        self._meta: dict[str, bytes] = {}
        self._bytes = 0
        self._last_seq = 0
        self._last_ts = 0
        self._closed = False

    @classmethod
    async def open(cls, *, wall_clock: Callable[[], int] = time.time_ns) -> MemoryStore:
        return cls(wall_clock=wall_clock)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("memory store is closed")

    # ---------------------------------------------------------------------------------- mutation

    size_of = staticmethod(msg_size)  # the reference's memory store's count

    async def apply(self, ops: Sequence[Op]) -> list[Result]:
        self._check_open()
        ops = list(ops)
        check_ops(ops, self._last_seq)
        check_positions(ops, self._position)
        return [self._apply_one(op) for op in ops]

    async def submit(self, ops: Sequence[Op]) -> Awaitable[list[Result]]:
        fut: asyncio.Future[list[Result]] = asyncio.get_running_loop().create_future()
        try:
            fut.set_result(await self.apply(ops))
        except StoreError as e:
            fut.set_exception(e)
        return fut

    async def append(
        self, subject: str, headers: bytes | None, data: bytes, ts: int | None = None
    ) -> tuple[int, int]:
        if ts is None:
            ts = self._clock()
        (seq,) = await self.apply((Append(subject, headers, data, ts),))
        return seq, ts  # type: ignore[return-value]

    def _position(self, meta_key: str) -> int:
        value = self._meta.get(meta_key)
        return int(value) if value is not None else 0

    def _apply_one(self, op: Op) -> Result:
        if isinstance(op, Append):
            return self._append(op)
        if isinstance(op, AppendBatch):
            for subject, headers, data in zip(op.subjects, op.headers, op.data, strict=True):
                self._append(Append(subject, headers, data, op.ts))
            return self._last_seq
        if isinstance(op, PurgeOp):
            return self._purge(op)
        if isinstance(op, DeleteOp):
            return self._remove(op.seq) is not None
        if isinstance(op, ExpireOp):
            return self._expire(op.up_to_ts)
        if isinstance(op, SkipOp):
            return self._skip(op)
        if isinstance(op, SetMetaOp):
            self._meta[op.key] = op.value
            return None
        if isinstance(op, DelMetaOp):
            return self._meta.pop(op.key, None) is not None
        if isinstance(op, SourcePosOp):
            self._meta[op.meta_key] = op.meta_value
            return None
        raise InvalidOperation(f"not a store operation: {op!r}")

    def _append(self, op: Append) -> int:
        seq = self._last_seq + 1 if op.seq is None else op.seq
        msg = StoredMsg(seq, op.subject, op.headers, op.data, op.ts)
        self._msgs[seq] = msg
        self._seqs.append(seq)
        lst = self._subj.get(op.subject)
        if lst is None:
            self._subj[op.subject] = [seq]
        else:
            lst.append(seq)
        self._bytes += msg_size(op.subject, op.headers, op.data)
        self._last_seq, self._last_ts = seq, op.ts
        return seq

    def _skip(self, op: SkipOp) -> bool:
        if op.seq <= self._last_seq:
            return False
        self._last_seq = op.seq
        if op.ts is not None:
            self._last_ts = op.ts
        return True

    def _forget(self, msg: StoredMsg) -> None:
        self._bytes -= msg_size(msg.subject, msg.headers, msg.data)

    def _remove(self, seq: int) -> StoredMsg | None:
        msg = self._msgs.pop(seq, None)
        if msg is None:
            return None
        i = bisect_left(self._seqs, seq)
        del self._seqs[i]
        lst = self._subj[msg.subject]
        del lst[bisect_left(lst, seq)]
        if not lst:
            del self._subj[msg.subject]
        self._forget(msg)
        return msg

    def _remove_below(self, cutoff: int) -> int:
        """Remove every message with seq < cutoff."""
        k = bisect_left(self._seqs, cutoff)
        if k == 0:
            return 0
        if k == len(self._seqs):
            return self._remove_all()
        touched: set[str] = set()
        for seq in self._seqs[:k]:
            msg = self._msgs.pop(seq)
            touched.add(msg.subject)
            self._forget(msg)
        del self._seqs[:k]
        for s in touched:
            lst = self._subj[s]
            del lst[: bisect_left(lst, cutoff)]
            if not lst:
                del self._subj[s]
        return k

    def _remove_all(self) -> int:
        n = len(self._seqs)
        self._msgs.clear()
        self._seqs.clear()
        self._subj.clear()
        self._bytes = 0
        return n

    def _remove_set(self, victims: list[int]) -> int:
        if not victims:
            return 0
        gone = set(victims)
        touched: set[str] = set()
        for seq in victims:
            msg = self._msgs.pop(seq)
            touched.add(msg.subject)
            self._forget(msg)
        self._seqs = [s for s in self._seqs if s not in gone]
        for s in touched:
            lst = [q for q in self._subj[s] if q not in gone]
            if lst:
                self._subj[s] = lst
            else:
                del self._subj[s]
        return len(victims)

    def _purge(self, op: PurgeOp) -> int:
        filt = normalize_filter(op.subject)
        if filt is None:
            if op.keep is not None:
                n = len(self._seqs)
                return 0 if op.keep >= n else self._remove_below(self._seqs[n - op.keep])
            if op.up_to_seq is not None:
                removed = self._remove_below(op.up_to_seq)
                if op.up_to_seq > self._last_seq + 1:
                    self._last_seq = op.up_to_seq - 1
                return removed
            return self._remove_all()
        matching = self._matching_seqs(filt)
        if op.keep is not None:
            victims = matching[: max(0, len(matching) - op.keep)]
        elif op.up_to_seq is not None:
            victims = matching[: bisect_left(matching, op.up_to_seq)]
        else:
            victims = matching
        return self._remove_set(victims)

    def _expire(self, up_to_ts: int) -> int:
        k = 0
        for seq in self._seqs:
            if self._msgs[seq].ts >= up_to_ts:
                break
            k += 1
        if k == 0:
            return 0
        if k == len(self._seqs):
            return self._remove_all()
        return self._remove_below(self._seqs[k])

    # ------------------------------------------------------------------------------------- reads

    def _subjects(self, filt: str) -> list[str]:
        if not has_wildcard(filt):
            return [filt] if filt in self._subj else []
        return [s for s in self._subj if match(filt, s)]

    def _matching_seqs(self, filt: str) -> list[int]:
        lists = [self._subj[s] for s in self._subjects(filt)]
        if len(lists) == 1:
            return list(lists[0])
        return list(heapq.merge(*lists))

    async def get(self, seq: int) -> StoredMsg | None:
        self._check_open()
        return self._msgs.get(seq)

    async def last_by_subject(self, subject_filter: str) -> StoredMsg | None:
        self._check_open()
        filt = normalize_filter(subject_filter)
        if filt is None:
            return self._msgs[self._seqs[-1]] if self._seqs else None
        best = max((self._subj[s][-1] for s in self._subjects(filt)), default=None)
        return None if best is None else self._msgs[best]

    async def first_after(self, seq: int, subject_filter: str | None = None) -> StoredMsg | None:
        self._check_open()
        filt = normalize_filter(subject_filter)
        if filt is None:
            i = bisect_left(self._seqs, seq)
            return self._msgs[self._seqs[i]] if i < len(self._seqs) else None
        best = None
        for s in self._subjects(filt):
            lst = self._subj[s]
            i = bisect_left(lst, seq)
            if i < len(lst) and (best is None or lst[i] < best):
                best = lst[i]
        return None if best is None else self._msgs[best]

    async def range(
        self,
        start_seq: int,
        end_seq: int | None = None,
        limit: int = 1000,
        subject_filter: str | None = None,
    ) -> list[StoredMsg]:
        self._check_open()
        filt = normalize_filter(subject_filter)
        if limit <= 0:
            return []
        end = self._last_seq if end_seq is None else end_seq
        if filt is None:
            seqs: Iterable[int] = self._seqs[
                bisect_left(self._seqs, start_seq) : bisect_right(self._seqs, end)
            ]
        else:
            lists = []
            for s in self._subjects(filt):
                lst = self._subj[s]
                lists.append(lst[bisect_left(lst, start_seq) : bisect_right(lst, end)])
            seqs = heapq.merge(*lists)
        return [self._msgs[q] for q in islice(seqs, limit)]

    async def read_columns(
        self, start_seq: int, end_seq: int, limit: int, subject_filter: str | None = None
    ) -> tuple[MsgColumns, int]:
        msgs = await self.range(start_seq, end_seq, limit, subject_filter)
        return columns_of(msgs), covered_by(msgs, start_seq, end_seq, limit)

    async def state(self, with_deleted: bool = False) -> StreamState:
        self._check_open()
        deleted = None
        if with_deleted:
            gaps: list[int] = []
            if self._seqs:
                prev = self._seqs[0] - 1
                for q in self._seqs:
                    gaps.extend(range(prev + 1, q))
                    prev = q
                gaps.extend(range(prev + 1, self._last_seq + 1))
            deleted = tuple(gaps)
        first = self._seqs[0] if self._seqs else self._last_seq + 1
        return make_state(
            msgs=len(self._seqs),
            nbytes=self._bytes,
            first_seq=first,
            first_ts=self._msgs[first].ts if self._seqs else 0,
            last_seq=self._last_seq,
            last_ts=self._last_ts,
            num_subjects=len(self._subj),
            deleted=deleted,
        )

    async def subjects_state(self, subject_filter: str = ">") -> dict[str, int]:
        self._check_open()
        filt = normalize_filter(subject_filter)
        if filt is None:
            return {s: len(lst) for s, lst in self._subj.items()}
        return {s: len(self._subj[s]) for s in self._subjects(filt)}

    async def msgs_for_subject(self, subject: str) -> int:
        self._check_open()
        filt = normalize_filter(subject)
        if filt is None:
            return len(self._seqs)
        return sum(len(self._subj[s]) for s in self._subjects(filt))

    async def num_pending(self, from_seq: int, subject_filter: str | None = None) -> int:
        self._check_open()
        filt = normalize_filter(subject_filter)
        if filt is None:
            return len(self._seqs) - bisect_left(self._seqs, from_seq)
        total = 0
        for s in self._subjects(filt):
            lst = self._subj[s]
            total += len(lst) - bisect_left(lst, from_seq)
        return total

    async def meta_get(self, key: str) -> bytes | None:
        self._check_open()
        return self._meta.get(key)

    async def meta_items(self, prefix: str = "") -> list[tuple[str, bytes]]:
        self._check_open()
        return sorted((k, v) for k, v in self._meta.items() if k.startswith(prefix))

    async def source_positions(self) -> dict[str, int]:
        return decode_source_positions(await self.meta_items(SOURCE_POS_PREFIX))

    # ------------------------------------------------------------------------- snapshot, lifecycle

    async def snapshot(
        self, keep_meta: Callable[[str], bool] | None = None, *, check: bool = False
    ) -> AsyncIterator[bytes]:
        self._check_open()
        # Take the point-in-time copy before the first yield: messages are immutable, so copying the
        # references is enough.
        msgs = [self._msgs[q] for q in self._seqs]
        metas = sorted(kv for kv in self._meta.items() if keep_meta is None or keep_meta(kv[0]))
        st = await self.state()
        enc = SnapshotEncoder(SnapshotHeader(st.first_seq, st.last_seq, st.last_ts, len(msgs), len(metas)))
        for m in msgs:
            if (chunk := enc.msg(m)) is not None:
                yield chunk
        for k, v in metas:
            if (chunk := enc.meta(k, v)) is not None:
                yield chunk
        yield enc.finish()

    async def restore(
        self, chunks: AsyncIterator[bytes] | Iterable[bytes], *, batch_bytes: int | None = None
    ) -> None:
        self._check_open()
        await restore_into(self, chunks, batch_bytes=batch_bytes)

    async def flush(self) -> None:
        self._check_open()

    async def close(self) -> None:
        self._closed = True
