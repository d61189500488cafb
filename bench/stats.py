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


def print_kind_rows(labels: dict[str, str], med: dict[str, dict[str, float]]) -> None:
    """One row per figure leafjet has: its label, the reference's value, leafjet's, the ratio."""
    print(f"{'figure':40s} {'reference':>10s} {'leafjet':>10s} {'ratio':>7s}")
    for key, label in labels.items():
        if key in med["leafjet"]:
            ref, lj = med["reference"][key], med["leafjet"][key]
            print(f"{label:40s} {ref:10.2f} {lj:10.2f} {lj / ref if ref else float('nan'):7.2f}")
