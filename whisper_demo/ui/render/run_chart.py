"""The Transcribe tab's latency chart, drawn as inline SVG: one line per run (the current
run in its cache mode's colour, the previous run in grey behind it), each run's median
step as a dashed line, and a mark where each 30 s window after the first starts.

Why SVG rather than gr.LinePlot: the LinePlot bakes its colour domain into a Vega spec and
rebuilds that spec asynchronously when its props change, so a run streamed beside the
previous one was drawn without colour until the run ended (and the page logged "Cannot
read properties of undefined" while the rebuild raced the data); re-rendering it for every
update also kept the browser's main thread busy during long decodes. An SVG string is
drawn by the browser at once, in the colours given here. The Live tab draws the same way
(latency_svg.py); both draw in svg_axes.PlotArea.

Pure: strings in, HTML out; no gradio. Every number drawn is a latency a TokenEvent or a
DecodeResult reported.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from .svg_axes import PlotArea, nice_ceiling

WIDTH, HEIGHT = 1000, 260
LEFT, RIGHT, TOP, BOTTOM = 52, 14, 14, 32  # margins around the plot area
TITLE = "Per-token decoder latency"
EMPTY_TEXT = "Each decoder step's latency is drawn here while a run decodes."
MARK_COLOR = "#94a3b8"


@dataclass(frozen=True)
class Line:
    """One run's per-step latencies (ms), as drawn."""

    label: str
    latencies_ms: Sequence[float]
    color: str


def typical_step_ms(latencies_ms: Sequence[float]) -> Optional[float]:
    """The median decoder step after the first (the first step also fills the cache with
    the start tokens, so it is not a typical step); None before the second step."""
    if len(latencies_ms) < 2:
        return None
    return float(np.median(np.asarray(latencies_ms[1:], dtype=np.float64)))


def chart_html(lines: Sequence[Line], window_starts: Sequence[int] = (), caption: str = "") -> str:
    """The chart: `lines` in drawing order (the last on top); window_starts: the steps at
    which a 30 s window after the first begins (marked by a dashed vertical line)."""
    lines = [line for line in lines if len(line.latencies_ms)]
    heading = f'<div class="wk-label" style="margin-bottom:.3rem">{html.escape(TITLE)}</div>'
    foot = f'<div class="wk-sub wk-chart-caption">{caption}</div>' if caption else ""
    if not lines:  # one line saying what will be here; the caption comes with the lines
        return f'<div class="wk-chart">{heading}<div class="wk-sub">{html.escape(EMPTY_TEXT)}</div></div>'
    n = max(len(line.latencies_ms) for line in lines)
    area = PlotArea(WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM, steps=n,
                    ceiling_ms=nice_ceiling(max(max(line.latencies_ms) for line in lines)))
    x, y = area.x, area.y

    parts: List[str] = area.grid((0.0, 0.25, 0.5, 0.75, 1.0))
    parts += area.step_labels("step 0", baseline=10)
    parts.append(f'<text x="{LEFT + area.plot_width / 2:.0f}" y="{HEIGHT - 10}" text-anchor="middle">'
                 'token position (decoder step)</text>')
    parts.append(area.ms_title())
    for step in window_starts:
        if 0 < step < n:
            parts.append(f'<line class="wk-window-mark" x1="{x(step):.1f}" x2="{x(step):.1f}" y1="{TOP}" '
                         f'y2="{TOP + area.plot_height}" stroke="{MARK_COLOR}" stroke-dasharray="4,3">'
                         f'<title>a new 30 s window starts at step {step}</title></line>')
    legend = []
    for line in lines:
        values = line.latencies_ms
        points = " ".join(f"{x(i):.1f},{y(ms):.1f}" for i, ms in enumerate(values))
        typical = typical_step_ms(values)
        about = (f"{len(values)} steps, median step {typical:.1f} ms (the first apart)"
                 if typical is not None else f"{len(values)} step")
        parts.append(f'<polyline class="wk-series" points="{points}" fill="none" stroke="{line.color}" '
                     f'stroke-width="1.6" stroke-linejoin="round"><title>{html.escape(line.label)}: '
                     f'{about}</title></polyline>')
        if typical is not None:
            parts.append(f'<line class="wk-median" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(typical):.1f}" '
                         f'y2="{y(typical):.1f}" stroke="{line.color}" stroke-dasharray="6,4" '
                         f'stroke-opacity=".8"><title>{html.escape(line.label)}: median step '
                         f'{typical:.1f} ms</title></line>')
        median_text = f" · median step {typical:.1f} ms" if typical is not None else ""
        legend.append(
            f'<span style="margin-right:1.2rem;white-space:nowrap"><span style="display:inline-block;'
            f'width:.9rem;height:.25rem;background:{line.color};vertical-align:middle;margin-right:.3rem">'
            f'</span>{html.escape(line.label)}{median_text}</span>')
    svg = (f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" aria-label="{html.escape(TITLE)}" '
           f'style="font:11px sans-serif;fill:#64748b"><title>{html.escape(TITLE)}</title>'
           f'{"".join(parts)}</svg>')
    return (f'<div class="wk-chart">{heading}{svg}<div class="wk-chart-legend" style="font-size:.8rem;'
            f'color:var(--body-text-color-subdued)">{"".join(legend)}</div>{foot}</div>')
