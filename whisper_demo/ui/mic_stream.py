"""The Live tab's browser microphone, server side: the route its audio comes by.

The page records the microphone itself (browser_mic.js: an AudioWorklet, 16-bit PCM at
the browser's rate) and posts it to

    POST /live-audio/{ticket}?at=N&rate=R[&end=1]      body: little-endian int16 mono

one request at a time, each holding what was recorded while the one before was on its
way (0.1 s while the server keeps up). `at` is the chunk's first sample in the recording,
at the page's rate; `end=1` marks the last chunk (sent at Stop, possibly empty).

Why not Gradio's streaming Audio: it uploads a WAV file every 0.1 s as a queued event,
each with its status messages: ~14 events a second that took a fifth of the browser's
main thread and a third of the server's event loop on a 2-core machine, and its route
kept only the latest chunk when two came before the handler ran. Here a chunk is a plain
request body, read off the event loop, never overwritten, and in order (one in flight).

A ticket is issued by Record's handler for one recording of one browser tab and is
unguessable: one tab's audio cannot be sent into another's session. A chunk sent again
after a failed request is recognised by its `at` (the overlap is dropped); audio that
never came is filled with silence and counted, so the stream keeps the recording's clock.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..audio import AudioError, read_pcm_chunk, too_large_chunk_message
from ..limits import Limits

log = logging.getLogger(__name__)

ROUTE = "/live-audio/{ticket}"
# the page sends at most this much audio in one request (less if the server's limit is lower)
PAGE_CHUNK_SECONDS = 1.0


class MicStream:
    """One recording's audio as it arrives: where the next sample belongs, and what came
    twice or never. `feed(rate, int16 samples, arrived)` takes the new audio in order."""

    def __init__(self, key: str, feed: Callable[[int, np.ndarray, float], None],
                 accepting: Callable[[], Optional[str]], max_gap_seconds: float):
        self.ticket = secrets.token_urlsafe(24)  # what the page sends its audio with
        self.key = key  # the browser tab (Gradio's session hash)
        self.feed = feed
        self.accepting = accepting  # None while the session takes audio, else why not
        self.max_gap_seconds = max_gap_seconds
        self.rate: Optional[int] = None
        self.received = 0  # samples of the recording, at `rate`, fed so far (silence for gaps included)
        self.chunks = 0
        self.repeated = 0  # samples that came twice (a request sent again), dropped
        self.missing = 0  # samples that never came, fed as silence
        self.ended = threading.Event()  # the page's last chunk came
        self.lock = threading.Lock()  # one chunk at a time, in order

    def new_part(self, at: int, rate: int, samples: np.ndarray) -> np.ndarray:
        """The part of a chunk starting at sample `at` that the stream has not had, with
        silence before it for any samples that never came. Called under `lock`."""
        if self.rate is None:
            self.rate = rate
        elif rate != self.rate:
            raise AudioError(f"the live audio changed its sample rate from {self.rate} to {rate} Hz "
                             "mid-recording; press Record again")
        if at < self.received:  # sent again: the start was fed already
            overlap = min(self.received - at, samples.size)
            self.repeated += overlap
            return samples[overlap:]
        gap = at - self.received
        if gap > self.max_gap_seconds * rate:
            raise AudioError(f"{gap / rate:.1f} s of the live audio never reached the server; "
                             "press Record again")
        if gap:
            self.missing += gap
            return np.concatenate([np.zeros(gap, samples.dtype), samples])
        return samples

    def take(self, at: int, rate: int, samples: np.ndarray, arrived: float) -> None:
        """Feed the new part of a chunk (AudioError if it cannot belong to this stream)."""
        with self.lock:
            part = self.new_part(at, rate, samples)
            if part.size:
                self.feed(rate, part, arrived)
                self.received += part.size
            self.chunks += 1

    def note(self) -> str:
        """What went wrong on the way, for the page ("" when nothing did)."""
        rate = self.rate or 1
        notes = []
        if self.missing:
            notes.append(f"{self.missing / rate:.1f} s of the microphone's audio never reached the server "
                         "(heard as silence).")
        if self.repeated:
            notes.append(f"{self.repeated / rate:.1f} s of it was sent twice (taken once).")
        return " ".join(notes)

    def summary(self) -> str:
        rate = self.rate or 1
        return (f"{self.chunks} chunks, {self.received / rate:.1f} s at {self.rate or '?'} Hz, "
                f"{self.repeated / rate:.2f} s sent twice, {self.missing / rate:.2f} s missing (silence)")


class MicStreams:
    """The open recordings by ticket, and what each tab's page should be told."""

    def __init__(self, limits: Optional[Limits] = None):
        self.limits = limits or Limits()
        self._by_ticket: Dict[str, MicStream] = {}
        self._ticket_of: Dict[str, str] = {}  # tab -> its open ticket
        self._refused: Dict[str, List[str]] = {}  # tab -> messages for its page
        self._lock = threading.Lock()

    def page_chunk_seconds(self) -> float:
        """The most audio the page puts in one request: within both of the server's limits."""
        by_bytes = self.limits.max_chunk_bytes / 2 / 48000  # 16-bit samples at the usual 48 kHz
        return max(0.1, min(PAGE_CHUNK_SECONDS, self.limits.max_chunk_seconds, by_bytes) * 0.9)

    def open(self, key: str, feed: Callable[[int, np.ndarray, float], None],
             accepting: Callable[[], Optional[str]]) -> MicStream:
        """A new recording for tab `key` (its earlier one, if any, takes no more audio)."""
        stream = MicStream(key, feed, accepting, max_gap_seconds=self.limits.max_chunk_seconds)
        with self._lock:
            old = self._ticket_of.pop(key, None)
            if old is not None:
                self._by_ticket.pop(old, None)
            self._by_ticket[stream.ticket] = stream
            self._ticket_of[key] = stream.ticket
            self._refused.pop(key, None)
        return stream

    def of(self, key: str) -> Optional[MicStream]:
        with self._lock:
            ticket = self._ticket_of.get(key)
            return self._by_ticket.get(ticket) if ticket else None

    def close(self, key: str, wait_for_end_s: float = 0.0) -> Optional[MicStream]:
        """Tab `key`'s recording takes no more audio, once its last chunk came (waited for up
        to `wait_for_end_s`: Stop's handler runs after the page sent it, but a page that
        went away never will). Returns it, or None if there was none."""
        stream = self.of(key)
        if stream is not None and wait_for_end_s > 0 and not stream.ended.wait(wait_for_end_s):
            log.warning("live recording closed before its last chunk came (%.1f s)", wait_for_end_s)
        with self._lock:
            ticket = self._ticket_of.pop(key, None)
            if ticket is not None:
                self._by_ticket.pop(ticket, None)
        if stream is not None:
            with stream.lock:  # a chunk being fed finishes first
                pass
        return stream

    def forget(self, key: str) -> None:
        """The tab is gone."""
        self.close(key)
        with self._lock:
            self._refused.pop(key, None)

    def refusals(self, key: str) -> List[str]:
        """Why chunks of this tab were refused since the last call (for its page)."""
        with self._lock:
            return self._refused.pop(key, [])

    def too_large(self, ticket: str, size: int) -> Tuple[int, dict]:
        """The reply to a request whose body is over the size limit (refused unread)."""
        message = too_large_chunk_message(size, self.limits.max_chunk_bytes)
        with self._lock:
            stream = self._by_ticket.get(ticket)
        if stream is not None:
            self._refuse(stream, message)
        return 413, {"error": message}

    def _refuse(self, stream: MicStream, message: str) -> None:
        log.warning("live chunk refused: %s", message)
        with self._lock:
            said = self._refused.setdefault(stream.key, [])
            if len(said) < 3:  # the page needs to hear it, not a flood
                said.append(message)

    def receive(self, ticket: str, at, rate, body: bytes, end: bool, arrived: float) -> Tuple[int, dict]:
        """One request of the page: (HTTP status, JSON reply). Runs off the event loop."""
        with self._lock:
            stream = self._by_ticket.get(ticket)
        if stream is None:
            return 410, {"error": "This recording has ended on the server; press Record to start again."}
        why_not = stream.accepting()
        if why_not:
            stream.ended.set()
            return 410, {"error": why_not}
        try:
            try:
                at = int(at)
            except (TypeError, ValueError):
                raise AudioError(f"the live audio chunk's position {at!r} is not a sample number") from None
            if at < 0:
                raise AudioError(f"the live audio chunk's position {at} is negative")
            rate, samples = read_pcm_chunk(body, rate, self.limits.max_chunk_bytes, self.limits.max_chunk_seconds)
            stream.take(at, rate, samples, arrived)
        except AudioError as exc:
            self._refuse(stream, str(exc))
            return 400, {"error": str(exc)}
        finally:
            if end:
                stream.ended.set()
        return 200, {"received_seconds": round(stream.received / (stream.rate or 1), 3)}


def audio_route(streams: MicStreams):
    """The Starlette route the page posts its microphone to (given to Gradio's app at launch)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def live_audio(request):
        arrived = time.monotonic()  # fed on a thread: its arrival is now
        ticket, limit = request.path_params["ticket"], streams.limits.max_chunk_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            status, reply = streams.too_large(ticket, int(declared))
            return JSONResponse(reply, status_code=status)
        body = bytearray()
        async for part in request.stream():  # never more than the limit in memory
            body += part
            if len(body) > limit:
                status, reply = streams.too_large(ticket, len(body))
                return JSONResponse(reply, status_code=status)
        query = request.query_params
        status, reply = await run_in_threadpool(
            streams.receive, ticket, query.get("at"), query.get("rate"), bytes(body), query.get("end") == "1", arrived)
        return JSONResponse(reply, status_code=status)

    return Route(ROUTE, live_audio, methods=["POST"])
