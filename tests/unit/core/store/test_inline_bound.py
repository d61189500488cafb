"""What a store call counts against the inline bound (commits on the loop's thread): a source's
batch by its messages, and a batch of a few large messages as past the bound."""

from __future__ import annotations

from core.store.api import Append, AppendBatch
from core.store.sqlite import INLINE_MAX_BATCH_BYTES, INLINE_MAX_OPS, _rows


def batch(n: int, size: int) -> AppendBatch:
    return AppendBatch(["s"] * n, [None] * n, [b"x" * size] * n, 1)


def test_a_small_batch_counts_its_messages_and_a_publish_one_row_each():
    assert _rows((batch(3, 100),)) == 3
    assert _rows((Append("s", None, b"x", 1), batch(2, 100))) == 3


def test_a_batch_past_the_bound_in_messages_or_bytes_is_not_committed_inline():
    assert _rows((batch(INLINE_MAX_OPS + 1, 1),)) > INLINE_MAX_OPS
    assert _rows((batch(3, INLINE_MAX_BATCH_BYTES // 2),)) > INLINE_MAX_OPS
