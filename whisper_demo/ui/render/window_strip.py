"""The cache panel's strip for audio over 30 s, window by window: where the decoder is in
the audio, what the current window did to the cache, and every step's latency with the
windows' starts marked.

Pure: a run's RunStats.windows and its latencies in, HTML and SVG out; no gradio.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from ...events import TokenEvent
from .formats import fmt_clock, fmt_ms
from .run_stats import WindowStats


def windows_html(windows: List[WindowStats], latencies_ms: Optional[Sequence[float]],
                 event: TokenEvent) -> str:
    """Long audio, window by window: where the decoder is in the audio, what the current
    window did to the cache, and the latency of every step so far with the window
    boundaries marked (each window's first step prefills its prompt in one forward)."""
    current = windows[-1]
    duration = max(event.audio_seconds, 1e-6)
    bands = "".join(
        f'<div title="window {w.window + 1}: {fmt_clock(w.start)}–{fmt_clock(w.end)}" '
        f'style="left:{100 * w.start / duration:.2f}%;width:{100 * (w.end - w.start) / duration:.2f}%"'
        f' class="{"wk-win-now" if w is current else "wk-win-done"}"></div>' for w in windows)
    start = current.prefill - current.prompt
    if event.cache_mode == "off":
        cache_text = (f"No cache: every step reruns the {current.prompt} tokens of text so far, "
                      f"{start} start tokens and the {max(0, current.steps - 1)} new ones, and turns "
                      f"this window's audio into attention keys and values again")
    else:
        cache_text = (f'Cache filled again: <span title="the prompt, prefilled in one forward pass">'
                      f"{current.prompt} tokens of text so far and {start} start tokens read in one "
                      f"pass ({fmt_ms(current.prefill_ms)})</span>, then "
                      f"{max(0, current.steps - 1)} new ones one by one; the audio's keys and values "
                      f"computed once for this window")
    text = (f"<b>Window {current.window + 1} of about {event.n_windows}</b> · "
            f"{fmt_clock(current.start)}–{fmt_clock(current.end)} of {fmt_clock(event.audio_seconds)}. "
            f"{cache_text}; encoder {fmt_ms(current.encoder_ms)}.")
    return (f'<div class="wk-windows"><div class="wk-sub">{text}</div>'
            f'<div class="wk-audio-bar">{bands}</div>'
            f'{_window_latency_svg(windows, latencies_ms or [])}</div>')


def _window_latency_svg(windows: List[WindowStats], latencies_ms: Sequence[float],
                        width: int = 760, height: int = 70) -> str:
    """Per-step latency with a dashed line where each window starts."""
    if not latencies_ms:
        return ""
    values = np.asarray(latencies_ms, dtype=np.float64)
    top = max(float(np.percentile(values, 99)), 1e-6)
    n = len(values)
    x = np.linspace(0, width, n) if n > 1 else np.array([0.0])
    y = height - 12 - np.minimum(values / top, 1.0) * (height - 16)
    points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(x, y))
    marks = []
    for w in windows:
        if w.first_step >= n:
            continue
        mx = x[w.first_step]
        marks.append(
            f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="0" y2="{height - 10}" stroke="#64748b" '
            f'stroke-dasharray="3,3"><title>window {w.window + 1} starts at step {w.first_step}: '
            f'{w.prefill} tokens read in one pass ({w.prompt} of text so far)</title></line>'
            f'<text x="{mx + 3:.1f}" y="{height - 1}" font-size="10" fill="#64748b">w{w.window + 1}</text>')
    return (f'<svg class="wk-win-latency" viewBox="0 0 {width} {height}" width="100%" height="{height}" '
            f'preserveAspectRatio="none"><title>per-token latency (up to {fmt_ms(top)}); '
            f'dashed: a new 30 s window</title>{"".join(marks)}<polyline points="{points}" fill="none" '
            f'stroke="#2563eb" stroke-width="1.2"/></svg>')


WINDOW_STRIP_CSS = """
.wk-windows { margin-top:.5rem; }
.wk-audio-bar { position:relative; height:10px; background:var(--border-color-primary); border-radius:3px;
                margin:.3rem 0; overflow:hidden; }
.wk-audio-bar > div { position:absolute; top:0; bottom:0; border-right:1px solid #fff; }
.wk-win-done { background:#93c5fd; }
.wk-win-now { background:#2563eb; }
"""
