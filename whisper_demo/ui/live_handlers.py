"""What the Live tab's handlers share, whichever microphone feeds a session: the tab's
sessions, found by the browser session's hash; the model and options a session decodes
with; the timer's redraw; and the end of a session when its page closes.

The handlers of each microphone build on this: live_browser_mic.py (the browser's) and
live_desktop_mic.py (this computer's); live_tab.py joins them into LiveTab and lays the
tab out.
"""

from __future__ import annotations

import html
import logging
from typing import Optional

import gradio as gr

from ..events import DecodeOptions
from ..limits import Limits, live_sessions_full_message
from ..live import SessionRegistry
from ..live.registry import SessionLimitReached
from ..options import decode_options
from . import panel
from .live_tab_session import TabSession
from .live_view import IDLE_TEXT, changed_only, render
from .mic_stream import MicStreams
from .session_files import live_transcript_file
from .store import Defaults, ModelStore

log = logging.getLogger(__name__)


class LiveHandlers:
    """Sessions are found by the browser session's hash, not passed through a gr.State:
    chunk events are queued before the previous one returns, so a State would hand a
    stale (empty) value to the next chunk, which would then start a second session and
    split the audio between them."""

    def __init__(self, store: ModelStore, defaults: Defaults, idle_timeout_s: Optional[float] = None):
        self.store = store
        self.defaults = defaults
        limits = defaults.limits if defaults is not None else Limits()
        self.sessions: SessionRegistry[TabSession] = SessionRegistry(
            idle_timeout_s or limits.live_quiet_seconds, max_running=limits.max_live_sessions,
            full_message=live_sessions_full_message(limits.max_live_sessions or 0))
        self.mic_streams = MicStreams(limits)  # the browser microphones' recordings (mic_stream.py)

    def _open(self, key: str, open_session):
        """open_session() under the registry's session limit: past it the visitor is told
        the server is busy."""
        try:
            return open_session()
        except SessionLimitReached as exc:
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

    def download(self, session: Optional[TabSession], request) -> gr.DownloadButton:
        """The download of a stopped session's final text (hidden while there is none)."""
        final = session.final if session is not None else None
        path = live_transcript_file(getattr(request, "session_hash", None), final.final_text if final else "")
        if path is None:
            return gr.DownloadButton(visible=False)
        return gr.DownloadButton(value=str(path), visible=True)

    def tick(self, request: gr.Request):
        """The timer: redraw what changed since the last redraw; Record offered again when
        a browser recording ended by itself (closed for quiet, or failed)."""
        # chunks refused by the limits: said here, since the page's audio requests carry
        # no Gradio event for a warning to reach the page by
        for refused in self.mic_streams.refusals(self._key(request)):
            gr.Warning(refused)
        session = self.session(request)
        if session is None:
            return (gr.skip(),) * 6
        ended = session.source == "browser" and not session.active and not session.buttons_reset
        version = session.worker.view().version
        if version == session.rendered_version and session.active:
            return (gr.skip(),) * 6
        session.rendered_version = version
        note = session.ended_note()  # failed or closed: its text stays, and the page is told why
        if note and not session.warned:
            session.warned = True
            gr.Warning(note)
        controls = (gr.skip(),) * 2
        if ended:
            session.buttons_reset = True
            controls = (gr.Button(interactive=True), gr.Button(interactive=False))
        return changed_only(session, render(session, session.model, note=note)) + controls

    def page_closed(self, request: gr.Request):
        """The tab went away (Gradio's unload event): close its session now, rather than
        when the reaper finds it idle. A desktop recording stops with it."""
        key = self._key(request)
        session = self.sessions.pop(key)
        self.mic_streams.forget(key)
        if session is not None:
            heard = session.heard_seconds()
            session.close()
            log.info("live session closed (page closed): %s microphone, %.1f s heard", session.source, heard)
