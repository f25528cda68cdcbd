"""Long audio cut into pieces of at most 30 s at the speaker's pauses (batched.py decodes
them several at once).

The seek loop (decode.py) must decode window after window: where one starts depends on
what the one before it wrote. Pieces cut in advance at pauses are independent, so a batch
of them can share each decoder step. Where to cut comes from Silero VAD (live/vad.py):
its per-frame voice decisions become speech regions (speech_regions), and the regions are
merged greedily into pieces up to the limit, each cut in the longest pause of its second
half (cut_pieces), so that a piece ends on a pause and is not left short. Silence between
pieces is never decoded: no words are invented there.

Everything here but `speech_probabilities` is pure (lists in, lists out): tests run it on tables.
"""

import contextlib
import threading
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from .audio import SAMPLE_RATE

Span = Tuple[int, int]  # [start, end) in samples

MAX_PIECE_SECONDS = 30.0
# pauses shorter than this are inside speech (a stop consonant, a breath between words)
MIN_PAUSE_SECONDS = 0.16  # faster-whisper batched's min_silence_duration_ms
# kept around each region: Silero's decision lags the first and last phonemes slightly
PAD_SECONDS = 0.1
# a region shorter than this (a click, a cough) is not speech
MIN_SPEECH_SECONDS = 0.1
# Silero scores streams of this length side by side (speech_probabilities), each after a
# warm-up on the audio before it: Silero is recurrent, and a stream started cold decides
# differently for its first seconds (its probabilities moved by up to 0.98 there)
STREAM_SECONDS = 10.0
WARM_UP_SECONDS = 4.0
# one Silero for every batched decode, one at a time (its recurrent state is per call)
_silero = None
_silero_lock = threading.Lock()


def speech_probabilities(audio: np.ndarray, model=None) -> np.ndarray:
    """Silero's probability of speech for each 32 ms frame of `audio`.

    The audio is scored as streams of STREAM_SECONDS side by side, one call per frame
    position for all the streams: Silero is recurrent (a frame after the one before), and a
    call costs about as much for one row as for many (here, one thread: 0.42 ms for 1 row,
    3.5 ms for 64), so a file scored frame after frame took 3.7 s of a 185 s file's 14 s.
    Each stream first hears the WARM_UP_SECONDS before it (silence before the first), whose
    scores are dropped: over 100 s of the dev recordings, 10 s streams with 4 s of warm-up
    decided 0.9 % of the frames otherwise than one stream over the whole audio, where 30 s
    streams started cold decided 6.5 % otherwise (and took 1.3x the time on a 609 s file).
    On one torch thread (kernels.step_threads): its operators are too small for a second,
    which only waits."""
    from . import kernels
    from .live.vad import FRAME, load_silero

    n = len(audio) // FRAME
    per_stream = round(STREAM_SECONDS * SAMPLE_RATE / FRAME)
    warm_up = round(WARM_UP_SECONDS * SAMPLE_RATE / FRAME)
    streams = max(1, -(-n // per_stream))
    padded = np.zeros((warm_up + streams * per_stream) * FRAME, dtype=np.float32)
    padded[warm_up * FRAME: (warm_up + n) * FRAME] = audio[: n * FRAME]
    # stream s: the audio's frames from s * per_stream - warm_up to (s + 1) * per_stream
    rows = np.arange(streams)[:, None] * per_stream + np.arange(warm_up + per_stream)[None, :]
    frames = torch.from_numpy(padded).view(-1, FRAME)[torch.from_numpy(rows)]
    global _silero
    with _silero_lock:
        if model is None:
            # loaded once (its first calls compile, ~1 s), and outside step_threads: loading
            # restores torch's thread count as it found it, which inside would be 1, made the
            # whole process's default (load_silero says why)
            _silero = _silero or load_silero()
            model = _silero
    threads = kernels.step_threads() if kernels.available() else contextlib.nullcontext()
    with _silero_lock, torch.inference_mode(), threads:
        model.reset_states()
        scores = [model(frames[:, i].contiguous(), SAMPLE_RATE)[:, 0] for i in range(warm_up + per_stream)]
    return torch.stack(scores[warm_up:], dim=1).reshape(-1)[:n].numpy()


def voiced_frames(probabilities: Sequence[float], threshold: Optional[float] = None,
                  neg_threshold: Optional[float] = None) -> List[bool]:
    """live/vad.py's decisions: voiced above `threshold` (vad.THRESHOLD), and, once speech
    has started, until the probability falls below `neg_threshold` (vad.NEG_THRESHOLD):
    Silero's hysteresis."""
    from .live import vad  # not at the top: the live package imports decode.py, which imports this

    threshold = vad.THRESHOLD if threshold is None else threshold
    neg_threshold = vad.NEG_THRESHOLD if neg_threshold is None else neg_threshold
    voiced, in_speech = [], False
    for p in probabilities:
        in_speech = p >= (neg_threshold if in_speech else threshold)
        voiced.append(in_speech)
    return voiced


def speech_regions(voiced: Sequence[bool], frame: int, n_samples: int,
                   min_pause: int = round(MIN_PAUSE_SECONDS * SAMPLE_RATE),
                   pad: int = round(PAD_SECONDS * SAMPLE_RATE),
                   min_speech: int = round(MIN_SPEECH_SECONDS * SAMPLE_RATE)) -> List[Span]:
    """Runs of voiced frames as sample spans: runs closer than `min_pause` joined, runs
    shorter than `min_speech` dropped, each padded by `pad` (within the audio, and never
    over the middle of the pause to its neighbour)."""
    runs: List[List[int]] = []
    for i, is_voiced in enumerate(voiced):
        if not is_voiced:
            continue
        start, end = i * frame, (i + 1) * frame
        if runs and start - runs[-1][1] < min_pause:
            runs[-1][1] = end
        else:
            runs.append([start, end])
    runs = [r for r in runs if r[1] - r[0] >= min_speech]
    regions = []
    for i, (start, end) in enumerate(runs):
        low = 0 if i == 0 else (runs[i - 1][1] + start) // 2
        high = n_samples if i == len(runs) - 1 else (end + runs[i + 1][0]) // 2
        regions.append((max(low, start - pad), min(high, end + pad, n_samples)))
    return [r for r in regions if r[1] > r[0]]


def cut_pieces(regions: Sequence[Span], max_length: int) -> List[Span]:
    """Speech regions merged greedily into pieces of at most `max_length` samples.

    A piece takes regions while they fit. When the next does not, the piece ends in the
    longest pause between its regions in its second half (or after its last region if it
    has no pause there), and the regions after that cut open the next piece. A region
    longer than `max_length` by itself is cut into parts of `max_length` (no pause to cut at).
    """
    regions = [part for r in regions for part in _split_long(r, max_length)]
    pieces: List[Span] = []
    i = 0
    while i < len(regions):
        j = i + 1  # regions[i:j] are the piece's
        while j < len(regions) and regions[j][1] - regions[i][0] <= max_length:
            j += 1
        if j < len(regions):
            j = _longest_pause_cut(regions, i, j)
        pieces.append((regions[i][0], regions[j - 1][1]))
        i = j
    return pieces


def _longest_pause_cut(regions: Sequence[Span], i: int, j: int) -> int:
    """Where to end a full piece of regions[i:j]: after the region followed by the longest
    pause among those in the second half of the piece (the last region if none is)."""
    start, end = regions[i][0], regions[j - 1][1]
    half = start + (end - start) // 2
    best, best_pause = j, -1
    for k in range(i + 1, j):  # a cut before regions[k]
        pause = regions[k][0] - regions[k - 1][1]
        if regions[k - 1][1] >= half and pause > best_pause:
            best, best_pause = k, pause
    return best


def _split_long(region: Span, max_length: int) -> List[Span]:
    start, end = region
    return [(s, min(end, s + max_length)) for s in range(start, end, max_length)]


def piece_audio(audio: np.ndarray, piece: Span) -> np.ndarray:
    return np.ascontiguousarray(audio[piece[0]:piece[1]], dtype=np.float32)


def audio_pieces(audio: np.ndarray, max_seconds: float = MAX_PIECE_SECONDS) -> List[Span]:
    """The pieces of `audio` (float32 16 kHz) to decode: Silero's speech regions, merged."""
    from .live.vad import FRAME

    voiced = voiced_frames(speech_probabilities(np.ascontiguousarray(audio, dtype=np.float32)))
    regions = speech_regions(voiced, FRAME, len(audio))
    return cut_pieces(regions, round(max_seconds * SAMPLE_RATE))
