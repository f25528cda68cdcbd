"""A finished window's attention as maps: what each step read in the cache (an SVG for the
page: hover a cell for its weight), where each step looked in the audio (a PNG), and both
with token texts on the axes for the download (a PNG). The colour scale is shared with the
view's chips (weight_color). Pure: WindowRecords in, SVG strings and PNG bytes out.
"""

from __future__ import annotations

import html
import io
from typing import Dict, Optional

import numpy as np

from ...attention import WindowRecord
from ...events import TIMESTAMP_SECONDS
from .plain_tokens import plain_token, previous_label

BLUE = (37, 99, 235)
MAP_MIN_WEIGHT = 0.01  # map cells below this (of the row's peak) are left blank: fewer nodes


def weight_color(share: float) -> str:
    """Colour for a weight as a share of its row's peak. The square root lifts the small
    weights off white: the first position (start-of-transcript) often takes most of the
    weight, and on a linear scale everything else would look alike."""
    return f"rgba({BLUE[0]},{BLUE[1]},{BLUE[2]},{np.sqrt(max(0.0, min(1.0, share))):.3f})"


def map_svg(window: WindowRecord, layer: Optional[int], labels: Dict[int, str]) -> str:
    """Steps (rows, the token each chose) by positions (columns, the cached tokens).
    labels: token id -> text for every cached position and chosen token."""
    matrix = window.self_map(layer)
    positions = list(window.positions())
    chosen = [e.token_id for e in window.events]
    columns = [plain_token(labels[t], previous_label(labels, positions, j)) for j, t in enumerate(positions)]
    rows_text = [plain_token(labels[t], previous_label(labels, chosen, i)) for i, t in enumerate(chosen)]
    n_rows, n_cols = matrix.shape
    cell = max(4, min(14, 720 // max(n_cols, 1)))
    left, top = 110, 100
    # the column labels lean right (-60°): room for the last one's 14 characters
    right = int(14 * 0.6 * (cell - 2) * 0.5) + 8 if cell >= 8 else 4
    width, height = left + n_cols * cell + right, top + n_rows * cell + 4
    out = []
    for i, row in enumerate(matrix):
        peak = max(float(row.max()), 1e-9)
        chose = rows_text[i]
        for j in np.nonzero(row >= MAP_MIN_WEIGHT * peak)[0]:
            out.append(f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell}" height="{cell}" '
                       f'fill="{weight_color(row[j] / peak)}"><title>step {window.events[i].step + 1} '
                       f'{html.escape(repr(chose))} → position {j} {html.escape(repr(columns[j]))}: '
                       f'{row[j]:.4f}</title></rect>')
    if cell >= 8:  # room for the token texts on both axes
        font = cell - 2
        for i, text in enumerate(rows_text):
            out.append(f'<text x="{left - 3}" y="{top + i * cell + cell - 2}" font-size="{font}" '
                       f'text-anchor="end">{html.escape(text[:14])}</text>')
        for j, text in enumerate(columns):
            x, y = left + j * cell + cell - 2, top - 3
            out.append(f'<text x="{x}" y="{y}" font-size="{font}" transform="rotate(-60 {x} {y})">'
                       f'{html.escape(text[:14])}</text>')
    out.append('<text x="2" y="12" font-size="11" fill="#64748b">rows: the token each step chose · '
               'columns: cached positions · hover a cell</text>')
    return (f'<div class="wk-map-scroll"><svg class="wk-map-svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{"".join(out)}</svg></div>')


def _figure_png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buffer.getvalue()


def cross_png(window: WindowRecord) -> bytes:
    """Steps by audio frames, for the page (small, no labels but the time axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matrix = window.cross_map()
    fig, ax = plt.subplots(figsize=(7.5, max(1.2, min(4.0, 0.03 * len(matrix) + 0.8))))
    ax.imshow(matrix / np.maximum(matrix.max(axis=1, keepdims=True), 1e-9), aspect="auto", cmap="Blues",
              extent=(window.start, window.start + matrix.shape[1] * TIMESTAMP_SECONDS, len(matrix), 0),
              interpolation="nearest")
    ax.set_xlabel("audio (s)")
    ax.set_ylabel("step")
    return _figure_png(fig)


def maps_png(window: WindowRecord, labels: Dict[int, str], layer: Optional[int]) -> bytes:
    """The download: the self-attention map with token texts on both axes, and the
    cross-attention map, of one window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    smap = window.self_map(layer)
    cmap = window.cross_map()
    positions = window.positions()
    rows = [labels.get(e.token_id) or plain_token(e.text) for e in window.events]
    size = max(6.0, min(40.0, 0.16 * max(smap.shape)))
    fig, (a, b) = plt.subplots(2, 1, figsize=(size, size * 1.6),
                               gridspec_kw={"height_ratios": [smap.shape[0] / max(smap.shape[1], 1) + 0.2, 0.6]})
    a.imshow(smap, cmap="Blues", aspect="auto", interpolation="nearest")
    a.set_xticks(range(len(positions)), [plain_token(labels.get(t, str(t))) for t in positions], rotation=90, fontsize=6)
    a.set_yticks(range(len(rows)), [plain_token(r) for r in rows], fontsize=6)
    a.set_title(f"window {window.index + 1}: self-attention of each step over the cache "
                f"({'mean over layers' if layer is None else f'layer {layer + 1}'}, mean over heads)")
    b.imshow(cmap, cmap="Blues", aspect="auto", interpolation="nearest",
             extent=(window.start, window.start + cmap.shape[1] * TIMESTAMP_SECONDS, len(cmap), 0))
    b.set_xlabel("audio (s)")
    b.set_ylabel("step")
    b.set_title("cross-attention of the alignment heads")
    return _figure_png(fig)
