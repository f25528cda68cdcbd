"""The latency charts' series and colours, and the Transcribe tab's chart data.

The Transcribe tab draws `gr.LinePlot(x="token", y="latency_ms", color="series")`; the
Live tab draws the same series as SVG (latency_svg.py). This module names the series
(series_label: one per cache mode and beam size), builds the long-format frame from
latencies (latency_frame), the vertical lines where a 30 s window starts (window_marks),
and the colour map that covers every series a run can produce (chart_colors, with a
colour of its own for tokens confirmed from a draft). MODE_COLORS is shared with the
panel's badge, so a run's badge and its line have the same colour. Pandas only: no gradio.
"""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np
import pandas as pd


# One colour per cache mode, used by the chart and the panel's badge alike.
MODE_COLORS = {"static": "#2563eb", "hooks": "#7c3aed", "off": "#dc2626"}
DRAFT_COLORS = {"static": "#f59e0b"}  # tokens confirmed from a draft (static greedy only)
MODE_LABELS = {
    "static": "KV cache: static",
    "hooks": "KV cache: hooks",
    "off": "no KV cache",
}


def series_label(mode: str, beam_size: int = 1) -> str:
    """A run's series in the chart, and the text of the panel's badge for it."""
    label = MODE_LABELS.get(mode, mode)
    return label if beam_size == 1 else f"{label}, beam {beam_size}"


DRAFT_SUFFIX = " · confirmed from the previous hypothesis"


def latency_frame(latencies_by_series: Dict[str, Sequence[float]]) -> pd.DataFrame:
    """Long-format frame for gr.LinePlot(x="token", y="latency_ms", color="series"):
    latencies in ms per series."""
    frames = []
    for name, values in latencies_by_series.items():
        if len(values) == 0:
            continue
        frames.append(pd.DataFrame({
            "token": np.arange(len(values), dtype=np.int64),
            "latency_ms": np.asarray(values, dtype=np.float64),
            "series": [name] * len(values),
        }))
    if not frames:
        return pd.DataFrame({"token": pd.Series(dtype="int64"),
                             "latency_ms": pd.Series(dtype="float64"),
                             "series": pd.Series(dtype="object")})
    return pd.concat(frames, ignore_index=True)


WINDOW_MARK = "window {} starts"
WINDOW_MARK_COLOR = "#94a3b8"
MAX_MARKED_WINDOWS = 60  # 30 min of audio; later windows go unmarked (the chart's colours are fixed)


def window_marks(windows: Sequence, top: float) -> pd.DataFrame:
    """Rows for the latency chart that draw a vertical line (0 to `top` ms) at the first step
    of each window after the first: where the cache was refilled from the prompt.
    windows: a run's panel.WindowStats (only .window and .first_step are read; typed loosely
    so that this module does not import the panel that imports it)."""
    first_steps = {}
    for w in windows:  # a retried window (fallback) keeps the mark of its first attempt
        first_steps.setdefault(w.window, w.first_step)
    rows = [(step, y, WINDOW_MARK.format(window + 1)) for window, step in first_steps.items()
            if 0 < step and window + 1 <= MAX_MARKED_WINDOWS for y in (0.0, top)]
    return pd.DataFrame({"token": pd.Series([r[0] for r in rows], dtype="int64"),
                         "latency_ms": pd.Series([r[1] for r in rows], dtype="float64"),
                         "series": pd.Series([r[2] for r in rows], dtype="object")})


def window_mark_colors() -> Dict[str, str]:
    return {WINDOW_MARK.format(k): WINDOW_MARK_COLOR for k in range(2, MAX_MARKED_WINDOWS + 1)}


def chart_colors() -> Dict[str, str]:
    """color_map for the LinePlot: every series label a run can produce."""
    colors = {}
    for mode, color in MODE_COLORS.items():
        colors[series_label(mode)] = color
        colors[series_label(mode) + DRAFT_SUFFIX] = DRAFT_COLORS.get(mode, color)
        for beams in range(2, 9):
            colors[series_label(mode, beams)] = color
    return colors
