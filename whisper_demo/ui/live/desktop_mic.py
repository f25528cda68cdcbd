"""The Live tab's handlers for this computer's microphone (the accordion under the browser
microphone): Start records the machine that runs the app, through whisper_demo/live/mic.py,
into the tab's session; Stop commits the rest.

Whether it can be used is known when the page is built: not on a shared server unless the
operator allows it (sharing.py), not without PortAudio or an input device. Then the page
shows Start and Stop disabled with the reason beside them (desktop_mic_problem), and
Start still refuses on the server, whatever a client sends.
"""

from __future__ import annotations

from typing import Optional

import gradio as gr

from ..render.live_view import render
from ..store import Defaults
from .sessions import LiveSessions, sent, session_key

SERVER_MIC_OFF = ("This computer's microphone is off on this shared server: visitors cannot "
                  "record the room it stands in. Use the browser microphone above. (The operator "
                  "can turn it on with --allow-server-mic.)")
READY_TEXT = "Ready: records on the machine that runs this app (for when the browser can't share a microphone)."


def desktop_mic_problem(defaults: Optional[Defaults] = None) -> Optional[str]:
    """Why this page cannot record this computer's microphone, or None when it can: off on
    a shared server (the sharing policy), or no PortAudio or input device here."""
    if defaults is not None and not defaults.policy.server_mic:
        return SERVER_MIC_OFF
    from ...live.mic_device import availability

    problem = availability()
    return f"Unavailable here: {problem}" if problem else None


def availability_text(problem: Optional[str]) -> str:
    """The accordion's status line: ready, or why not (desktop_mic_problem)."""
    return f"⚠️ {problem}" if problem else READY_TEXT


class DesktopMic:
    """Start and Stop of this computer's microphone, over the tab's sessions (`live`)."""

    def __init__(self, live: LiveSessions):
        self.live = live

    def start(self, cache_on, mode, model_name=None, request: gr.Request = None):
        from ...live import mic

        live = self.live
        key, model = session_key(request), live.model(model_name)
        if live.defaults is not None and not live.defaults.policy.server_mic:
            gr.Warning(SERVER_MIC_OFF)
            return self._refused(model, SERVER_MIC_OFF)
        options = live.options(cache_on, mode)
        source = mic.DesktopMicSource(model, options)
        try:
            source.start()
        except mic.MicUnavailable as exc:
            message = f"This computer's microphone is unavailable: {exc}"
            gr.Warning(message)
            return self._refused(model, message)
        try:
            session = live.open(key, lambda: live.new_session(model, options, "desktop", desktop=source))
        except gr.Error:
            source.close()
            raise
        return ((gr.Timer(active=True),) + ("🎙️ Recording this computer's microphone…",)
                + sent(session, render(session, model)) + (gr.File(value=None, visible=False),))

    @staticmethod
    def _refused(model, message: str) -> tuple:
        return ((gr.Timer(active=False),) + (f"⚠️ {message}",) + render(None, model, note=message)
                + (gr.File(value=None, visible=False),))

    def stop(self, request: gr.Request):
        session = self.live.session(request)
        if session is None or session.desktop is None:
            return (gr.Timer(active=False),) + ("Not recording.",) + (gr.skip(),) * 5
        session.finish()
        session.rendered_version = -1
        return ((gr.Timer(active=False),) + ("Stopped.",) + sent(session, render(session, session.model))
                + (self.live.download(session, request),))
