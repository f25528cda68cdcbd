"""Long audio cut into pieces of at most 30 s at the speaker's pauses (batched.py decodes
them several at once).

The seek loop (decode.py) must decode window after window: where one starts depends on
what the one before it wrote. Pieces cut in advance at pauses are independent, so a batch
of them can share each decoder step. Where to cut comes from Silero VAD (live/vad.py):
its per-frame voice decisions become speech regions (speech_regions), and the regions are
merged greedily into pieces up to the limit (cut_pieces): a piece ends in the pause before
the first region that does not fit, as faster-whisper's batched pipeline merges its
chunks, so it is full and ends on a pause. A pause over 0.6 s inside a piece is shortened
to 0.6 s (a Piece plays several spans of the file): Whisper encodes 30 s whatever it is
given, and seconds of silence cost like speech. Silence between pieces is never decoded:
no words are invented there.

A decode can also skip speech it was given: with timestamp tokens Whisper sometimes closes a
segment and opens the next one seconds later, and the sentence between is never written
(on the 10-minute file of `bench e2e`, 5-12 such stretches in 19-22 pieces), or writes a
few words timed over seconds of speech (too_few_tokens). unheard_speech finds the speech
that no segment covers, so that it is decoded on its own (batched.py).

Everything here but `speech_probabilities` is pure (lists in, lists out): tests run it on tables.
"""

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .audio import SAMPLE_RATE

Span = Tuple[int, int]  # [start, end) in samples

MAX_PIECE_SECONDS = 30.0
# a pause inside a piece longer than this is shortened to it: faster-whisper's batched
# pipeline keeps at most 0.8 s (its 0.4 s of padding on each side)
MAX_KEPT_PAUSE_SECONDS = 0.6
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
# a segment over at least this much speech that wrote fewer text tokens than this per second
# of it did not hear it (too_few_tokens): people say 2-3 words a second (English ~1.3 tokens a
# word; a token a character in Chinese), slow speech over 1; tokens count in any language
MIN_SPARSE_SECONDS = 4.0
MIN_TOKENS_PER_SECOND = 0.6


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


@dataclass(frozen=True)
class Piece:
    """What one encoder window decodes: spans of the file played one after another.

    A piece cut from speech with no long pause is one span. Where a pause inside it is
    longer than the kept pause (cut_pieces), the span before ends and the next begins inside
    it: Whisper encodes 30 s whatever it is given, so seconds of silence in a window are
    paid for like speech, and the window holds less speech."""

    parts: Tuple[Span, ...]

    @property
    def start(self) -> int:
        return self.parts[0][0]

    @property
    def end(self) -> int:
        return self.parts[-1][1]

    @property
    def length(self) -> int:
        """Samples of audio the decode is given (the parts, without what was left out)."""
        return sum(end - start for start, end in self.parts)

    def samples(self, audio: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.concatenate([audio[start:end] for start, end in self.parts]),
                                    dtype=np.float32)

    def file_seconds(self, seconds: float, is_end: bool = False) -> float:
        """A time in the piece's audio (seconds from its start) as a time in the file, in the
        part it falls in. A time on the seam between two parts is the later part's start,
        or with `is_end` (a segment's or a word's end) the earlier part's end."""
        position = seconds * SAMPLE_RATE
        for start, end in self.parts:
            length = end - start
            if position < length or (is_end and position <= length):
                return (start + max(position, 0.0)) / SAMPLE_RATE
            position -= length
        return self.end / SAMPLE_RATE


def cut_pieces(regions: Sequence[Span], max_length: int, max_pause: Optional[int] = None) -> List[Piece]:
    """Speech regions merged greedily into pieces of at most `max_length` samples of audio.

    A piece takes regions while they fit; the first that does not opens the next piece.
    (Ending a full piece at the longest pause of its last fifth instead, to end on a
    sentence, was tried: over twelve orders of the e2e file 9 % more pieces and no fewer
    errors, 1,295 / 1,308 against 1,328 / 1,258 in exact / int8; docs/benchmarks.md,
    "Full pieces".) With `max_pause`, a pause longer than that inside a piece is
    shortened to it (half kept after the speech before it, half before the speech after
    it) and the piece's length counts the shortened pause. A region longer than
    `max_length` by itself is cut into parts of `max_length` (no pause to cut at).
    """
    regions = [part for r in regions for part in _split_long(r, max_length)]
    pieces: List[Piece] = []
    i = 0
    while i < len(regions):
        j = i + 1  # regions[i:j] are the piece's
        while j < len(regions) and _joined_length(regions[i:j + 1], max_pause) <= max_length:
            j += 1
        pieces.append(Piece(_joined_parts(regions[i:j], max_pause)))
        i = j
    return pieces


def _joined_parts(regions: Sequence[Span], max_pause: Optional[int]) -> Tuple[Span, ...]:
    """The spans of the file that regions joined into one piece play: from the first
    region's start to the last one's end, less the middle of every pause over `max_pause`."""
    parts, start = [], regions[0][0]
    for before, after in zip(regions, regions[1:]):
        if max_pause is not None and after[0] - before[1] > max_pause:
            parts.append((start, before[1] + max_pause // 2))
            start = after[0] - (max_pause - max_pause // 2)
    parts.append((start, regions[-1][1]))
    return tuple(parts)


def _joined_length(regions: Sequence[Span], max_pause: Optional[int]) -> int:
    return sum(end - start for start, end in _joined_parts(regions, max_pause))


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


def voiced_length(regions: Sequence[Span], span: Span) -> int:
    """Samples of `span` inside speech `regions`."""
    return sum(max(0, min(end, span[1]) - max(start, span[0])) for start, end in regions)


def too_few_tokens(n_tokens: int, voiced: int, min_voiced: int = round(MIN_SPARSE_SECONDS * SAMPLE_RATE),
                   tokens_per_second: float = MIN_TOKENS_PER_SECOND) -> bool:
    """Whether a segment wrote too few text tokens for the speech under it (`voiced`
    samples) to have heard it: a decode that wrote " for a stilliner." (5 tokens) with
    timestamps around 25 s of read speech skipped most of it."""
    return voiced >= min_voiced and n_tokens < tokens_per_second * voiced / SAMPLE_RATE


def audio_regions(audio: np.ndarray) -> List[Span]:
    """Silero's speech regions of `audio` (float32 16 kHz)."""
    from .live.vad import FRAME

    voiced = voiced_frames(speech_probabilities(np.ascontiguousarray(audio, dtype=np.float32)))
    return speech_regions(voiced, FRAME, len(audio))


def audio_pieces(audio: np.ndarray, max_seconds: float = MAX_PIECE_SECONDS) -> List[Piece]:
    """The pieces of `audio` (float32 16 kHz) to decode: Silero's speech regions, merged."""
    return regions_to_pieces(audio_regions(audio), max_seconds)


def regions_to_pieces(regions: Sequence[Span], max_seconds: float = MAX_PIECE_SECONDS) -> List[Piece]:
    """cut_pieces with this module's kept pause."""
    return cut_pieces(regions, round(max_seconds * SAMPLE_RATE), round(MAX_KEPT_PAUSE_SECONDS * SAMPLE_RATE))
