"""Small statistics: percentiles of samples and median/min/max over runs."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(samples: Sequence[float | None]) -> dict[str, Any]:
    """Median of the runs that produced a value, with their spread; `failed` counts the rest."""
    values = [v for v in samples if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "runs": list(samples), "failed": len(samples)}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": list(samples), "failed": len(samples) - len(values)}
