"""What a sourcing hub stream must hold, checked against what each upstream acknowledged.

The tests that fault a hub sourcing leaf streams (links cut, servers SIGKILLed) end by reading
the hub stream and handing its messages here: the checker itself does no I/O, so its rules are
tested on their own. A hub message names its origin in ``Nats-Stream-Source``, as both servers
write it: ``<stream>:<hash of the external API> <upstream seq> <filter> <transform> <subject>
<identity>``; its first two fields identify the upstream message.

The rules, per upstream:
- no loss: every sequence the upstream acknowledged to a publisher is on the hub;
- no duplicates: each upstream sequence is on the hub at most once;
- order: the upstream sequences appear on the hub in increasing order.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import nats.errors

SOURCE_HEADER = "Nats-Stream-Source"


def upstream_of(source_header: str) -> tuple[str, int]:
    """(upstream key, upstream sequence) of a ``Nats-Stream-Source`` value."""
    fields = source_header.split()
    if len(fields) < 2 or not fields[1].isdigit():
        raise ValueError(f"not a {SOURCE_HEADER} value: {source_header!r}")
    return fields[0], int(fields[1])


@dataclass
class UpstreamReport:
    """What the hub holds of one upstream, against what the upstream acknowledged."""

    name: str
    acked: int  # distinct sequences acknowledged to the publisher
    on_hub: int  # hub messages from this upstream (duplicates included)
    missing: list[int] = field(default_factory=list)  # acknowledged, not on the hub
    duplicates: list[int] = field(default_factory=list)  # on the hub more than once
    out_of_order: list[tuple[int, int]] = field(default_factory=list)  # (before, after) pairs

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicates or self.out_of_order)

    def summary(self) -> str:
        def few(xs: list[Any]) -> str:
            return f"{len(xs)}" + (f" e.g. {xs[:5]}" if xs else "")

        return (
            f"{self.name}: acked {self.acked}, on hub {self.on_hub}, missing {few(self.missing)}, "
            f"duplicates {few(self.duplicates)}, out of order {few(self.out_of_order)}"
        )


@dataclass
class SourcedReport:
    upstreams: dict[str, UpstreamReport]
    unknown: list[str]  # hub messages with no or a foreign Nats-Stream-Source

    @property
    def ok(self) -> bool:
        return not self.unknown and all(u.ok for u in self.upstreams.values())

    def summary(self) -> str:
        lines = [u.summary() for u in self.upstreams.values()]
        if self.unknown:
            lines.append(f"{len(self.unknown)} hub messages of no known upstream, e.g. {self.unknown[:3]}")
        return "\n".join(lines)


def check_sourced(
    hub_sources: Iterable[str | None], acked: Mapping[str, Iterable[int]], names: Mapping[str, str]
) -> SourcedReport:
    """Check the hub stream's ``Nats-Stream-Source`` values, in stream order, against the
    sequences each upstream acknowledged. ``names`` maps an upstream key (the header's first
    field) to the name the report uses, the key of ``acked``."""
    seen: dict[str, list[int]] = {name: [] for name in acked}
    unknown: list[str] = []
    for header in hub_sources:
        try:
            key, seq = upstream_of(header or "")
        except ValueError:
            unknown.append(repr(header))
            continue
        name = names.get(key)
        if name is None or name not in seen:
            unknown.append(header or "")
            continue
        seen[name].append(seq)
    reports = {}
    for name, seqs in seen.items():
        want = set(acked[name])
        counts = Counter(seqs)
        out_of_order = []
        last = 0
        for seq in seqs:
            if seq < last:
                out_of_order.append((last, seq))
            last = max(last, seq)
        reports[name] = UpstreamReport(
            name=name,
            acked=len(want),
            on_hub=len(seqs),
            missing=sorted(want - counts.keys()),
            duplicates=sorted(s for s, n in counts.items() if n > 1),
            out_of_order=out_of_order,
        )
    return SourcedReport(reports, unknown)


@dataclass(frozen=True)
class Stored:
    seq: int
    data: bytes
    source: str | None  # its Nats-Stream-Source


async def iter_stream(
    nc: Any, stream: str, batch: int = 1000, timeout: float = 60.0
) -> AsyncIterator[Stored]:
    """Every message of ``stream`` in order, read by a pull consumer without acks (fast for many
    messages, none kept here; the consumer is deleted after). ``timeout``: for each batch."""
    js = nc.jetstream(timeout=10)
    total = (await js.stream_info(stream)).state.messages
    durable = "SOURCED_CHECK"
    await js.add_consumer(stream, durable_name=durable, ack_policy="none", deliver_policy="all")
    psub = await js.pull_subscribe_bind(durable, stream=stream)
    read = 0
    try:
        while read < total:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        msgs = await psub.fetch(min(batch, total - read), timeout=5)
                        break
                    except nats.errors.TimeoutError:
                        continue
            read += len(msgs)
            for m in msgs:
                yield Stored(m.metadata.sequence.stream, m.data, (m.headers or {}).get(SOURCE_HEADER))
    finally:
        await psub.unsubscribe()
        await js.delete_consumer(stream, durable)


async def read_stream(nc: Any, stream: str) -> list[Stored]:
    return [m async for m in iter_stream(nc, stream)]


def check_acks(stored: Iterable[Stored], acks: Iterable[tuple[str, int]]) -> list[str]:
    """The upstream side: each message id (the payload) stored once, at the sequence its ack
    named. The problems found, as text."""
    by_seq = {m.seq: m.data.decode(errors="replace") for m in stored}
    ids = Counter(by_seq.values())
    problems = [f"{msg_id} stored {n} times" for msg_id, n in ids.items() if n > 1]
    problems += [
        f"{msg_id} acked as seq {seq}, which holds {by_seq.get(seq)!r}"
        for msg_id, seq in acks
        if by_seq.get(seq) != msg_id
    ]
    return problems
