"""Checks over whole integer columns, in C: numpy when it is installed, else ``map`` over the values.

The bulk read path moves columns of 100,000 rows (core/protocol/readframe.py, core/store/columns.py);
a Python loop over each row's offsets cost as much as the rest of decoding a frame. numpy is an
optional accelerator here, imported on first use (an agent that never reads in bulk does not pay
its memory); without it the same checks run as C-level ``map`` iterations.
"""

from __future__ import annotations

import operator
from typing import Any

_NUMPY: Any = None
# Below this many values the check is a ``map``: numpy's fixed cost per call (a view, two
# slices, a comparison, ``all``: about 5 us, 15 on a loaded machine) is more than a short
# ``map``, and a live reader's frames hold a message or a few, each checked column by column.
NUMPY_FROM = 64


def numpy() -> Any:
    """The numpy module, or None when it is not installed."""
    global _NUMPY
    if _NUMPY is None:
        try:
            import numpy as np

            _NUMPY = np
        except ImportError:  # pragma: no cover - depends on the installation
            _NUMPY = False
    return _NUMPY or None


def non_decreasing(values: memoryview) -> bool:
    """Is every value >= the one before? ``values``: a 1-D memoryview of integers (any format)."""
    np = numpy() if len(values) >= NUMPY_FROM else None
    if np is not None:
        a = np.frombuffer(values, dtype=np.dtype(values.format))
        return bool(a.size < 2 or (a[1:] >= a[:-1]).all())
    return not any(map(operator.gt, values, values[1:]))


def increasing(values: memoryview) -> bool:
    """Is every value > the one before?"""
    np = numpy() if len(values) >= NUMPY_FROM else None
    if np is not None:
        a = np.frombuffer(values, dtype=np.dtype(values.format))
        return bool(a.size < 2 or (a[1:] > a[:-1]).all())
    return not any(map(operator.ge, values, values[1:]))
