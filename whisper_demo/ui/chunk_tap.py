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

A chunk is read with a limit (audio.read_chunk_file: refused by its size and its header
before it is decoded), and its uploaded file is deleted once fed: a recording is ten
files a second, which Gradio would otherwise keep until the server stops.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

from ..audio import AudioError, read_chunk_file
from ..limits import Limits
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


# A fed chunk's file is deleted this long after it was fed, not at once: Gradio names an
# upload's folder by its content, so a second chunk with the same bytes (digital silence)
# lands on the same path, and deleting at once could take that one before it is read.
DELETE_FED_AFTER_S = 30.0


def _delete_upload(path: str) -> None:
    """Remove an uploaded chunk and its folder (Gradio makes one per upload) if now empty."""
    try:
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    except OSError:  # gone already, or the folder still holds another file
        pass


class ChunkInbox:
    """Tapped chunks by browser session, in recording order, until they are fed."""

    def __init__(self, limits: Optional[Limits] = None):
        self.limits = limits or Limits()
        # every streamed chunk, by browser session, until the handler feeds it (see
        # tapped), in recording order: the page numbers its chunks, a sequencer per page reorders
        self._inbox: dict = collections.defaultdict(collections.deque)
        self._order: dict = {}  # browser session -> ChunkSequencer
        self._refused: dict = collections.defaultdict(list)  # browser session -> messages
        self._fed: collections.deque = collections.deque()  # (fed at, browser session, path)
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
        arrived = time.monotonic()  # the chunk is read later, on a thread: its arrival is now
        with self._inbox_lock:
            order = self._order.setdefault(key, ChunkSequencer())
            self._inbox[key].extend(order.add(chunk_number(_payload_path(payload) or ""), (payload, arrived)))

    def discard(self, key: str) -> None:
        """Drop what is waiting (chunks sent after the recording was committed)."""
        with self._inbox_lock:
            self._inbox.pop(key, None)

    def forget(self, key: str) -> None:
        """The page is gone: its chunks, its sequencer and its chunks' files."""
        with self._inbox_lock:
            self._inbox.pop(key, None)
            self._order.pop(key, None)
            self._refused.pop(key, None)
        self.remove_fed(key)

    def refusals(self, key: str) -> List[str]:
        """Why chunks of this session were refused since the last call (for its page)."""
        with self._inbox_lock:
            return self._refused.pop(key, [])

    def remove_fed(self, key: Optional[str] = None) -> int:
        """Delete the files of fed chunks: all of `key`'s (its recording ended), and any
        session's fed over DELETE_FED_AFTER_S ago. How many were deleted."""
        cutoff = time.monotonic() - DELETE_FED_AFTER_S
        doomed = []
        with self._inbox_lock:
            while self._fed and self._fed[0][0] < cutoff:  # oldest first: fed in time order
                doomed.append(self._fed.popleft())
            if key is not None:
                kept: collections.deque = collections.deque()
                for entry in self._fed:
                    (doomed if entry[1] == key else kept).append(entry)
                self._fed = kept
        for _, _, path in doomed:
            _delete_upload(path)
        return len(doomed)

    def _release_held(self, key: str, flush: bool = False) -> None:
        """Move the chunks the sequencer no longer needs to hold into the inbox."""
        with self._inbox_lock:
            order = self._order.get(key)
            if order is not None:
                self._inbox[key].extend(order.ready(flush))

    def feed(self, key: str, feed: Callable, wait: bool = True, flush: bool = False) -> int:
        """Hand every chunk of this browser session that is in turn to `feed(sample_rate,
        samples, arrived)` (arrived: when it was tapped, time.monotonic()), oldest first (flush: every one, the recording has ended). With
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
                    break
                payload, arrived = box.popleft()
            path = _chunk_path(payload)
            if path is None:
                continue
            try:
                sample_rate, data = read_chunk_file(path, self.limits.max_chunk_bytes,
                                                    self.limits.max_chunk_seconds)
                feed(sample_rate, data, arrived)
                fed += 1
            except AudioError as exc:
                log.warning("live chunk refused: %s", exc)
                with self._inbox_lock:
                    if len(self._refused[key]) < 3:  # the page needs to hear it, not a flood
                        self._refused[key].append(str(exc))
            except Exception:
                log.exception("a live chunk could not be read: %s", path)
            with self._inbox_lock:
                self._fed.append((time.monotonic(), key, path))
        self.remove_fed()
        return fed
