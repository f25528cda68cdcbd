"""The Transcribe tab's layout: the audio input, the switches, the buttons, the transcript,
the attention view, the cache panel and the chart, wired to TranscribeTab's handlers.

    with gr.Tab("Transcribe"):
        tab = build_transcribe_tab(store, defaults, model_status=header_line)

What each handler does is in transcribe_tab.py (decoding) and model_switch.py (the model
dropdown); this module only places the components and says which event calls which.
"""

from __future__ import annotations

from typing import List, Tuple

import gradio as gr
from whisper.tokenizer import LANGUAGES

from ..events import CACHE_MODES
from ..examples import CLIPS, clip_path
from ..options import RANDOM_SEED, seed_field
from . import attention_view, panel, run_chart
from .controls import link_cache_controls
from .model_switch import model_choices
from .store import Defaults, ModelStore
from .transcribe_tab import CHART_CAPTION, TranscribeTab


def example_paths() -> List[str]:
    """The clips shipped in whisper_demo/examples/ that are present."""
    return [str(clip_path(name)) for name in CLIPS if clip_path(name).is_file()]


def language_choices() -> List[Tuple[str, str]]:
    return [("auto-detect", "auto")] + sorted(
        ((f"{name.title()} ({code})", code) for code, name in LANGUAGES.items()), key=lambda c: c[0])


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
                seed = gr.Number(value=seed_field(opts.seed), precision=0, minimum=RANDOM_SEED,
                                 label="Seed", elem_id="seed",
                                 info="a window that fails openai-whisper's tests is decoded again by "
                                      "sampling; this seeds its draws, so the same audio gives the same "
                                      f"words every run. {RANDOM_SEED}: random (openai-whisper's unseeded draws)")
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

    # seed last: API calls written before it existed still fit (it takes the field's value)
    inputs = [audio, cache_on, mode, beam, language, timestamps, model_dd, previous, attention_on, layer, seed]
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
        tab.models.load_model, [model_dd, in_use, panel_box], [status_out, language, model_dd, in_use, panel_box],
        api_name="load_model", concurrency_id="load", concurrency_limit=1, show_progress="minimal",
        show_progress_on=[status_out])
    tab.model_dd = model_dd
    return tab
