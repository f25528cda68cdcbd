"""Numbers as the page writes them: byte sizes, durations, clock times, counted nouns, and
the summary of a run's step latencies (last, mean, p95, tokens per second).

Pure and shared by the cache panel, the Compare summary and the Live tab's view.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np


def plural(n: int, word: str) -> str:
    """1 -> '1 step', 2 -> '2 steps'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def fmt_bytes(n: Optional[float]) -> str:
    """1536 -> '1.5 KiB'; binary units, since tensors are sized in powers of two."""
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def fmt_ms(ms: Optional[float]) -> str:
    if ms is None:
        return "—"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def fmt_clock(seconds: float) -> str:
    """169.4 -> '2:49'"""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}:{seconds % 60:02d}"


def latency_summary(latencies_ms: Sequence[float]) -> Dict[str, float]:
    """last / mean / p95 / tokens per second (decoder time only) of the steps so far."""
    if not latencies_ms:
        return {"last": None, "mean": None, "p95": None, "tps": None, "n": 0}
    arr = np.asarray(latencies_ms, dtype=np.float64)
    total = arr.sum()
    return {
        "last": float(arr[-1]),
        "mean": float(arr.mean()),
        "p95": float(np.percentile(arr, 95)),
        "tps": float(len(arr) / (total / 1000)) if total > 0 else None,
        "n": len(arr),
    }
