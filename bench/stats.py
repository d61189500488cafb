"""Order statistics the matrices report (nothing here measures)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def quantile(xs: Iterable[float], q: float) -> float:
    """The sample at fraction ``q`` (0..1) of ``xs`` sorted; NaN when there are none."""
    s = sorted(xs)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, int(q * len(s)))]


def median_or_nan(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")
