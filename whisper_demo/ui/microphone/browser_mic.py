"""The Live tab's handlers for the browser microphone: Record opens the microphone in the
page and a session on the server, the page posts the audio to the session's ticket, Stop
sends the rest and gives it its final text.

The page records and sends the audio itself (browser_mic.js, put in the page's head) to
a route of its own (route.py, mic_stream.py), not through Gradio's events: Record's handler only
opens the session and hands the page its ticket; Stop's waits for the last chunk.

    Record: js open() -> start(problem, ...) -> ticket -> js begin(ticket)
    Stop:   js stop() (the last chunk sent) -> stop()
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import gradio as gr

from ..live.sessions import LiveSessions, sent, session_key
from ..live.tab_session import DEFAULT_POLICY
from ..render.live_view import render
from .mic_stream import ROUTE

log = logging.getLogger(__name__)

BROWSER_MIC_JS = "<script>\n" + (Path(__file__).with_name("browser_mic.js").read_text()) + "\n</script>\n"
# Record's first step, in the page: open the microphone; its problem (or "") becomes the
# handler's first input
OPEN_JS = "async (problem, ...rest) => [await window.whisperKvMic.open(), ...rest]"
BEGIN_JS = "(ticket) => { window.whisperKvMic.begin(ticket); }"
CANCEL_JS = "() => { window.whisperKvMic.cancel(); }"
STOP_JS = "async () => { await window.whisperKvMic.stop(); }"
# Stop's handler waits this long for the page's last chunk (sent before it runs)
LAST_CHUNK_WAIT_S = 5.0


def buttons(recording: bool):
    """Record and Stop as the page shows them: one of the two can be pressed."""
    return gr.Button(interactive=not recording), gr.Button(interactive=recording)


class BrowserMic:
    """Record, Stop and the cache switches of the browser microphone, over the tab's
    sessions (`live`)."""

    def __init__(self, live: LiveSessions):
        self.live = live

    def start(self, problem, cache_on, mode, policy=DEFAULT_POLICY, model_name=None, request: gr.Request = None):
        """Record pressed and the page holds the microphone (else `problem` says why not): a
        fresh session with the model chosen in the header and the policy chosen in the
        tab, and the page's ticket to send its audio with."""
        if problem:
            raise gr.Error(problem, title="No microphone")
        live = self.live
        key, model = session_key(request), live.model(model_name)
        session = live.open(key, lambda: live.new_session(model, live.options(cache_on, mode), "browser",
                                                          policy=policy))
        session.mic_stream = live.mic_streams.open(key, session.worker.feed, session.refusal)
        reply = json.dumps({"path": ROUTE.format(ticket=session.mic_stream.ticket).lstrip("/"),
                            "max_chunk_seconds": live.mic_streams.page_chunk_seconds()})
        return ((gr.Timer(active=True), reply) + buttons(recording=True)
                + sent(session, render(session, session.model)) + (gr.File(value=None, visible=False),))

    def stop(self, model_name=None, request: gr.Request = None):
        """Stop pressed, after the page sent its last chunk: the rest is made final and the
        page offers the final text as a download."""
        key = session_key(request)
        session = self.live.sessions.get(key)
        stream = self.live.mic_streams.close(key, wait_for_end_s=LAST_CHUNK_WAIT_S if session is not None else 0)
        if session is None:
            return ((gr.Timer(active=False),) + buttons(recording=False) + render(None, self.live.model(model_name))
                    + (gr.File(value=None, visible=False),))
        session.finish()
        session.rendered_version = -1
        session.buttons_reset = True
        stats = session.worker.view().stats
        log.info("live session stopped: %.1f s heard, %d re-decodes, %d final passes; microphone: %s",
                 session.heard_seconds(), stats.decodes if stats else 0, stats.final_passes if stats else 0,
                 stream.summary() if stream is not None else "no stream")
        return ((gr.Timer(active=False),) + buttons(recording=False) + sent(session, render(session, session.model))
                + (self.live.download(session, request),))

    def set_options(self, cache_on, mode, request: gr.Request = None):
        """The cache switch or mode changed while recording: from the next re-decode on."""
        session = self.live.session(request)
        if session is not None and session.active and session.source == "browser":
            session.set_options(self.live.options(cache_on, mode))
