"""The file / recorded-clip view: drop or record audio, watch tokens and the cache arrive.

Everything a user can do here is a handler on `TranscribeTab`, each a plain Python
callable that tests can call directly:

    transcribe(audio, cache_on, mode, beam, language, timestamps, model_name, previous,
               attention, layer, seed, words)
        -> generator of (transcript, panel_html, chart_html, compare_html, previous,
                         attention_html, attention_files, transcript_files)
    compare(...same inputs...) -> the same outputs, for cache on then cache off
    transcribe_api(audio, cache_on, mode, beam, language, timestamps, model_name, seed,
                   word_timestamps)
        -> (text, segments, language, figures): the /transcribe API
    compare_api(...the same inputs...) -> (text, cached figures, uncached figures,
                                           identical tokens): the /compare API
    models.load_model(...) -> switch the model (model_switch.py)
    stopped() -> panel note after Stop

The tab's layout and its events are in layout.py; the page's events run the handlers
through `page_event` (a refusal is one warning, the page left as it was).

The decode itself is whisper_demo.decode.stream_transcribe; this module only turns its
events into page updates (throttled: see Throttle) and its failures into readable messages.

Scripts call the API endpoint /transcribe (it waits in the same queue as the page's
users) and read named outputs, plain JSON:

    from gradio_client import Client, handle_file
    client = Client("http://127.0.0.1:7860/")
    text, segments, language, figures = client.predict(
        handle_file("talk.wav"), True, "static", 1, "auto", True, "tiny.en", api_name="/transcribe")
    # inputs: audio, cache on, mode (static|hooks|off), beam, language, timestamps, model,
    # and optionally the seed of a fallback window's draws (the server's --seed by
    # default; -1: random) and word timestamps (True: each segment's "words" with times);
    # segments: [{"start", "end", "text", "words"?}] in seconds; figures: the run's
    # numbers ("decoder_steps", "step_ms", "peak_self_cache_bytes", ...).
    # Bad audio raises gradio_client's AppError with the same message the page shows.
"""

from __future__ import annotations

import functools
import html
import logging
import re
from pathlib import Path
from typing import Generator, Optional, Tuple

import gradio as gr

from ...audio import SAMPLE_RATE, AudioError, describe, load_audio
from ...decode import stream_transcribe
from ...events import DecodeOptions, DecodeResult, TokenEvent
from ...limits import LimitExceeded, check_decode_budget
from ...batched import DEFAULT_BATCH_SIZE
from ...options import decode_options, effective_mode
from ...transcript_files import api_segments, figures, transcribe_result, write_transcript
from ..render import attention_view, panel, run_chart
from ..render.compare_summary import compare_html
from ..render.latency_chart import chart_colors, series_label
from .model_switch import ModelSwitch, ModelUnavailable
from ..render.run_stats import RunStats
from .running_decodes import RunningDecodes
from ..session_files import run_folder
from ..store import Defaults, ModelStore
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
            # the page shows messages as HTML: a file's name is text
            raise gr.Error(html.escape(audio_problem(exc), quote=False), title="Can't use this audio") from exc

    def _check_budget(self, samples, beam_size: int, runs: int = 1) -> None:
        """Refuse, before it takes a decode slot for minutes, a decode over the server's
        budget of audio seconds x beams (limits.py)."""
        try:
            check_decode_budget(len(samples) / SAMPLE_RATE, beam_size, runs,
                                self.defaults.limits.decode_budget)
        except LimitExceeded as exc:
            raise gr.Error(str(exc), title="Too large for this server") from exc

    def _options(self, model, cache_on, mode, beam, language, timestamps,
                 attention=False, seed=None, words=None, batched=None) -> DecodeOptions:
        """The page's choices over the command line's options (options.decode_options).
        seed, words (word timestamps), batched (long files in batches) None: not given,
        the command line's."""
        chosen = {} if seed is None else {"seed": seed}
        if words is not None:
            chosen["word_timestamps"] = bool(words)
        if batched is not None:
            # on: the command line's --batch-size where it gave one, else faster-whisper's 8
            base = self.defaults.options.batch_size
            chosen["batch_size"] = (base if base > 1 else DEFAULT_BATCH_SIZE) if batched else 0
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

    def _decoding(self, model, samples, options, stats: RunStats, request=None,
                  ) -> Generator[TokenEvent, None, Optional[DecodeResult]]:
        """One decode: yields its TokenEvents (each added to `stats`), returns its
        DecodeResult. Closing it (Stop, a closed tab, an error) closes the decoder: its
        cache is freed and, in hooks mode, its hooks leave the shared model."""
        result: Optional[DecodeResult] = None
        finished = self.running.started(request)
        stream = stream_transcribe(model, samples, options)
        try:
            for item in stream:
                if isinstance(item, TokenEvent):
                    stats.add(item)
                    yield item
                else:
                    result = item
        except GeneratorExit:
            raise
        except Exception as exc:
            log.exception("decode failed")
            raise gr.Error(f"Decoding failed: {type(exc).__name__}: {exc}", title="Decoding failed") from exc
        finally:
            stream.close()
            self.running.closed(request, finished)
            _log_end(model, options, samples, stats, result)
        return result

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
        # the last run's transcript files go: they are not this transcript's
        yield (transcript_prefix, panel.panel_html(None, model, status=f"encoding {describe(samples)}…"),
               self._chart(chart_series, previous, stats.windows), compare_value, gr.skip(),
               waiting, gr.update(value=None, visible=False), gr.update(value=None, visible=False))
        events = self._decoding(model, samples, options, stats, request)
        try:
            while True:
                try:
                    item = next(events)
                except StopIteration as stop:
                    result = stop.value
                    break
                if view is not None:
                    view.add(item)
                if throttle.due():
                    yield (transcript_prefix + item.transcript,
                           panel.panel_html(item, model, latencies_ms=stats.latencies_ms,
                                            windows=stats.windows),
                           self._chart(chart_series, previous, stats.windows), compare_value,
                           gr.skip(),
                           view.live_html(item) if view is not None else gr.skip(), gr.skip(), gr.skip())
        finally:
            events.close()
        if result is None:
            raise gr.Error("Decoding failed: the decoder ended without a result", title="Decoding failed")
        if view is not None:
            view.finish(result)
        return result, stats

    # --- handlers -----------------------------------------------------------------------

    def transcribe(self, audio, cache_on=True, mode="static", beam=1, language="auto",
                   timestamps=True, model_name=None, previous=None, attention=False, layer="all",
                   seed=None, words=None, batched=None, progress=gr.Progress(track_tqdm=True),
                   request: gr.Request = None):
        """attention: the "Inside the cache" view is open, so this run computes its
        attention weights (explicitly, at a cost) and the view draws them; layer: the
        view's layer choice (attention_view.layer_choices); seed: Advanced's (a number,
        options.RANDOM_SEED for random; None: the command line's); words: word timestamps
        (None: the command line's), which make the subtitles word-level; batched: "Long
        files in batches" (batched.py; used for files over 30 s)."""
        model = self._model(model_name, progress)
        samples = self._audio(audio)
        options = self._options(model, cache_on, mode, beam, language, timestamps, attention, seed, words,
                                batched)
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
               *_final_view(view, request=request), _transcript_files(result, audio, request))

    def compare(self, audio, cache_on=True, mode="static", beam=1, language="auto",
                timestamps=True, model_name=None, previous=None, attention=False, layer="all",
                seed=None, words=None, batched=None, progress=gr.Progress(track_tqdm=True),
                request: gr.Request = None):
        """The same audio twice: with the chosen cache (static if the switch is off), then
        without. Both curves on one chart, both totals, the speedup, identical-tokens badge.
        The panel ends on the run whose mode the KV cache box shows (the cached run when it
        is ticked), so the two agree. With the attention view open, it shows the cached run
        and how far the uncached run's recomputed weights are from it."""
        model = self._model(model_name, progress)
        samples = self._audio(audio)
        # seeded alike: a window that falls back draws from the same seed in both runs
        on = self._options(model, True, mode, beam, language, timestamps, attention, seed, words, batched)
        off = self._options(model, False, mode, beam, language, timestamps, attention, seed, words, batched)
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
        cached_box = effective_mode(bool(cache_on), mode) != "off"
        shown, shown_stats = (r_on, s_on) if cached_box else (r_off, s_off)
        final_panel = panel.panel_html(shown, model, last_event=shown_stats.last_event,
                                       wall_seconds=shown_stats.wall_seconds, windows=shown_stats.windows,
                                       status="compare done (panel: the "
                                              f"{'cached' if cached_box else 'uncached'} run)")
        note = attention_view.compare_note(views[0].record, views[1].record) if views[0] else ""
        yield (r_on.text, final_panel, self._chart(series, None, s_on.windows), compare_html(r_on, r_off),
               (series_label(r_on.cache_mode, r_on.beam_size), list(r_on.latencies_ms)),
               *_final_view(views[0], note, request), _transcript_files(r_on, audio, request))

    def transcribe_api(self, audio, cache_on=True, mode="static", beam=1, language="auto",
                       timestamps=True, model_name=None, seed=None, word_timestamps=False,
                       request: gr.Request = None):
        """The /transcribe API: one decode, waited for, as (text, segments, language,
        figures): segments are [{start, end, text, words?}] (seconds; words with word
        timestamps), figures the run's numbers (transcript_files.figures). Refusals raise
        gr.Error with the page's messages."""
        model = self._model(model_name)
        samples = self._audio(audio)
        options = self._options(model, cache_on, mode, beam, language, timestamps, False, seed, word_timestamps)
        self._check_budget(samples, options.beam_size)
        events = self._decoding(model, samples, options, RunStats(), request)
        try:
            result = _drained(events)
        finally:
            events.close()
        if result is None:
            raise gr.Error("Decoding failed: the decoder ended without a result", title="Decoding failed")
        return result.text, api_segments(transcribe_result(result)), result.language, figures(result)

    def compare_api(self, audio, cache_on=True, mode="static", beam=1, language="auto",
                    timestamps=True, model_name=None, seed=None, word_timestamps=False,
                    request: gr.Request = None):
        """The /compare API: the audio with the cache (the chosen mode; static if the box
        is off), then without, as (text, cached figures, uncached figures, identical tokens)."""
        model = self._model(model_name)
        samples = self._audio(audio)
        runs = [self._options(model, on, mode, beam, language, timestamps, False, seed, word_timestamps)
                for on in (True, False)]
        self._check_budget(samples, runs[0].beam_size, runs=2)
        results = []
        for options in runs:
            events = self._decoding(model, samples, options, RunStats(), request)
            try:
                results.append(_drained(events))
            finally:
                events.close()
            if results[-1] is None:
                raise gr.Error("Decoding failed: the decoder ended without a result", title="Decoding failed")
        cached, uncached = results
        return cached.text, figures(cached), figures(uncached), cached.tokens == uncached.tokens

    def stopped(self, panel_html: str, request: gr.Request = None) -> str:
        """After Stop: the panel keeps the last numbers it showed and says the run stopped.
        Waits (up to 10 s) until this session's decodes have closed, so that no update of
        the cancelled run can arrive after this one."""
        self.running.wait_closed(request, timeout=10)
        return panel.with_status(panel_html, "stopped: decode cancelled, cache freed")


def _drained(generator):
    """Run a generator to its end; its return value."""
    while True:
        try:
            next(generator)
        except StopIteration as stop:
            return stop.value


# openai-whisper-free wording of audio.py's "could not read '<path>' as audio: <what it
# looks like> (libsndfile: ...; ffmpeg: ...)"
_UNREADABLE = re.compile(r"could not read '(?P<path>.+?)' as audio: (?P<looks>.*?)"
                         r"(?: \((?:libsndfile|ffmpeg):.*)?$", re.S)


def audio_problem(exc: Exception) -> str:
    """The page's message for audio it cannot use (an AudioError): short, naming the file
    by its name rather than the server's temporary path, without the decoders' own errors
    (the server's log has those)."""
    message = str(exc)
    unreadable = _UNREADABLE.match(message)
    if unreadable:
        name, looks = Path(unreadable["path"]).name, unreadable["looks"]
        starts = re.search(r"starts like (.+?) but is damaged or cut short", looks)
        if starts:
            return f"That audio file is damaged or cut short: {name} (it starts like {starts[1]})"
        kind = re.search(r"looks like (.+?), not audio", looks)
        return f"That file is not audio: {name}" + (f" (it looks like {kind[1]})" if kind else "")
    # any other message: a quoted server path becomes the file's name
    return re.sub(r"'(/[^']+)'", lambda m: f"'{Path(m[1]).name}'", message)


def page_event(handler, n_outputs: int):
    """`handler` as the page's events run it: a refusal before the run starts (audio it
    cannot use, a model that cannot load, options or a size refused) is one warning with
    the handler's message, and the page stays as it was (every output skipped), where a
    raised gr.Error would also mark each output with an "Error" pill. Errors during a
    decode are raised as they are. Scripts (the /transcribe API) get the gr.Error."""

    @functools.wraps(handler)  # Gradio reads the handler's parameters (Progress, Request)
    def run(*args, **kwargs):
        stream = handler(*args, **kwargs)
        try:
            try:
                first = next(stream)
            except StopIteration:
                return
            except gr.Error as exc:
                log.info("refused before decoding: %s", exc.message)
                gr.Warning(exc.message, title=exc.title)
                yield (gr.skip(),) * n_outputs
                return
            yield first
            yield from stream
        finally:
            stream.close()

    return run


def _transcript_files(result: DecodeResult, audio, request=None):
    """The transcript as SRT, VTT, TXT and JSON (transcript_files.py) in the session's
    folder, named after the audio; the downloads box shows them (skipped without a
    session: a direct call)."""
    folder = run_folder(getattr(request, "session_hash", None), "transcript")
    if folder is None or not result.text.strip():
        return gr.update(value=None, visible=False) if folder is not None else gr.skip()
    stem = Path(audio).stem if isinstance(audio, (str, Path)) else "recording"
    name = re.sub(r"[^\w-]+", "_", stem).strip("_")[:60] or "transcript"
    paths = write_transcript(transcribe_result(result), folder, name)
    return gr.update(value=[str(p) for p in paths.values()], visible=True)


def _final_view(view: Optional["attention_view.AttentionView"], note: str = "", request=None) -> tuple:
    """(attention HTML, downloads) for a finished run; skips when the view was closed.
    The downloads go to one folder per browser session, replaced by its next run (Gradio
    serves its own copies), so a long-running server does not pile them up."""
    if view is None:
        return gr.skip(), gr.skip()
    folder = run_folder(getattr(request, "session_hash", None), "attention")  # removed when the tab closes
    # the downloads box appears with its files (an empty one would be a bare 200 px box)
    return view.final_html(note), gr.update(value=view.files(folder), visible=True)


def _log_end(model, options: DecodeOptions, samples, stats: RunStats,
             result: Optional[DecodeResult]) -> None:
    """One server log line per decode: what ran, and for one that did not finish (Stop,
    the page closed, an error), that its cache is gone and how many hooks remain."""
    from ...cache import hook_count

    what = f"{describe(samples)} · {options.cache} · beam {options.beam_size}"
    tokens = len(stats.latencies_ms)
    if result is not None:
        log.info("decode done: %s · %d tokens in %.1f s", what, tokens, stats.wall_seconds)
    else:
        log.info("decode stopped after %d tokens (Stop, page closed or error): %s · cache "
                 "released · forward hooks on the model now: %d", tokens, what, hook_count(model))
