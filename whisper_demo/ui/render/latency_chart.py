"""The latency charts' series and colours.

Both tabs draw their charts as SVG (run_chart.py for Transcribe, latency_svg.py for Live).
This module names the series (series_label: one per cache mode and beam size) and holds
the colour map that covers every series a run can produce (chart_colors, with a colour of
its own for tokens reused from a draft). MODE_COLORS is shared with the panel's badge, so
a run's badge and its line have the same colour. No gradio.
"""

from __future__ import annotations

from typing import Dict



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


DRAFT_SUFFIX = " · reused from the last guess"  # a draft: the previous decode's tokens, checked


def chart_colors() -> Dict[str, str]:
    """Colours by series label: every series a run can produce."""
    colors = {}
    for mode, color in MODE_COLORS.items():
        colors[series_label(mode)] = color
        colors[series_label(mode) + DRAFT_SUFFIX] = DRAFT_COLORS.get(mode, color)
        for beams in range(2, 9):
            colors[series_label(mode, beams)] = color
    return colors
