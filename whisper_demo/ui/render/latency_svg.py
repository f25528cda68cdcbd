"""The Live tab's latency chart, drawn as inline SVG: the per-token decoder latency of the
recent re-decodes, one line per cache mode, and the tokens a draft pass confirmed as
amber dots (the one costly pass, then the near-zero steps after it).

Why not gr.LinePlot (the Transcribe tab has left it too: run_chart.py): Gradio's page
copies the value of every component that an event outputs to whenever an event's status
changes, and the Live tab has ten microphone events a second. With a few hundred points in a LinePlot that copying
took about a sixth of a core from the decoder on a 2-core machine (Chromium's profiler,
speech_25s.wav through the fake microphone); an SVG string costs next to nothing.
"""

from __future__ import annotations

import html
from typing import Dict, List, Sequence, Tuple

from .latency_chart import DRAFT_SUFFIX, chart_colors
from .svg_axes import PlotArea, nice_ceiling

WIDTH, HEIGHT = 640, 230
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 14, 30  # margins around the plot area
TITLE = "Per-token decoder latency (recent re-decodes)"
FALLBACK_COLOR = "#64748b"


def latency_svg(series: Dict[str, Sequence[Tuple[float, bool]]]) -> str:
    """HTML for the chart: `series` maps a series label (latency_chart.series_label) to
    (latency ms, confirmed from the draft) per token, oldest first."""
    series = {label: list(values) for label, values in series.items() if len(values)}
    heading = f'<div class="wk-label" style="margin-bottom:.3rem">{html.escape(TITLE)}</div>'
    if not series:
        return (f'<div class="wk-chart">{heading}<div style="color:var(--body-text-color-subdued)">'
                "Each token's latency appears here once a re-decode has run.</div></div>")
    colors = chart_colors()
    n = max(len(values) for values in series.values())
    area = PlotArea(WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM, steps=n,
                    ceiling_ms=nice_ceiling(max(ms for values in series.values() for ms, _ in values)))
    x, y = area.x, area.y

    parts: List[str] = area.grid((0.0, 0.5, 1.0))
    parts += area.step_labels("token 0", baseline=8)
    parts.append(area.ms_title())
    legend = []
    for label, values in series.items():
        color = colors.get(label, FALLBACK_COLOR)
        points = " ".join(f"{x(i):.1f},{y(ms):.1f}" for i, (ms, _) in enumerate(values))
        parts.append(f'<polyline class="wk-series" points="{points}" fill="none" stroke="{color}" '
                     'stroke-width="1.5" stroke-linejoin="round"/>')
        draft_color = colors.get(label + DRAFT_SUFFIX, color)
        for i, (ms, from_draft) in enumerate(values):
            if from_draft:
                parts.append(f'<circle class="wk-draft" cx="{x(i):.1f}" cy="{y(ms):.1f}" r="2.5" '
                             f'fill="{draft_color}"/>')
        legend.append((label, color))
        if any(from_draft for _, from_draft in values):
            legend.append((label + DRAFT_SUFFIX, draft_color))
    svg = (f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
           f'aria-label="{html.escape(TITLE)}" style="font:11px sans-serif;fill:#64748b">'
           f'<title>{html.escape(TITLE)}</title>{"".join(parts)}</svg>')
    keys = "".join(
        f'<span style="margin-right:1rem;white-space:nowrap"><span style="display:inline-block;'
        f'width:.8rem;height:.25rem;background:{color};vertical-align:middle;margin-right:.3rem">'
        f'</span>{html.escape(label)}</span>' for label, color in legend)
    return (f'<div class="wk-chart">{heading}{svg}'
            f'<div style="font-size:.8rem;color:var(--body-text-color-subdued)">{keys}</div></div>')
