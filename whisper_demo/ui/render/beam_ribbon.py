"""Beam search in the "Inside the cache" view: which beam row each cache row came from at
each reorder, drawn as a ribbon (SVG), and a caption that counts the reorders and what they
copy. Pure: a WindowRecord in, SVG and text out.
"""

from __future__ import annotations

from typing import Optional

from ...attention import WindowRecord

RIBBON_STEPS = 40  # the ribbon shows the last this many reorders


def ribbon_svg(window: WindowRecord, last: Optional[int] = RIBBON_STEPS) -> str:
    """Beam rows (lines) across steps (columns): at each reorder a row's line comes from the
    row it was copied from. Orange: a row that moved (the cache copies those positions)."""
    sources = window.beam_sources()
    first = 0 if last is None else max(0, len(sources) - last)
    sources = sources[first:]
    if not sources or not sources[0]:
        return ""
    beams = len(sources[0])
    dx, dy, pad = 14, 12, 8
    width, height = pad * 2 + dx * len(sources), pad * 2 + dy * (beams - 1)
    out = []
    for t, src in enumerate(sources):
        x0, x1 = pad + dx * (t - 1) if t else pad, pad + dx * t
        for row, came_from in enumerate(src):
            moved = came_from != row
            out.append(f'<line x1="{x0}" y1="{pad + dy * came_from}" x2="{x1}" y2="{pad + dy * row}" '
                       f'stroke="{"#f59e0b" if moved else "#94a3b8"}" stroke-width="{2 if moved else 1}">'
                       f'<title>step {window.events[first + t].step + 1}: row {row} ← row {came_from}</title></line>')
        for row in range(beams):
            out.append(f'<circle cx="{x1}" cy="{pad + dy * row}" r="2" fill="#475569"/>')
    return (f'<svg class="wk-ribbon" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            f'{"".join(out)}</svg>')


def ribbon_caption(window: WindowRecord) -> str:
    sources = [s for s in window.beam_sources() if s]
    moved = [s for s in sources if list(s) != list(range(len(s)))]
    if not sources:
        return ""
    bytes_now = window.events[-1].self_cache_bytes
    return (f"{len(moved)} of {len(sources)} steps reordered the beams; each reorder copies every "
            f"cached position of the moved rows (hooks: the whole cache, {bytes_now / 1024:.0f} KiB now)")
