"""The Gradio page. The only package of whisper-kv that imports gradio.

    store = ModelStore(device="cpu"); store.put("tiny.en", model)
    app = build_app(store, Defaults(model="tiny.en"))
    launch(app, host="127.0.0.1", port=7860)

Layout: a header with the model line, then tabs: "Transcribe" (transcribe/layout.py lays
out upload, record, examples, streamed transcript, cache panel, latency chart, Compare,
Stop; transcribe/handlers.py handles them; transcribe/model_switch.py the model dropdown)
and "Live" (live/layout.py, when present: streaming microphone; the page posts its audio
to microphone/route.py). render/ draws HTML and SVG without gradio: render/panel.py the
cache panel for both tabs. store.py holds what every session shares.

Queue
-----
Every decode (Transcribe, upload, record, example, Compare) shares one concurrency group,
"decode", limited to `Defaults.concurrency` (2) at once; the queue holds `Defaults.max_queue`
(16) more, and each waiting user sees Gradio's "queue: n/m" position. Why 2: the demo runs
on a laptop CPU (2-8 cores) and torch already spreads one decode across all cores, so more
decodes at once only share the same cores, make every decode slower and the latency
numbers noisy; but a single slot would let one long uncached Compare block everyone, so a
second slot keeps another decode moving beside it. Why 16: beyond that a newcomer would wait minutes
(a 25 s clip with the cache off takes about 5-50 s here); "queue full" says so at once.
Model loads have their own group of 1, so a load never runs twice and never takes a
decode slot.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import gradio as gr

from ..limits import CACHE_SWEEP_S
from .microphone.browser_mic import BROWSER_MIC_JS
from .microphone.route import audio_route
from .render.attention_view import ATTENTION_CSS
from .render.compare_summary import COMPARE_CSS
from .render.live_view import LIVE_CSS
from .render.panel import PANEL_CSS
from .render.window_strip import WINDOW_STRIP_CSS
from .session_files import remove_session_files
from .store import Defaults, ModelStore

__all__ = ["build_app", "launch", "warm_up_events", "Defaults", "ModelStore", "APP_CSS"]

log = logging.getLogger(__name__)
ANALYTICS_EVERY_ENV = "GRADIO_ANALYTICS_CACHE_FREQUENCY"  # read when the queue is made

APP_CSS = PANEL_CSS + COMPARE_CSS + WINDOW_STRIP_CSS + ATTENTION_CSS + LIVE_CSS + """
#wk-header h1 { margin: 0; font-size: 1.6rem; }
#wk-header p { margin: .15rem 0 0; color: var(--body-text-color-subdued); }
#model_status p { margin: 0; font-size: .9rem; }
#transcript textarea { font-size: 1.05rem; line-height: 1.5; }
.wk-hint p { font-size: .8rem; color: var(--body-text-color-subdued); margin: 0; }
"""

# The browser's voice-call processing off for the Transcribe tab's Record (the Live tab
# asks for the same itself: microphone/browser_mic.js): Gradio asks for `getUserMedia({audio: true})`,
# which in Chrome means echo cancellation, noise suppression and automatic gain. Whisper was
# trained on unprocessed audio and normalises level itself. Through Chromium's fake
# microphone, tiny.en's word error rate on what the server received (speech_25s.wav, three
# runs each) was 0.105-0.145 without the processing and 0.132-0.145 with it (0.105 on the
# file itself): a small effect, in the direction expected.
RAW_MICROPHONE_JS = """
<script>
// whisper-kv: record the microphone as it is (see whisper_demo/ui/__init__.py)
(() => {
  const media = navigator.mediaDevices;
  if (!media || !media.getUserMedia) return;
  const realGetUserMedia = media.getUserMedia.bind(media);
  media.getUserMedia = (constraints) => {
    if (constraints && constraints.audio === true) {
      constraints = Object.assign({}, constraints, {
        audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
    }
    return realGetUserMedia(constraints);
  };
})();
</script>
"""

# No Google fonts: the app must look the same offline.
THEME = gr.themes.Soft(primary_hue="blue", neutral_hue="slate",
                       font=["ui-sans-serif", "system-ui", "sans-serif"],
                       font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"])


def build_app(store: ModelStore, defaults: Optional[Defaults] = None) -> gr.Blocks:
    """The whole page, wired to `store` (shared by every session)."""
    from .transcribe.layout import build_transcribe_tab

    defaults = defaults or Defaults()
    # Uploads, chunks and served files older than the limit are deleted from Gradio's cache
    # (and all of them at shutdown), so a long-running shared server does not fill its disk.
    delete_cache = (CACHE_SWEEP_S, int(defaults.limits.cache_seconds))
    with gr.Blocks(title="whisper-kv: watch the decoder's KV cache", delete_cache=delete_cache) as app:
        with gr.Row(elem_id="wk-header"):
            with gr.Column(scale=3):
                gr.Markdown(
                    "# whisper-kv\n"
                    "Whisper transcribes token by token while the panel shows the decoder's "
                    "KV cache fill and what each token costs. Untick **KV cache** and every "
                    "token pays again for what the cache kept."
                )
            with gr.Column(scale=2):
                status = ""
                if store.is_loaded(defaults.model):
                    from .transcribe.model_switch import ModelSwitch

                    status = ModelSwitch(store, defaults).model_status()
                model_status = gr.Markdown(status, elem_id="model_status", label="model status")
        with gr.Tabs():
            with gr.Tab("Transcribe", id="transcribe"):
                app.transcribe_tab = build_transcribe_tab(store, defaults, model_status=model_status)
            with gr.Tab("Live", id="live"):
                live = _live_tab(store, defaults, app.transcribe_tab.model_dd)
        if live is not None:
            # one model for the page: the Live tab's next session uses the header's choice,
            # and its idle panel describes it at once
            app.transcribe_tab.model_switch.then(live.live.show_model, app.transcribe_tab.model_dd, live.panel_box,
                                                 api_name=False, show_progress="hidden")
            # A closed tab ends its live session at once (and any desktop recording with
            # it); decodes of a closed tab are closed by Gradio's queue (see transcribe/handlers.py).
            app.unload(live.live.page_closed)
            # the route the Live tab's page posts its microphone to (given to the server at launch)
            app.extra_routes = [audio_route(live.mic_streams)]
        app.unload(remove_session_files)  # the tab's own folders (attention downloads)
    # Gradio's queue recomputes a pandas summary of its last 10,000 events after every event,
    # for a monitoring page this app does not enable. A live page sends ~14 events a second
    # (a chunk every 0.1 s, the timer's redraws), and each summary took 5-10 ms as the
    # events piled up: CPU taken from the live decodes. Once per 10,000 events instead.
    os.environ.setdefault(ANALYTICS_EVERY_ENV, "10000")
    app.queue(default_concurrency_limit=defaults.concurrency, max_size=defaults.max_queue)
    return app


def _live_tab(store: ModelStore, defaults: Defaults, model_choice=None):
    """The Live tab, or None (with a message in its place) if it cannot be built: a broken
    Live tab must not take the Transcribe tab down."""
    try:
        from .live.layout import build_live_tab

        return build_live_tab(store, defaults, model_choice=model_choice)
    except Exception as exc:
        log.exception("Live tab failed to build")
        gr.Markdown(f"### Live transcription is unavailable\n`{type(exc).__name__}: {exc}`")
        return None


def warm_up_events() -> None:
    """What Gradio's first event still loads, paid at start (app.py's warm-up): Gradio runs
    every event inside a matplotlib backend manager (gradio/utils.py), and the first one
    imports matplotlib and resolves its default backend, importing pyplot: about half a
    second of the first request on a 2-core machine."""
    import matplotlib

    matplotlib.get_backend()


def launch(app: gr.Blocks, host: str = "127.0.0.1", port: int = 7860, share: bool = False,
           max_file_size=None, block: bool = True, quiet: bool = True):
    """Serve `app`; print its address once it is listening. Returns the local URL.

    block=False returns right after start (tests); otherwise serves until Ctrl-C."""
    _, url, share_url = app.launch(
        server_name=host, server_port=port, share=share, max_file_size=max_file_size,
        prevent_thread_lock=True, quiet=quiet, show_error=True, theme=THEME, css=APP_CSS,
        head=RAW_MICROPHONE_JS + BROWSER_MIC_JS,
        footer_links=["api"], inbrowser=False, app_kwargs={"routes": list(getattr(app, "extra_routes", []))},
    )
    shown = url
    if host in ("0.0.0.0", "::"):
        shown = url.replace(host, "127.0.0.1") + f"  (listening on all interfaces: {host})"
    print(f"whisper-kv is serving on {shown}", flush=True)
    if share_url:
        print(f"public share link: {share_url}", flush=True)
    if block:
        try:
            app.block_thread()
        except KeyboardInterrupt:
            pass
        finally:
            app.close()
    return url
