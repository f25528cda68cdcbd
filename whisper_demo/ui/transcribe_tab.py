"""The file / recorded-clip view: drop or record audio, watch tokens and the cache arrive.

Everything a user can do here is a handler on `TranscribeTab`, each a plain Python
callable that tests can call directly:

    transcribe(audio, cache_on, mode, beam, language, timestamps, model_name, previous,
               attention, layer, seed)
        -> generator of (transcript, panel_html, chart_html, compare_html, previous,
                         attention_html, attention_files)
    compare(...same inputs...) -> the same outputs, for cache on then cache off
    models.load_model(...) -> switch the model (model_switch.py)
    stopped() -> panel note after Stop

The tab's layout and its events are in transcribe_layout.py.

The decode itself is whisper_demo.decode.stream_transcribe; this module only turns its
events into page updates (throttled: see Throttle) and its failures into readable messages.

Scripts can call the same handlers through Gradio's API (named endpoints /transcribe and
/compare; they wait in the same queue as the page's users):

    from gradio_client import Client, handle_file
    client = Client("http://127.0.0.1:7860/")
    text, panel_html, *_ = client.predict(handle_file("talk.wav"), True, "static", 1, "auto",
                                          True, "tiny.en", api_name="/transcribe")
    # inputs: audio, cache on, mode (static|hooks|off), beam, language, timestamps, model,
    # and optionally attention (True: the "Inside the cache" view), its layer ("all") and
    # the seed of a fallback window's draws (default: the server's --seed, 0; -1: random);
    # panel_html holds the run's numbers ("N decoder steps", cache bytes, latencies); with
    # attention the outputs end with the view's HTML and its downloads (PNG maps, JSON).
    # Bad audio raises gradio_client's AppError with the same message the page shows.
"""

from __future__ import annotations

import html
import logging
import shutil
from typing import Generator, Optional, Tuple

import gradio as gr

from ..audio import SAMPLE_RATE, AudioError, describe, load_audio
from ..decode import stream_transcribe
from ..events import DecodeOptions, DecodeResult, TokenEvent
from ..limits import LimitExceeded, check_decode_budget
from ..options import decode_options
from . import attention_view, panel, run_chart
from .compare_summary import compare_html
from .latency_chart import chart_colors, series_label
from .model_switch import ModelSwitch, ModelUnavailable
from .run_stats import RunStats
from .running_decodes import RunningDecodes
from .session_files import attention_folder
from .store import Defaults, ModelStore
from .throttle import Throttle

log = logging.getLogger(__name__)

PREVIOUS_COLOR = "#94a3b8"  # the last run, drawn in grey behind the current one
# What the chart draws (run_chart.py), in the order a reader meets it
CHART_CAPTION = (
    "Each point is one decoder step; the dashed line is each run's median step. With the "
    "cache a step runs one new token against what is kept, so the line stays near its median "
    "(the first step, and the first of each 30 s window, also fills the cache; a busy machine "
    "can make single steps spike). Without it, every step turns the audio into "
    "cross-attention keys and values again and reruns every token so far, so the line starts "
    "higher and climbs.")


class TranscribeTab:
    """Handlers of the Transcribe tab, bound to the shared store and the app's defaults."""

    def __init__(self, store: ModelStore, defaults: Defaults):
        self.store = store
        self.defaults = defaults
        self.models = ModelSwitch(store, defaults)
        # Stop waits on these so that its "stopped" panel is the last update the page receives
        self.running = RunningDecodes()
        # set when laid out: the model dropdown and its switch event, which the Live tab follows
        self.model_dd = None
        self.model_switch = None

    # --- helpers ------------------------------------------------------------------------

    def _model(self, name: Optional[str], progress=None):
        try:
            return self.models.load_or_refuse(name or self.defaults.model, progress)
        except ModelUnavailable as exc:
            raise gr.Error(html.escape(str(exc)), title="Model unavailable") from exc

    def _audio(self, audio):
        try:
            return load_audio(audio, self.defaults.max_audio_seconds)
        except AudioError as exc:
            raise gr.Error(str(exc), title="Can't use this audio") from exc

    def _check_budget(self, samples, beam_size: int, runs: int = 1) -> None:
        """Refuse, before it takes a decode slot for minutes, a decode over the server's
        budget of audio seconds x beams (limits.py)."""
        try:
            check_decode_budget(len(samples) / SAMPLE_RATE, beam_size, runs,
                                self.defaults.limits.decode_budget)
        except LimitExceeded as exc:
            raise gr.Error(str(exc), title="Too large for this server") from exc

    def _options(self, model, cache_on, mode, beam, language, timestamps,
                 attention=False, seed=None) -> DecodeOptions:
        """The page's choices over the command line's options (options.decode_options).
        seed None: not given, the command line's."""
        chosen = {} if seed is None else {"seed": seed}
        try:
            return decode_options(self.defaults.options, cache_on=cache_on, mode=mode, beam_size=beam,
                                  language=language, timestamps=bool(timestamps),
                                  multilingual=model.is_multilingual, attention=bool(attention), **chosen)
        except ValueError as exc:  # a combination DecodeOptions refuses
            raise gr.Error(str(exc), title="Options not possible") from exc

    @staticmethod
    def _chart(series: dict, previous, windows=()) -> str:
        """The chart's HTML (run_chart.py): the previous run in grey, then this run's
        series in their colours. windows: the current run's RunStats.windows; each window
        after the first is marked at its first step."""
        lines = []
        if previous:
            lines.append(run_chart.Line(previous[0], previous[1], PREVIOUS_COLOR))
        colors = chart_colors()
        lines += [run_chart.Line(name, values, colors.get(name, PREVIOUS_COLOR))
                  for name, values in series.items() if len(values)]
        starts = {}
        for w in windows:  # a retried window (fallback) keeps the mark of its first attempt
            starts.setdefault(w.window, w.first_step)
        return run_chart.chart_html(lines, sorted(starts.values()), CHART_CAPTION)

    def _run(self, model, samples, options, label: str, chart_series: dict, previous,
             transcript_prefix: str = "", compare_value: str = "", request=None,
             view: Optional["attention_view.AttentionView"] = None,
             ) -> Generator[tuple, None, Tuple[DecodeResult, RunStats]]:
        """Stream one decode: yields page tuples, returns (DecodeResult, RunStats), so a
        handler writes `result, stats = yield from self._run(...)` (closing the handler
        closes this generator, and with it the decoder). view: the attention view, fed
        every event when the run asked for its attention."""
        stats = RunStats()
        throttle = Throttle()
        chart_series[label] = stats.latencies_ms  # the chart reads the live list
        waiting = ('<div class="wk-sub">Waiting for the first token…</div>' if view is not None
                   else "")
        yield (transcript_prefix, panel.panel_html(None, model, status=f"encoding {describe(samples)}…"),
               self._chart(chart_series, previous, stats.windows), compare_value, gr.skip(),
               waiting, gr.update(value=None, visible=False))
        result: Optional[DecodeResult] = None
        finished = self.running.started(request)
        stream = stream_transcribe(model, samples, options)
        try:
            for item in stream:
                if isinstance(item, TokenEvent):
                    stats.add(item)
                    if view is not None:
                        view.add(item)
                    if throttle.due():
                        yield (transcript_prefix + item.transcript,
                               panel.panel_html(item, model, latencies_ms=stats.latencies_ms,
                                                windows=stats.windows),
                               self._chart(chart_series, previous, stats.windows), compare_value,
                               gr.skip(),
                               view.live_html(item) if view is not None else gr.skip(), gr.skip())
                else:
                    result = item
                    if view is not None:
                        view.finish(result)
        except GeneratorExit:
            raise
        except Exception as exc:
            log.exception("decode failed")
            raise gr.Error(f"Decoding failed: {type(exc).__name__}: {exc}", title="Decoding failed") from exc
        finally:
            # Stop, a closed tab (Gradio closes this generator in both cases) or an error:
            # closing the decoder frees its cache and, in hooks mode, removes the hooks
            # from the shared model.
            stream.close()
            self.running.closed(request, finished)
            _log_end(model, options, samples, stats, result)
        return result, stats

    # --- handlers -----------------------------------------------------------------------

    def transcribe(self, audio, cache_on=True, mode="static", beam=1, language="auto",
                   timestamps=True, model_name=None, previous=None, attention=False, layer="all",
                   seed=None, progress=gr.Progress(track_tqdm=True), request: gr.Request = None):
        """attention: the "Inside the cache" view is open, so this run computes its
        attention weights (explicitly, at a cost) and the view draws them; layer: the
        view's layer choice (attention_view.layer_choices); seed: Advanced's (a number,
        options.RANDOM_SEED for random; None: the command line's)."""
        model = self._model(model_name, progress)
        samples = self._audio(audio)
        options = self._options(model, cache_on, mode, beam, language, timestamps, attention, seed)
        self._check_budget(samples, options.beam_size)
        label = series_label(options.cache, options.beam_size)
        prev = None
        if previous:
            prev = (f"previous: {previous[0]}", previous[1])
        series: dict = {}
        view = attention_view.AttentionView(model, samples, layer) if options.attention else None
        result, stats = yield from self._run(model, samples, options, label, series, prev, request=request,
                                             view=view)
        final_panel = panel.panel_html(result, model, last_event=stats.last_event,
                                       wall_seconds=stats.wall_seconds, windows=stats.windows)
        yield (result.text, final_panel, self._chart(series, prev, stats.windows), "",
               (label, list(result.latencies_ms)),
               *_final_view(view, request=request))

    def compare(self, audio, cache_on=True, mode="static", beam=1, language="auto",
                timestamps=True, model_name=None, previous=None, attention=False, layer="all",
                seed=None, progress=gr.Progress(track_tqdm=True), request: gr.Request = None):
        """The same audio twice: with the chosen cache (static if the switch is off), then
        without. Both curves on one chart, both totals, the speedup, identical-tokens badge.
        With the attention view open, it shows the cached run and how far the uncached
        run's recomputed weights are from it."""
        model = self._model(model_name, progress)
        samples = self._audio(audio)
        # seeded alike: a window that falls back draws from the same seed in both runs
        on = self._options(model, True, mode, beam, language, timestamps, attention, seed)
        off = self._options(model, False, mode, beam, language, timestamps, attention, seed)
        self._check_budget(samples, on.beam_size, runs=2)
        series: dict = {}
        results = []
        views = []
        waiting = '<div class="wk-sub">Comparing: run 1 of 2, with the cache…</div>'
        for i, options in enumerate((on, off)):
            label = series_label(options.cache, options.beam_size)
            note = waiting if i == 0 else '<div class="wk-sub">Comparing: run 2 of 2, without the cache…</div>'
            views.append(attention_view.AttentionView(model, samples, layer) if options.attention else None)
            results.append((yield from self._run(model, samples, options, label, series, None,
                                                 compare_value=note, request=request, view=views[-1])))
        (r_on, s_on), (r_off, s_off) = results
        final_panel = panel.panel_html(r_off, model, last_event=s_off.last_event,
                                       wall_seconds=s_off.wall_seconds, windows=s_off.windows,
                                       status="compare done (panel: the uncached run)")
        note = attention_view.compare_note(views[0].record, views[1].record) if views[0] else ""
        yield (r_on.text, final_panel, self._chart(series, None, s_on.windows), compare_html(r_on, r_off),
               (series_label(r_on.cache_mode, r_on.beam_size), list(r_on.latencies_ms)),
               *_final_view(views[0], note, request))

    def stopped(self, panel_html: str, request: gr.Request = None) -> str:
        """After Stop: the panel keeps the last numbers it showed and says the run stopped.
        Waits (up to 10 s) until this session's decodes have closed, so that no update of
        the cancelled run can arrive after this one."""
        self.running.wait_closed(request, timeout=10)
        return panel.with_status(panel_html, "stopped: decode cancelled, cache freed")


def _final_view(view: Optional["attention_view.AttentionView"], note: str = "", request=None) -> tuple:
    """(attention HTML, downloads) for a finished run; skips when the view was closed.
    The downloads go to one folder per browser session, replaced by its next run (Gradio
    serves its own copies), so a long-running server does not pile them up."""
    if view is None:
        return gr.skip(), gr.skip()
    folder = attention_folder(getattr(request, "session_hash", None))  # removed when the tab closes
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    # the downloads box appears with its files (an empty one would be a bare 200 px box)
    return view.final_html(note), gr.update(value=view.files(folder), visible=True)


def _log_end(model, options: DecodeOptions, samples, stats: RunStats,
             result: Optional[DecodeResult]) -> None:
    """One server log line per decode: what ran, and for one that did not finish (Stop,
    the page closed, an error), that its cache is gone and how many hooks remain."""
    from ..cache import hook_count

    what = f"{describe(samples)} · {options.cache} · beam {options.beam_size}"
    tokens = len(stats.latencies_ms)
    if result is not None:
        log.info("decode done: %s · %d tokens in %.1f s", what, tokens, stats.wall_seconds)
    else:
        log.info("decode stopped after %d tokens (Stop, page closed or error): %s · cache "
                 "released · forward hooks on the model now: %d", tokens, what, hook_count(model))
