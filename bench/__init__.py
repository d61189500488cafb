"""Benchmarks: named matrices that print figures and the ratio to the reference, never assert."""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def median_figures(figs: list[Any]) -> Any:
    """One figures dataclass (or dict) holding, field by field, the median of ``figs`` (one per
    run)."""
    if isinstance(figs[0], dict):
        return {k: statistics.median(f[k] for f in figs) for k in figs[0]}
    cls = type(figs[0])
    return cls(**{k: statistics.median(getattr(f, k) for f in figs) for k in cls.__dataclass_fields__})


def medians_by_kind(
    kinds: Sequence[str], runs: int, prefix: str, measure: Callable[[str, Path], Any]
) -> dict[str, Any]:
    """``measure(kind, workdir)`` ``runs`` times for each kind, alternating the kinds, each in a
    folder of its own under a temporary one (``prefix``); the medians (``median_figures``) by kind."""
    figs: dict[str, list[Any]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for r in range(runs):
            for kind in kinds:
                figs[kind].append(measure(kind, Path(tmp) / f"{kind}-{r}"))
    return {kind: median_figures(f) for kind, f in figs.items()}
