"""What a live session publishes: immutable snapshots (its stats, and one LiveUpdate per
re-decode or skipped one) that the page, the terminal and the benchmark read while the
session's own thread goes on changing its state. A decoded update also carries a
BufferView: the audio that re-decode read and where the policy stands in it (the Live
tab draws it under the transcript: ui/render/live_strip.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Optional, Sequence, Tuple

import numpy as np

from ..audio import SAMPLE_RATE
from ..events import DecodeResult, TokenEvent
from .hypotheses import TokenPeak
from .words import Decision, Hypothesis, TimedWord
from .revision import Revision

ENVELOPE_BARS = 240  # a few hundred bars draw a waveform; each is the loudest sample of its slice


@dataclass(frozen=True)
class LiveStats:
    """Latency and work figures of a session so far."""

    decodes: int
    skipped: int  # re-decodes not run: no speech, or nothing new said
    loops: int  # re-decodes that looped (their words get no vote)
    unprompted: bool  # the buffer's decodes kept looping on the prompt: now decoded without it
    first_token_ms_median: Optional[float]  # newest chunk's arrival -> first token
    first_token_ms_p95: Optional[float]
    commit_s_median: Optional[float]  # a word's end arriving -> the word committed
    commit_s_p95: Optional[float]
    last_first_token_ms: Optional[float]
    last_decode_ms: Optional[float]  # wall time of the last re-decode, encoder included
    last_encoder_ms: Optional[float]  # the encoder's part of it
    last_tokens: int  # decoder steps of the last re-decode
    last_from_draft: int  # of them, confirmed from the previous hypothesis (speculative.py)
    last_draft_passes: int  # the decoder forwards that confirmed them
    last_given: int  # tokens of the committed words it was given to start from (not decoded)
    audio_seconds: float  # received so far
    buffer_seconds: float  # held for re-decoding
    dropped_seconds: float  # discarded: a decoder too slow for the stream (never silently)
    lost_seconds: float  # should have arrived by now and did not (chunks lost on the way)
    # the final passes (final_pass.py): one per end of an utterance
    final_passes: int = 0
    streamed_judged: int = 0  # streamed (committed) words a final pass has judged
    revised_words: int = 0  # of them, changed or removed by it
    rewritten_words: int = 0  # final words a later pass over their audio wrote otherwise
    last_final_ms: Optional[float] = None  # wall time of the last final pass
    final_delay_s_median: Optional[float] = None  # pause heard -> its final text (wall)
    final_delay_s_p95: Optional[float] = None
    # the last decode's wall time against the CPU time this process spent meanwhile: a
    # decode that gets much less than its threads' worth of CPU is waiting for it (another
    # program, the browser, other sessions)
    last_cpu_ms: Optional[float] = None
    # streamed words a final pass removed with no final word over their time (Transcript.lost:
    # speech lost; should be 0), and those no final word covered, kept as they are
    lost_words: int = 0
    kept_streamed: int = 0
    rescued_words: int = 0  # of them, left out by a final pass that wrote around them (Transcript.revise)
    silent_words: int = 0  # streamed words dropped as heard in silence (no final word over them)


@dataclass(frozen=True)
class WordMark:
    """Where the attention read one word of a re-decode."""

    text: str
    seconds: float  # stream time of its last token's attention peak
    committed: bool  # committed by this re-decode (else still tentative)


@dataclass(frozen=True)
class BufferView:
    """The audio buffer one re-decode read, and where the policy stands in it. Times are
    stream seconds (from the session's first sample)."""

    start: float
    end: float
    envelope: Tuple[float, ...]  # loudest |sample| of each of up to ENVELOPE_BARS equal slices
    committed_until: float  # end of the last committed word (before `start`: none in this buffer)
    words: Tuple[WordMark, ...] = ()  # the decode's new words with attention (AlignAtt only)
    cursor: Optional[float] = None  # where the newest token's attention peaked (None: no attention)
    edge: Optional[float] = None  # AlignAtt: a token read past this stopped the commit
    at_pause: bool = False  # a final pass at a pause read it: the whole utterance was heard

    def committed_to(self, seconds: float) -> "BufferView":
        """The same audio after later commits (an update that ran no decode)."""
        return replace(self, committed_until=seconds)


def envelope(samples: np.ndarray, bars: int = ENVELOPE_BARS) -> Tuple[float, ...]:
    """The waveform's outline: the loudest |sample| of each of `bars` equal slices (fewer
    for a buffer shorter than that many samples). One pass over the buffer."""
    if samples.size == 0:
        return ()
    starts = np.linspace(0, samples.size, min(bars, samples.size) + 1).astype(np.int64)[:-1]
    return tuple(round(float(v), 4) for v in np.maximum.reduceat(np.abs(samples), starts))


def buffer_view(samples: np.ndarray, start: float, hyp: Optional[Hypothesis], decision: Decision,
                token_peaks: Sequence[TokenPeak], committed_until: float, at_pause: bool = False) -> BufferView:
    """What the strip shows of a re-decode of `samples` (starting at `start` stream
    seconds): made before the buffer is cut, with the committed end after the decision.
    token_peaks: the decode's steps as AlignAtt read them (attempt.py)."""
    committed = set(decision.committed)
    marks = tuple(WordMark(word.text, peaks[-1], word in committed)
                  for word, peaks in zip(hyp.words, hyp.peaks) if peaks) if hyp is not None else ()
    # The newest word's last token. Not the decode's last step: given committed words, a
    # decode that wrote nothing new ends at once, and its one step (end of text, carrying the
    # given words' text) peaked anywhere (0.4 s into a 3.5 s buffer of "And so my fellow
    # Americans."). Words whose text the tokens do not spell have no peaks of their own:
    # then the tokens' (which, with no words given, are this decode's alone).
    cursor = marks[-1].seconds if marks else None
    if cursor is None and hyp is not None and hyp.words and not hyp.after_committed:
        cursor = newest_peak(token_peaks)
    return BufferView(start, start + samples.size / SAMPLE_RATE, envelope(samples), committed_until,
                      marks, cursor=cursor, edge=decision.edge, at_pause=at_pause)


def newest_peak(token_peaks: Sequence[TokenPeak]) -> Optional[float]:
    """Where the newest token that reads audio had its attention (punctuation reads none:
    its peak can lie seconds back); None when the decoder gave no attention."""
    timed = [(text, peak) for text, peak in token_peaks if peak is not None]
    reading = [peak for text, peak in timed if re.search(r"\w", text)] or [peak for _, peak in timed]
    return reading[-1] if reading else None


@dataclass(frozen=True)
class LiveUpdate:
    committed: str  # everything committed so far
    tentative: str  # the current hypothesis after the committed text (may still change)
    new_committed: str  # what this update committed ("" if nothing)
    decoded: bool  # whether a re-decode ran for this update
    first_token_ms: Optional[float]
    commit_latencies_s: Tuple[float, ...]  # speech -> commit for each newly committed word
    stats: LiveStats
    result: Optional[DecodeResult] = None  # of this re-decode
    last_event: Optional[TokenEvent] = None  # its last decoder step (cache panel)
    trimmed_seconds: float = 0.0  # audio cut from the buffer's start
    final: bool = False  # from finish(): the session's last update, every word in it final
    reason: str = ""  # which rule committed or cut, or why no decode ran
    buffer: Optional[BufferView] = None  # the audio the last re-decode read (None before one)
    # The committed text in two parts: the words final passes made final, one string each,
    # then those the streamed pass committed after them (`committed` is both)
    final_words: Tuple[str, ...] = ()
    # the same words as shown, with their stream times (the Live tab's subtitles)
    final_timed_words: Tuple[TimedWord, ...] = ()
    streamed: str = ""
    revision: Optional[Revision] = None  # what this update's final pass changed (None: not one)

    @property
    def final_text(self) -> str:
        return " ".join(self.final_words)


def percentile(values, q) -> Optional[float]:
    return float(np.percentile(np.asarray(values), q)) if len(values) else None
