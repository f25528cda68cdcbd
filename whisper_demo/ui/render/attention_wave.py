"""The audio strip of the "Inside the cache" view (attention_view.py): the waveform, the
window being decoded, where the alignment heads look at a step and the cursor at its peak,
with the trail of the earlier tokens' cursors; and the word player's playhead. Pure SVG.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ...attention import WindowRecord
from ...events import TIMESTAMP_SECONDS, TokenEvent

WAVE_COLUMNS = 600  # waveform envelope resolution


def envelope(samples: np.ndarray, columns: int = WAVE_COLUMNS) -> np.ndarray:
    """[columns] peak amplitude per column, scaled to the loudest (for the waveform)."""
    if len(samples) == 0:
        return np.zeros(columns)
    edges = np.linspace(0, len(samples), columns + 1).astype(int)
    peaks = np.array([np.abs(samples[a:max(b, a + 1)]).max() for a, b in zip(edges[:-1], edges[1:])])
    return peaks / max(float(peaks.max()), 1e-9)


def waveform_svg(wave: np.ndarray, duration: float, window: Optional[WindowRecord] = None,
                 event: Optional[TokenEvent] = None, playhead: bool = False) -> str:
    """The audio's waveform (`wave`: envelope()); with `window`, the window being decoded and
    where its tokens looked (dots); with `event`, where the alignment heads look at that step
    (a curve) and its peak (the cursor); playhead: the player's, moved by PLAYER_JS."""
    w, h = WAVE_COLUMNS, 80
    mid = h / 2
    x_of = (lambda t: t / duration * w) if duration > 0 else (lambda t: 0.0)
    bars = "".join(f'<line x1="{i + .5}" x2="{i + .5}" y1="{mid - a * 34:.1f}" y2="{mid + a * 34:.1f}"/>'
                   for i, a in enumerate(wave))
    out = [f'<g stroke="#94a3b8" stroke-width="1">{bars}</g>']
    if window is not None:
        out.insert(0, f'<rect x="{x_of(window.start):.1f}" width="{x_of(window.end) - x_of(window.start):.1f}" '
                      f'y="0" height="{h}" fill="#dbeafe"><title>window {window.index + 1}: '
                      f'{window.start:.1f}–{window.end:.1f} s</title></rect>')
        trail = [e.attention.audio_time for e in window.events if e.text.strip()]
        out.append("".join(f'<circle cx="{x_of(t):.1f}" cy="{h - 4}" r="2" fill="#1d4ed8"/>' for t in trail))
    if event is not None and event.attention is not None and window is not None:
        cross = event.attention.cross_weights
        top = max(float(cross.max()), 1e-9)
        xs = window.start + np.arange(len(cross)) * TIMESTAMP_SECONDS
        step = max(1, len(cross) // 300)  # at most ~300 points for the curve
        pts = " ".join(f"{x_of(t):.1f},{h - 8 - c / top * (h - 16):.1f}" for t, c in zip(xs[::step], cross[::step]))
        out.append(f'<polyline points="{pts}" fill="none" stroke="#f59e0b" stroke-width="1.5"/>')
        cx = x_of(event.attention.audio_time)
        out.append(f'<line class="wk-cursor" x1="{cx:.1f}" x2="{cx:.1f}" y1="0" y2="{h}" stroke="#dc2626" '
                   f'stroke-width="2"><title>cursor {event.attention.audio_time:.2f} s</title></line>')
    if playhead:
        out.append(f'<line class="wk-playhead" data-duration="{duration:.3f}" x1="0" x2="0" '
                   f'y1="0" y2="{h}" stroke="#16a34a" stroke-width="2"/>')
    return (f'<svg class="wk-wave" viewBox="0 0 {w} {h}" width="100%" height="{h}" '
            f'preserveAspectRatio="none">{"".join(out)}</svg>')
