"""Is there speech, and where did it end: Silero VAD over a live stream.

Silero VAD (PyPI `silero-vad`) is a small neural voice detector; its wheel carries the
model, which runs on torch with no download. It replaces a hand-made energy gate, which
let steady noise through as "voice" and called quiet speech silence. It scores 32 ms
frames (512 samples at 16 kHz) with a recurrent state, about 0.4 ms per frame here.

A frame is voiced above THRESHOLD, and stays voiced above NEG_THRESHOLD once speech has
started (the hysteresis of Silero's own `get_speech_timestamps`, which puts the second
0.15 below the first), so a soft syllable in the middle of a word does not end the speech.
THRESHOLD is below Silero's default of 0.5 because whispered and creaky speech scores
0.3-0.5 at its peaks (two real recordings of ../shared/eval-dev: at 0.5 not one frame of
them counted as speech, and the live path would never have decoded them), while digital
silence, room noise and white hiss stay under 0.05.
"""

from __future__ import annotations

import functools
from typing import List, Optional

import numpy as np
import torch

from ..audio import SAMPLE_RATE

FRAME = 512  # samples per Silero frame at 16 kHz
THRESHOLD = 0.3
NEG_THRESHOLD = 0.15


def load_silero():
    """A fresh Silero VAD model (its recurrent state is per stream: one per session)."""
    return _load_keeping_threads(sequence=False)


@functools.lru_cache(maxsize=None)
def load_silero_sequence():
    """Silero's sequence model (silero-vad's ONNX export that scores a block of frames in
    one call, from its wheel): the streaming model's probabilities for a whole file at once.
    One for the process: it keeps no state between calls (pieces.speech_probabilities)."""
    return _load_keeping_threads(sequence=True)


def _load_keeping_threads(sequence: bool):
    # Importing silero_vad calls torch.set_num_threads(1) for the whole process: every
    # encoder and decoder pass after it, live or offline, ran on one core (tiny.en's
    # encoder: ~245 ms a live re-decode instead of ~180 ms on this 2-core machine).
    threads = torch.get_num_threads()
    try:
        from silero_vad import load_silero_vad

        return load_silero_vad(sequence=sequence)
    finally:
        torch.set_num_threads(threads)


class VoiceDetector:
    """Frame-by-frame voice decisions over one stream, kept from `first_kept` on.

    add() takes float32 16 kHz samples as they arrive; positions are stream samples."""

    def __init__(self, model=None):
        # model: Silero's, or any callable (frame, sample rate) -> probability of speech
        # with reset_states() (tests score frames by their loudness)
        self.model = model if model is not None else load_silero()
        self.model.reset_states()
        self._remainder = np.zeros(0, dtype=np.float32)
        self._voiced: List[bool] = []  # one per frame from frame `_first` on
        self._first = 0  # stream frame index of _voiced[0]
        self._frames = 0  # frames scored so far
        self._in_speech = False
        self.last_voice_end = -1  # stream sample where the last voiced frame ends

    def add(self, samples: np.ndarray) -> None:
        data = np.concatenate([self._remainder, samples]) if self._remainder.size else samples
        n = data.size // FRAME
        self._remainder = data[n * FRAME:].copy()
        if n == 0:
            return
        frames = torch.from_numpy(np.ascontiguousarray(data[: n * FRAME], dtype=np.float32)).view(n, FRAME)
        with torch.inference_mode():
            for frame in frames:
                probability = float(self.model(frame, SAMPLE_RATE))
                self._in_speech = probability >= (NEG_THRESHOLD if self._in_speech else THRESHOLD)
                self._voiced.append(self._in_speech)
                self._frames += 1
                if self._in_speech:
                    self.last_voice_end = self._frames * FRAME

    @property
    def scored_until(self) -> int:
        """Stream sample up to which frames have been scored."""
        return self._frames * FRAME

    def forget_before(self, stream_sample: int) -> None:
        """Drop decisions for audio the session no longer holds (bounded memory)."""
        drop = min(len(self._voiced), max(0, stream_sample // FRAME - self._first))
        if drop:
            del self._voiced[:drop]
            self._first += drop

    def utterance_end(self, after: int, pause: int) -> Optional[int]:
        """The first end of speech after stream sample `after` that the scored audio shows
        followed by at least `pause` samples without voice: the stream sample where its
        last voiced frame ends. None while no such pause has been heard. Frame by frame,
        so the answer depends on the audio alone, not on how it was chunked or when asked."""
        pause_frames = -(-pause // FRAME)
        lo = max(0, after // FRAME - self._first)
        last_voiced = None
        for i in range(lo, len(self._voiced)):
            if self._voiced[i]:
                last_voiced = i
            elif last_voiced is not None and i - last_voiced >= pause_frames:
                return (last_voiced + 1 + self._first) * FRAME
        return None

    def first_voice(self, after: int) -> Optional[int]:
        """Stream sample where the first voiced frame at or after `after` starts (None: none yet)."""
        lo = max(0, -(-after // FRAME) - self._first)
        for i in range(lo, len(self._voiced)):
            if self._voiced[i]:
                return (i + self._first) * FRAME
        return None

    def next_onset(self, after: int) -> Optional[int]:
        """Stream sample where the first voice that starts after `after` (a voiced frame
        after an unvoiced one) starts; None: none yet."""
        lo = max(1, after // FRAME + 1 - self._first)
        for i in range(lo, len(self._voiced)):
            if self._voiced[i] and not self._voiced[i - 1]:
                return (i + self._first) * FRAME
        return None

    def voice_end_within(self, start: int, end: int) -> Optional[int]:
        """Stream sample where the last voiced frame between two stream samples ends (None:
        no voice there): how far a final pass over that audio must write."""
        lo = max(0, start // FRAME - self._first)
        hi = min(len(self._voiced), max(0, -(-end // FRAME) - self._first))
        for i in range(hi - 1, lo - 1, -1):
            if self._voiced[i]:
                return (i + 1 + self._first) * FRAME
        return None

    def voiced_seconds(self, start: int, end: Optional[int] = None) -> float:
        """Seconds of voiced frames between two stream samples."""
        lo = max(0, start // FRAME - self._first)
        hi = len(self._voiced) if end is None else max(0, -(-end // FRAME) - self._first)
        return sum(self._voiced[lo:hi]) * FRAME / SAMPLE_RATE

    def pause_after(self, stream_sample: int, within: int, min_frames: int = 2) -> Optional[int]:
        """Where to cut in the first unvoiced run (of at least min_frames) that begins
        within `within` samples after `stream_sample`: 64 ms into the run, or its middle
        if it is shorter, so that the audio after the cut opens with a little silence, not
        on the onset of a word. None if the speech does not pause there."""
        lo = max(0, stream_sample // FRAME - self._first)
        hi = min(len(self._voiced), (stream_sample + within) // FRAME - self._first + 1)
        run_start = None
        for i in range(lo, len(self._voiced) + 1):
            quiet = i < len(self._voiced) and not self._voiced[i]
            if quiet and run_start is None:
                if i > hi:
                    return None
                run_start = i
            elif not quiet and run_start is not None:
                if i - run_start >= min_frames:
                    return (run_start + min(2, (i - run_start) // 2) + self._first) * FRAME
                run_start = None
        return None
