"""The Transcribe tab's layout: the audio input, the switches, the buttons, the transcript,
the attention view, the cache panel and the chart, wired to TranscribeTab's handlers.

    with gr.Tab("Transcribe"):
        tab = build_transcribe_tab(store, defaults, model_status=header_line)

What each handler does is in handlers.py (decoding) and model_switch.py (the model
dropdown); this module only places the components and says which event calls which.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import List, Tuple

import gradio as gr
from whisper.tokenizer import LANGUAGES

from ...events import CACHE_MODES
from ...examples import CLIPS, clip_path
from ...options import RANDOM_SEED, seed_field
from ..render import attention_view, panel, run_chart
from ..controls import link_cache_controls
from .model_switch import model_choices
from ..store import Defaults, ModelStore
from .handlers import CHART_CAPTION, TranscribeTab, page_event


def example_paths() -> List[str]:
    """The clips shipped in whisper_demo/examples/ that are present."""
    return [str(clip_path(name)) for name in CLIPS if clip_path(name).is_file()]


def language_choices() -> List[Tuple[str, str]]:
    return [("auto-detect", "auto")] + sorted(
        ((f"{name.title()} ({code})", code) for code, name in LANGUAGES.items()), key=lambda c: c[0])


class TranscribeComponents(SimpleNamespace):
    """The tab's components, by name, as the layout made them and the wiring reads them."""


def build_transcribe_tab(store: ModelStore, defaults: Defaults, model_status=None) -> TranscribeTab:
    """Lay out the tab inside the current gr.Blocks context and wire its events.

    model_status: a gr.Markdown (the page header's model line) to update on model switch."""
    tab = TranscribeTab(store, defaults)
    default_model = store.get(defaults.model) if store.is_loaded(defaults.model) else None
    ui = TranscribeComponents(previous=gr.State(None))
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=340):
            _input_column(ui, defaults, default_model)
        with gr.Column(scale=7, min_width=420):
            _output_column(ui, default_model)
    # The chart spans the page: token position is the long axis.
    ui.chart = gr.HTML(run_chart.chart_html([], caption=CHART_CAPTION), elem_id="latency_chart",
                       padding=False)
    _wire_stop(tab, ui, _wire_decodes(tab, ui, defaults) + _wire_api(tab, ui, defaults))
    link_cache_controls(ui.cache_on, ui.mode)
    ui.attention_on.change(lambda on: gr.update(visible=bool(on)), ui.attention_on, ui.attn_box, api_name=False,
                           show_progress="hidden")
    _wire_model_switch(tab, ui, defaults, model_status)
    return tab


def _input_column(ui: TranscribeComponents, defaults: Defaults, default_model) -> None:
    """The audio, the switches, the buttons, the advanced settings and the examples."""
    opts = defaults.options
    ui.audio = gr.Audio(sources=["upload", "microphone"], type="filepath", elem_id="audio_in",
                        label="Audio", show_label=True)
    ui.cache_on = gr.Checkbox(value=opts.cache != "off", label="KV cache", elem_id="kv_toggle",
                              info="untick: every token recomputes all the tokens before it")
    ui.attention_on = gr.Checkbox(value=False, label="Inside the cache: what each new token reads",
                                  elem_id="attn_toggle",
                                  info="attention over the cache and the audio, drawn as tokens "
                                       "stream; computed only while this is ticked (slower)")
    ui.batched = gr.Checkbox(value=opts.batch_size > 1, label="Long files in batches", elem_id="batched_toggle",
                             info="files over 30 s: cut at pauses into pieces of at most 30 s, "
                                  "8 decoded at once (greedy, no prompt: faster, not transcribe's "
                                  "window-by-window result); the panel shows the batch")
    with gr.Row():
        ui.run_btn = gr.Button("Transcribe", variant="primary", elem_id="run_btn", scale=2, min_width=90)
        ui.compare_btn = gr.Button("Compare", elem_id="compare_btn", scale=2, min_width=90)
        ui.stop_btn = gr.Button("Stop", variant="stop", elem_id="stop_btn", scale=1, min_width=60)
    gr.Markdown("**Compare** decodes the clip with the cache, then without, and draws both "
                "curves. **Stop** cancels a run; its cache is freed.", elem_classes=["wk-hint"])
    with gr.Accordion("Advanced", open=False, elem_id="advanced"):
        _advanced(ui, defaults, default_model)
    examples = example_paths()
    ui.examples = gr.Examples([[p] for p in examples], inputs=[ui.audio],
                              label="Examples (click to transcribe)") if examples else None


def _advanced(ui: TranscribeComponents, defaults: Defaults, default_model) -> None:
    """The model, cache mode, beam, language, timestamps and seed."""
    opts = defaults.options
    ui.model_dd = gr.Dropdown(choices=defaults.offered_models(model_choices()) or [defaults.model],
                              value=defaults.model, label="Model", elem_id="model_dd",
                              info="loaded once, then shared by every session")
    ui.mode = gr.Radio(list(CACHE_MODES), value=opts.cache, label="Cache mode", elem_id="cache_mode",
                       info="static: room for every token set aside once, written in place · "
                            "hooks: openai-whisper's, copied whole to grow each step · off: no cache")
    ui.beam = gr.Slider(1, 5, value=opts.beam_size, step=1, label="Beam size",
                        info="1 = greedy; beams share one cross-attention cache")
    multilingual = bool(default_model is not None and default_model.is_multilingual)
    ui.language = gr.Dropdown(language_choices(), value="auto", label="Language", interactive=multilingual,
                              info="for multilingual models" if multilingual else "this model is English-only")
    ui.timestamps = gr.Checkbox(value=opts.timestamps, label="Timestamps",
                                info="timestamp tokens; needed to seek through audio over 30 s")
    ui.seed = gr.Number(value=seed_field(opts.seed), precision=0, minimum=RANDOM_SEED,
                        label="Seed", elem_id="seed",
                        info="a window that fails openai-whisper's tests is decoded again by "
                             "sampling; this seeds its draws, so the same audio gives the same "
                             f"words every run. {RANDOM_SEED}: random (openai-whisper's unseeded draws)")
    ui.words = gr.Checkbox(value=opts.word_timestamps, label="Word timestamps", elem_id="word_timestamps",
                           info="when each word was said: the subtitles then show a cue per word "
                                "(one more pass over each window's attention)")


def _output_column(ui: TranscribeComponents, default_model) -> None:
    """The transcript, the attention view under it, the cache panel and the Compare summary."""
    ui.transcript = gr.Textbox(label="Transcript", lines=4, max_lines=12, elem_id="transcript",
                               interactive=False, buttons=["copy"],
                               placeholder="Tokens appear here as the decoder chooses them.")
    # The attention view sits under the transcript: its chips are the tokens above.
    n_layers = default_model.dims.n_text_layer if default_model is not None else 4
    with gr.Column(visible=False, elem_id="attn_box") as ui.attn_box:
        ui.layer = gr.Dropdown(attention_view.layer_choices(n_layers), value="all",
                               label="Self-attention layer", elem_id="attn_layer",
                               info="mean over heads; applies to the next run")
        ui.attn_html = gr.HTML("", elem_id="attn_view", js_on_load=attention_view.PLAYER_JS,
                               label="attention view")
        ui.attn_files = gr.File(label="Download: maps (PNG) and numbers (JSON)", file_count="multiple",
                                elem_id="attn_files", interactive=False, visible=False)
    ui.panel_box = gr.HTML(panel.panel_html(None, default_model) if default_model is not None else "",
                           elem_id="cache_panel", label="cache panel")
    ui.compare_box = gr.HTML("", elem_id="compare_box", label="compare summary")
    # after a run: the transcript as subtitles (SRT, VTT), text and JSON (transcript_files.py),
    # under the panel so that the panel stays beside the transcript it describes
    ui.transcript_files = gr.File(label="Download the transcript: subtitles (SRT, VTT), text, JSON",
                                  file_count="multiple", elem_id="transcript_files", interactive=False,
                                  visible=False)


def _decode_inputs(ui: TranscribeComponents) -> list:
    return [ui.audio, ui.cache_on, ui.mode, ui.beam, ui.language, ui.timestamps, ui.model_dd, ui.previous,
            ui.attention_on, ui.layer, ui.seed, ui.words, ui.batched]


def _wire_decodes(tab: TranscribeTab, ui: TranscribeComponents, defaults: Defaults) -> list:
    """Transcribe, upload, record, an example and Compare decode (their events returned).

    These are the page's own events (api_visibility private: they stream HTML); scripts
    use the API endpoints of _wire_api."""
    inputs = _decode_inputs(ui)
    outputs = [ui.transcript, ui.panel_box, ui.chart, ui.compare_box, ui.previous, ui.attn_html, ui.attn_files,
               ui.transcript_files]
    transcribe = page_event(tab.transcribe, len(outputs))
    compare = page_event(tab.compare, len(outputs))
    # Every decode shares one concurrency group ("decode"): see ui/__init__.py for the numbers.
    decode_kw = dict(concurrency_id="decode", concurrency_limit=defaults.concurrency,
                     show_progress="minimal")
    page = dict(api_visibility="private", **decode_kw)
    events = [
        ui.run_btn.click(transcribe, inputs, outputs, api_name="transcribe_page", **page),
        ui.audio.upload(transcribe, inputs, outputs, api_name=False, **decode_kw),
        ui.audio.stop_recording(transcribe, inputs, outputs, api_name=False, **decode_kw),
        ui.compare_btn.click(compare, inputs, outputs, api_name="compare_page", **page),
    ]
    if ui.examples is not None and getattr(ui.examples, "load_input_event", None) is not None:
        events.append(ui.examples.load_input_event.then(transcribe, inputs, outputs, api_name=False,
                                                        **decode_kw))
    return events


def _wire_stop(tab: TranscribeTab, ui: TranscribeComponents, events: list) -> None:
    """Stop cancels every decode of the session: the page's, and an API call's."""
    # Stop cancels whichever decode runs; Gradio then closes the handler's generator, whose
    # finally closes stream_transcribe (cache freed, hooks removed). The panel says so at once.
    # The cancel must be its own fn=None event: the browser handles one trigger's events in
    # order and waits for each, so a Python fn on the same click would hold the cancel back
    # (seen in Gradio 6.31). The note follows with .then, once this session's decode has
    # closed, so that it is the last panel update the page gets.
    ui.stop_btn.click(None, None, None, cancels=events, api_name=False).then(
        tab.stopped, ui.panel_box, ui.panel_box, api_name=False, show_progress="hidden")


def _wire_api(tab: TranscribeTab, ui: TranscribeComponents, defaults: Defaults) -> list:
    """The endpoints a program calls (gradio_client, "Use via API" in the page's footer):
    /transcribe and /compare, in the decode queue with the page's users, returning named
    plain values rather than the page's HTML. Their trigger is a button nobody sees; their
    inputs are the page's own controls (so an argument left out takes the page's default:
    the server's --seed, its word timestamps), their outputs hidden fields whose labels
    name them in the API page and gradio_client."""
    inputs = [ui.audio, ui.cache_on, ui.mode, ui.beam, ui.language, ui.timestamps, ui.model_dd, ui.seed,
              ui.words]
    decode_kw = dict(concurrency_id="decode", concurrency_limit=defaults.concurrency, show_progress="hidden")
    with gr.Column(visible=False):
        trigger = gr.Button("API", visible=False)
        text = gr.Textbox(label="text")
        segments = gr.JSON(label="segments")
        language = gr.Textbox(label="language")
        run_figures = gr.JSON(label="figures")
        cached = gr.JSON(label="cached_figures")
        uncached = gr.JSON(label="uncached_figures")
        same = gr.Checkbox(label="identical_tokens")
    transcribe = trigger.click(
        tab.transcribe_api, inputs, [text, segments, language, run_figures], api_name="transcribe",
        api_description="Transcribe one audio file, waiting for the whole run: its text, segments "
                        "[{start, end, text, words?}] in seconds, the language, and the run's figures "
                        "(decoder steps, step times, cache bytes).", **decode_kw)
    compare = trigger.click(
        tab.compare_api, inputs, [text, cached, uncached, same], api_name="compare",
        api_description="Decode the audio with the KV cache, then without: the text, each run's "
                        "figures and whether both chose identical tokens.", **decode_kw)
    return [transcribe, compare]


def _wire_model_switch(tab: TranscribeTab, ui: TranscribeComponents, defaults: Defaults, model_status) -> None:
    """Switching model loads it once (progress shown on the status line) and keeps it in
    the shared store; a model that cannot load says why and the old one stays selected."""
    status_out = model_status if model_status is not None else gr.Markdown(visible=False)
    in_use = gr.State(defaults.model)  # the model this session's runs use: the last that loaded
    # progress on the header's line only: a failed load must not mark the other outputs
    tab.model_switch = ui.model_dd.select(
        tab.models.load_model, [ui.model_dd, in_use, ui.panel_box],
        [status_out, ui.language, ui.model_dd, in_use, ui.panel_box],
        api_name="load_model", concurrency_id="load", concurrency_limit=1, show_progress="minimal",
        show_progress_on=[status_out])
    tab.model_dd = ui.model_dd
