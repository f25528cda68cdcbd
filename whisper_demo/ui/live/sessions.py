"""What the Live tab's handlers share, whichever microphone feeds a session (LiveSessions):
the tab's sessions, found by the browser session's hash; the model and options a session
decodes with; the timer's redraw; the end of a session that ran past the server's length
limit; and the end of a session when its page closes.

Each microphone's handlers hold one: microphone/browser_mic.py (the browser's) and
live/desktop_mic.py (this computer's); live/tab.py composes the three into LiveTab.
"""

from __future__ import annotations

import html
import logging
import time
from typing import Callable, Optional

import gradio as gr

from ...events import DecodeOptions
from ...limits import Limits, live_sessions_full_message
from ...live import SessionRegistry
from ...live.registry import SessionLimitReached
from ...options import decode_options
from ..microphone.mic_stream import MicStreams
from ..render import panel
from ..render.live_view import IDLE_TEXT, render
from ..session_files import live_subtitle_files, live_transcript_file
from ..store import Defaults, ModelStore
from .tab_session import TabSession

log = logging.getLogger(__name__)

NO_SESSION = ("This request came without a Gradio session (the page's browser tab), so it "
              "cannot be matched to a live session; reload the page.")


def session_key(request) -> str:
    """The browser tab's key (Gradio's session hash); refused without one, never shared."""
    key = getattr(request, "session_hash", None)
    if not key:
        raise gr.Error(NO_SESSION, title="No session")
    return key


def changed_only(session: TabSession, outputs) -> tuple:
    """outputs with gr.skip() for what the browser already shows: during a decode the
    version moves with every token, and re-sending unchanged HTML made the browser and the
    server compete with the decoder on a small machine."""
    result = []
    for i, value in enumerate(outputs):
        if value == session.sent_html[i]:
            result.append(gr.skip())
        else:
            session.sent_html[i] = value
            result.append(value)
    return tuple(result)


def sent(session: TabSession, outputs) -> tuple:
    """A full render about to be sent: remember it for changed_only."""
    session.sent_html = list(outputs)
    return tuple(outputs)


class LiveSessions:
    """Sessions are found by the browser session's hash, not passed through a gr.State:
    chunk events are queued before the previous one returns, so a State would hand a
    stale (empty) value to the next chunk, which would then start a second session and
    split the audio between them."""

    def __init__(self, store: ModelStore, defaults: Defaults, idle_timeout_s: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.defaults = defaults
        self.clock = clock  # sessions' and recordings' wall clock (tests give their own)
        limits = defaults.limits if defaults is not None else Limits()
        self.max_session_seconds = defaults.max_live_seconds if defaults is not None else None
        self.sessions: SessionRegistry[TabSession] = SessionRegistry(
            idle_timeout_s or limits.live_quiet_seconds, max_running=limits.max_live_sessions,
            full_message=live_sessions_full_message(limits.max_live_sessions or 0))
        # the browser microphones' recordings (microphone/mic_stream.py)
        self.mic_streams = MicStreams(limits, clock=clock)

    def open(self, key: str, make: Callable[[], TabSession]) -> TabSession:
        """A fresh session for tab `key` from make(), under the registry's session limit:
        past it the visitor is told the server is busy."""
        try:
            return self.sessions.replace(key, make)
        except SessionLimitReached as exc:
            raise gr.Error(str(exc), title="Live transcription is busy") from exc

    def new_session(self, model, options: DecodeOptions, source: str, **kwargs) -> TabSession:
        """A TabSession on this tab's clock, with the server's length limit."""
        return TabSession(model, options, source, max_seconds=self.max_session_seconds, clock=self.clock, **kwargs)

    def model(self, name: Optional[str] = None):
        """The model chosen in the page's header (the Transcribe tab's Model), or the app's."""
        name = name or self.defaults.model
        try:
            return self.store.get(name)
        except Exception as exc:
            raise gr.Error(html.escape(f"Model {name!r} is not available: {exc}")) from exc

    def options(self, cache_on, mode) -> DecodeOptions:
        """The app's options with this tab's cache choice, in the live precision; live
        decodes are greedy."""
        return decode_options(self.defaults.options, cache_on=cache_on, mode=mode, beam_size=1,
                              precision=self.defaults.live_precision)

    def session(self, request) -> Optional[TabSession]:
        return self.sessions.get(session_key(request))

    def show_model(self, model_name, request: gr.Request = None):
        """The model in the header changed: an idle Live tab describes the new one (a
        session in progress keeps its model until the next Record)."""
        session = self.session(request)
        if session is not None and session.active:
            return gr.skip()
        return panel.panel_html(None, self.model(model_name), status=IDLE_TEXT)

    def download(self, session: Optional[TabSession], request) -> gr.File:
        """The downloads of a stopped session's final text: the .txt, and SRT and VTT
        subtitles with each sentence's times (hidden while there is no text)."""
        final = session.final if session is not None else None
        key = session_key(request)
        path = live_transcript_file(key, final.final_text if final else "")
        if path is None:
            return gr.File(value=None, visible=False)
        subtitles = live_subtitle_files(key, final.final_timed_words)
        return gr.File(value=[str(p) for p in [path, *subtitles]], visible=True)

    def end_if_too_long(self, session: TabSession) -> None:
        """Past the server's length limit (--max-live-minutes): the recording takes no more
        audio and the rest is made final, its text kept for the page."""
        if session.end_for_length():
            session.rendered_version = -1
            log.info("live session closed at the length limit (%.0f s): %.1f s heard",
                     self.max_session_seconds or 0, session.heard_seconds())

    def tick(self, request: gr.Request):
        """The timer: redraw what changed since the last redraw; Record offered again (and
        the text's download) when a browser recording ended by itself (closed for quiet or
        length, or failed)."""
        key = session_key(request)
        # chunks refused by the limits: said here, since the page's audio requests carry
        # no Gradio event for a warning to reach the page by
        for refused in self.mic_streams.refusals(key):
            gr.Warning(refused)
        session = self.sessions.get(key)
        if session is None:
            return (gr.skip(),) * 7
        self.end_if_too_long(session)
        if not session.active:
            self.mic_streams.close(key)  # ended however: its ticket is forgotten
        version = session.worker.view().version
        if version == session.rendered_version and session.active:
            return (gr.skip(),) * 7
        session.rendered_version = version
        return changed_only(session, render(session, session.model, note=self._note(session))) + self._controls(
            session, request)

    @staticmethod
    def _note(session: TabSession) -> str:
        """Why it ended (failed or closed; its text stays), warned about once."""
        note = session.ended_note()
        if note and not session.warned:
            session.warned = True
            gr.Warning(note)
        return note

    def _controls(self, session: TabSession, request) -> tuple:
        """Record, Stop and the download, for a browser recording that ended by itself."""
        if session.source != "browser" or session.active or session.buttons_reset:
            return (gr.skip(),) * 3
        session.buttons_reset = True
        download = self.download(session, request) if session.final is not None else gr.skip()
        return gr.Button(interactive=True), gr.Button(interactive=False), download

    def page_closed(self, request: gr.Request):
        """The tab went away (Gradio's unload event): close its session now, rather than
        when the reaper finds it idle. A desktop recording stops with it."""
        key = getattr(request, "session_hash", None)
        if not key:
            return
        session = self.sessions.pop(key)
        self.mic_streams.forget(key)
        if session is not None:
            heard = session.heard_seconds()
            session.close()
            log.info("live session closed (page closed): %s microphone, %.1f s heard", session.source, heard)
