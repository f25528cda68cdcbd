"""The thread that drives a LiveSession: `feed()` never waits for a decode.

Used by the web page (browser chunks, this computer's microphone): the handler feeds audio
and reads `view()`, an immutable snapshot; the worker re-decodes whenever enough new audio
is there and publishes every TokenEvent and LiveUpdate. Nothing outside this thread reads
the session's mutable state while it decodes. `finish()` waits until the rest is committed.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Deque, Dict, List, Optional, Tuple

import numpy as np

from ..events import TokenEvent
from ..timing import warm_up
from .driver import Source, drive
from .session import LiveSession
from .revision import Revision
from .snapshots import LiveStats, LiveUpdate

DECODE_NICENESS = 5


@dataclass(frozen=True)
class LiveView:
    """What a page shows of a session at one moment."""

    version: int  # grows with every published item
    committed: str  # the final words, then the streamed committed ones
    tentative: str
    update: Optional[LiveUpdate]  # the last one
    event: Optional[TokenEvent]  # the last decoder step
    stats: Optional[LiveStats]  # as of the last update
    error: Optional[BaseException]
    done: bool  # the worker has ended (finished, closed or failed)
    final_words: Tuple[str, ...] = ()  # the committed words that are final, one string each
    streamed: str = ""  # the committed words after them, not final yet
    # the last final pass that changed a word, and when it was published (time.monotonic):
    # the page marks the words it changed for a moment
    revision: Optional[Revision] = None
    revised_at: Optional[float] = None


def lower_thread_priority(niceness: int = DECODE_NICENESS) -> None:
    """Make the calling thread yield the CPU: on Linux a thread has its own nice value, so
    the decoder runs below the web server's handlers, which must take every audio chunk in
    time on a busy machine. Torch releases the GIL, so only the CPU is contended."""
    if not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, max(current, niceness)))
    except OSError:  # not permitted, or not Linux semantics: run at normal priority
        pass


class LiveWorker(Source):
    """Drives its session (driver.py) as the source of its audio: other threads feed it,
    Stop asks it to finish, close() to give up."""

    def __init__(self, session: LiveSession, poll_seconds: float = 0.05, history: int = 400,
                 yield_cpu: bool = False):
        self.session = session
        # In the web server the decode thread must not starve the handlers that receive the
        # chunks; in a terminal there is nothing to protect.
        self.yield_cpu = yield_cpu
        self.poll_seconds = poll_seconds
        self.history = history
        self._cond = threading.Condition()
        self._view = LiveView(0, "", "", None, None, None, None, False)
        # per-token decoder latencies of recent re-decodes, by (cache mode, beams), each
        # with whether the token was confirmed from the draft: the chart
        self._latencies: Dict[Tuple[str, int], Deque[Tuple[float, bool]]] = {}
        self._stop = False
        self._finish_requested = False
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-decode", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ any thread

    def feed(self, sample_rate: int, chunk, arrived: Optional[float] = None) -> None:
        """arrived: when the chunk reached the server (time.monotonic), if it is fed later."""
        self.session.add_audio(sample_rate, chunk, arrived)
        self._wake()

    def feed_samples(self, samples: np.ndarray) -> None:
        self.session.add_samples(samples)
        self._wake()

    def view(self) -> LiveView:
        with self._cond:
            return self._view

    def latency_series(self) -> Dict[Tuple[str, int], List[Tuple[float, bool]]]:
        """(latency ms, confirmed from the draft) per recent token, by (cache mode, beams)."""
        with self._cond:
            return {k: list(v) for k, v in self._latencies.items()}

    def request_finish(self) -> None:
        with self._cond:
            self._finish_requested = True
            self._cond.notify_all()

    def finish(self, timeout: Optional[float] = None) -> Optional[LiveUpdate]:
        """Commit the rest; returns the final LiveUpdate (None if it did not come in time)."""
        self.request_finish()
        self.done.wait(timeout)
        update = self.view().update
        return update if update is not None and update.final else None

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ the thread

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _publish(self, item) -> None:
        session = self.session
        # computed on this thread, the only one that changes the session
        if isinstance(item, TokenEvent):
            committed, tentative = session.preview(item)
        else:
            committed, tentative = item.committed, item.tentative
        with self._cond:
            view = self._view
            if isinstance(item, TokenEvent):
                key = (item.cache_mode, item.beam_size)
                self._latencies.setdefault(key, deque(maxlen=self.history)).append((item.latency_ms, item.from_draft))
                self._view = replace(view, version=view.version + 1, committed=committed, tentative=tentative,
                                     event=item, error=None, done=False)
            else:
                revision, revised_at = view.revision, view.revised_at
                if item.revision is not None and item.revision.changed:
                    revision, revised_at = item.revision, time.monotonic()
                self._view = replace(view, version=view.version + 1, committed=committed, tentative=tentative,
                                     update=item, stats=item.stats, error=None, done=False,
                                     final_words=item.final_words, streamed=item.streamed,
                                     revision=revision, revised_at=revised_at)
            self._cond.notify_all()

    # the driver's questions (driver.Source), asked on the thread

    def ended(self, session: LiveSession) -> bool:
        return self._finish_requested

    def closed(self) -> bool:
        return self._stop

    def wait(self) -> None:
        with self._cond:
            while not (self._stop or self._finish_requested or self.session.ready()):
                self._cond.wait(self.poll_seconds)

    def _run(self) -> None:
        if self.yield_cpu:
            lower_thread_priority()
        error = None
        try:
            warm_up()  # word timing's compile, once per process; audio buffers meanwhile
            drive(self.session, self, self._publish)
        except BaseException as err:  # shown by the page rather than lost in a thread
            error = err
        finally:
            with self._cond:
                view = self._view
                self._view = replace(view, version=view.version + 1, error=error, done=True)
                self.done.set()
                self._cond.notify_all()

