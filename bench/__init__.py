"""Benchmarks: named matrices that print figures and the ratio to the reference, never assert."""

from __future__ import annotations

import statistics
from typing import Any


def median_figures(figs: list[Any]) -> Any:
    """One figures dataclass (or dict) holding, field by field, the median of ``figs`` (one per
    run)."""
    if isinstance(figs[0], dict):
        return {k: statistics.median(f[k] for f in figs) for k in figs[0]}
    cls = type(figs[0])
    return cls(**{k: statistics.median(getattr(f, k) for f in figs) for k in cls.__dataclass_fields__})
