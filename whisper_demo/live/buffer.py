"""The audio a session holds: everything since its last cut, where it starts in the
stream, and the one place stream samples become seconds and back.

    buffer = AudioBuffer(on_cut=forget)   # forget(offset): what else drops its older audio
    buffer.append(samples)
    buffer.slice(start, until)            # stream samples, whatever was cut before
    buffer.cut_to(sample)                 # drop the audio before it
    to_seconds(buffer.offset), nearest_sample(cut_s)

Positions are stream samples at 16 kHz, counted from the session's first sample.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..audio import SAMPLE_RATE


def to_seconds(samples: int) -> float:
    """Stream samples (a position or a length) in seconds."""
    return samples / SAMPLE_RATE


def nearest_sample(seconds: float) -> int:
    """A stream time (a word's end, a cut) as the sample nearest to it."""
    return int(round(seconds * SAMPLE_RATE))


def to_samples(seconds: float) -> int:
    """A length from the settings (LiveConfig's seconds) in whole samples, rounded down as
    the session has always read them."""
    return int(seconds * SAMPLE_RATE)


class AudioBuffer:
    def __init__(self, on_cut: Optional[Callable[[int], None]] = None):
        self.samples = np.zeros(0, dtype=np.float32)
        self.offset = 0  # stream sample of samples[0]
        self._on_cut = on_cut  # told the new offset after every cut
        self._trimmed = 0  # samples cut since take_trimmed()

    @property
    def end(self) -> int:
        """Stream sample just after the newest audio."""
        return self.offset + self.samples.size

    @property
    def start_s(self) -> float:
        return to_seconds(self.offset)

    @property
    def seconds(self) -> float:
        return to_seconds(self.samples.size)

    def append(self, audio: np.ndarray) -> None:
        self.samples = np.concatenate([self.samples, audio])

    def slice(self, start: int, until: Optional[int] = None) -> np.ndarray:
        """The audio from stream sample `start` to `until` (default: the end)."""
        return self.samples[start - self.offset:None if until is None else until - self.offset]

    def cut_to(self, stream_sample: int) -> int:
        """Drop the audio before a stream sample (kept within the buffer); how many samples."""
        stream_sample = min(max(stream_sample, self.offset), self.end)
        n = stream_sample - self.offset
        if n <= 0:
            return 0
        self.samples = self.samples[n:].copy()
        self.offset = stream_sample
        self._trimmed += n
        if self._on_cut is not None:
            self._on_cut(self.offset)
        return n

    def take_trimmed(self) -> float:
        """Seconds cut from the start since the last call (what an update reports)."""
        trimmed, self._trimmed = self._trimmed, 0
        return to_seconds(trimmed)
