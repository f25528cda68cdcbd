"""The live cache panel: what the decoder's KV cache holds and what each token costs.

No gradio here and no decoding: panel_html takes a TokenEvent (a decode in progress) or a
DecodeResult (one finished), with the model for its dimensions, and returns HTML. Every
number shown comes from an event or a result; the numbers are written by formats.py, long
audio's window strip is window_strip.py, and the Compare summary is compare_summary.py.
The file view and the Live tab both use it, so nothing here knows which tab it serves.

The memory formulas (docs/kv-cache.md) are shown beside the measured values:
    self K/V  = 2 x layers x d_model x tokens x beams x bytes/element   (cache.self_cache_bytes)
    cross K/V = 2 x layers x 1500 x d_model x bytes/element             (cache.cross_cache_bytes)
(1500 audio positions: a 30 s window; a window encoded without its padding, as the Live
tab's streamed pass encodes its buffer, holds its audio + encoder.MARGIN_SECONDS only.)
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

from whisper.audio import N_FRAMES

from ... import kernels
from ...cache import cross_cache_bytes, self_cache_bytes
from ...encoder import FRAMES_PER_SECOND, MARGIN_SECONDS, encoder_frames
from ...events import DecodeResult, TokenEvent
from .formats import fmt_bytes, fmt_clock, fmt_ms, latency_summary, plural
from .latency_chart import MODE_COLORS, series_label
from .run_stats import WindowStats
from .window_strip import windows_html

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


def element_size(model) -> int:
    return model.decoder.token_embedding.weight.element_size()


def _tile(label: str, value: str, sub: str = "", cls: str = "") -> str:
    sub_html = f'<div class="wk-sub">{sub}</div>' if sub else ""
    return (f'<div class="wk-tile {cls}"><div class="wk-label">{label}</div>'
            f'<div class="wk-value">{value}</div>{sub_html}</div>')


def _check(measured: int, formula: int) -> str:
    if measured == formula:
        return '<span class="wk-ok" title="measured equals the formula">✓ formula</span>'
    return '<span class="wk-warn" title="measured differs from the formula">≠ formula</span>'


@dataclass
class _Shown:
    """What one panel shows of a decode, streaming or finished, whichever it came from."""

    result: Optional[DecodeResult]
    event: Optional[TokenEvent]  # the latest step (with a result: its last, if known)
    lat: dict  # latency_summary's numbers
    mode: str
    beams: int
    steps: int
    encoder: str  # the encoder time, written
    rss: int
    rss_sub: str
    status: str
    # in batches (DecodeOptions.batch_size): the pieces the step decoded at once, each a
    # row of the self cache with its own cross K/V; 0 when not batched
    batch: int = 0

    @property
    def rows(self) -> Tuple[int, str]:
        """The cache's rows and what each is: the batch's pieces, or the beams."""
        if self.batch:
            return self.batch, "piece" if self.batch == 1 else "pieces"
        return self.beams, "beam" if self.beams == 1 else "beams"


def panel_html(item: Optional[Item], model, *, latencies_ms: Optional[Sequence[float]] = None,
               last_event: Optional[TokenEvent] = None, status: str = "",
               wall_seconds: Optional[float] = None, encoder_ms: Optional[float] = None,
               windows: Optional[List[WindowStats]] = None) -> str:
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
    if isinstance(item, DecodeResult):
        shown = _finished(item, last_event, status)
    else:
        shown = _streaming(item, latencies_ms, encoder_ms, status)
    color = MODE_COLORS.get(shown.mode, "#475569")
    elem = element_size(model)
    tiles = [_length_tile(shown, model.dims, color), *_self_tile(shown, model, elem),
             _cross_tile(shown, model, elem), *_cost_tiles(shown, encoder_ms, wall_seconds)]
    event, result = shown.event, shown.result
    strip = windows_html(windows, latencies_ms if result is None else result.latencies_ms,
                         event) if windows and event is not None and event.n_windows > 1 else ""
    return f'<div class="wk-panel">{_header(shown, color)}<div class="wk-grid">{"".join(tiles)}</div>{strip}</div>'


def _finished(result: DecodeResult, last_event: Optional[TokenEvent], status: str) -> _Shown:
    lat = latency_summary(result.latencies_ms)
    lat["mean"], lat["p95"] = result.mean_latency_ms, result.p95_latency_ms
    lat["tps"] = result.tokens_per_second
    return _Shown(result, last_event, lat, result.cache_mode, result.beam_size, result.n_tokens,
                  fmt_ms(result.encoder_ms), result.peak_rss_bytes, "peak resident memory", status or "done",
                  last_event.batch_rows if last_event is not None else 0)


def _streaming(item: TokenEvent, latencies_ms: Optional[Sequence[float]], encoder_ms: Optional[float],
               status: str) -> _Shown:
    lat = latency_summary(latencies_ms if latencies_ms is not None else [item.latency_ms])
    if not status and item.batch_rows:
        status = (f"decoding batch {item.window + 1} of {item.n_windows}: {item.batch_rows} of its "
                  f"{item.batch_pieces} pieces at once · {fmt_clock(item.window_start)}–"
                  f"{fmt_clock(item.window_end)} of {fmt_clock(item.audio_seconds)}")
    if not status and item.n_windows > 1:
        # the count is an estimate: a window ends at its last timestamp, not at 30 s
        status = (f"decoding window {item.window + 1} of about {item.n_windows} · "
                  f"{fmt_clock(item.window_start)}–{fmt_clock(item.window_end)} of "
                  f"{fmt_clock(item.audio_seconds)}")
    encoder = fmt_ms(encoder_ms) if encoder_ms is not None else "—"
    return _Shown(None, item, lat, item.cache_mode, item.beam_size, item.step + 1, encoder, item.rss_bytes,
                  "resident memory now", status or "decoding…", item.batch_rows)


def _header(shown: _Shown, color: str) -> str:
    mode = shown.mode
    return (
        f'<div class="wk-head"><span class="wk-badge" style="background:{color}">'
        f'{html.escape(series_label(mode, shown.beams))}'
        f'{f" · batch of {shown.batch}" if shown.batch else ""}</span>'
        f'<span class="wk-blurb" title="{html.escape(MODE_TERMS.get(mode, ""))}">'
        f'{html.escape(MODE_BLURB.get(mode, ""))}</span>'
        f'<span class="wk-status">{html.escape(shown.status)}</span></div>'
    )


def _length_tile(shown: _Shown, dims, color: str) -> str:
    event = shown.event
    if event is not None:
        held, cap = event.cache_tokens, event.cache_capacity
    else:
        held, cap = None, dims.n_text_ctx
    if shown.mode == "off":
        length_value = "0"
        length_sub = "nothing kept: every step reruns all tokens"
        bar = 0.0
    else:
        length_value = f"{held if held is not None else '—'}<small> / {cap}</small>"
        length_sub = ('<span title="n_text_ctx: the most tokens the decoder reads">'
                      "tokens kept per beam, of the most the model reads</span>")
        bar = (held or 0) / cap if cap else 0.0
    return _tile("Cache length", length_value,
                 f'<div class="wk-bar"><div style="width:{100 * bar:.1f}%;background:{color}"></div></div>'
                 f"{length_sub}")


def _self_tile(shown: _Shown, model, elem: int) -> List[str]:
    """The self-attention K/V tile: measured beside its formula while streaming, the peak
    of a finished run (none for a result without it)."""
    event, dims = shown.event, model.dims
    rows, what = shown.rows
    if event is None:
        return [_tile("Self-attention K/V", fmt_bytes(shown.result.peak_self_cache_bytes), "peak")]
    measured, tokens = event.self_cache_bytes, event.cache_tokens
    formula = self_cache_bytes(model, tokens, rows, elem)
    formula_text = (f'<span title="{D_TERM}">2 × {dims.n_text_layer} layers × {dims.n_text_state} d × '
                    f"{tokens} tok × {rows} {what} × {elem} B = "
                    f"{fmt_bytes(formula)}</span>")
    sub = f"{_check(measured, formula)} {formula_text}"
    if event.self_cache_reserved_bytes > measured:
        sub += f"<br>allocated {fmt_bytes(event.self_cache_reserved_bytes)} (all {event.cache_capacity} positions, once)"
    if shown.mode == "off":
        sub = "none kept (recomputed every step)"
    return [_tile("Self-attention K/V", fmt_bytes(measured), sub)]


def _encoded_positions(event: TokenEvent, dims) -> int:
    """Audio positions (20 ms each) the cross-attention K/V hold when the window was encoded
    without its padding (DecodeOptions.encode_audio_only, the Live tab's streamed pass; a
    batch of skipped stretches: its longest): its audio plus encoder.MARGIN_SECONDS, in
    whole seconds; the full window otherwise."""
    audio_seconds = event.batch_encoded_seconds or event.window_end - event.window_start
    audio_frames = round(audio_seconds * FRAMES_PER_SECOND)
    mel_frames = encoder_frames(max(0, audio_frames), audio_only=True)
    return min(dims.n_audio_ctx, mel_frames * dims.n_audio_ctx // N_FRAMES)


def _cross_tile(shown: _Shown, model, elem: int) -> str:
    event, result, mode, dims = shown.event, shown.result, shown.mode, model.dims
    beams, what = shown.rows
    cross_measured = event.cross_cache_bytes if event is not None else (
        result.peak_cross_cache_bytes if result is not None else 0)

    def size(positions: int, element: int) -> int:
        return 2 * dims.n_text_layer * positions * dims.n_text_state * element

    # The formula for what this run kept: a full window (1500 positions) or, for a window
    # encoded without its padding, the positions encoded; in the model's element size or
    # in 2 bytes (the fast mode keeps them in 16 bits)
    positions = [dims.n_audio_ctx]
    if event is not None and mode != "off":
        positions.append(_encoded_positions(event, dims))
    sizes = [elem] + ([2] if mode != "off" and elem == 4 else [])
    candidates = [(p, e) for p in positions for e in sizes]
    n, elem = next(((p, e) for p, e in candidates if cross_measured in (size(p, e), size(p, e) * beams)),
                   candidates[0])
    cross_formula = size(n, elem)
    if n == dims.n_audio_ctx:
        frames = f"{n} frames"
    else:
        frames = (f'<span title="the window was encoded without its padding: its audio and '
                  f'{MARGIN_SECONDS:g} s more, in whole seconds">{n} frames (audio + {MARGIN_SECONDS:g} s)</span>')
    cross_text = (f'<span title="{D_TERM}">2 × {dims.n_text_layer} layers × {frames} × '
                  f'{dims.n_text_state} d × {elem} B = {fmt_bytes(cross_formula)}</span>')
    if mode == "off":
        cross_sub = f"none kept: {fmt_bytes(cross_formula)} projected again every step"
    elif cross_measured == cross_formula * beams and beams > 1:
        each = " (one audio each)" if shown.batch else ""
        cross_sub = f'<span class="wk-ok">✓ formula × {beams} {what}{each}</span> {cross_text}'
    else:
        cross_sub = f"{_check(cross_measured, cross_formula)} {cross_text}"
    return _tile("Cross-attention K/V", fmt_bytes(cross_measured), cross_sub)


def _cost_tiles(shown: _Shown, encoder_ms: Optional[float], wall_seconds: Optional[float]) -> List[str]:
    """Per-token latency, tokens a second, the encoder, memory and (finished) the decoder's total."""
    result, lat = shown.result, shown.lat
    tiles = [_tile(
        "Per-token latency",
        f'{fmt_ms(lat["last"]) if result is None else fmt_ms(lat["mean"])}',
        (f'mean {fmt_ms(lat["mean"])} · p95 {fmt_ms(lat["p95"])}' if result is None
         else f'mean · p95 {fmt_ms(lat["p95"])} · last {fmt_ms(lat["last"])}'),
        cls="wk-wide-value",
    )]
    tps = f'{lat["tps"]:.1f}' if lat["tps"] else "—"
    # the Live tab's panel (encoder_ms given) shows one re-decode: the last, even after Stop
    scope = " in the last re-decode" if encoder_ms is not None and result is None else ""
    tiles.append(_tile("Tokens / s", tps, f"{plural(shown.steps, 'decoder step')}{scope} (decoder time only)"))
    tiles.append(_encoder_tile(shown, encoder_ms))
    tiles.append(_tile("Process memory", fmt_bytes(shown.rss), shown.rss_sub))
    if result is not None:
        decoder_total = f"{result.decode_seconds:.2f} s"
        whole = f" · whole run {wall_seconds:.1f} s" if wall_seconds is not None else ""
        tiles.append(_tile("Decoder total", decoder_total,
                           f"{plural(result.n_tokens, 'step')} · {result.language}{whole}"
                           + (f" · {result.skipped_windows} silent window(s) skipped"
                              if result.skipped_windows else "")))
    return tiles


def _encoder_tile(shown: _Shown, encoder_ms: Optional[float]) -> str:
    result, event, encoder = shown.result, shown.event, shown.encoder
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
    return _tile("Encoder", encoder, enc_sub)


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
            f'{html.escape(detail)}</div>{_kernels_note()}</div>')


def _kernels_note() -> str:
    """A line only when the compiled kernels did not load (the server's log says which
    path decoder steps take either way): what it means for the person watching, with the
    reason for whoever runs the server on hover."""
    reason = kernels.unavailable_reason() if not kernels.available() else None
    if reason is None:
        return ""
    return (f'<div class="wk-sub wk-kernels" title="{html.escape(kernels.describe_path())}">'
            "Decoder steps run on plain PyTorch here (this app's faster kernels did not load: "
            f"{html.escape(reason)}): the same words, slower steps.</div>")


def with_status(panel: str, status: str) -> str:
    """The same panel HTML with its header's status replaced (e.g. "stopped" after Stop),
    unless the run it shows had finished ("done…")."""
    import re

    def swap(m):
        return m.group(0) if m.group(2).startswith("done") else f"{m.group(1)}{html.escape(status)}{m.group(3)}"

    return re.sub(r'(<span class="wk-status">)([^<]*)(</span>)', swap, panel or "", count=1)


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
"""
