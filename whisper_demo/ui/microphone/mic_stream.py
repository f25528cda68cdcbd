"""The Live tab's browser microphone, server side: the recordings its audio feeds, and what
each request of the page may add to them (the Starlette route itself is route.py).

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

What a ticket may do is enforced here, not trusted to the page:
- one request in flight per ticket: a second one at the same time is refused (409) at
  once, never queued on a lock in the thread pool Gradio's handlers share;
- no more audio than the wall clock since Record allows, give or take MAX_AHEAD_SECONDS
  (429): a client cannot feed faster than real time;
- a request adds at most --max-chunk-seconds, silence for a gap included (400);
- a ticket is looked up before any of its body is read (route.py), and forgotten as soon
  as its session ends, however it ends (Stop, Record again, the tab closed, closed for
  quiet or length, failed);
- once the session takes no more audio (closed, failed, past --max-live-minutes), its
  ticket is refused with the reason (410).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ...audio import AudioError, read_pcm_chunk, too_large_chunk_message
from ...limits import Limits

log = logging.getLogger(__name__)

ROUTE = "/live-audio/{ticket}"
# the page sends at most this much audio in one request (less if the server's limit is lower)
PAGE_CHUNK_SECONDS = 1.0
# How far a recording's audio may run ahead of the server's clock since Record. An honest
# page is never ahead by more than what it recorded before Record's handler handed it the
# ticket (the microphone opens first, in the page: well under a second) plus the drift
# between the browser's audio clock and the server's (milliseconds a minute); 3 s covers
# both on a slow machine, and still holds any client to real time, 3 s early at most.
MAX_AHEAD_SECONDS = 3.0

Reply = Tuple[int, dict]  # (HTTP status, JSON body)


class AheadOfClock(AudioError):
    """More audio than the time since Record allows (refused with 429)."""


class MicStream:
    """One recording's audio as it arrives: where the next sample belongs, and what came
    twice or never. `feed(rate, int16 samples, arrived)` takes the new audio in order."""

    def __init__(self, key: str, feed: Callable[[int, np.ndarray, float], None],
                 accepting: Callable[[], Optional[str]], max_chunk_seconds: float, opened: float = 0.0):
        self.ticket = secrets.token_urlsafe(24)  # what the page sends its audio with
        self.key = key  # the browser tab (Gradio's session hash)
        self.feed = feed
        self.accepting = accepting  # None while the session takes audio, else why not
        self.max_chunk_seconds = max_chunk_seconds  # the most one request may add, gap included
        self.opened = opened  # Record, on the streams' clock: audio may not run ahead of it
        self.rate: Optional[int] = None
        self.received = 0  # samples of the recording, at `rate`, fed so far (silence for gaps included)
        self.chunks = 0
        self.repeated = 0  # samples that came twice (a request sent again), dropped
        self.missing = 0  # samples that never came, fed as silence
        self.ended = threading.Event()  # the page's last chunk came
        self.busy = threading.Lock()  # a request in flight: taken without waiting (MicStreams.admit)
        self.lock = threading.Lock()  # a chunk being fed (close waits for it)
        self.discard: Callable[[], None] = lambda: None  # its ticket forgotten (MicStreams.open sets it)

    def _placed(self, at: int, rate: int, size: int) -> Tuple[int, int]:
        """(samples of the chunk fed before, samples of silence before it) for a chunk of
        `size` samples starting at `at`; AudioError if it cannot belong to this stream."""
        if self.rate is not None and rate != self.rate:
            raise AudioError(f"the live audio changed its sample rate from {self.rate} to {rate} Hz "
                             "mid-recording; press Record again")
        if at < self.received:  # sent again: the start was fed already
            return min(self.received - at, size), 0
        gap = at - self.received
        if gap + size > self.max_chunk_seconds * rate:
            raise AudioError(f"{gap / rate:.1f} s of the live audio never reached the server: with this "
                             f"chunk's {size / rate:.1f} s, more than the {self.max_chunk_seconds:g} s one "
                             "chunk may add (--max-chunk-seconds); press Record again")
        return 0, gap

    def _check_clock(self, rate: int, added: int, now: float) -> None:
        ahead = (self.received + added) / rate - (now - self.opened)
        if ahead > MAX_AHEAD_SECONDS:
            raise AheadOfClock(f"the live audio is {ahead:.1f} s ahead of the time since Record (at most "
                               f"{MAX_AHEAD_SECONDS:g} s allowed): a microphone sends audio no faster "
                               "than it is spoken")

    def take(self, at: int, rate: int, samples: np.ndarray, arrived: float) -> None:
        """Feed the new part of a chunk, with silence before it for samples that never
        came (AudioError if it cannot belong to this stream, nothing fed then)."""
        with self.lock:
            skip, gap = self._placed(at, rate, samples.size)
            self._check_clock(rate, gap + samples.size - skip, arrived)
            self.rate = rate
            self.repeated += skip
            self.missing += gap
            part = samples[skip:]
            if gap:
                part = np.concatenate([np.zeros(gap, samples.dtype), part])
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


ENDED = "This recording has ended on the server; press Record to start again."
BUSY = ("This recording's previous chunk is still being taken: its page sends one request at a "
        "time, and the server takes no more.")


class MicStreams:
    """The open recordings by ticket, and what each tab's page should be told. A request
    is admit()ted (its ticket, one at a time), then take()n off the event loop, then
    release()d; receive() is the three in one."""

    def __init__(self, limits: Optional[Limits] = None, clock: Callable[[], float] = time.monotonic):
        self.limits = limits or Limits()
        self.clock = clock  # when a recording opened and a request arrived
        self._by_ticket: Dict[str, MicStream] = {}
        self._ticket_of: Dict[str, str] = {}  # tab -> its open ticket
        self._refused: Dict[str, List[str]] = {}  # tab -> messages for its page
        self._lock = threading.Lock()  # the dicts only: never held while anything else runs

    def page_chunk_seconds(self) -> float:
        """The most audio the page puts in one request: within both of the server's limits."""
        by_bytes = self.limits.max_chunk_bytes / 2 / 48000  # 16-bit samples at the usual 48 kHz
        return max(0.1, min(PAGE_CHUNK_SECONDS, self.limits.max_chunk_seconds, by_bytes) * 0.9)

    def open(self, key: str, feed: Callable[[int, np.ndarray, float], None],
             accepting: Callable[[], Optional[str]]) -> MicStream:
        """A new recording for tab `key` (its earlier one, if any, takes no more audio)."""
        stream = MicStream(key, feed, accepting, self.limits.max_chunk_seconds, opened=self.clock())
        stream.discard = lambda: self._discard(stream)
        with self._lock:
            old = self._ticket_of.pop(key, None)
            if old is not None:
                self._by_ticket.pop(old, None)
            self._by_ticket[stream.ticket] = stream
            self._ticket_of[key] = stream.ticket
            self._refused.pop(key, None)
        return stream

    def _discard(self, stream: MicStream) -> None:
        """Forget the stream's ticket (its session ended): its requests are refused unread."""
        with self._lock:
            self._by_ticket.pop(stream.ticket, None)
            if self._ticket_of.get(stream.key) == stream.ticket:
                del self._ticket_of[stream.key]

    def of(self, key: str) -> Optional[MicStream]:
        with self._lock:
            ticket = self._ticket_of.get(key)
            return self._by_ticket.get(ticket) if ticket else None

    def close(self, key: str, wait_for_end_s: float = 0.0) -> Optional[MicStream]:
        """Tab `key`'s recording takes no more audio, once its last chunk came (waited for up
        to `wait_for_end_s`: Stop's handler runs after the page sent it, but a page that
        went away never will). Returns it, or None if there was none."""
        stream = self.of(key)
        if stream is None:
            return None
        if wait_for_end_s > 0 and not stream.ended.wait(wait_for_end_s):
            log.warning("live recording closed before its last chunk came (%.1f s)", wait_for_end_s)
        stream.discard()
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

    def admit(self, ticket: str) -> Tuple[Optional[MicStream], Optional[Reply]]:
        """(the ticket's stream, None), now holding its one place for a request in flight, or
        (None, the refusal): an unknown or ended ticket, or a request while one is in flight.
        Never waits: called before the body is read, on the event loop."""
        with self._lock:
            stream = self._by_ticket.get(ticket)
        if stream is None:
            return None, (410, {"error": ENDED})
        if not stream.busy.acquire(blocking=False):
            return None, (409, {"error": BUSY})
        why_not = stream.accepting()
        if why_not:
            stream.busy.release()
            stream.ended.set()
            stream.discard()
            return None, (410, {"error": why_not})
        return stream, None

    @staticmethod
    def release(stream: MicStream) -> None:
        stream.busy.release()

    def too_large(self, stream: MicStream, size: int) -> Reply:
        """The reply to a request whose body is over the size limit (refused unread)."""
        message = too_large_chunk_message(size, self.limits.max_chunk_bytes)
        self._refuse(stream, message)
        return 413, {"error": message}

    def _refuse(self, stream: MicStream, message: str) -> None:
        log.warning("live chunk refused: %s", message)
        with self._lock:
            said = self._refused.setdefault(stream.key, [])
            if len(said) < 3:  # the page needs to hear it, not a flood
                said.append(message)

    def take(self, stream: MicStream, at, rate, body: bytes, end: bool, arrived: float) -> Reply:
        """One admitted request's chunk: (HTTP status, JSON reply). Runs off the event loop."""
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
            return (429 if isinstance(exc, AheadOfClock) else 400), {"error": str(exc)}
        finally:
            if end:
                stream.ended.set()
        return 200, {"received_seconds": round(stream.received / (stream.rate or 1), 3)}

    def receive(self, ticket: str, at, rate, body: bytes, end: bool, arrived: float) -> Reply:
        """admit, take and release one request (the route does them apart, to refuse an
        unknown or busy ticket before reading its body)."""
        stream, refused = self.admit(ticket)
        if refused is not None:
            return refused
        try:
            return self.take(stream, at, rate, body, end, arrived)
        finally:
            self.release(stream)
