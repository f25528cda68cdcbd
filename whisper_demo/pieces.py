"""Long audio cut into pieces of at most 30 s at the speaker's pauses (batched.py decodes
them several at once).

The seek loop (decode.py) must decode window after window: where one starts depends on
what the one before it wrote. Pieces cut in advance at pauses are independent, so a batch
of them can share each decoder step. Where to cut comes from Silero VAD (live/vad.py):
its per-frame voice decisions become speech regions (speech_regions), and the regions are
merged greedily into pieces up to the limit, each cut in the longest pause of its second
half (cut_pieces), so that a piece ends on a pause and is not left short. Silence between
pieces is never decoded: no words are invented there.

A decode can also skip speech it was given: with timestamp tokens Whisper sometimes closes a
segment and opens the next one seconds later, and the sentence between is never written
(on the 10-minute file of `bench e2e`, 6 such stretches in 29 pieces). unheard_speech finds
the speech that no segment covers, so that it is decoded on its own (batched.py).

Everything here but `speech_probabilities` is pure (lists in, lists out): tests run it on tables.
"""

from typing import List, Optional, Sequence, Tuple

import numpy as np

from .audio import SAMPLE_RATE

Span = Tuple[int, int]  # [start, end) in samples

MAX_PIECE_SECONDS = 30.0
# pauses shorter than this are inside speech (a stop consonant, a breath between words)
MIN_PAUSE_SECONDS = 0.16  # faster-whisper batched's min_silence_duration_ms
# kept around each region: Silero's decision lags the first and last phonemes slightly
PAD_SECONDS = 0.1
# a region shorter than this (a click, a cough) is not speech
MIN_SPEECH_SECONDS = 0.1
# speech that no segment covers for this long was skipped by its decode (a word is ~0.3 s;
# a segment's timestamps are within a few tenths of its words, hence the margin)
MIN_UNHEARD_SECONDS = 1.0
HEARD_MARGIN_SECONDS = 0.2


def speech_probabilities(audio: np.ndarray, model=None) -> np.ndarray:
    """Silero's probability of speech for each 32 ms frame of `audio`, as one pass of the
    live detector's model over the whole audio would give them.

    Silero is recurrent (each frame after the one before), so scored frame by frame from
    Python it took 9.5 s for a 609 s file (an AVX2 EPYC, one thread), and the side-by-side
    streams that replaced that loop (each warmed up on the audio before it) took 1.8-2.2 s
    and decided 0.9 % of the frames otherwise. silero-vad's sequence model runs the same
    network over a block of frames in one ONNX Runtime call, its state carried from block to
    block: the same probabilities (within 2e-5 of the streaming model's) in 1.2 s. It keeps
    no state between calls, so concurrent batched decodes share it without a lock."""
    from .live.vad import FRAME, load_silero_sequence

    if model is None:
        model = load_silero_sequence()
    n = len(audio) // FRAME
    return model.audio_forward(np.ascontiguousarray(audio[: n * FRAME], dtype=np.float32))[:n]


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


def unheard_speech(regions: Sequence[Span], heard: Sequence[Span], min_length: int,
                   margin: int, max_length: int) -> List[Span]:
    """The parts of speech `regions` outside every `heard` span (a decoded segment's time,
    widened by `margin` on both sides) that are at least `min_length` samples long: speech
    a decode was given and wrote nothing for, as pieces of at most `max_length`."""
    widened = sorted((start - margin, end + margin) for start, end in heard)
    unheard: List[Span] = []
    for start, end in regions:
        position = start
        for heard_start, heard_end in widened:
            if heard_end <= position or heard_start >= end:
                continue
            if heard_start > position:
                unheard.append((position, heard_start))
            position = max(position, heard_end)
        if position < end:
            unheard.append((position, end))
    return [part for start, end in unheard if end - start >= min_length
            for part in _split_long((start, end), max_length)]


def piece_audio(audio: np.ndarray, piece: Span) -> np.ndarray:
    return np.ascontiguousarray(audio[piece[0]:piece[1]], dtype=np.float32)


def audio_regions(audio: np.ndarray) -> List[Span]:
    """Silero's speech regions of `audio` (float32 16 kHz)."""
    from .live.vad import FRAME

    voiced = voiced_frames(speech_probabilities(np.ascontiguousarray(audio, dtype=np.float32)))
    return speech_regions(voiced, FRAME, len(audio))


def audio_pieces(audio: np.ndarray, max_seconds: float = MAX_PIECE_SECONDS) -> List[Span]:
    """The pieces of `audio` (float32 16 kHz) to decode: Silero's speech regions, merged."""
    return cut_pieces(audio_regions(audio), round(max_seconds * SAMPLE_RATE))
