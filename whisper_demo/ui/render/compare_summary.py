"""The Compare summary: the cached and the uncached run of one clip side by side, the
speedup from the cache, and whether the two chose the same tokens.

Pure: two DecodeResults in, HTML out; no gradio.
"""

from __future__ import annotations

import html
from typing import Optional

from ...events import DecodeResult
from .formats import fmt_ms
from .latency_chart import MODE_COLORS, series_label
from .run_chart import typical_step_ms


def compare_html(cached: DecodeResult, uncached: DecodeResult) -> str:
    """Both runs, the speedup, and whether the two token sequences are identical.

    The speedup shown first is the ratio of the two runs' median decoder steps, the first
    step apart (run_chart.typical_step_ms): a step's cost is what the cache changes, and a
    median holds from run to run where a total moves with whatever else the machine did
    during a few seconds (one spike of 60 ms weighs in a total of 0.3 s)."""
    identical = cached.tokens == uncached.tokens
    step_on, step_off = typical_step_ms(cached.latencies_ms), typical_step_ms(uncached.latencies_ms)
    per_step = f"{step_off / step_on:.1f}×" if step_on and step_off else "—"
    total = uncached.decode_seconds / cached.decode_seconds if cached.decode_seconds > 0 else float("inf")
    greedy = cached.beam_size == 1
    if identical:
        badge = '<span class="wk-pill wk-pill-ok">✓ identical tokens</span>'
    else:
        first = next((i for i, (a, b) in enumerate(zip(cached.tokens, uncached.tokens)) if a != b),
                     min(len(cached.tokens), len(uncached.tokens)))
        why = "a bug: greedy decoding must not depend on the cache" if greedy else "beam search"
        badge = (f'<span class="wk-pill wk-pill-bad">✗ tokens differ from position {first} ({why})</span>')

    def col(result: DecodeResult, step: Optional[float]) -> str:
        color = MODE_COLORS.get(result.cache_mode, "#475569")
        wall = result.decode_seconds + result.encoder_ms / 1000
        return (
            f'<div class="wk-cmp-col" style="border-color:{color}">'
            f'<div class="wk-label" style="color:{color}">{html.escape(series_label(result.cache_mode, result.beam_size))}</div>'
            f'<div class="wk-value">{fmt_ms(step)}</div>'
            f'<div class="wk-sub">median step (the first apart) · {result.n_tokens} tokens<br>'
            f'decoder {result.decode_seconds:.2f} s · with the encoder {wall:.2f} s</div></div>'
        )

    return (
        f'<div class="wk-compare">{col(cached, step_on)}{col(uncached, step_off)}'
        f'<div class="wk-cmp-col wk-cmp-speed"><div class="wk-label">Speedup from the cache</div>'
        f'<div class="wk-value">{per_step}</div>'
        f'<div class="wk-sub">per token: the median steps\' ratio · whole decoder time {total:.1f}× '
        f'(moves with the machine\'s load)</div>'
        f'{badge}</div></div>'
    )


COMPARE_CSS = """
.wk-compare { display:grid; grid-template-columns:1fr 1fr 1.2fr; gap:.5rem; font-variant-numeric:tabular-nums; }
.wk-cmp-col { border:1px solid var(--border-color-primary); border-left-width:4px; border-radius:8px;
              padding:.45rem .65rem; background:var(--background-fill-secondary); }
.wk-cmp-speed { border-left-color:#15803d; }
.wk-pill { display:inline-block; margin-top:.35rem; border-radius:999px; padding:.1rem .6rem;
           font-size:.8rem; font-weight:700; }
.wk-pill-ok { background:#dcfce7; color:#166534; }
.wk-pill-bad { background:#fee2e2; color:#991b1b; }
"""
