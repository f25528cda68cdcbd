"""The plot area both latency charts draw in (run_chart.py for Transcribe, latency_svg.py
for Live): where a step and a latency land in the SVG, the horizontal grid with its
millisecond labels, and the axis top rounded to 1, 2 or 5 times a power of ten.

Pure: numbers in, SVG element strings out; no gradio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= value (an axis top)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop always returns


@dataclass(frozen=True)
class PlotArea:
    """An SVG of width x height with margins around its plot; `steps` points along x
    (step 0 at the left edge, the last at the right) and latencies from 0 to `ceiling_ms`
    up the y axis (a higher latency is drawn at the top edge)."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    steps: int
    ceiling_ms: float

    @property
    def plot_width(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> float:
        return self.height - self.top - self.bottom

    def x(self, step: float) -> float:
        return self.left + self.plot_width * (step / max(1, self.steps - 1))

    def y(self, ms: float) -> float:
        return self.top + self.plot_height * (1 - min(ms, self.ceiling_ms) / self.ceiling_ms)

    def grid(self, fractions: Sequence[float]) -> List[str]:
        """A light horizontal line at each fraction of the axis top, labelled in ms."""
        parts = []
        for fraction in fractions:
            ms = self.ceiling_ms * fraction
            gy = self.y(ms)
            parts.append(f'<line x1="{self.left}" y1="{gy:.1f}" x2="{self.width - self.right}" '
                         f'y2="{gy:.1f}" stroke="#e2e8f0"/>')
            parts.append(f'<text x="{self.left - 6}" y="{gy + 4:.1f}" text-anchor="end">{ms:g}</text>')
        return parts

    def step_labels(self, first: str, baseline: int) -> List[str]:
        """The x axis's ends: `first` under step 0, the last step's index at the right;
        baseline: their distance above the SVG's bottom edge."""
        return [f'<text x="{self.left}" y="{self.height - baseline}">{first}</text>',
                f'<text x="{self.width - self.right}" y="{self.height - baseline}" '
                f'text-anchor="end">{self.steps - 1}</text>']

    def ms_title(self) -> str:
        """The y axis's unit, written upwards beside it."""
        middle = self.top + self.plot_height / 2
        return (f'<text x="12" y="{middle:.1f}" text-anchor="middle" '
                f'transform="rotate(-90 12 {middle:.1f})">ms</text>')
