"""The Live tab: the browser microphone (or this computer's) streamed into a live session.

    with gr.Tab("Live"):
        build_live_tab(store, defaults)

Each browser tab gets its own TabSession (a live.LiveWorker: a LiveSession and its decode
thread), kept in the tab's SessionRegistry under Gradio's session hash; all share the one
model from the store. The microphone's `.stream` handler only queues the chunk and returns
(a chunk arriving while a decode runs is buffered, never dropped, and the handler never
waits for the decoder); a gr.Timer redraws the view from the worker's immutable LiveView
(live_view.py: committed text in normal type, tentative text grey and italic, the strip
of the audio the last re-decode read, the cache panel and the latency chart) where it
changed. Stop commits the rest. The registry closes sessions with no audio, or only
silence, for the server's quiet limit, so an abandoned tab frees its thread and audio,
and refuses a session past its limit of sessions at once (limits.py); a session that
ended so, or failed, keeps its text on its page until Record.
"""

from __future__ import annotations

import html
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import gradio as gr

from ..audio import AudioError, read_chunk_file
from ..events import CACHE_MODES, DecodeOptions
from ..options import decode_options
from ..live import LiveConfig, LiveSession, LiveUpdate, LiveWorker, SessionRegistry, model_decoder
from ..limits import Limits, live_sessions_full_message
from ..live.registry import SessionLimitReached
from . import panel
from .chunk_order import ChunkSequencer
from .chunk_tap import ChunkInbox, receives_every_chunk
from .chunk_tap import install_chunk_tap
from .latency_svg import latency_svg
from .live_view import (COPY_ON_CLICK_JS, IDLE_TEXT, TENTATIVE_STYLE, changed_only, render, sent,
                        transcript_html)
from .store import Defaults, ModelStore
from .controls import link_cache_controls

log = logging.getLogger(__name__)

REFRESH_S = 0.25  # view refresh while a session is active
# When a word becomes final (LiveConfig.policy), as the Live tab offers it
POLICY_CHOICES = [("the model has heard it (AlignAtt)", "alignatt"),
                  ("two decodes agree (LocalAgreement)", "agreement")]
DEFAULT_POLICY = LiveConfig().policy


class TabSession:
    """One browser tab's live state: its decode worker, and an optional desktop mic."""

    def __init__(self, model, options: DecodeOptions, source: str = "browser", desktop=None,
                 policy: str = DEFAULT_POLICY):
        self.model = model
        self.source = source
        self.desktop = desktop  # mic.DesktopMicSource when recording this computer's mic
        self.policy = policy  # LiveConfig.policy: which words are final (the desktop mic keeps the default)
        self.worker: LiveWorker = desktop.worker if desktop is not None else LiveWorker(
            LiveSession(self._decoder(options), LiveConfig(policy=policy)), yield_cpu=True)
        self.rendered_version = -1
        self.sent_html: list = [None] * 4  # transcript, stats, panel, chart as last sent
        self.final: Optional[LiveUpdate] = None
        self.order: Optional[ChunkSequencer] = None  # the page's chunk order (browser source)
        self.created = time.monotonic()
        self.closed = False
        self.warned = False  # its page was told why it ended (ended_note)

    @property
    def active(self) -> bool:
        return self.final is None and not self.worker.done.is_set()

    def set_options(self, options: DecodeOptions) -> None:
        """From the next re-decode on (the worker reads its decoder once per decode)."""
        self.worker.session.set_decoder(self._decoder(options))

    def _decoder(self, options: DecodeOptions):
        # AlignAtt reads each token's attention: its decoder must be asked for it
        return model_decoder(self.model, options, alignatt=LiveConfig(policy=self.policy).reads_attention)

    def finish(self, timeout: float = 120.0) -> Optional[LiveUpdate]:
        if self.desktop is not None:
            self.final = self.desktop.stop(timeout)
        else:
            self.final = self.worker.finish(timeout)
        return self.final

    def close(self) -> None:
        self.closed = True
        if self.desktop is not None:
            self.desktop.close()
        self.worker.close()

    def idle_seconds(self) -> float:
        return self.worker.session.idle_seconds()

    def silent_seconds(self) -> float:
        return self.worker.session.silent_seconds()

    def running(self) -> bool:
        """Whether it holds a decode thread (what the registry's session limit counts)."""
        return not self.closed and not self.worker.done.is_set()

    def ended_note(self) -> str:
        """Why a session that took no more audio ended, for its page ("" if it did not)."""
        error = self.worker.view().error
        if error is not None:
            return (f"Live transcription stopped: {type(error).__name__}: {error}. The text so far "
                    f"is kept here; press Record to start again.")
        if self.closed:
            return ("Live transcription closed: no audio, or only silence, for too long (this "
                    "server's limit). The text so far is kept here; press Record to start again.")
        return ""

    def heard_seconds(self) -> float:
        view = self.worker.view()
        return view.stats.audio_seconds if view.stats else self.worker.session.audio_seconds


# ---------------------------------------------------------------------------- rendering


# ---------------------------------------------------------------------------- the tab


class LiveTab:
    """Handlers. Sessions are found by the browser session's hash, not passed through a
    gr.State: chunk events are queued before the previous one returns, so a State would
    hand a stale (empty) value to the next chunk, which would then start a second session
    and split the audio between them."""

    def __init__(self, store: ModelStore, defaults: Defaults, idle_timeout_s: Optional[float] = None):
        self.store = store
        self.defaults = defaults
        limits = defaults.limits if defaults is not None else Limits()
        self.sessions: SessionRegistry[TabSession] = SessionRegistry(
            idle_timeout_s or limits.live_quiet_seconds, max_running=limits.max_live_sessions,
            full_message=live_sessions_full_message(limits.max_live_sessions or 0))
        self.inbox = ChunkInbox(limits)  # every streamed chunk, until it is fed (see tapped)
        # feeds tapped chunks off the event loop: reading one is decoding a file
        self.feeder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-feed")
        self.tapping = False

    def _open(self, key: str, open_session):
        """open_session() under the registry's session limit: past it the visitor is told
        the server is busy, and what its page sent is dropped."""
        try:
            return open_session()
        except SessionLimitReached as exc:
            self.inbox.forget(key)
            raise gr.Error(str(exc), title="Live transcription is busy") from exc

    def _model(self, name: Optional[str] = None):
        """The model chosen in the page's header (the Transcribe tab's Model), or the app's."""
        name = name or self.defaults.model
        try:
            return self.store.get(name)
        except Exception as exc:
            raise gr.Error(html.escape(f"Model {name!r} is not available: {exc}")) from exc

    def show_model(self, model_name, request: gr.Request = None):
        """The model in the header changed: an idle Live tab describes the new one (a
        session in progress keeps its model until the next Record)."""
        session = self.session(request)
        if session is not None and session.active:
            return gr.skip()
        return panel.panel_html(None, self._model(model_name), status=IDLE_TEXT)

    def _options(self, cache_on, mode) -> DecodeOptions:
        """The app's options with this tab's cache choice, in the live precision; live
        decodes are greedy."""
        return decode_options(self.defaults.options, cache_on=cache_on, mode=mode, beam_size=1,
                              precision=self.defaults.live_precision)

    @staticmethod
    def _key(request) -> str:
        return getattr(request, "session_hash", None) or "default"

    def session(self, request) -> Optional[TabSession]:
        return self.sessions.get(self._key(request))

    def _browser_session(self, request, cache_on, mode, model_name=None, policy=DEFAULT_POLICY) -> TabSession:
        key = self._key(request)

        def reusable(session: TabSession) -> bool:
            # a stopped, failed or closed session stays: its page keeps its text until
            # Record is pressed again (start() replaces it)
            return session.source == "browser"

        model = self._model(model_name)  # loaded (or failing) before the registry's lock is taken
        # concurrent chunks of one stream must find the same session: the registry is atomic
        return self._open(key, lambda: self.sessions.get_or_create(
            key, lambda: self._new_browser_session(key, model, self._options(cache_on, mode), policy), reusable))

    def _new_browser_session(self, key: str, model, options: DecodeOptions, policy: str = DEFAULT_POLICY) -> TabSession:
        session = TabSession(model, options, "browser", policy=policy)
        session.order = self.inbox.new_recording(key)
        return session

    # --- browser microphone

    def start(self, cache_on, mode, policy=DEFAULT_POLICY, model_name=None, request: gr.Request = None):
        """Record pressed: a fresh session, with the model chosen in the header and the
        commit policy chosen in the tab."""
        model = self._model(model_name)
        current = self.session(request)
        if (current is not None and current.source == "browser" and current.active
                and time.monotonic() - current.created < 5.0):
            # the first chunks of this recording beat this event to the server and
            # already started its session: keep it (replacing it would lose them)
            current.set_options(self._options(cache_on, mode))
            return (gr.Timer(active=True),) + sent(current, render(current, current.model))
        session = self._open(self._key(request), lambda: self.sessions.replace(
            self._key(request), lambda: self._new_browser_session(self._key(request), model,
                                                                  self._options(cache_on, mode), policy)))
        return (gr.Timer(active=True),) + sent(session, render(session, session.model))

    def tapped(self, session_hash, body) -> None:
        """Called by the chunk tap (chunk_tap.py), on the event loop, for every chunk body
        Gradio receives for this tab's stream.
        Feeds it at once when its session exists and no handler is feeding (reading a
        0.1 s wav and resampling it takes about a millisecond), so the decoder gets the
        audio when it arrives rather than when Gradio's queue loop gets round to calling
        the handler; otherwise the handler feeds it. Never waits for a lock here."""
        data = getattr(body, "data", None)
        if not data:
            return
        key = session_hash or "default"
        self.inbox.add(key, data[0])
        session = self.sessions.get(key)  # never creates one here: the handler does
        if session is not None and session.source == "browser" and session.active:
            # on a thread: reading the chunk decodes a file, never done on the event loop
            self.feeder.submit(self._feed_inbox, key, session, False)

    def _feed_inbox(self, key: str, session: TabSession, wait: bool = True, flush: bool = False) -> int:
        """Feed every tapped chunk of this browser session that is in turn, oldest first
        (flush: every one, the recording has ended). With wait=False, leaves them to
        whoever is feeding already."""
        return self.inbox.feed(key, session.worker.feed, wait, flush)

    @receives_every_chunk
    def chunk(self, audio, cache_on, mode, policy=DEFAULT_POLICY, model_name=None, request: gr.Request = None):
        """Streamed chunks: queue them and return at once; the timer redraws."""
        session = self._browser_session(request, cache_on, mode, model_name, policy)
        if not session.active:
            self.inbox.discard(self._key(request))
            return  # sent after Stop (the rest was committed), or after the session ended
        session.set_options(self._options(cache_on, mode))
        if self.tapping:  # `audio` is the latest of the tapped chunks: feed them all
            self._feed_inbox(self._key(request), session)
        elif audio is not None:
            try:
                limits = self.inbox.limits
                sample_rate, data = audio if isinstance(audio, tuple) else read_chunk_file(
                    audio, limits.max_chunk_bytes, limits.max_chunk_seconds)
                session.worker.feed(sample_rate, data)
            except AudioError as exc:
                gr.Warning(str(exc))

    def stop(self, model_name=None, request: gr.Request = None):
        """Stop pressed: wait for the chunks still queued, then commit the rest."""
        session = self.session(request)
        if session is None:
            return (gr.Timer(active=False),) + render(None, self._model(model_name))
        time.sleep(0.3)  # the browser sends one more chunk after Stop
        if self.tapping and session.source == "browser" and session.final is None:
            self._feed_inbox(self._key(request), session, flush=True)  # chunks after the last call
        session.finish()
        self.inbox.remove_fed(self._key(request))  # the recording's chunk files
        session.rendered_version = -1
        stats = session.worker.view().stats
        log.info("live session stopped: %.1f s heard, %d re-decodes; %s", session.heard_seconds(),
                 stats.decodes if stats else 0, session.order.summary() if session.order else "")
        return (gr.Timer(active=False),) + sent(session, render(session, session.model))

    def tick(self, request: gr.Request):
        # chunks refused by the limits: said here, since a stream's later calls carry no
        # event for a warning to reach the page by
        for refused in self.inbox.refusals(self._key(request)):
            gr.Warning(refused)
        session = self.session(request)
        if session is None:
            return (gr.skip(),) * 4
        version = session.worker.view().version
        if version == session.rendered_version and session.active:
            return (gr.skip(),) * 4
        session.rendered_version = version
        note = session.ended_note()  # failed or closed: its text stays, and the page is told why
        if note and not session.warned:
            session.warned = True
            gr.Warning(note)
        return changed_only(session, render(session, session.model, note=note))

    def page_closed(self, request: gr.Request):
        """The tab went away (Gradio's unload event): close its session now, rather than
        when the reaper finds it idle. A desktop recording stops with it."""
        key = self._key(request)
        session = self.sessions.pop(key)
        self.inbox.forget(key)
        if session is not None:
            heard = session.heard_seconds()
            session.close()
            log.info("live session closed (page closed): %s microphone, %.1f s heard", session.source, heard)

    # --- this computer's microphone

    def desktop_start(self, cache_on, mode, model_name=None, request: gr.Request = None):
        from ..live import mic

        model = self._model(model_name)
        if self.defaults is not None and not self.defaults.policy.server_mic:
            gr.Warning(SERVER_MIC_OFF)
            return (gr.Timer(active=False),) + (f"⚠️ {SERVER_MIC_OFF}",) + render(None, model, note=SERVER_MIC_OFF)
        options = self._options(cache_on, mode)
        source = mic.DesktopMicSource(model, options)
        try:
            source.start()
        except mic.MicUnavailable as exc:
            message = f"This computer's microphone is unavailable: {exc}"
            gr.Warning(message)
            return (gr.Timer(active=False),) + (f"⚠️ {message}",) + render(None, model, note=message)
        try:
            session = self._open(self._key(request), lambda: self.sessions.replace(
                self._key(request), lambda: TabSession(model, options, "desktop", desktop=source)))
        except gr.Error:
            source.close()
            raise
        return (gr.Timer(active=True),) + ("🎙️ Recording this computer's microphone…",) + sent(session, render(session, model))

    def desktop_stop(self, request: gr.Request):
        session = self.session(request)
        if session is None or session.desktop is None:
            return (gr.Timer(active=False),) + ("Not recording.",) + (gr.skip(),) * 4
        session.finish()
        session.rendered_version = -1
        return (gr.Timer(active=False),) + ("Stopped.",) + sent(session, render(session, session.model))


SERVER_MIC_OFF = ("This computer's microphone is off on this shared server: visitors cannot "
                  "record the room it stands in. Use the browser microphone above. (The operator "
                  "can turn it on with --allow-server-mic.)")


def _availability_text(defaults: Optional[Defaults] = None) -> str:
    if defaults is not None and not defaults.policy.server_mic:
        return f"⚠️ {SERVER_MIC_OFF}"
    from ..live.mic_device import availability

    problem = availability()
    if problem:
        return f"⚠️ Unavailable here: {problem}"
    return "Ready: records on the machine that runs this app (for when the browser can't share a microphone)."


def build_live_tab(store: ModelStore, defaults: Defaults, idle_timeout_s: Optional[float] = None,
                   model_choice=None) -> LiveTab:
    """Lay out the Live tab in the current Blocks context and wire it. model_choice: the
    page's model dropdown (the Transcribe tab's), whose model each new session uses."""
    tab = LiveTab(store, defaults, idle_timeout_s)
    tab.tapping = install_chunk_tap()
    model = store.get(defaults.model) if store.is_loaded(defaults.model) else None
    timer = gr.Timer(REFRESH_S, active=False)

    gr.Markdown(
        "Speak, and Whisper re-decodes the audio since the last committed sentence as it "
        "arrives (silence is not decoded: a voice detector listens first). Words in normal "
        "type are **committed** and will not change: the model's attention has moved past "
        "them, with audio after them (or, with LocalAgreement, two consecutive decodes agreed "
        "on them), or you paused and one decode heard the whole phrase. "
        f'<span style="{TENTATIVE_STYLE}">Grey italic words are tentative</span>: '
        "the latest guess, which the next decode may still revise.")
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=340):
            # No waveform while recording: the page redrew it for every chunk, which took
            # ~30 % of a core from the decoder on a 2-core machine (Chromium's profiler).
            # filepath: the handler reads each chunk itself, with a limit (chunk_tap.py)
            mic_in = gr.Audio(sources=["microphone"], streaming=True, type="filepath",
                              elem_id="live-mic", label="Browser microphone",
                              waveform_options=gr.WaveformOptions(show_recording_waveform=False))
            cache_on = gr.Checkbox(value=defaults.options.cache != "off", label="KV cache",
                                   elem_id="live_kv_toggle",
                                   info="applies from the next re-decode; untick to feel the difference")
            mode = gr.Radio(list(CACHE_MODES), value=defaults.options.cache,
                            label="Cache mode", elem_id="live_cache_mode")
            policy = gr.Radio(POLICY_CHOICES, value=DEFAULT_POLICY, label="A word is final when",
                              elem_id="live_policy",
                              info="applies from the next Record; AlignAtt shows where the model is reading, "
                                   "LocalAgreement waits about twice as long")
            with gr.Accordion("This computer's microphone", open=False, elem_id="desktop-mic"):
                desktop_status = gr.Markdown(_availability_text(defaults), elem_id="desktop-mic-status")
                with gr.Row():
                    desktop_start = gr.Button("Start", elem_id="desktop-mic-start", variant="primary")
                    desktop_stop = gr.Button("Stop", elem_id="desktop-mic-stop", variant="stop")
        with gr.Column(scale=7, min_width=420):
            # "Copy text" is drawn inside the transcript once there is text; copied in the
            # browser, with no round trip
            transcript = gr.HTML(transcript_html("", ""), elem_id="live-transcript", js_on_load=COPY_ON_CLICK_JS)
            stats = gr.HTML("", elem_id="live-stats")
            panel_box = gr.HTML(panel.panel_html(None, model, status=IDLE_TEXT) if model is not None else "",
                                elem_id="live-cache-panel")
            chart = gr.HTML(latency_svg({}), elem_id="live-latency-chart")

    views = [transcript, stats, panel_box, chart]
    quiet = dict(api_name=False, show_progress="hidden")
    chosen = [model_choice] if model_choice is not None else []
    mic_in.start_recording(tab.start, [cache_on, mode, policy] + chosen, [timer] + views,
                           concurrency_limit=None, **quiet)
    # No concurrency limit: the handler only queues audio. Gradio's frontend drops a chunk
    # when the previous chunk's event is still pending, so the handler must never wait in
    # the queue behind anything (a limit of 1 lost half the audio on a busy 2-core box).
    mic_in.stream(tab.chunk, [mic_in, cache_on, mode, policy] + chosen, None, stream_every=0.5, time_limit=None,
                  concurrency_limit=None, **quiet)
    mic_in.stop_recording(tab.stop, chosen or None, [timer] + views, concurrency_limit=None, **quiet)
    timer.tick(tab.tick, None, views, concurrency_limit=None, **quiet)
    desktop_start.click(tab.desktop_start, [cache_on, mode] + chosen, [timer, desktop_status] + views,
                        api_name=False)
    desktop_stop.click(tab.desktop_stop, None, [timer, desktop_status] + views, api_name=False)
    link_cache_controls(cache_on, mode)
    tab.panel_box = panel_box  # the header's model switch redraws it (ui/__init__.py)
    return tab

