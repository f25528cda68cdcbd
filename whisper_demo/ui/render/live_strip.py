"""The Live tab's buffer strip, drawn as inline SVG under the transcript: the audio the
last re-decode read (its waveform over stream time), the part of it already committed,
and for AlignAtt (live/alignatt.py) where the model was reading: a cursor at the newest
token's attention peak, the edge `frame_seconds` before the end of the audio that had
arrived (a word read past it is a guess about speech not fully heard, so the commit
stops there), and a tick where each word of the decode was read.

Drawn on the server from the immutable LiveUpdate.buffer (live/snapshots.BufferView),
like latency_svg.py and for the same reason: no chart component for the page to copy on
every microphone event.

Pure: a BufferView in, HTML out; no gradio.
"""

from __future__ import annotations

import html
import math
from typing import List, Optional

from ...live.snapshots import BufferView

WIDTH, HEIGHT = 640, 132
LEFT, RIGHT = 10, 10
PLOT_TOP, PLOT_BOTTOM = 22, 92  # the waveform's band; labels above and below it
TITLE = "What the last re-decode heard"
QUIET_FLOOR = 0.05  # the loudest bar of a quiet buffer is drawn this tall at most relative to full scale
LABEL_CHAR_PX = 6.0  # about one character of the 11 px font, to keep labels inside the SVG

EDGE_LABEL = "the model has not fully heard past here"
CURSOR_LABEL = "newest token read here"

WAVE_COLOR = "#64748b"
COMMITTED_FILL, COMMITTED_LINE = "#dcfce7", "#16a34a"
UNHEARD_FILL, EDGE_LINE = "#fef3c7", "#d97706"
CURSOR_COLOR = "#dc2626"
WORD_COMMITTED, WORD_TENTATIVE = "#15803d", "#94a3b8"


class StripScale:
    """Stream seconds to x across the plot (the buffer's start at the left edge)."""

    def __init__(self, start: float, end: float):
        self.start, self.span = start, max(end - start, 1e-6)

    def x(self, seconds: float) -> float:
        fraction = min(max((seconds - self.start) / self.span, 0.0), 1.0)
        return LEFT + (WIDTH - LEFT - RIGHT) * fraction


def strip_html(buffer: Optional[BufferView], policy: str, final: bool = False) -> str:
    """The strip and its caption. policy: the session's LiveConfig.policy ("agreement" or
    "alignatt"), which says whether there is attention to draw; final: the session ended."""
    heading = f'<div class="wk-label" style="margin-bottom:.3rem">{html.escape(TITLE)}</div>'
    if buffer is None:
        return (f'<div id="live-strip" class="wk-chart">{heading}<div style="color:var(--body-text-color-subdued)">'
                "The audio each re-decode reads appears here, with the part already committed"
                + (" and where the model is reading." if policy == "alignatt" else ".") + "</div></div>")
    svg = (f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" aria-label="{html.escape(TITLE)}" '
           f'style="font:11px sans-serif;fill:#64748b"><title>{html.escape(TITLE)}</title>'
           f'{"".join(strip_parts(buffer))}</svg>')
    caption = html.escape(strip_caption(buffer, policy, final))
    return (f'<div id="live-strip" class="wk-chart">{heading}{svg}'
            f'<div class="wk-strip-caption" style="font-size:.8rem;color:var(--body-text-color-subdued)">'
            f'<div>{legend_html(buffer, policy)}</div>{caption}</div></div>')


def strip_parts(buffer: BufferView) -> List[str]:
    """The SVG elements, back to front: shading, waveform, boundary, edge, ticks, cursor."""
    scale = StripScale(buffer.start, buffer.end)
    left, right = scale.x(buffer.start), scale.x(buffer.end)
    height = PLOT_BOTTOM - PLOT_TOP
    parts: List[str] = []

    committed = buffer.committed_until > buffer.start
    if committed:  # what will not change: the committed words of this buffer
        cx = scale.x(buffer.committed_until)
        parts.append(f'<rect class="wk-strip-committed" x="{left:.1f}" y="{PLOT_TOP}" width="{cx - left:.1f}" '
                     f'height="{height}" fill="{COMMITTED_FILL}"/>')
    if buffer.edge is not None:  # the last stretch of audio, which the model has not fully heard
        ex = scale.x(buffer.edge)
        parts.append(f'<rect class="wk-strip-unheard" x="{ex:.1f}" y="{PLOT_TOP}" width="{right - ex:.1f}" '
                     f'height="{height}" fill="{UNHEARD_FILL}"/>')

    parts += _waveform(buffer, left, right)
    if committed and scale.x(buffer.committed_until) - left > 70:
        # over the waveform, with a halo of the shading's colour to stay readable
        parts.append(f'<text x="{left + 4:.1f}" y="{PLOT_TOP + 12}" fill="{COMMITTED_LINE}" '
                     f'stroke="{COMMITTED_FILL}" stroke-width="4" paint-order="stroke">committed</text>')

    if committed and buffer.committed_until < buffer.end:
        cx = scale.x(buffer.committed_until)
        parts.append(_marker("wk-strip-boundary", buffer.committed_until, cx, PLOT_TOP, PLOT_BOTTOM, COMMITTED_LINE, "2"))
    if buffer.edge is not None:
        ex = scale.x(buffer.edge)
        parts.append(_marker("wk-strip-edge", buffer.edge, ex, PLOT_TOP - 6, PLOT_BOTTOM, EDGE_LINE, "1.5",
                             extra=' stroke-dasharray="4 3"'))
        parts.append(_label(ex, PLOT_TOP - 9, EDGE_LABEL, EDGE_LINE))
    for word in buffer.words:  # where the attention read each word of this decode
        state = "committed" if word.committed else "tentative"
        parts.append(_marker("wk-strip-word", word.seconds, scale.x(word.seconds), PLOT_BOTTOM - 9, PLOT_BOTTOM,
                             WORD_COMMITTED if word.committed else WORD_TENTATIVE, "2",
                             title=f"{html.escape(word.text)}: read at {word.seconds:.2f} s ({state})"))
    if buffer.cursor is not None:
        ux = scale.x(buffer.cursor)
        parts.append(_marker("wk-strip-cursor", buffer.cursor, ux, PLOT_TOP, PLOT_BOTTOM + 4, CURSOR_COLOR, "2"))
        parts.append(_label(ux, PLOT_BOTTOM + 15, CURSOR_LABEL, CURSOR_COLOR))

    return parts + _time_axis(scale, buffer.start, buffer.end)


def _marker(cls: str, seconds: float, x: float, y1: float, y2: float, color: str, width: str,
            extra: str = "", title: str = "") -> str:
    """A vertical line at `seconds` (x), with its time for tests and tools, and a hover
    title if given."""
    line = (f'<line class="{cls}" data-seconds="{seconds:.3f}" x1="{x:.1f}" y1="{y1}" x2="{x:.1f}" y2="{y2}" '
            f'stroke="{color}" stroke-width="{width}"{extra}')
    return f"{line}><title>{title}</title></line>" if title else f"{line}/>"


def _time_axis(scale: StripScale, start: float, end: float) -> List[str]:
    """The buffer's two ends in seconds since Record, and a label every 0.5, 1, 2, 5 or 10 s
    between them (at most about eight), kept clear of the ends' labels."""
    baseline = HEIGHT - 4
    left, right = scale.x(start), scale.x(end)
    parts = [f'<text x="{left:.1f}" y="{baseline}">{start:.1f} s</text>',
             f'<text x="{right:.1f}" y="{baseline}" text-anchor="end">{end:.1f} s</text>']
    step = next((s for s in (0.5, 1, 2, 5, 10) if (end - start) / s <= 8), 30)
    t = math.floor(start / step) * step + step
    while t < end:
        x = scale.x(t)
        if x - left > 45 and right - x > 45:
            parts.append(f'<line x1="{x:.1f}" y1="{baseline - 13}" x2="{x:.1f}" y2="{baseline - 10}" stroke="#94a3b8"/>')
            parts.append(f'<text x="{x:.1f}" y="{baseline}" text-anchor="middle">{t:g}</text>')
        t += step
    return parts


def _waveform(buffer: BufferView, left: float, right: float) -> List[str]:
    """One bar per envelope value, mirrored about the band's middle. Scaled to the loudest
    bar, but never louder than QUIET_FLOOR would make it: a buffer of near silence stays flat."""
    values = buffer.envelope
    if not values:
        return []
    scale = max(max(values), QUIET_FLOOR)
    middle, half = (PLOT_TOP + PLOT_BOTTOM) / 2, (PLOT_BOTTOM - PLOT_TOP) / 2 - 2
    step = (right - left) / len(values)
    bars = []
    for i, value in enumerate(values):
        h = max(half * value / scale, 0.5)
        bars.append(f"M{left + i * step + step / 2:.1f} {middle - h:.1f}V{middle + h:.1f}")
    width = max(step * 0.7, 0.6)
    return [f'<path class="wk-strip-wave" d="{"".join(bars)}" stroke="{WAVE_COLOR}" stroke-width="{width:.2f}"/>']


def _label(x: float, y: float, text: str, color: str) -> str:
    """Text beside a vertical line at x: to its left when it fits there, else to its right."""
    fits_left = x - LEFT >= len(text) * LABEL_CHAR_PX
    anchor, tx = ("end", x - 4) if fits_left else ("start", x + 4)
    return f'<text x="{tx:.1f}" y="{y}" text-anchor="{anchor}" fill="{color}">{html.escape(text)}</text>'


def strip_caption(buffer: BufferView, policy: str, final: bool) -> str:
    """One plain sentence on what the strip shows, for this policy and moment."""
    if final:
        return "The session ended: every word heard has its final text."
    if buffer.at_pause:
        return ("You paused: one decode heard the whole utterance, as openai-whisper's transcribe reads a "
                "file, and gave it its final text; the words it changed are marked for a moment.")
    if policy != "alignatt":
        return ("No cursor: this session commits a word when two decodes agree on it, which does "
                "not read where the model is listening. Choose AlignAtt before Record to see it.")
    if buffer.edge is None:
        return "The model's attention was not read for this decode."
    sentence = (f"A word is committed once the model has read it before the edge, "
                f"{buffer.end - buffer.edge:.1f} s before the end of the audio so far")
    sentence += ": past it the speech is not fully heard yet."
    if buffer.cursor is None:
        sentence += " This decode wrote no new word, so there is no cursor."
    return sentence


def legend_html(buffer: BufferView, policy: str) -> str:
    """What each colour means, drawn in that colour."""
    def key(swatch: str, text: str) -> str:
        return (f'<span style="margin-right:.9rem;white-space:nowrap"><span style="display:inline-block;'
                f'width:.8rem;height:.6rem;vertical-align:middle;margin-right:.3rem;{swatch}"></span>'
                f"{html.escape(text)}</span>")

    keys = [key(f"background:{COMMITTED_FILL};border-right:2px solid {COMMITTED_LINE}", "committed: will not change")]
    if policy == "alignatt" and buffer.edge is not None:
        keys.append(key(f"background:{UNHEARD_FILL};border-left:2px dashed {EDGE_LINE}", "after the edge: not fully heard"))
    if buffer.cursor is not None:
        keys.append(key(f"border-left:2px solid {CURSOR_COLOR}", "where the newest token was reading"))
    if buffer.words:
        keys.append(key(f"border-left:2px solid {WORD_COMMITTED};border-right:2px solid {WORD_TENTATIVE};width:.5rem",
                        "where each word was read (hover: which)"))
    return "".join(keys)
