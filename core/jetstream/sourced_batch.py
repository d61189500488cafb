"""A batch of sourced messages as columns: what a ``list[Delivery]`` holds, without an object
per message. A bulk source (bulk_source.py) slices a read frame's columns straight into one,
and the stream stores it as one ``AppendBatch`` (``Stream._admit_plain_sourced``); everything
else that takes deliveries reads it as a sequence of ``Delivery`` (built on demand)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, overload


class Delivery(NamedTuple):
    """A message from upstream, as the stream stores it: its upstream sequence and timestamp
    (from the ack reply), subject, headers (as rewritten for storing) and payload."""

    sseq: int
    subject: str
    headers: bytes | None
    payload: bytes
    ts: int


class SourcedColumns(Sequence[Delivery]):
    """Deliveries in upstream order, one list per field (all of one length)."""

    __slots__ = ("headers", "payloads", "sseqs", "subjects", "ts")

    def __init__(
        self,
        sseqs: list[int],
        subjects: list[str],
        headers: list[bytes | None],
        payloads: list[bytes],
        ts: list[int],
    ) -> None:
        self.sseqs, self.subjects, self.headers = sseqs, subjects, headers
        self.payloads, self.ts = payloads, ts

    def __len__(self) -> int:
        return len(self.sseqs)

    @overload
    def __getitem__(self, i: int) -> Delivery: ...
    @overload
    def __getitem__(self, i: slice) -> SourcedColumns: ...
    def __getitem__(self, i: int | slice) -> Delivery | SourcedColumns:
        if isinstance(i, slice):
            cols = self.sseqs[i], self.subjects[i], self.headers[i], self.payloads[i], self.ts[i]
            return SourcedColumns(*cols)
        return Delivery(self.sseqs[i], self.subjects[i], self.headers[i], self.payloads[i], self.ts[i])

    def __iter__(self) -> Iterator[Delivery]:
        return map(Delivery, self.sseqs, self.subjects, self.headers, self.payloads, self.ts)

    def __iadd__(self, other: Iterable[Delivery]) -> SourcedColumns:
        if isinstance(other, SourcedColumns):
            self.sseqs += other.sseqs
            self.subjects += other.subjects
            self.headers += other.headers
            self.payloads += other.payloads
            self.ts += other.ts
        else:
            for d in other:
                self.sseqs.append(d.sseq)
                self.subjects.append(d.subject)
                self.headers.append(d.headers)
                self.payloads.append(d.payload)
                self.ts.append(d.ts)
        return self
