"""The "Inside the cache" view: what each new token reads, drawn from its TokenEvents.

While tokens stream (DecodeOptions.attention, only while the view is open):
- self-attention over the cache: the cached positions' tokens as chips, darker where the
  step that chose the newest token put more weight (mean over heads; one layer, the mean
  over layers, or every layer as a small row under each chip);
- cross-attention over the audio: the waveform, the window being decoded, where the
  alignment heads look now (a curve) and the cursor at its peak, with the cursor's trail;
- beam search: which beam row each cache row came from at each reorder (a ribbon).
When the run ends: the token-by-position map of each window (hover a cell for its
weight), where each token looked in the audio, the words on a player (playing highlights
the word being spoken, a click plays from that word), and downloads (PNG maps, JSON).

Pure HTML/SVG strings plus matplotlib PNGs; the page's wiring is in transcribe_tab.py.
Every number drawn comes from a TokenEvent or the DecodeResult (attention.py gathers them).
"""

from __future__ import annotations

import base64
import html
import io
import re
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
from whisper.tokenizer import LANGUAGES

from ..attention import AttentionRecord, WindowRecord, token_labels
from ..events import TIMESTAMP_SECONDS, DecodeResult, TokenEvent

BLUE = (37, 99, 235)
WAVE_COLUMNS = 600  # waveform envelope resolution
RIBBON_STEPS = 40  # the ribbon shows the last this many reorders
MAP_MIN_WEIGHT = 0.01  # map cells below this (of the row's peak) are left blank: fewer nodes
PLAYER_MAX_SECONDS = 300  # the player embeds the audio in the page (32 kB/s as base64 WAV)
# Whisper's special tokens in plain words (the token itself is in each chip's tooltip)
SHORT = {"<|startoftranscript|>": "start", "<|startofprev|>": "earlier text", "<|endoftext|>": "end",
         "<|notimestamps|>": "no times", "<|transcribe|>": "transcribe", "<|translate|>": "translate"}
TIMESTAMP = re.compile(r"<\|(\d+\.\d+)\|>")
LANGUAGE = re.compile(r"<\|([a-z]{2,3})\|>")

# How each cache mode obtains the weights it shows (the same weights, to float rounding).
HOW = {"static": " Weights: read from the static cache.",
       "off": " Weights: recomputed from scratch this step (no cache).",
       "hooks": " Weights: openai-whisper's modules keep none, so an extra uncached pass computes them."}

# Runs in the page once (gr.HTML js_on_load): the final view's player and words. Events are
# delegated to the view's element, so they keep working when its HTML is replaced.
PLAYER_JS = """
element.addEventListener('click', (e) => {
  const word = e.target.closest('[data-t0]');
  const audio = element.querySelector('audio.wk-play');
  if (!word || !audio) return;
  audio.currentTime = parseFloat(word.dataset.t0);
  audio.play();
});
element.addEventListener('timeupdate', (e) => {
  const audio = e.target;
  if (!audio.classList || !audio.classList.contains('wk-play')) return;
  const t = audio.currentTime;
  element.querySelectorAll('.wk-word').forEach((w) =>
    w.classList.toggle('wk-now', t >= parseFloat(w.dataset.t0) && t < parseFloat(w.dataset.t1)));
  const head = element.querySelector('.wk-playhead');
  if (head) { const x = t / parseFloat(head.dataset.duration) * 600;
              head.setAttribute('x1', x); head.setAttribute('x2', x); }
}, true);
"""


def layer_choices(n_layers: int) -> List[Tuple[str, str]]:
    return ([("all layers, one row each", "all"), ("mean over layers", "mean")]
            + [(f"layer {i + 1}", str(i)) for i in range(n_layers)])


def _layer(choice: str, n_layers: int) -> Optional[int]:
    """A layer index, or None for the mean ("all" colours chips by the mean too)."""
    return int(choice) if choice and choice.isdigit() and int(choice) < n_layers else None


def _short(label: str, previous: Optional[str] = None) -> str:
    """A token as a newcomer reads it. A timestamp token after text ends a segment ("to
    3.16 s"); any other opens one ("from 3.16 s"), so the pair Whisper writes between two
    segments reads "to 3.16 s", "from 3.16 s" rather than the same token twice."""
    stamp = TIMESTAMP.fullmatch(label)
    if stamp:
        ends = previous is not None and not previous.startswith("<|")
        return f"{'to' if ends else 'from'} {float(stamp.group(1)):g} s"
    language = LANGUAGE.fullmatch(label)
    if language and language.group(1) in LANGUAGES:
        return LANGUAGES[language.group(1)]
    return SHORT.get(label, label)


def _previous(labels: Dict[int, str], tokens: List[int], i: int) -> Optional[str]:
    return labels[tokens[i - 1]] if i > 0 else None


def _blue(share: float) -> str:
    """Colour for a weight as a share of its row's peak. The square root lifts the small
    weights off white: the first position (start-of-transcript) often takes most of the
    weight, and on a linear scale everything else would look alike."""
    return f"rgba({BLUE[0]},{BLUE[1]},{BLUE[2]},{np.sqrt(max(0.0, min(1.0, share))):.3f})"


def envelope(samples: np.ndarray, columns: int = WAVE_COLUMNS) -> np.ndarray:
    """[columns] peak amplitude per column, scaled to the loudest (for the waveform)."""
    if len(samples) == 0:
        return np.zeros(columns)
    edges = np.linspace(0, len(samples), columns + 1).astype(int)
    peaks = np.array([np.abs(samples[a:max(b, a + 1)]).max() for a, b in zip(edges[:-1], edges[1:])])
    return peaks / max(float(peaks.max()), 1e-9)


class AttentionView:
    """One run's view: fed every TokenEvent, asked for HTML when the page updates."""

    def __init__(self, model, samples: np.ndarray, layer: str = "all"):
        self.model = model
        self.samples = samples
        self.duration = len(samples) / 16000
        self.n_layers = model.dims.n_text_layer
        self.layer = layer or "all"
        self.record = AttentionRecord()
        self.wave = envelope(samples)
        self._labels: Dict[int, str] = {}

    def add(self, event: TokenEvent) -> None:
        self.record.add(event)

    def finish(self, result: DecodeResult) -> None:
        self.record.result = result

    def labels(self, ids) -> Dict[int, str]:
        missing = [t for t in ids if t not in self._labels]
        if missing:
            self._labels.update(token_labels(self.model, missing))
        return self._labels

    # --- while tokens stream ---------------------------------------------------------------

    def live_html(self, event: TokenEvent) -> str:
        att = event.attention
        if att is None:
            return ""
        labels = self.labels(list(att.positions) + [event.token_id])
        window = self.record.windows[-1] if self.record.windows else None
        parts = [
            f'<div class="wk-attn-head">Step {event.step + 1}: the decoder chose '
            f'<b>{html.escape(repr(_short(labels[event.token_id], labels[att.positions[-1]] if len(att.positions) else None)))}</b> after reading '
            f'{len(att.positions)} cached positions and the audio around '
            f'{att.audio_time:.2f} s{_window_note(event)}{HOW.get(event.cache_mode, "")}</div>',
            _section("Self-attention over the cache",
                     self.chips(att.self_weights, att.positions, labels),
                     "one chip per cached position; darker = more weight from the newest token's query "
                     "(colour: square root of the share of the row's peak; hover for the weights)"),
            _section("Cross-attention over the audio", self.waveform_svg(window, event),
                     "where the alignment heads look (curve) and its peak (cursor); dots: earlier tokens"),
        ]
        if att.beam_sources and window is not None:
            parts.append(_section("Beam reorders", ribbon_svg(window),
                                  ribbon_caption(window)))
        return f'<div class="wk-attn">{"".join(parts)}</div>'

    def chips(self, weights: np.ndarray, positions, labels: Dict[int, str]) -> str:
        layer = _layer(self.layer, self.n_layers)
        main = weights.mean(axis=0) if layer is None else weights[layer]
        peak = max(float(main.max()), 1e-9)
        peaks = np.maximum(weights.max(axis=1), 1e-9)
        chips = []
        positions = list(positions)
        for p, token in enumerate(positions):
            alpha = float(main[p]) / peak
            per_layer = " · ".join(f"L{i + 1} {weights[i, p]:.3f}" for i in range(len(weights)))
            title = f"position {p} {labels[token]!r}: {main[p]:.4f} ({per_layer})"
            rows = ""
            if self.layer == "all":
                rows = "".join(f'<span class="wk-lay" style="background:{_blue(weights[i, p] / peaks[i])}"></span>'
                               for i in range(len(weights)))
            color = "#fff" if alpha > 0.3 else "inherit"
            chips.append(f'<span class="wk-chip" title="{html.escape(title)}">'
                         f'<span class="wk-tok" style="background:{_blue(alpha)};color:{color}">'
                         f'{html.escape(_short(labels[token], _previous(labels, positions, p)))}</span>'
                         f'{rows}</span>')
        return f'<div class="wk-chips">{"".join(chips)}</div>'

    def waveform_svg(self, window: Optional[WindowRecord], event: Optional[TokenEvent] = None,
                     playhead: bool = False) -> str:
        w, h = WAVE_COLUMNS, 80
        mid = h / 2
        x_of = (lambda t: t / self.duration * w) if self.duration > 0 else (lambda t: 0.0)
        bars = "".join(f'<line x1="{i + .5}" x2="{i + .5}" y1="{mid - a * 34:.1f}" y2="{mid + a * 34:.1f}"/>'
                       for i, a in enumerate(self.wave))
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
            out.append(f'<line class="wk-playhead" data-duration="{self.duration:.3f}" x1="0" x2="0" '
                       f'y1="0" y2="{h}" stroke="#16a34a" stroke-width="2"/>')
        return (f'<svg class="wk-wave" viewBox="0 0 {w} {h}" width="100%" height="{h}" '
                f'preserveAspectRatio="none">{"".join(out)}</svg>')

    # --- when the run ends -----------------------------------------------------------------

    def final_html(self, note: str = "") -> str:
        if not self.record.windows:
            return '<div class="wk-attn wk-sub">No tokens were decoded (silence?).</div>'
        parts = [f'<div class="wk-attn-head">Inside the cache, finished run: '
                 f'{len(self.record.events)} steps in {len(self.record.windows)} '
                 f'window{"s" if len(self.record.windows) != 1 else ""} of 30 s. {note}</div>',
                 _section("Words on the audio", self.player_html(),
                          "play: the word being spoken is highlighted · click a word to play from it")]
        layer = _layer(self.layer, self.n_layers)
        which = "mean over layers" if layer is None else f"layer {layer + 1}"
        for window in self.record.windows:
            parts.append(
                f'<details class="wk-map" {"open" if window is self.record.windows[0] else ""}>'
                f'<summary>Window {window.index + 1}: {window.start:.1f}–{window.end:.1f} s · '
                f'<span title="prompt and start tokens prefilled in one forward pass">'
                f'{window.prompt_tokens} tokens of earlier text + {window.prefill_tokens - window.prompt_tokens} '
                f'start tokens read in one pass</span>, {window.generated} steps · what each step read '
                f'({which})</summary>'
                f'{self.map_svg(window, layer)}'
                f'<div class="wk-sub">Where each token looked in the audio (rows: steps; columns: '
                f'{window.start:.1f}–{window.end:.1f} s):</div>{self.cross_img(window)}'
                + (f'<div class="wk-sub">Beam reorders:</div>{ribbon_svg(window, None)}'
                   f'<div class="wk-sub">{ribbon_caption(window)}</div>' if window.events[0].attention.beam_sources else "")
                + '</details>')
        return f'<div class="wk-attn">{"".join(parts)}</div>'

    def player_html(self) -> str:
        words = self.record.words()
        spans = "".join(
            f'<span class="wk-word" data-t0="{w.start:.2f}" data-t1="{w.end:.2f}" '
            f'title="{w.start:.2f}–{w.end:.2f} s">{html.escape(w.text)}</span>' for w in words)
        player = ""
        if self.duration <= PLAYER_MAX_SECONDS:
            player = f'<audio class="wk-play" controls preload="auto" src="{self.wav_data_url()}"></audio>'
        else:
            player = '<div class="wk-sub">(audio over 5 min: play it in the Audio box)</div>'
        return (f'{player}{self.waveform_svg(None, playhead=True)}'
                f'<div class="wk-words">{spans or "(no words)"}</div>')

    def wav_data_url(self) -> str:
        import soundfile

        buffer = io.BytesIO()
        soundfile.write(buffer, self.samples, 16000, format="WAV", subtype="PCM_16")
        return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")

    def map_svg(self, window: WindowRecord, layer: Optional[int]) -> str:
        """Steps (rows, the token each chose) by positions (columns, the cached tokens)."""
        matrix = window.self_map(layer)
        positions = list(window.positions())
        chosen = [e.token_id for e in window.events]
        labels = self.labels(positions + chosen)
        columns = [_short(labels[t], _previous(labels, positions, j)) for j, t in enumerate(positions)]
        rows_text = [_short(labels[t], _previous(labels, chosen, i)) for i, t in enumerate(chosen)]
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
                           f'fill="{_blue(row[j] / peak)}"><title>step {window.events[i].step + 1} '
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

    def cross_img(self, window: WindowRecord) -> str:
        png = cross_png(window)
        return f'<img class="wk-cross" alt="cross-attention map" src="data:image/png;base64,{base64.b64encode(png).decode()}"/>'

    def files(self, folder: Optional[Path] = None) -> List[str]:
        """The maps as PNG (one per window) and the numbers as JSON, written to a new folder."""
        folder = Path(folder or tempfile.mkdtemp(prefix="whisper-kv-attention-"))
        paths = []
        layer = _layer(self.layer, self.n_layers)
        for window in self.record.windows:
            path = folder / f"attention_window{window.index + 1}.png"
            path.write_bytes(maps_png(window, self.labels(window.positions()), layer))
            paths.append(str(path))
        ids = [t for e in self.record.events for t in (*e.attention.positions, e.token_id)]
        path = folder / "attention.json"
        path.write_text(self.record.to_json(self.labels(ids)))
        paths.append(str(path))
        return paths


def _window_note(event: TokenEvent) -> str:
    if event.n_windows <= 1:
        return "."
    return f" (window {event.window + 1} of {event.n_windows})."


def _section(title: str, body: str, caption: str) -> str:
    return (f'<div class="wk-attn-sec"><div class="wk-label">{html.escape(title)}</div>{body}'
            f'<div class="wk-sub">{html.escape(caption)}</div></div>')


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
    rows = [labels.get(e.token_id) or _short(e.text) for e in window.events]
    size = max(6.0, min(40.0, 0.16 * max(smap.shape)))
    fig, (a, b) = plt.subplots(2, 1, figsize=(size, size * 1.6),
                               gridspec_kw={"height_ratios": [smap.shape[0] / max(smap.shape[1], 1) + 0.2, 0.6]})
    a.imshow(smap, cmap="Blues", aspect="auto", interpolation="nearest")
    a.set_xticks(range(len(positions)), [_short(labels.get(t, str(t))) for t in positions], rotation=90, fontsize=6)
    a.set_yticks(range(len(rows)), [_short(r) for r in rows], fontsize=6)
    a.set_title(f"window {window.index + 1}: self-attention of each step over the cache "
                f"({'mean over layers' if layer is None else f'layer {layer + 1}'}, mean over heads)")
    b.imshow(cmap, cmap="Blues", aspect="auto", interpolation="nearest",
             extent=(window.start, window.start + cmap.shape[1] * TIMESTAMP_SECONDS, len(cmap), 0))
    b.set_xlabel("audio (s)")
    b.set_ylabel("step")
    b.set_title("cross-attention of the alignment heads")
    return _figure_png(fig)


def compare_note(cached: AttentionRecord, uncached: AttentionRecord) -> str:
    """The cached run against the uncached one, which recomputed every weight from scratch."""
    pairs = list(zip(cached.events, uncached.events))
    if not pairs or len(cached.events) != len(uncached.events):
        return "The uncached run took other steps: its weights cannot be compared step by step."
    diff = max(float(np.abs(a.attention.self_weights - b.attention.self_weights).max()) for a, b in pairs
               if a.attention.self_weights.shape == b.attention.self_weights.shape)
    return (f"The uncached run recomputed these weights from scratch at every step: largest "
            f"difference {diff:.1e} over {len(pairs)} steps.")


ATTENTION_CSS = """
.wk-attn { font-size:.85rem; }
.wk-attn-head { margin:.2rem 0 .4rem; }
.wk-attn-sec { margin:.4rem 0 .6rem; }
.wk-chips { display:flex; flex-wrap:wrap; gap:2px; margin:.25rem 0; }
.wk-chip { display:inline-flex; flex-direction:column; align-items:stretch; }
.wk-tok { font-family:var(--font-mono); font-size:.78rem; padding:1px 3px; border-radius:3px;
          border:1px solid var(--border-color-primary); white-space:pre; }
.wk-lay { height:3px; margin-top:1px; border-radius:1px; }
.wk-wave { display:block; background:var(--background-fill-secondary); border-radius:6px; }
.wk-words { line-height:1.9; margin-top:.3rem; }
.wk-word { cursor:pointer; padding:1px 2px; border-radius:3px; }
.wk-word:hover { background:#dbeafe; }
.wk-word.wk-now { background:#2563eb; color:#fff; }
.wk-play { width:100%; margin:.2rem 0; }
.wk-map summary { cursor:pointer; font-weight:600; margin:.3rem 0; }
.wk-map-scroll { overflow:auto; max-height:720px; border:1px solid var(--border-color-primary); border-radius:6px; }
.wk-map-svg text { fill:var(--body-text-color); font-family:var(--font-mono); }
.wk-cross { max-width:100%; }
"""
