"""The file / recorded-clip view: drop or record audio, watch tokens and the cache arrive.

Everything a user can do here is one of four handlers on `TranscribeTab`, each a plain
Python callable that tests can call directly:

    transcribe(audio, cache_on, mode, beam, language, timestamps, model_name, previous,
               attention, layer)
        -> generator of (transcript, panel_html, chart_html, compare_html, previous,
                         attention_html, attention_files)
    compare(...same inputs...) -> the same outputs, for cache on then cache off
    load_model(model_name, in_use, panel_html)
        -> (model status markdown, language dropdown update, model dropdown, model in use,
            idle panel); a model that cannot load leaves `in_use` selected
    stopped() -> panel note after Stop

The decode itself is whisper_demo.decode.stream_transcribe; this module only turns its
events into page updates (throttled: see Throttle) and its failures into readable messages.

Scripts can call the same handlers through Gradio's API (named endpoints /transcribe and
/compare; they wait in the same queue as the page's users):

    from gradio_client import Client, handle_file
    client = Client("http://127.0.0.1:7860/")
    text, panel_html, *_ = client.predict(handle_file("talk.wav"), True, "static", 1, "auto",
                                          True, "tiny.en", api_name="/transcribe")
    # inputs: audio, cache on, mode (static|hooks|off), beam, language, timestamps, model,
    # and optionally attention (True: the "Inside the cache" view) and its layer ("all");
    # panel_html holds the run's numbers ("N decoder steps", cache bytes, latencies); with
    # attention the outputs end with the view's HTML and its downloads (PNG maps, JSON).
    # Bad audio raises gradio_client's AppError with the same message the page shows.
"""

from __future__ import annotations

import html
import logging
import shutil
from typing import Generator, List, Optional, Tuple

import gradio as gr
from whisper.tokenizer import LANGUAGES

from ..audio import SAMPLE_RATE, AudioError, describe, load_audio
from ..decode import stream_transcribe
from ..examples import CLIPS, clip_path
from ..events import CACHE_MODES, DecodeOptions, DecodeResult, TokenEvent
from ..limits import LimitExceeded, check_decode_budget
from ..options import decode_options
from . import attention as attention_view
from . import panel, run_chart
from .controls import link_cache_controls
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


def example_paths() -> List[str]:
    """The clips shipped in whisper_demo/examples/ that are present."""
    return [str(clip_path(name)) for name in CLIPS if clip_path(name).is_file()]


def language_choices() -> List[Tuple[str, str]]:
    return [("auto-detect", "auto")] + sorted(
        ((f"{name.title()} ({code})", code) for code, name in LANGUAGES.items()), key=lambda c: c[0])


def model_choices() -> List[Tuple[str, str]]:
    """Dropdown entries from model_sources.list_models(): offline ones first, the rest marked."""
    try:
        from ..model_sources import list_models

        infos = list_models()
    except Exception as exc:  # a broken models module must not take the page down
        log.warning("list_models failed: %s", exc)
        return []
    from ..model_sources import can_download

    # a model this machine cannot download is said to be unusable before anyone picks it
    missing = "needs download" if can_download() else "unavailable offline (needs a download)"
    choices = []
    for info in infos:
        size = f"{info.n_params / 1e6:.0f} M params" if info.n_params else ""
        where = "offline" if info.available_offline else missing
        choices.append((f"{info.name} · {size} · {where}".replace(" ·  ·", " ·"), info.name))
    return choices


class ModelUnavailable(Exception):
    """A model the page cannot switch to; the message is for the person who picked it."""


def _is_idle(panel_html: Optional[str]) -> bool:
    """Whether the cache panel shows no run (so it describes the model, and can follow it)."""
    return not panel_html or "wk-empty" in panel_html


class TranscribeTab:
    """Handlers of the Transcribe tab, bound to the shared store and the app's defaults."""

    def __init__(self, store: ModelStore, defaults: Defaults):
        self.store = store
        self.defaults = defaults
        # Stop waits on these so that its "stopped" panel is the last update the page receives
        self.running = RunningDecodes()
        # set when laid out: the model dropdown and its switch event, which the Live tab follows
        self.model_dd = None
        self.model_switch = None

    # --- helpers ------------------------------------------------------------------------

    def _model(self, name: Optional[str], progress=None):
        try:
            return self._load_or_refuse(name or self.defaults.model, progress)
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
                 attention=False) -> DecodeOptions:
        """The page's choices over the command line's options (options.decode_options)."""
        try:
            return decode_options(self.defaults.options, cache_on=cache_on, mode=mode, beam_size=beam,
                                  language=language, timestamps=bool(timestamps),
                                  multilingual=model.is_multilingual, attention=bool(attention))
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
        colors = panel.chart_colors()
        lines += [run_chart.Line(name, values, colors.get(name, PREVIOUS_COLOR))
                  for name, values in series.items() if len(values)]
        starts = {}
        for w in windows:  # a retried window (fallback) keeps the mark of its first attempt
            starts.setdefault(w.window, w.first_step)
        return run_chart.chart_html(lines, sorted(starts.values()), CHART_CAPTION)

    def _run(self, model, samples, options, label: str, chart_series: dict, previous,
             transcript_prefix: str = "", compare_value: str = "", request=None,
             view: Optional["attention_view.AttentionView"] = None,
             ) -> Generator[tuple, None, Tuple[DecodeResult, "panel.RunStats"]]:
        """Stream one decode: yields page tuples, returns (DecodeResult, RunStats), so a
        handler writes `result, stats = yield from self._run(...)` (closing the handler
        closes this generator, and with it the decoder). view: the attention view, fed
        every event when the run asked for its attention."""
        stats = panel.RunStats()
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
                   progress=gr.Progress(track_tqdm=True), request: gr.Request = None):
        """attention: the "Inside the cache" view is open, so this run computes its
        attention weights (explicitly, at a cost) and the view draws them; layer: the
        view's layer choice (attention_view.layer_choices)."""
        model = self._model(model_name, progress)
        samples = self._audio(audio)
        options = self._options(model, cache_on, mode, beam, language, timestamps, attention)
        self._check_budget(samples, options.beam_size)
        label = panel.series_label(options.cache, options.beam_size)
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
                progress=gr.Progress(track_tqdm=True), request: gr.Request = None):
        """The same audio twice: with the chosen cache (static if the switch is off), then
        without. Both curves on one chart, both totals, the speedup, identical-tokens badge.
        With the attention view open, it shows the cached run and how far the uncached
        run's recomputed weights are from it."""
        model = self._model(model_name, progress)
        samples = self._audio(audio)
        on = self._options(model, True, mode, beam, language, timestamps, attention)
        off = self._options(model, False, mode, beam, language, timestamps, attention)
        self._check_budget(samples, on.beam_size, runs=2)
        series: dict = {}
        results = []
        views = []
        waiting = '<div class="wk-sub">Comparing: run 1 of 2, with the cache…</div>'
        for i, options in enumerate((on, off)):
            label = panel.series_label(options.cache, options.beam_size)
            note = waiting if i == 0 else '<div class="wk-sub">Comparing: run 2 of 2, without the cache…</div>'
            views.append(attention_view.AttentionView(model, samples, layer) if options.attention else None)
            results.append((yield from self._run(model, samples, options, label, series, None,
                                                 compare_value=note, request=request, view=views[-1])))
        (r_on, s_on), (r_off, s_off) = results
        final_panel = panel.panel_html(r_off, model, last_event=s_off.last_event,
                                       wall_seconds=s_off.wall_seconds, windows=s_off.windows,
                                       status="compare done (panel: the uncached run)")
        note = attention_view.compare_note(views[0].record, views[1].record) if views[0] else ""
        yield (r_on.text, final_panel, self._chart(series, None, s_on.windows), panel.compare_html(r_on, r_off),
               (panel.series_label(r_on.cache_mode, r_on.beam_size), list(r_on.latencies_ms)),
               *_final_view(views[0], note, request))

    def load_model(self, model_name, in_use=None, panel_html="", progress=gr.Progress(track_tqdm=True)):
        """Switch to `model_name`: (header status, language, model dropdown, model in use,
        idle panel). A model that cannot load leaves `in_use` selected and working, with one
        message that says why and which models work offline (a toast, as plain text: the
        message quotes errors such as "<urlopen error ...>" that would read as HTML)."""
        name = model_name or self.defaults.model
        in_use = in_use or self.defaults.model
        try:
            model = self._load_or_refuse(name, progress)
        except ModelUnavailable as exc:
            gr.Warning(html.escape(str(exc)), title="Model unavailable", duration=None)
            return gr.skip(), gr.skip(), gr.update(value=in_use), in_use, gr.skip()
        idle_panel = panel.panel_html(None, model) if _is_idle(panel_html) else gr.skip()
        return self.model_status(name), self.language_update(model), gr.skip(), name, idle_panel

    def _load_or_refuse(self, name: str, progress=None):
        """The model, loaded once; ModelUnavailable when it needs a download this machine
        cannot make (said without trying) or when loading fails."""
        from ..model_sources import can_download, list_models

        if self.store.is_loaded(name):
            return self.store.get(name)
        infos = {info.name: info for info in list_models()}
        offline = ", ".join(n for n, info in infos.items() if info.available_offline)
        info = infos.get(name)
        if info is not None and not info.available_offline and not can_download():
            raise ModelUnavailable(f"{name} needs a download from OpenAI, and this machine cannot "
                                   f"reach it. Models available offline: {offline}.")
        if progress is not None and not self.store.is_loaded(name):
            progress(0, desc=f"Loading {name} (once; then shared by every session)…")
        try:
            return self.store.get(name)
        except Exception as exc:  # ModelError, or a download that failed
            log.warning("model %s failed to load: %s", name, exc)
            message = str(exc)
            if "available offline" not in message:
                message += f" Models available offline: {offline}."
            raise ModelUnavailable(f"{name} could not be loaded: {message}") from exc

    def model_status(self, name: Optional[str] = None) -> str:
        from ..models import model_label

        entry = self.store.get_entry(name or self.defaults.model)
        model = entry.model
        loaded = f" · loaded in {entry.load_seconds:.1f} s" if entry.load_seconds else ""
        kind = "multilingual" if model.is_multilingual else "English-only"
        return f"**{model_label(model)}** · {kind} · {model.device}{loaded}"

    def stopped(self, panel_html: str, request: gr.Request = None) -> str:
        """After Stop: the panel keeps the last numbers it showed and says the run stopped.
        Waits (up to 10 s) until this session's decodes have closed, so that no update of
        the cancelled run can arrive after this one."""
        self.running.wait_closed(request, timeout=10)
        return panel.with_status(panel_html, "stopped: decode cancelled, cache freed")

    @staticmethod
    def language_update(model):
        if model.is_multilingual:
            return gr.update(interactive=True, info="for multilingual models; auto-detect by default")
        return gr.update(value="auto", interactive=False, info="this model is English-only")


def build_transcribe_tab(store: ModelStore, defaults: Defaults, model_status=None) -> TranscribeTab:
    """Lay out the tab inside the current gr.Blocks context and wire its events.

    model_status: a gr.Markdown (the page header's model line) to update on model switch."""
    tab = TranscribeTab(store, defaults)
    default_model = store.get(defaults.model) if store.is_loaded(defaults.model) else None
    opts = defaults.options
    previous = gr.State(None)

    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=340):
            audio = gr.Audio(
                sources=["upload", "microphone"], type="filepath", elem_id="audio_in",
                label="Audio", show_label=True,
            )
            cache_on = gr.Checkbox(value=opts.cache != "off", label="KV cache", elem_id="kv_toggle",
                                   info="untick: every token recomputes all the tokens before it")
            attention_on = gr.Checkbox(value=False, label="Inside the cache: what each new token reads",
                                       elem_id="attn_toggle",
                                       info="attention over the cache and the audio, drawn as tokens "
                                            "stream; computed only while this is ticked (slower)")
            with gr.Row():
                run_btn = gr.Button("Transcribe", variant="primary", elem_id="run_btn", scale=2, min_width=90)
                compare_btn = gr.Button("Compare", elem_id="compare_btn", scale=2, min_width=90)
                stop_btn = gr.Button("Stop", variant="stop", elem_id="stop_btn", scale=1, min_width=60)
            gr.Markdown("**Compare** decodes the clip with the cache, then without, and draws both "
                        "curves. **Stop** cancels a run; its cache is freed.", elem_classes=["wk-hint"])
            with gr.Accordion("Advanced", open=False, elem_id="advanced"):
                model_dd = gr.Dropdown(choices=defaults.offered_models(model_choices()) or [defaults.model], value=defaults.model,
                                       label="Model", elem_id="model_dd",
                                       info="loaded once, then shared by every session")
                mode = gr.Radio(list(CACHE_MODES),
                                value=opts.cache, label="Cache mode", elem_id="cache_mode",
                                info="static: room for every token set aside once, written in place · "
                                     "hooks: openai-whisper's, copied whole to grow each step · off: no cache")
                beam = gr.Slider(1, 5, value=opts.beam_size, step=1, label="Beam size",
                                 info="1 = greedy; beams share one cross-attention cache")
                multilingual = bool(default_model is not None and default_model.is_multilingual)
                language = gr.Dropdown(language_choices(), value="auto", label="Language",
                                       interactive=multilingual,
                                       info="for multilingual models" if multilingual
                                       else "this model is English-only")
                timestamps = gr.Checkbox(value=opts.timestamps, label="Timestamps",
                                         info="timestamp tokens; needed to seek through audio over 30 s")
            examples = example_paths()
            if examples:
                ex = gr.Examples([[p] for p in examples], inputs=[audio], label="Examples (click to transcribe)")
            else:
                ex = None
        with gr.Column(scale=7, min_width=420):
            transcript = gr.Textbox(label="Transcript", lines=4, max_lines=12, elem_id="transcript",
                                    interactive=False, buttons=["copy"],
                                    placeholder="Tokens appear here as the decoder chooses them.")
            # The attention view sits under the transcript: its chips are the tokens above.
            n_layers = default_model.dims.n_text_layer if default_model is not None else 4
            with gr.Column(visible=False, elem_id="attn_box") as attn_box:
                layer = gr.Dropdown(attention_view.layer_choices(n_layers), value="all",
                                    label="Self-attention layer", elem_id="attn_layer",
                                    info="mean over heads; applies to the next run")
                attn_html = gr.HTML("", elem_id="attn_view", js_on_load=attention_view.PLAYER_JS)
                attn_files = gr.File(label="Download: maps (PNG) and numbers (JSON)", file_count="multiple",
                                     elem_id="attn_files", interactive=False, visible=False)
            panel_box = gr.HTML(panel.panel_html(None, default_model) if default_model is not None else "",
                                elem_id="cache_panel")
            compare_box = gr.HTML("", elem_id="compare_box")
    # The chart spans the page: token position is the long axis.
    chart = gr.HTML(run_chart.chart_html([], caption=CHART_CAPTION), elem_id="latency_chart",
                    padding=False)

    inputs = [audio, cache_on, mode, beam, language, timestamps, model_dd, previous, attention_on, layer]
    outputs = [transcript, panel_box, chart, compare_box, previous, attn_html, attn_files]
    # Every decode shares one concurrency group ("decode"): see ui/__init__.py for the numbers.
    decode_kw = dict(concurrency_id="decode", concurrency_limit=defaults.concurrency,
                     show_progress="minimal")
    events = [
        run_btn.click(tab.transcribe, inputs, outputs, api_name="transcribe", **decode_kw),
        audio.upload(tab.transcribe, inputs, outputs, api_name=False, **decode_kw),
        audio.stop_recording(tab.transcribe, inputs, outputs, api_name=False, **decode_kw),
        compare_btn.click(tab.compare, inputs, outputs, api_name="compare", **decode_kw),
    ]
    if ex is not None and getattr(ex, "load_input_event", None) is not None:
        events.append(ex.load_input_event.then(tab.transcribe, inputs, outputs, api_name=False, **decode_kw))
    # Stop cancels whichever decode runs; Gradio then closes the handler's generator, whose
    # finally closes stream_transcribe (cache freed, hooks removed). The panel says so at once.
    # The cancel must be its own fn=None event: the browser handles one trigger's events in
    # order and waits for each, so a Python fn on the same click would hold the cancel back
    # (seen in Gradio 6.31). The note follows with .then, once this session's decode has
    # closed, so that it is the last panel update the page gets.
    stop_btn.click(None, None, None, cancels=events, api_name=False).then(
        tab.stopped, panel_box, panel_box, api_name=False, show_progress="hidden")

    link_cache_controls(cache_on, mode)
    attention_on.change(lambda on: gr.update(visible=bool(on)), attention_on, attn_box, api_name=False,
                        show_progress="hidden")
    # Switching model loads it once (progress shown on the status line) and keeps it in
    # the shared store; a model that cannot load says why and the old one stays selected.
    status_out = model_status if model_status is not None else gr.Markdown(visible=False)
    in_use = gr.State(defaults.model)  # the model this session's runs use: the last that loaded
    # progress on the header's line only: a failed load must not mark the other outputs
    tab.model_switch = model_dd.select(
        tab.load_model, [model_dd, in_use, panel_box], [status_out, language, model_dd, in_use, panel_box],
        api_name="load_model", concurrency_id="load", concurrency_limit=1, show_progress="minimal",
        show_progress_on=[status_out])
    tab.model_dd = model_dd
    return tab


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


def _log_end(model, options: DecodeOptions, samples, stats: "panel.RunStats",
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
