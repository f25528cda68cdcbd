"""The Live tab: the browser microphone (or this computer's) streamed into a LiveTranscriber.

    with gr.Tab("Live"):
        build_live_tab(store, defaults)

Each browser session gets its own LiveSession (a BackgroundTranscriber: a LiveTranscriber
with a decode thread) in a gr.State; all share the one model from the store. The
microphone's `.stream` handler only queues the chunk and returns (a chunk arriving while
a decode runs is buffered, never dropped, and the handler never waits for the decoder);
a gr.Timer redraws the view (committed text in normal type, tentative text grey and
italic, the cache panel and the latency chart) whenever the decode thread published a new
token. Stop commits the rest. Sessions idle for `IDLE_TIMEOUT_S` are closed by a reaper
thread (and by the State's time_to_live), so an abandoned tab frees its thread and audio.
"""

from __future__ import annotations

import html
import logging
import threading
import time
import weakref
from typing import Optional

import gradio as gr

from ..audio import AudioError
from ..events import DecodeOptions
from ..live import BackgroundTranscriber, LiveTranscriber, LiveUpdate
from . import panel
from .store import Defaults, ModelStore

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 300.0  # a session without audio for this long is closed
REFRESH_S = 0.25  # view refresh while a session is active
COMMITTED_STYLE = ""
TENTATIVE_STYLE = "color:#94a3b8;font-style:italic"


def effective_mode(cache_on: bool, mode: str) -> str:
    if not cache_on:
        return "off"
    return mode if mode in ("static", "hooks") else "static"


class LiveSession:
    """One browser tab's live state: its decode worker, and an optional desktop mic."""

    def __init__(self, model, options: DecodeOptions, source: str = "browser", desktop=None):
        self.model = model
        self.source = source
        self.desktop = desktop  # mic.DesktopMicSource when recording this computer's mic
        self.worker = desktop.worker if desktop is not None else BackgroundTranscriber(
            LiveTranscriber(model, options))
        self.rendered_version = -1
        self.final: Optional[LiveUpdate] = None
        self.created = time.monotonic()
        _SESSIONS.add(self)

    @property
    def live(self) -> LiveTranscriber:
        return self.worker.live

    @property
    def active(self) -> bool:
        return self.final is None and not self.worker.done.is_set()

    def set_options(self, options: DecodeOptions) -> None:
        self.live.reset_options(options)

    def finish(self, timeout: float = 120.0) -> Optional[LiveUpdate]:
        if self.desktop is not None:
            self.final = self.desktop.stop(timeout)
        else:
            self.final = self.worker.finish(timeout)
        return self.final

    def close(self) -> None:
        if self.desktop is not None:
            self.desktop.close()
        self.worker.close()
        _SESSIONS.discard(self)

    def idle_seconds(self) -> float:
        return self.live.idle_seconds()


# every session, weakly: the reaper closes the idle ones
_SESSIONS: "weakref.WeakSet[LiveSession]" = weakref.WeakSet()
_REAPER_STARTED = threading.Event()


def _reap_forever(timeout_s: float, every_s: float) -> None:
    while True:
        time.sleep(every_s)
        reap_idle(timeout_s)


def reap_idle(timeout_s: float = IDLE_TIMEOUT_S) -> int:
    """Close sessions with no audio for timeout_s. Returns how many were closed."""
    closed = 0
    for session in list(_SESSIONS):
        if session.idle_seconds() > timeout_s:
            try:
                session.close()
            except Exception:  # never let one session stop the reaper
                log.exception("closing an idle live session failed")
            closed += 1
    return closed


def _start_reaper(timeout_s: float) -> None:
    if not _REAPER_STARTED.is_set():
        _REAPER_STARTED.set()
        threading.Thread(target=_reap_forever, args=(timeout_s, min(30.0, timeout_s / 4)),
                         name="live-reaper", daemon=True).start()


# ---------------------------------------------------------------------------- rendering


def transcript_html(committed: str, tentative: str, final: bool = False, note: str = "") -> str:
    committed_html = f'<span class="wk-committed" style="{COMMITTED_STYLE}">{html.escape(committed)}</span>'
    tentative_html = (f' <span class="wk-tentative" style="{TENTATIVE_STYLE}">{html.escape(tentative)}</span>'
                      if tentative else "")
    if not committed and not tentative:
        body = ('<span style="color:var(--body-text-color-subdued)">'
                f'{html.escape(note or "Press Record and speak: text appears here as you talk.")}</span>')
    else:
        body = committed_html + tentative_html
    state = "final" if final else "live"
    return (f'<div id="live-transcript-body" data-state="{state}" '
            f'style="font-size:1.15rem;line-height:1.6;min-height:4.5rem;padding:.6rem .8rem;'
            f'border:1px solid var(--border-color-primary);border-radius:8px">{body}</div>')


def stats_html(live: LiveTranscriber, update: Optional[LiveUpdate]) -> str:
    s = live.stats()

    def ms(v):
        return panel.fmt_ms(v) if v is not None else "—"

    def sec(v):
        return f"{v:.1f} s" if v is not None else "—"

    tiles = [
        ("Chunk end → first token", ms(s.first_token_ms_median),
         f"median · p95 {ms(s.first_token_ms_p95)} · last {ms(s.last_first_token_ms)}"),
        ("Speech → commit", sec(s.commit_s_median), f"median · p95 {sec(s.commit_s_p95)}"),
        ("Buffer", f"{live.buffer_seconds:.1f} s",
         f"of {s.audio_seconds:.1f} s heard · trimmed at committed segments"),
        ("Re-decodes", str(s.decodes),
         f"{s.skipped} skipped (no new speech)" + (f" · last {ms(s.last_decode_ms)}" if s.last_decode_ms else "")),
    ]
    cells = "".join(
        f'<div class="wk-tile"><div class="wk-label">{html.escape(a)}</div>'
        f'<div class="wk-value">{b}</div><div class="wk-sub">{html.escape(c)}</div></div>'
        for a, b, c in tiles)
    return f'<div class="wk-panel"><div class="wk-grid">{cells}</div></div>'


def render(session: Optional["LiveSession"], model, note: str = ""):
    """(transcript, stats, panel, chart) for the current state of a session."""
    if session is None:
        return (transcript_html("", "", note=note), "", panel.panel_html(None, model, status=note), None)
    worker = session.worker
    live = session.live
    final = session.final
    update = final or worker.update
    committed, tentative = (final.committed, "") if final else worker.preview
    if worker.error is not None:
        note = f"Decoding failed: {type(worker.error).__name__}: {worker.error}"
    series = {panel.series_label(mode, beams): values
              for (mode, beams), values in worker.latency_series().items()}
    event = worker.event
    if event is None:
        panel_box = panel.panel_html(None, session.model, status=note or "listening…")
    else:
        latencies = series.get(panel.series_label(event.cache_mode, event.beam_size), [event.latency_ms])
        status = note or ("done" if final else f"re-decode #{live.stats().decodes} · buffer {live.buffer_seconds:.1f} s")
        panel_box = panel.panel_html(event, session.model, latencies_ms=latencies, status=status)
    frame = panel.latency_frame(series)
    return (transcript_html(committed, tentative, final=final is not None, note=note),
            stats_html(live, update), panel_box, frame if len(frame) else None)


# ---------------------------------------------------------------------------- the tab


class LiveTab:
    """Handlers. Sessions are found by the browser session's hash, not passed through a
    gr.State: chunk events are queued before the previous one returns, so a State would
    hand a stale (empty) value to the next chunk, which would then start a second session
    and split the audio between them."""

    def __init__(self, store: ModelStore, defaults: Defaults):
        self.store = store
        self.defaults = defaults
        self._sessions: dict = {}
        self._lock = threading.Lock()

    def _model(self):
        try:
            return self.store.get(self.defaults.model)
        except Exception as exc:
            raise gr.Error(f"Model {self.defaults.model!r} is not available: {exc}") from exc

    def _options(self, cache_on, mode) -> DecodeOptions:
        base = self.defaults.options
        return DecodeOptions(cache=effective_mode(bool(cache_on), mode), beam_size=1,
                             language=base.language, task=base.task,
                             no_speech_threshold=base.no_speech_threshold,
                             silence_rms=base.silence_rms)

    @staticmethod
    def _key(request) -> str:
        return getattr(request, "session_hash", None) or "default"

    def session(self, request) -> Optional[LiveSession]:
        with self._lock:
            session = self._sessions.get(self._key(request))
        if session is not None and session not in _SESSIONS:  # reaped while idle
            return None
        return session

    def _replace(self, request, make) -> LiveSession:
        key = self._key(request)
        with self._lock:
            old = self._sessions.pop(key, None)
            if old is not None:
                old.close()
            session = make()
            self._sessions[key] = session
            self._forget_closed()
        return session

    def _forget_closed(self) -> None:
        for key in [k for k, v in self._sessions.items() if v not in _SESSIONS]:
            del self._sessions[key]

    def _browser_session(self, request, cache_on, mode) -> LiveSession:
        key = self._key(request)
        with self._lock:  # concurrent chunks of one stream must find the same session
            session = self._sessions.get(key)
            if session is None or session not in _SESSIONS or session.source != "browser" or (
                    not session.active and session.final is None):
                session = LiveSession(self._model(), self._options(cache_on, mode), "browser")
                self._sessions[key] = session
        return session

    # --- browser microphone

    def start(self, cache_on, mode, request: gr.Request):
        """Record pressed: a fresh session."""
        model = self._model()
        session = self._replace(request, lambda: LiveSession(model, self._options(cache_on, mode), "browser"))
        return (gr.Timer(active=True),) + render(session, session.model)

    def chunk(self, audio, cache_on, mode, request: gr.Request):
        """One streamed chunk: queue it and return at once; the timer redraws."""
        session = self._browser_session(request, cache_on, mode)
        if session.final is not None:
            return  # a chunk sent after Stop, once the rest was committed
        session.set_options(self._options(cache_on, mode))
        if audio is not None:
            sample_rate, data = audio
            try:
                session.worker.feed(sample_rate, data)
            except AudioError as exc:
                gr.Warning(str(exc))

    def stop(self, request: gr.Request):
        """Stop pressed: wait for the chunks still queued, then commit the rest."""
        session = self.session(request)
        if session is None:
            return (gr.Timer(active=False),) + render(None, self._model())
        time.sleep(0.3)  # the browser sends one more chunk after Stop
        session.finish()
        session.rendered_version = -1
        return (gr.Timer(active=False),) + render(session, session.model)

    def tick(self, request: gr.Request):
        session = self.session(request)
        if session is None:
            return (gr.skip(),) * 4
        version = session.worker.version
        if version == session.rendered_version and session.active:
            return (gr.skip(),) * 4
        session.rendered_version = version
        return render(session, session.model)

    # --- this computer's microphone

    def desktop_start(self, cache_on, mode, request: gr.Request):
        from .. import mic

        model = self._model()
        options = self._options(cache_on, mode)
        source = mic.DesktopMicSource(model, options)
        try:
            source.start()
        except mic.MicUnavailable as exc:
            message = f"This computer's microphone is unavailable: {exc}"
            gr.Warning(message)
            return (gr.Timer(active=False), f"⚠️ {message}") + render(None, model, note=message)
        session = self._replace(request, lambda: LiveSession(model, options, "desktop", desktop=source))
        return (gr.Timer(active=True), "🎙️ Recording this computer's microphone…") + render(session, model)

    def desktop_stop(self, request: gr.Request):
        session = self.session(request)
        if session is None or session.desktop is None:
            return (gr.Timer(active=False), "Not recording.") + (gr.skip(),) * 4
        session.finish()
        return (gr.Timer(active=False), "Stopped.") + render(session, session.model)


def _availability_text() -> str:
    from .. import mic

    problem = mic.availability()
    if problem:
        return f"⚠️ Unavailable here: {problem}"
    return "Ready: records on the machine that runs this app (for when the browser can't share a microphone)."


def build_live_tab(store: ModelStore, defaults: Defaults, idle_timeout_s: float = IDLE_TIMEOUT_S) -> LiveTab:
    """Lay out the Live tab in the current Blocks context and wire it."""
    tab = LiveTab(store, defaults)
    _start_reaper(idle_timeout_s)
    model = store.get(defaults.model) if store.is_loaded(defaults.model) else None
    timer = gr.Timer(REFRESH_S, active=False)

    gr.Markdown(
        "Speak, and Whisper re-decodes the last seconds of audio every half second. Words in "
        "normal type are **committed**: two consecutive decodes agreed on them, and they will "
        f'not change. <span style="{TENTATIVE_STYLE}">Grey italic words are tentative</span>: '
        "the latest guess, which the next decode may still revise.")
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=340):
            mic_in = gr.Audio(sources=["microphone"], streaming=True, type="numpy",
                              elem_id="live-mic", label="Browser microphone")
            cache_on = gr.Checkbox(value=defaults.options.cache != "off", label="KV cache",
                                   elem_id="live_kv_toggle",
                                   info="applies from the next re-decode; untick to feel the difference")
            mode = gr.Radio(["static", "hooks", "off"], value=defaults.options.cache,
                            label="Cache mode", elem_id="live_cache_mode")
            with gr.Accordion("This computer's microphone", open=False, elem_id="desktop-mic"):
                desktop_status = gr.Markdown(_availability_text(), elem_id="desktop-mic-status")
                with gr.Row():
                    desktop_start = gr.Button("Start", elem_id="desktop-mic-start", variant="primary")
                    desktop_stop = gr.Button("Stop", elem_id="desktop-mic-stop", variant="stop")
        with gr.Column(scale=7, min_width=420):
            transcript = gr.HTML(transcript_html("", ""), elem_id="live-transcript")
            stats = gr.HTML("", elem_id="live-stats")
            panel_box = gr.HTML(panel.panel_html(None, model) if model is not None else "",
                                elem_id="live-cache-panel")
            chart = gr.LinePlot(
                None, x="token", y="latency_ms", color="series", y_lim=[0, None],
                color_map=panel.chart_colors(), title="Per-token decoder latency (recent re-decodes)",
                x_title="token", y_title="latency (ms)", height=300, elem_id="live-latency-chart",
                tooltip=["token", "latency_ms", "series"], label="Latency")

    views = [transcript, stats, panel_box, chart]
    quiet = dict(api_name=False, show_progress="hidden")
    mic_in.start_recording(tab.start, [cache_on, mode], [timer] + views, concurrency_limit=None, **quiet)
    # No concurrency limit: the handler only queues audio. Gradio's frontend drops a chunk
    # when the previous chunk's event is still pending, so the handler must never wait in
    # the queue behind anything (a limit of 1 lost half the audio on a busy 2-core box).
    mic_in.stream(tab.chunk, [mic_in, cache_on, mode], None, stream_every=0.5, time_limit=None,
                  concurrency_limit=None, **quiet)
    mic_in.stop_recording(tab.stop, None, [timer] + views, concurrency_limit=None, **quiet)
    timer.tick(tab.tick, None, views, concurrency_limit=None, **quiet)
    desktop_start.click(tab.desktop_start, [cache_on, mode], [timer, desktop_status] + views, api_name=False)
    desktop_stop.click(tab.desktop_stop, None, [timer, desktop_status] + views, api_name=False)
    cache_on.input(lambda on, m: effective_mode(on, m) if on else "off", [cache_on, mode], mode,
                   queue=False, api_name=False)
    mode.input(lambda m: m != "off", mode, cache_on, queue=False, api_name=False)
    tab.components = dict(mic=mic_in, timer=timer, transcript=transcript,
                          stats=stats, panel=panel_box, chart=chart, cache_on=cache_on, mode=mode,
                          desktop_status=desktop_status, desktop_start=desktop_start,
                          desktop_stop=desktop_stop)
    return tab
