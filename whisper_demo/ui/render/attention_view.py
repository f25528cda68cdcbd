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

Pure HTML/SVG strings; the maps are drawn by attention_maps.py, the audio strip by
attention_wave.py, the beam ribbon by beam_ribbon.py, token texts by plain_tokens.py, and the page's wiring is in
transcribe/layout.py. Every number drawn comes from a TokenEvent or the DecodeResult
(whisper_demo/attention.py gathers them).
"""

from __future__ import annotations

import base64
import html
import io
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...attention import AttentionRecord, WindowRecord, token_labels
from ...events import DecodeResult, TokenEvent
from .attention_maps import cross_png, map_svg, maps_png, weight_color
from .attention_wave import envelope, waveform_svg
from .beam_ribbon import ribbon_caption, ribbon_svg
from .plain_tokens import plain_token, previous_label

PLAYER_MAX_SECONDS = 300  # the player embeds the audio in the page (32 kB/s as base64 WAV)

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

    def window_labels(self, window: WindowRecord) -> Dict[int, str]:
        """Texts of a window's cached positions and of the tokens its steps chose."""
        return self.labels(list(window.positions()) + [e.token_id for e in window.events])

    # --- while tokens stream ---------------------------------------------------------------

    def live_html(self, event: TokenEvent) -> str:
        att = event.attention
        if att is None:
            return ""
        labels = self.labels(list(att.positions) + [event.token_id])
        window = self.record.windows[-1] if self.record.windows else None
        parts = [
            f'<div class="wk-attn-head">Step {event.step + 1}: the decoder chose '
            f'<b>{html.escape(repr(plain_token(labels[event.token_id], labels[att.positions[-1]] if len(att.positions) else None)))}</b> after reading '
            f'{len(att.positions)} cached positions and the audio around '
            f'{att.audio_time:.2f} s{_window_note(event)}{HOW.get(event.cache_mode, "")}</div>',
            _section("Self-attention over the cache",
                     self.chips(att.self_weights, att.positions, labels),
                     "one chip per cached position; darker = more weight from the newest token's query "
                     "(colour: square root of the share of the row's peak; hover for the weights)"),
            _section("Cross-attention over the audio", waveform_svg(self.wave, self.duration, window, event),
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
                rows = "".join(f'<span class="wk-lay" style="background:{weight_color(weights[i, p] / peaks[i])}"></span>'
                               for i in range(len(weights)))
            color = "#fff" if alpha > 0.3 else "inherit"
            chips.append(f'<span class="wk-chip" title="{html.escape(title)}">'
                         f'<span class="wk-tok" style="background:{weight_color(alpha)};color:{color}">'
                         f'{html.escape(plain_token(labels[token], previous_label(labels, positions, p)))}</span>'
                         f'{rows}</span>')
        return f'<div class="wk-chips">{"".join(chips)}</div>'

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
                f'{map_svg(window, layer, self.window_labels(window))}'
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
        return (f'{player}{waveform_svg(self.wave, self.duration, None, playhead=True)}'
                f'<div class="wk-words">{spans or "(no words)"}</div>')

    def wav_data_url(self) -> str:
        import soundfile

        buffer = io.BytesIO()
        soundfile.write(buffer, self.samples, 16000, format="WAV", subtype="PCM_16")
        return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")

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
