"""One partition's read: a sequence range -> RecordBatches, through the bulk read API or direct gets.

Which path is decided on the driver (``choose_bulk``: the ``bulkRead`` option, or a probe of the read
API) and travels in the partition. A partition whose first bulk request is refused anyway reads by
direct get; a message too large for a bulk reply is read alone by MSG.GET and the bulk read goes on
after it. Either path checks for data loss the same way (``GapTracker``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from bridges.spark.arrow import frame_to_batch, to_record_batch
from bridges.spark.bulk import NotServedError, TooLargeError, probe, read_pieces
from bridges.spark.json_columns import Fields
from bridges.spark.options import SourceOptions
from bridges.spark.reader import (
    Record,
    SyncSession,
    check_data_loss,
    msg_get_next,
    read_range,
    stream_info,
)


def choose_bulk(opts: SourceOptions, s: SyncSession) -> bool:
    """Driver side: read through the bulk read API? (``bulkRead``: true, false, or auto = ask it)."""
    if opts.bulk_read != "auto":
        return opts.bulk_read == "true"
    return s.run(lambda nc: probe(nc, opts))


class GapTracker:
    """The lowest sequence of ``[first, last]`` a read did not return (None: none missing).

    Data loss is a missing sequence below the stream's first sequence once the read is over: the
    head was purged or aged out before (or while) it was read. Checking only the lowest gap is
    enough: every other missing sequence is above it. Interior deletes are gaps too, and are not
    loss unless the stream's head has since moved past them (then they cannot be told apart from a
    purge, and count as loss)."""

    def __init__(self, first: int) -> None:
        self.expected = first
        self.gap: int | None = None

    def see(self, seqs: pa.Int64Array) -> None:
        n = len(seqs)
        if self.gap is not None or n == 0:
            return
        lo, hi = seqs[0].as_py(), seqs[n - 1].as_py()
        if lo != self.expected:
            self.gap = self.expected
        elif hi - lo + 1 != n:
            # pairwise_diff[k] = seqs[k] - seqs[k - 1]: a jump at k follows seqs[k - 1]
            jumps = pc.indices_nonzero(pc.greater(pc.pairwise_diff(seqs), 1))
            self.gap = seqs[jumps[0].as_py() - 1].as_py() + 1
        self.expected = hi + 1

    def finish(self, last: int) -> int | None:
        if self.gap is None and self.expected <= last:
            self.gap = self.expected
        return self.gap


def _bulk_batches(
    s: SyncSession, opts: SourceOptions, first: int, last: int, fields: Fields, names: list[str]
) -> Iterator[pa.RecordBatch]:
    assert s.nc is not None
    pos, probing = first, True
    while pos <= last:
        try:
            for piece in s.iterate(read_pieces(s.nc, opts, pos, last, probing)):
                probing = False
                if piece.rows:
                    yield frame_to_batch(
                        opts.stream, piece.frame, piece.rows, fields, names, opts.null_headers
                    )
                pos = piece.covered + 1
            return
        except TooLargeError as e:  # this one message by MSG.GET, then on in bulk
            rec = s.run(functools.partial(msg_get_next, opts=opts, seq=e.seq, subject=opts.subject))
            if rec is None or rec[0] > last:
                return
            yield to_record_batch(opts.stream, [rec], fields, names, opts.null_headers)
            pos, probing = rec[0] + 1, False


def _direct_batches(
    s: SyncSession, opts: SourceOptions, first: int, last: int, direct: bool, fields: Fields, names: list[str]
) -> Iterator[pa.RecordBatch]:
    assert s.nc is not None
    buf: list[Record] = []
    for chunk in s.iterate(read_range(s.nc, opts, first, last, direct)):
        buf.extend(chunk)
        if len(buf) >= opts.rows_per_arrow_batch:
            yield to_record_batch(opts.stream, buf, fields, names, opts.null_headers)
            buf = []
    if buf:
        yield to_record_batch(opts.stream, buf, fields, names, opts.null_headers)


def read_partition(
    opts: SourceOptions, lo: int, hi: int, bulk: bool, fields: Fields, names: list[str]
) -> Iterator[pa.RecordBatch]:
    """The messages with ``lo <= seq <= hi`` as RecordBatches; raises ``DataLossError`` (unless
    ``failOnDataLoss=false``) when some of them were removed before they were read."""
    with SyncSession(opts) as s:
        info = s.run(lambda nc: stream_info(nc, opts))
        first = check_data_loss(opts, lo, hi, info.first_seq)
        direct = info.allow_direct if opts.use_direct == "auto" else opts.use_direct == "true"
        gaps = GapTracker(first)
        batches = (
            _bulk_batches(s, opts, first, hi, fields, names)
            if bulk
            else _direct_batches(s, opts, first, hi, direct, fields, names)
        )
        try:
            for batch in batches:
                gaps.see(batch.column(1))
                yield batch
        except NotServedError:  # refused before anything was read: this server reads by direct get
            for batch in _direct_batches(s, opts, first, hi, direct, fields, names):
                gaps.see(batch.column(1))
                yield batch
        gap = gaps.finish(hi)
        if gap is not None and opts.fail_on_data_loss:
            now = s.run(lambda nc: stream_info(nc, opts))
            check_data_loss(opts, gap, hi, now.first_seq)
