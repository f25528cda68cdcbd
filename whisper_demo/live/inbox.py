"""The audio a live session has been given and not yet taken: chunks from any thread,
resampled as one stream, when each arrived, and what was lost on the way or dropped for a
stalled decoder.

One lock guards it; the decoding thread takes the waiting audio in one call (take()).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Deque, List, Optional, Sequence, Tuple

import numpy as np

from ..audio import SAMPLE_RATE, ChunkStream


class AudioInbox:
    def __init__(self, max_backlog_seconds: float, clock: Callable[[], float]):
        self.clock = clock
        self.max_backlog = int(max_backlog_seconds * SAMPLE_RATE)
        self._lock = threading.Lock()
        self._pending: List[np.ndarray] = []
        self._pending_samples = 0
        self.received = 0  # stream samples received
        self._arrivals: Deque[Tuple[int, float]] = deque()  # (stream end sample, wall time)
        self._first_arrival: Optional[float] = None
        self._first_chunk = 0  # samples
        self._max_chunk = 0
        self._behind = 0.0  # wall time since the first chunk minus audio after it
        self.dropped = 0  # samples discarded for a decoder that took none
        self.stopped_at: Optional[float] = None  # from then on the clock no longer counts
        self.last_activity = clock()
        self._chunks = ChunkStream()
        self._resampling = threading.Lock()  # chunks are resampled, and queued, in the order they come

    def add_chunk(self, sample_rate: int, chunk, arrived: float) -> None:
        """A chunk of any rate, dtype and channel count (AudioError if not audio),
        resampled as one stream with the chunks before it (audio.ChunkStream)."""
        with self._resampling:
            self.add(self._chunks(sample_rate, np.asarray(chunk)), arrived)

    def flush(self, arrived: float) -> None:
        """What the resampler still holds: the end of the recording."""
        with self._resampling:
            self.add(self._chunks.flush(), arrived)

    def add(self, samples: np.ndarray, arrived: float) -> None:
        if samples.size == 0:
            return
        with self._lock:
            self._pending.append(samples)
            self._pending_samples += samples.size
            self.received += samples.size
            self._arrivals.append((self.received, arrived))
            if self._first_arrival is None:
                self._first_arrival, self._first_chunk = arrived, samples.size
            self._max_chunk = max(self._max_chunk, samples.size)
            self._behind = (arrived - self._first_arrival) - (self.received - self._first_chunk) / SAMPLE_RATE
            # Nobody consumes (a stalled decoder): keep memory bounded, oldest audio first.
            while self._pending_samples > self.max_backlog and len(self._pending) > 1:
                dropped = self._pending.pop(0)
                self._pending_samples -= dropped.size
                self.dropped += dropped.size
            self.last_activity = arrived

    def waiting(self) -> bool:
        with self._lock:
            return self._pending_samples > 0

    def take(self) -> Tuple[Optional[np.ndarray], Optional[float]]:
        """(the waiting audio in one array or None, when the newest of it arrived)."""
        with self._lock:
            chunks, self._pending, self._pending_samples = self._pending, [], 0
            newest = self._arrivals[-1][1] if self._arrivals else None
        return (np.concatenate(chunks) if chunks else None), newest

    def forget_before(self, stream_sample: int) -> None:
        """Arrival marks are kept only for audio the session still holds."""
        with self._lock:
            while len(self._arrivals) > 1 and self._arrivals[1][0] <= stream_sample:
                self._arrivals.popleft()

    def arrival_of(self, stream_seconds: float, default: float) -> float:
        """When the audio holding a stream time arrived."""
        with self._lock:
            arrivals = list(self._arrivals)
        return arrival_of(arrivals, stream_seconds, default)

    @property
    def lost_seconds(self) -> float:
        """Audio that should have arrived and did not: the wall time since the first chunk
        less the audio received after it, beyond the slack of one chunk. While the session
        runs, a stream that stopped arriving counts from the clock; from stop on, the
        clock no longer counts (the final decode may take a while)."""
        with self._lock:
            slack = self._max_chunk / SAMPLE_RATE
            behind = self._behind
            if self._first_arrival is not None and self.stopped_at is None:
                behind = max(behind, (self.clock() - self._first_arrival)
                             - (self.received - self._first_chunk) / SAMPLE_RATE - slack)
        return behind if behind > slack else 0.0


def arrival_of(arrivals: Sequence[Tuple[int, float]], stream_seconds: float, default: float) -> float:
    """When the audio holding a stream time arrived ((end sample, wall time) marks)."""
    sample = int(stream_seconds * SAMPLE_RATE)
    return next((wall for end, wall in arrivals if end >= sample), arrivals[-1][1] if arrivals else default)
