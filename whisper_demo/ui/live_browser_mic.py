"""The Live tab's handlers for the browser microphone: Record starts a session, every
streamed chunk is queued for it (never waiting for the decoder), Stop commits the rest.

The chunks reach the session two ways: the chunk tap (chunk_tap.py) sees each as Gradio
receives it, in recording order (chunk_order.py), and feeds it off the event loop at once;
the stream's handler feeds whatever the tap left, or the chunk itself when there is no tap.
"""

from __future__ import annotations

import logging
import time

import gradio as gr

from ..audio import AudioError, read_chunk_file
from ..events import DecodeOptions
from .chunk_tap import receives_every_chunk
from .live_handlers import LiveHandlers
from .live_tab_session import DEFAULT_POLICY, TabSession
from .live_view import render, sent

log = logging.getLogger(__name__)


class BrowserMicHandlers(LiveHandlers):
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
            return (gr.Timer(active=True),) + sent(current, render(current, current.model)) + (
                gr.DownloadButton(visible=False),)
        session = self._open(self._key(request), lambda: self.sessions.replace(
            self._key(request), lambda: self._new_browser_session(self._key(request), model,
                                                                  self._options(cache_on, mode), policy)))
        return (gr.Timer(active=True),) + sent(session, render(session, session.model)) + (
            gr.DownloadButton(visible=False),)

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
        """Stop pressed: wait for the chunks still queued, then give the rest its final text;
        the page offers that text as a download."""
        session = self.session(request)
        if session is None:
            return (gr.Timer(active=False),) + render(None, self._model(model_name)) + (gr.DownloadButton(visible=False),)
        time.sleep(0.3)  # the browser sends one more chunk after Stop
        if self.tapping and session.source == "browser" and session.final is None:
            self._feed_inbox(self._key(request), session, flush=True)  # chunks after the last call
        session.finish()
        self.inbox.remove_fed(self._key(request))  # the recording's chunk files
        session.rendered_version = -1
        stats = session.worker.view().stats
        log.info("live session stopped: %.1f s heard, %d re-decodes, %d final passes; %s", session.heard_seconds(),
                 stats.decodes if stats else 0, stats.final_passes if stats else 0,
                 session.order.summary() if session.order else "")
        return (gr.Timer(active=False),) + sent(session, render(session, session.model)) + (
            self.download(session, request),)
