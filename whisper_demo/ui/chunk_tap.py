"""Every chunk of the browser microphone's stream, kept, and fed to its session in order.

Why: Gradio 6.31's streaming microphone sends a chunk every 0.1 s (the audio component
sets `stream_every=.1` in the browser whatever `.stream(stream_every=...)` says), each as
POST /stream/{event_id}, and that route only does `event.data = body; event.signal.set()`:
the stream's queue loop then calls the handler once with whatever `event.data` holds.
Every chunk that arrives while the previous call is still on its way through the queue
loop and the thread pool is overwritten, silently. On a busy 2-core machine (decode
thread + Chromium + server) that lost half the audio. The tap keeps every chunk: it
records each body the moment Gradio stores it (on the event loop, no work done there),
and the handler then feeds all of them, in order.

Two parts: install_chunk_tap() makes Gradio's Event hand every body to the object whose
stream handler is marked @receives_every_chunk (the Live tab); a ChunkInbox holds the
bodies per browser session, in recording order (chunk_order.py), until they are fed.
"""

from __future__ import annotations

import collections
import logging
import threading
from pathlib import Path
from typing import Callable, Optional

import gradio as gr

from ..audio import AudioError
from .chunk_order import ChunkSequencer, chunk_number

log = logging.getLogger(__name__)


def receives_every_chunk(handler):
    """Mark a stream handler method: once the tap is installed, every chunk body of its
    stream is also handed to `handler.__self__.tapped(session_hash, body)` as it arrives."""
    handler.receives_every_chunk = True
    return handler


def install_chunk_tap() -> bool:
    """Make `Event.data` a property whose setter also hands stream chunks of a marked
    handler (receives_every_chunk) to its object. Returns False (and the handler falls back
    to the latest chunk only) when this Gradio does not look like the one this was written
    for. Installing twice is harmless: the property itself says it is installed."""
    try:
        from gradio import queueing
        event_cls = queueing.Event
    except Exception:  # pragma: no cover - another Gradio
        return False
    installed = vars(event_cls).get("data")
    if isinstance(installed, property) and getattr(installed.fget, "is_chunk_tap", False):
        return True
    if "data" in vars(event_cls) or not hasattr(event_cls, "streaming"):
        return False

    def get_data(self):
        return self.__dict__.get("data")

    def set_data(self, value):
        self.__dict__["data"] = value
        if value is None:
            return
        try:
            handler = getattr(self.fn, "fn", None)
            if getattr(getattr(handler, "__func__", None), "receives_every_chunk", False):
                handler.__self__.tapped(self.session_hash, value)
        except Exception:  # never break Gradio's own bookkeeping
            log.exception("live chunk tap failed")

    get_data.is_chunk_tap = True
    event_cls.data = property(get_data, set_data)
    return True


def _payload_path(payload) -> Optional[str]:
    if isinstance(payload, dict):
        return payload.get("path")
    return getattr(payload, "path", None)


def _chunk_path(payload) -> Optional[str]:
    """The uploaded file of an audio payload, only if it lies in Gradio's upload folder
    (what Gradio's own preprocessing checks: a client cannot make us read other files)."""
    path = _payload_path(payload)
    if not path:
        return None
    from gradio import utils as gr_utils

    folder = Path(gr_utils.get_upload_folder()).resolve()
    resolved = Path(path).resolve()
    if resolved != folder and folder not in resolved.parents:
        log.warning("ignoring a live chunk outside the upload folder: %s", path)
        return None
    return str(resolved)


class ChunkInbox:
    """Tapped chunks by browser session, in recording order, until they are fed."""

    def __init__(self):
        # every streamed chunk, by browser session, until the handler feeds it (see
        # tapped), in recording order: the page numbers its chunks, a sequencer per page reorders
        self._inbox: dict = collections.defaultdict(collections.deque)
        self._order: dict = {}  # browser session -> ChunkSequencer
        self._inbox_lock = threading.Lock()
        self._feed_lock = threading.Lock()  # one feeder at a time: chunks stay in order

    def new_recording(self, key: str) -> ChunkSequencer:
        """The page's sequencer, told a recording starts (its numbering spans the page's life)."""
        with self._inbox_lock:
            order = self._order.setdefault(key, ChunkSequencer())
            order.new_recording()
        return order

    def add(self, key: str, payload) -> None:
        """A tapped chunk: in the inbox once the sequencer has it in turn. Quick, and on the
        event loop: never waits for the feed lock."""
        with self._inbox_lock:
            order = self._order.setdefault(key, ChunkSequencer())
            self._inbox[key].extend(order.add(chunk_number(_payload_path(payload) or ""), payload))

    def discard(self, key: str) -> None:
        """Drop what is waiting (chunks sent after the recording was committed)."""
        with self._inbox_lock:
            self._inbox.pop(key, None)

    def forget(self, key: str) -> None:
        """The page is gone: its chunks and its sequencer."""
        with self._inbox_lock:
            self._inbox.pop(key, None)
            self._order.pop(key, None)

    def _release_held(self, key: str, flush: bool = False) -> None:
        """Move the chunks the sequencer no longer needs to hold into the inbox."""
        with self._inbox_lock:
            order = self._order.get(key)
            if order is not None:
                self._inbox[key].extend(order.ready(flush))

    def feed(self, key: str, feed: Callable, wait: bool = True, flush: bool = False) -> int:
        """Hand every chunk of this browser session that is in turn to `feed(sample_rate,
        samples)`, oldest first (flush: every one, the recording has ended). With
        wait=False, leaves them to whoever is feeding already."""
        self._release_held(key, flush)
        fed = 0
        while True:
            if not self._feed_lock.acquire(blocking=wait):
                return fed
            try:
                fed += self._drain(key, feed)
            finally:
                self._feed_lock.release()
            with self._inbox_lock:  # one tapped while we released the lock: take it too
                if not self._inbox.get(key):
                    return fed

    def _drain(self, key: str, feed: Callable) -> int:
        fed = 0
        while True:
            with self._inbox_lock:
                box = self._inbox.get(key)
                if not box:
                    self._inbox.pop(key, None)
                    return fed
                payload = box.popleft()
            path = _chunk_path(payload)
            if path is None:
                continue
            try:
                from gradio import processing_utils

                sample_rate, data = processing_utils.audio_from_file(path)
                feed(sample_rate, data)
                fed += 1
            except AudioError as exc:
                gr.Warning(str(exc))
            except Exception:
                log.exception("a live chunk could not be read: %s", path)
