"""The Live tab: the browser microphone (or this computer's) streamed into a live session.

    with gr.Tab("Live"):
        build_live_tab(store, defaults)

Each browser tab gets its own TabSession (tab_session.py: a live.LiveWorker, a
LiveSession and its decode thread), kept in the tab's SessionRegistry under Gradio's
session hash; all share the one model from the store. The page records the microphone
itself and posts its audio to the session's ticket (ui/microphone/:
a chunk arriving while a decode runs is buffered, never dropped, and nothing waits for the
decoder); a gr.Timer redraws the view from
the worker's immutable LiveView (render/live_view.py: committed text in normal type, tentative
text grey and italic, the strip of the audio the last re-decode read, the cache panel and
the latency chart) where it changed. Stop commits the rest. The registry closes sessions
with no audio, or only silence, for the server's quiet limit, so an abandoned tab frees
its thread and audio, and refuses a session past its limit of sessions at once
(limits.py), and ends one past the server's length limit (--max-live-minutes); a session
that ended so, or failed, keeps its text on its page until Record.

The handlers are LiveTab's (tab.py): what both microphones share (sessions.py), the
browser microphone's (microphone/browser_mic.py) and this computer's (desktop_mic.py).
This module lays the tab out and wires each event to its handler.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

import gradio as gr

from ...events import CACHE_MODES
from ..controls import link_cache_controls
from ..microphone.browser_mic import BEGIN_JS, CANCEL_JS, OPEN_JS, STOP_JS
from ..render import panel
from ..render.latency_svg import latency_svg
from ..render.live_view import COPY_ON_CLICK_JS, IDLE_TEXT, TENTATIVE_STYLE, transcript_html
from ..store import Defaults, ModelStore
from .desktop_mic import SERVER_MIC_OFF, availability_text, desktop_mic_problem
from .tab import LiveTab
from .tab_session import DEFAULT_POLICY, TabSession

__all__ = ["LiveTab", "TabSession", "build_live_tab", "SERVER_MIC_OFF", "POLICY_CHOICES"]

REFRESH_S = 0.25  # view refresh while a session is active
# When a streamed word is committed (LiveConfig.policy), as the Live tab offers it
POLICY_CHOICES = [("the model has heard it (AlignAtt)", "alignatt"),
                  ("two decodes agree (LocalAgreement)", "agreement")]
# Under the buttons: what the microphone is doing, and its level (browser_mic.js writes them)
MIC_STATUS_HTML = ('<div class="wk-mic"><span class="wk-mic-label">Browser microphone</span>'
                   '<span class="wk-mic-text">Press Record and speak.</span>'
                   '<span class="wk-mic-meter" title="input level"><span class="wk-mic-level"></span></span></div>')


INTRO = (
    "Speak, and Whisper re-decodes what you said as it arrives (silence is not decoded: a "
    "voice detector listens first). Words in normal type are **committed**: the model's "
    "attention has moved past them, with audio after them (or, with LocalAgreement, two "
    "consecutive decodes agreed on them). "
    f'<span style="{TENTATIVE_STYLE}">Grey italic words are tentative</span>: the latest '
    "guess. When you pause (and every 5 s while you do not), one decode hears the whole "
    "utterance, as a file is transcribed, and gives it its **final** text; a word it wrote otherwise is "
    '<mark class="wk-revised" style="animation:none">marked</mark> for a moment. '
    "Stop gives the rest its final text, to download as text or subtitles.")


class LiveComponents(SimpleNamespace):
    """The tab's components, by name, as the layout made them and the wiring reads them."""


def build_live_tab(store: ModelStore, defaults: Defaults, idle_timeout_s: Optional[float] = None,
                   model_choice=None) -> LiveTab:
    """Lay out the Live tab in the current Blocks context and wire it. model_choice: the
    page's model dropdown (the Transcribe tab's), whose model each new session uses."""
    tab = LiveTab(store, defaults, idle_timeout_s)
    model = store.get(defaults.model) if store.is_loaded(defaults.model) else None
    ui = LiveComponents(timer=gr.Timer(REFRESH_S, active=False))
    gr.Markdown(INTRO)
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=340):
            _browser_mic(ui)
            _switches(ui, defaults)
            _desktop_mic(ui, defaults)
        with gr.Column(scale=7, min_width=420):
            _views(ui, model)
    _wire(tab, ui, model_choice)
    link_cache_controls(ui.cache_on, ui.mode)
    tab.panel_box = ui.panel_box  # the header's model switch redraws it (ui/__init__.py)
    return tab


def _browser_mic(ui: LiveComponents) -> None:
    # The page records and sends the audio itself (browser_mic.js): no Gradio event per
    # chunk, and no waveform redrawn for each (that took ~30 % of a core from the decoder
    # on a 2-core machine)
    with gr.Group(elem_id="live-mic"):
        gr.HTML(MIC_STATUS_HTML, elem_id="live-mic-status")
        with gr.Row():
            ui.record = gr.Button("Record", elem_id="live-record", variant="primary", size="sm")
            ui.stop = gr.Button("Stop", elem_id="live-stop", variant="stop", size="sm", interactive=False)
    # filled in the page by Record's first step (why there is no microphone, or ""), and by
    # its handler (the ticket the page sends its audio with)
    ui.mic_problem = gr.Textbox(visible=False, elem_id="live-mic-problem")
    ui.ticket = gr.Textbox(visible=False, elem_id="live-mic-ticket")


def _switches(ui: LiveComponents, defaults: Defaults) -> None:
    ui.cache_on = gr.Checkbox(value=defaults.options.cache != "off", label="KV cache", elem_id="live_kv_toggle",
                              info="applies from the next re-decode; untick to feel the difference")
    ui.mode = gr.Radio(list(CACHE_MODES), value=defaults.options.cache, label="Cache mode",
                       elem_id="live_cache_mode")
    ui.policy = gr.Radio(POLICY_CHOICES, value=DEFAULT_POLICY, label="A streamed word is committed when",
                         elem_id="live_policy",
                         info="applies from the next Record; AlignAtt shows where the model is reading, "
                              "LocalAgreement waits about twice as long")


def _desktop_mic(ui: LiveComponents, defaults: Defaults) -> None:
    with gr.Accordion("This computer's microphone", open=False, elem_id="desktop-mic"):
        # off (shared server, no PortAudio, no device): the buttons say so by being
        # disabled, with the reason beside them, rather than by a refusal on click
        problem = desktop_mic_problem(defaults)
        ui.desktop_status = gr.Markdown(availability_text(problem), elem_id="desktop-mic-status")
        with gr.Row():
            ui.desktop_start = gr.Button("Start", elem_id="desktop-mic-start", variant="primary",
                                         interactive=problem is None)
            ui.desktop_stop = gr.Button("Stop", elem_id="desktop-mic-stop", variant="stop",
                                        interactive=problem is None)


def _views(ui: LiveComponents, model) -> None:
    # "Copy text" is drawn inside the transcript once there is text; copied in the browser,
    # with no round trip
    ui.transcript = gr.HTML(transcript_html(), elem_id="live-transcript", js_on_load=COPY_ON_CLICK_JS)
    # after Stop: the session's final text as a .txt
    ui.download = gr.File(label="The final text (TXT) and its subtitles (SRT, VTT)", file_count="multiple",
                          visible=False, interactive=False, elem_id="live-download")
    ui.stats = gr.HTML("", elem_id="live-stats")
    ui.panel_box = gr.HTML(panel.panel_html(None, model, status=IDLE_TEXT) if model is not None else "",
                           elem_id="live-cache-panel")
    ui.chart = gr.HTML(latency_svg({}), elem_id="live-latency-chart")


def _wire(tab: LiveTab, ui: LiveComponents, model_choice) -> None:
    views = [ui.transcript, ui.stats, ui.panel_box, ui.chart]
    quiet = dict(api_name=False, show_progress="hidden")
    chosen = [model_choice] if model_choice is not None else []
    # No concurrency limit: Record and Stop only open and close a session; the decoding
    # runs on the session's own thread
    started = ui.record.click(tab.browser.start, [ui.mic_problem, ui.cache_on, ui.mode, ui.policy] + chosen,
                              [ui.timer, ui.ticket, ui.record, ui.stop] + views + [ui.download], js=OPEN_JS,
                              concurrency_limit=None, **quiet)
    started.success(None, [ui.ticket], None, js=BEGIN_JS, **quiet)
    started.failure(None, None, None, js=CANCEL_JS, **quiet)
    ui.stop.click(None, None, None, js=STOP_JS, **quiet).then(
        tab.browser.stop, chosen or None, [ui.timer, ui.record, ui.stop] + views + [ui.download],
        concurrency_limit=None, **quiet)
    for control in (ui.cache_on, ui.mode):
        control.change(tab.browser.set_options, [ui.cache_on, ui.mode], None, concurrency_limit=None, **quiet)
    ui.timer.tick(tab.live.tick, None, views + [ui.record, ui.stop, ui.download], concurrency_limit=None, **quiet)
    desktop_outputs = [ui.timer, ui.desktop_status] + views + [ui.download]
    ui.desktop_start.click(tab.desktop.start, [ui.cache_on, ui.mode] + chosen, desktop_outputs, api_name=False)
    ui.desktop_stop.click(tab.desktop.stop, None, desktop_outputs, api_name=False)
