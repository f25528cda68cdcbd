"""Pure formatting for the live cache panel and the Compare summary.

No gradio here and no decoding: every function takes TokenEvents / DecodeResults (and the
model, for its dimensions) and returns HTML; the latency charts are drawn in run_chart.py
and latency_svg.py. Every number shown comes from an event or a result; what this module adds
is formatting and aggregation (mean and p95 of the latencies seen so far, tokens per second
from those latencies). The file view and the Live tab both use it, so nothing here knows
which tab it serves.

The memory formulas (README, "The KV cache, in one page") are shown beside the measured values:
    self K/V  = 2 x layers x d_model x tokens x beams x bytes/element   (cache.self_cache_bytes)
    cross K/V = 2 x layers x 1500 x d_model x bytes/element             (cache.cross_cache_bytes)
"""

from __future__ import annotations

import html
import time
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from .. import kernels
from ..cache import cross_cache_bytes, self_cache_bytes
from ..events import DecodeResult, TokenEvent
from .latency_chart import MODE_COLORS, series_label
from .run_chart import typical_step_ms
# the chart's colours, importable from here as before the chart moved out of panel.py
from .latency_chart import chart_colors  # noqa: F401

Item = Union[TokenEvent, DecodeResult]

MODE_BLURB = {
    "static": "room for every token set aside once, each new token written in place",
    "hooks": "openai-whisper's cache, copied whole to grow by one token each step",
    "off": "everything recomputed every step",
}
# The technical words behind the plain ones, shown on hover (title attributes)
MODE_TERMS = {
    "static": "static KV cache: preallocated K/V tensors of n_text_ctx positions, written in place",
    "hooks": "openai-whisper's install_kv_cache_hooks: torch.cat appends each step's K/V",
    "off": "no KV cache: self- and cross-attention K/V recomputed at every step",
}
D_TERM = "d: the width of one token's vector in this model (d_model)"


def plural(n: int, word: str) -> str:
    """1 -> '1 step', 2 -> '2 steps'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


# ---------------------------------------------------------------------------------------
# numbers -> text


def fmt_bytes(n: Optional[float]) -> str:
    """1536 -> '1.5 KiB'; binary units, since tensors are sized in powers of two."""
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def fmt_ms(ms: Optional[float]) -> str:
    if ms is None:
        return "—"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def element_size(model) -> int:
    return model.decoder.token_embedding.weight.element_size()


def latency_summary(latencies_ms: Sequence[float]) -> Dict[str, float]:
    """last / mean / p95 / tokens per second (decoder time only) of the steps so far."""
    if not latencies_ms:
        return {"last": None, "mean": None, "p95": None, "tps": None, "n": 0}
    arr = np.asarray(latencies_ms, dtype=np.float64)
    total = arr.sum()
    return {
        "last": float(arr[-1]),
        "mean": float(arr.mean()),
        "p95": float(np.percentile(arr, 95)),
        "tps": float(len(arr) / (total / 1000)) if total > 0 else None,
        "n": len(arr),
    }


# ---------------------------------------------------------------------------------------
# the panel


def _tile(label: str, value: str, sub: str = "", cls: str = "") -> str:
    sub_html = f'<div class="wk-sub">{sub}</div>' if sub else ""
    return (f'<div class="wk-tile {cls}"><div class="wk-label">{label}</div>'
            f'<div class="wk-value">{value}</div>{sub_html}</div>')


def _check(measured: int, formula: int) -> str:
    if measured == formula:
        return '<span class="wk-ok" title="measured equals the formula">✓ formula</span>'
    return '<span class="wk-warn" title="measured differs from the formula">≠ formula</span>'


def panel_html(item: Optional[Item], model, *, latencies_ms: Optional[Sequence[float]] = None,
               last_event: Optional[TokenEvent] = None, status: str = "",
               wall_seconds: Optional[float] = None, encoder_ms: Optional[float] = None,
               windows: Optional[List["WindowStats"]] = None) -> str:
    """The live panel for a decode in progress (a TokenEvent) or finished (a DecodeResult).

    latencies_ms: per-step latencies seen so far (for mean/p95 while streaming; a result
    carries its own). last_event: with a result, the final TokenEvent, whose cache length
    and bytes are the state at the end. status: a short line shown in the header
    ("decoding…", "done", "stopped"). wall_seconds: time since the run began, if known.
    encoder_ms: the encoder time to show while tokens stream (the Live tab's last re-decode).
    windows: the run's windows so far (RunStats.windows): audio longer than 30 s gets a
    strip that says where the decoder is and what each window did to the cache.
    """
    if item is None:
        return _empty_panel(model, status)
    dims = model.dims
    elem = element_size(model)

    if isinstance(item, DecodeResult):
        result, event = item, last_event
        lat = latency_summary(result.latencies_ms)
        lat["mean"], lat["p95"] = result.mean_latency_ms, result.p95_latency_ms
        lat["tps"] = result.tokens_per_second
        mode, beams = result.cache_mode, result.beam_size
        steps = result.n_tokens
        encoder = fmt_ms(result.encoder_ms)
        rss = result.peak_rss_bytes
        rss_sub = "peak resident memory"
        status = status or "done"
    else:
        result, event = None, item
        lat = latency_summary(latencies_ms if latencies_ms is not None else [item.latency_ms])
        mode, beams = item.cache_mode, item.beam_size
        steps = item.step + 1
        encoder = fmt_ms(encoder_ms) if encoder_ms is not None else "—"
        rss = item.rss_bytes
        rss_sub = "resident memory now"
        if not status and item.n_windows > 1:
            # the count is an estimate: a window ends at its last timestamp, not at 30 s
            status = (f"decoding window {item.window + 1} of about {item.n_windows} · "
                      f"{fmt_clock(item.window_start)}–{fmt_clock(item.window_end)} of "
                      f"{fmt_clock(item.audio_seconds)}")
        status = status or "decoding…"

    color = MODE_COLORS.get(mode, "#475569")
    header = (
        f'<div class="wk-head"><span class="wk-badge" style="background:{color}">'
        f'{html.escape(series_label(mode, beams))}</span>'
        f'<span class="wk-blurb" title="{html.escape(MODE_TERMS.get(mode, ""))}">'
        f'{html.escape(MODE_BLURB.get(mode, ""))}</span>'
        f'<span class="wk-status">{html.escape(status)}</span></div>'
    )

    tiles = []
    # cache length
    if event is not None:
        held, cap = event.cache_tokens, event.cache_capacity
    else:
        held, cap = None, dims.n_text_ctx
    if mode == "off":
        length_value = "0"
        length_sub = "nothing kept: every step reruns all tokens"
        bar = 0.0
    else:
        length_value = f"{held if held is not None else '—'}<small> / {cap}</small>"
        length_sub = ('<span title="n_text_ctx: the most tokens the decoder reads">'
                      "tokens kept per beam, of the most the model reads</span>")
        bar = (held or 0) / cap if cap else 0.0
    tiles.append(
        _tile("Cache length", length_value,
              f'<div class="wk-bar"><div style="width:{100 * bar:.1f}%;background:{color}"></div></div>'
              f"{length_sub}")
    )

    # self-attention K/V
    if event is not None:
        measured = event.self_cache_bytes
        tokens = event.cache_tokens
        formula = self_cache_bytes(model, tokens, beams, elem)
        formula_text = (f'<span title="{D_TERM}">2 × {dims.n_text_layer} layers × {dims.n_text_state} d × '
                        f"{tokens} tok × {beams} beam{'s' if beams > 1 else ''} × {elem} B = "
                        f"{fmt_bytes(formula)}</span>")
        sub = f"{_check(measured, formula)} {formula_text}"
        if event.self_cache_reserved_bytes > measured:
            sub += f"<br>allocated {fmt_bytes(event.self_cache_reserved_bytes)} (all {cap} positions, once)"
        if mode == "off":
            sub = "none kept (recomputed every step)"
        tiles.append(_tile("Self-attention K/V", fmt_bytes(measured), sub))
    elif result is not None:
        tiles.append(_tile("Self-attention K/V", fmt_bytes(result.peak_self_cache_bytes), "peak"))

    # cross-attention K/V
    cross_formula = cross_cache_bytes(model, elem)
    cross_measured = event.cross_cache_bytes if event is not None else (
        result.peak_cross_cache_bytes if result is not None else 0)
    if mode != "off" and elem == 4 and cross_measured == cross_cache_bytes(model, 2):
        elem, cross_formula = 2, cross_cache_bytes(model, 2)  # the fast mode keeps them float16
    cross_text = (f'<span title="{D_TERM}">2 × {dims.n_text_layer} layers × {dims.n_audio_ctx} frames × '
                  f"{dims.n_text_state} d × {elem} B = {fmt_bytes(cross_formula)}</span>")
    if mode == "off":
        cross_sub = f"none kept: {fmt_bytes(cross_formula)} projected again every step"
    elif cross_measured == cross_formula * beams and beams > 1:
        cross_sub = f'<span class="wk-ok">✓ formula × {beams} beams</span> {cross_text}'
    else:
        cross_sub = f"{_check(cross_measured, cross_formula)} {cross_text}"
    tiles.append(_tile("Cross-attention K/V", fmt_bytes(cross_measured), cross_sub))

    # latency
    tiles.append(_tile(
        "Per-token latency",
        f'{fmt_ms(lat["last"]) if result is None else fmt_ms(lat["mean"])}',
        (f'mean {fmt_ms(lat["mean"])} · p95 {fmt_ms(lat["p95"])}' if result is None
         else f'mean · p95 {fmt_ms(lat["p95"])} · last {fmt_ms(lat["last"])}'),
        cls="wk-wide-value",
    ))
    tps = f'{lat["tps"]:.1f}' if lat["tps"] else "—"
    # the Live tab's panel (encoder_ms given) shows one re-decode: the last, even after Stop
    scope = " in the last re-decode" if encoder_ms is not None and result is None else ""
    tiles.append(_tile("Tokens / s", tps, f"{plural(steps, 'decoder step')}{scope} (decoder time only)"))
    if result is not None:
        enc_sub = "audio → features, per 30 s window"
    elif encoder_ms is not None:
        enc_sub = "audio → features, last re-decode"
    elif event is not None and event.window_encoder_ms > 0:
        # each window's encoder time as it happens (the encoder runs once per window)
        encoder = fmt_ms(event.window_encoder_ms)
        enc_sub = "audio → features" + (f", window {event.window + 1} of about {event.n_windows}"
                                        if event.n_windows > 1 else "")
    else:
        enc_sub = "reported when the run ends"
    # what it computed in: bfloat16 in the fast mode where the CPU has it, else float32
    enc_sub += f" · {(result or event).encoder_dtype}"
    tiles.append(_tile("Encoder", encoder, enc_sub))
    tiles.append(_tile("Process memory", fmt_bytes(rss), rss_sub))
    if result is not None:
        decoder_total = f"{result.decode_seconds:.2f} s"
        whole = f" · whole run {wall_seconds:.1f} s" if wall_seconds is not None else ""
        tiles.append(_tile("Decoder total", decoder_total,
                           f"{plural(result.n_tokens, 'step')} · {result.language}{whole}"
                           + (f" · {result.skipped_windows} silent window(s) skipped"
                              if result.skipped_windows else "")))

    strip = windows_html(windows, latencies_ms if result is None else result.latencies_ms,
                         event) if windows and event is not None and event.n_windows > 1 else ""
    return f'<div class="wk-panel">{header}<div class="wk-grid">{"".join(tiles)}</div>{strip}</div>'


def fmt_clock(seconds: float) -> str:
    """169.4 -> '2:49'"""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}:{seconds % 60:02d}"


def windows_html(windows: List["WindowStats"], latencies_ms: Optional[Sequence[float]],
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


def _window_latency_svg(windows: List["WindowStats"], latencies_ms: Sequence[float],
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


IDLE_TEXT = "Drop a file, record, or pick an example: the cache fills here as tokens arrive."


def _empty_panel(model, status: str = "") -> str:
    dims = model.dims if model is not None else None
    detail = ""
    if dims is not None:
        elem = element_size(model)
        detail = (
            f"{getattr(model, 'name', 'model')}: {dims.n_text_layer} decoder layers, each token "
            f"a vector of {dims.n_text_state} numbers, up to {dims.n_text_ctx} tokens per 30 s. "
            f"A full cache of the text: {fmt_bytes(self_cache_bytes(model, dims.n_text_ctx, 1, elem))}; "
            f"of the audio: {fmt_bytes(cross_cache_bytes(model, elem))} per 30 s window."
        )
        terms = (f"d_model {dims.n_text_state}, n_text_ctx {dims.n_text_ctx}; self-attention K/V "
                 f"for the text, cross-attention K/V for the audio")
    msg = html.escape(status or IDLE_TEXT)
    return (f'<div class="wk-panel wk-empty"><div class="wk-head"><span class="wk-status">{msg}</span>'
            f'</div><div class="wk-sub" title="{html.escape(terms) if dims is not None else ""}">'
            f'{html.escape(detail)}</div>'
            f'<div class="wk-sub">Decoder steps: {html.escape(kernels.describe_path())}</div></div>')


def with_status(panel: str, status: str) -> str:
    """The same panel HTML with its header's status replaced (e.g. "stopped" after Stop),
    unless the run it shows had finished ("done…")."""
    import re

    def swap(m):
        return m.group(0) if m.group(2).startswith("done") else f"{m.group(1)}{html.escape(status)}{m.group(3)}"

    return re.sub(r'(<span class="wk-status">)([^<]*)(</span>)', swap, panel or "", count=1)


# ---------------------------------------------------------------------------------------
# Compare


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


class WindowStats:
    """One 30 s window of a run, from its TokenEvents."""

    def __init__(self, event: TokenEvent, first_step: int):
        self.window = event.window
        self.first_step = first_step  # index into the run's latencies
        self.start, self.end = event.window_start, event.window_end
        self.prompt, self.prefill = event.prompt_tokens, event.prefill_tokens
        self.prefill_ms = event.latency_ms  # the first step runs the prefill
        self.encoder_ms = event.window_encoder_ms
        self.steps = 0


class RunStats:
    """Aggregates one run's events for the panel: latencies so far, the last event, and
    the windows (long audio)."""

    def __init__(self):
        self.latencies_ms: List[float] = []
        self.last_event: Optional[TokenEvent] = None
        self.windows: List[WindowStats] = []
        self.started = time.perf_counter()

    def add(self, event: TokenEvent) -> None:
        if not self.windows or self.windows[-1].window != event.window or event.restart:
            self.windows.append(WindowStats(event, len(self.latencies_ms)))
        self.windows[-1].steps += 1
        self.latencies_ms.append(event.latency_ms)
        self.last_event = event

    @property
    def wall_seconds(self) -> float:
        return time.perf_counter() - self.started


PANEL_CSS = """
.wk-panel { font-variant-numeric: tabular-nums; }
.wk-head { display:flex; align-items:center; gap:.6rem; margin-bottom:.5rem; flex-wrap:wrap; }
.wk-badge { color:#fff; border-radius:999px; padding:.15rem .7rem; font-weight:600; font-size:.85rem; }
.wk-blurb { color:var(--body-text-color-subdued); font-size:.85rem; }
.wk-status { margin-left:auto; font-size:.85rem; color:var(--body-text-color-subdued); }
.wk-empty .wk-status { margin-left:0; }
.wk-grid { display:grid; grid-template-columns:repeat(auto-fill, minmax(200px, 1fr)); gap:.5rem; }
.wk-tile { border:1px solid var(--border-color-primary); border-radius:8px; padding:.45rem .65rem;
           background:var(--background-fill-secondary); min-height:4.6rem; }
.wk-label { font-size:.72rem; text-transform:uppercase; letter-spacing:.05em;
            color:var(--body-text-color-subdued); font-weight:600; }
.wk-value { font-size:1.55rem; font-weight:700; line-height:1.2; font-family:var(--font-mono); }
.wk-value small { font-size:.9rem; font-weight:500; color:var(--body-text-color-subdued); }
.wk-sub { font-size:.74rem; color:var(--body-text-color-subdued); line-height:1.35; }
.wk-ok { color:#15803d; font-weight:600; }
.wk-warn { color:#b45309; font-weight:600; }
.wk-bar { height:6px; background:var(--border-color-primary); border-radius:3px; margin:.25rem 0 .2rem; overflow:hidden; }
.wk-bar > div { height:100%; border-radius:3px; transition:width .15s; }
.wk-compare { display:grid; grid-template-columns:1fr 1fr 1.2fr; gap:.5rem; font-variant-numeric:tabular-nums; }
.wk-cmp-col { border:1px solid var(--border-color-primary); border-left-width:4px; border-radius:8px;
              padding:.45rem .65rem; background:var(--background-fill-secondary); }
.wk-cmp-speed { border-left-color:#15803d; }
.wk-pill { display:inline-block; margin-top:.35rem; border-radius:999px; padding:.1rem .6rem;
           font-size:.8rem; font-weight:700; }
.wk-pill-ok { background:#dcfce7; color:#166534; }
.wk-pill-bad { background:#fee2e2; color:#991b1b; }
.wk-windows { margin-top:.5rem; }
.wk-audio-bar { position:relative; height:10px; background:var(--border-color-primary); border-radius:3px;
                margin:.3rem 0; overflow:hidden; }
.wk-audio-bar > div { position:absolute; top:0; bottom:0; border-right:1px solid #fff; }
.wk-win-done { background:#93c5fd; }
.wk-win-now { background:#2563eb; }
"""
