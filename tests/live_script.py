"""Stand-ins for a live session's decoders and voice detector: scripted answers, so that a
test drives the session's bookkeeping deterministically (no model, no clock).

    session = LiveSession(Script(...), config, vad=loud_voice(), final_decoder=FinalScript(...))
"""

from typing import List, Optional, Sequence, Tuple

import numpy as np

from whisper_demo.events import DecodeResult, Segment, TokenEvent
from whisper_demo.live.transcript import Transcript
from whisper_demo.live.vad import VoiceDetector
from whisper_demo.live.words import Decision, TimedWord
from whisper_demo.timing import Word

SR = 16000

Words = Sequence[Tuple[str, float, float]]  # (word, start, end), seconds from the buffer's start


def timed_words(spec: str) -> List[TimedWord]:
    """"word@start-end ..." -> TimedWords (stream seconds)."""
    out = []
    for item in spec.split():
        text, times = item.rsplit("@", 1)
        start, end = times.split("-")
        out.append(TimedWord(text, float(start), float(end)))
    return out


class PeakScorer:
    """The voice detector's model, scripted: a 32 ms frame is speech when its peak passes 0.1."""

    def reset_states(self):
        pass

    def __call__(self, frame, sample_rate):
        return 1.0 if float(frame.abs().max()) > 0.1 else 0.0


def loud_voice() -> VoiceDetector:
    return VoiceDetector(PeakScorer())


def loud(seconds):
    return np.full(int(round(seconds * SR)), 0.5, np.float32)


def quiet(seconds):
    return np.zeros(int(round(seconds * SR)), np.float32)


def token_event(step: int, transcript: str) -> TokenEvent:
    return TokenEvent(step=step, window=0, token_id=1, text="", transcript=transcript,
                      latency_ms=1.0, cache_tokens=1, cache_capacity=448, self_cache_bytes=0,
                      self_cache_reserved_bytes=0, cross_cache_bytes=0, rss_bytes=0,
                      cache_mode="static", beam_size=1)


def scripted_result(words: Words, tokens: Sequence[int] = ()) -> DecodeResult:
    """A decode's result with these (word, start, end) in one segment."""
    segment = Segment(0.0, words[-1][2] if words else 0.0, " ".join(w for w, _, _ in words), list(tokens),
                      [Word(" " + w, a, b) for w, a, b in words])
    return DecodeResult(text=segment.text, tokens=list(tokens), segments=[segment] if words else [],
                        language="en", cache_mode="static", beam_size=1, n_tokens=1,
                        decode_seconds=0.001, encoder_ms=5.0, tokens_per_second=1.0,
                        mean_latency_ms=1.0, p95_latency_ms=1.0, peak_self_cache_bytes=0,
                        peak_cross_cache_bytes=0, peak_rss_bytes=0)


class Script:
    """The streamed decoder, scripted: each call is answered with the next list of (word,
    start, end) (times relative to the buffer); it records what it was given."""

    def __init__(self, *answers: Words):
        self.answers = list(answers)
        self.calls: List[Tuple[float, Optional[str]]] = []  # (buffer seconds, prompt)
        self.prefixes: List[Tuple[str, ...]] = []  # the committed words each call was given as its start

    def __call__(self, audio, prompt, draft=None, prefix=None):
        self.calls.append((audio.size / SR, prompt))
        self.prefixes.append(prefix.words if prefix else ())
        words = self.answers.pop(0) if self.answers else []
        yield token_event(0, " ".join(w for w, _, _ in words))
        yield scripted_result(words)


class FinalScript:
    """The final pass's decoder, scripted: each call is answered with the next list of
    (word, start, end) after the given words (times relative to the buffer), or with no
    words once the script is spent. Its result's tokens number each word (1, 2, ...), the
    given ones included, so a test can see which tokens the next pass was given."""

    def __init__(self, *answers: Words):
        self.answers = list(answers)
        # (buffer seconds, prompt, given words, given tokens)
        self.calls: List[Tuple[float, Optional[str], Tuple[str, ...], Optional[Tuple[int, ...]]]] = []
        self.drafts: List[Optional[Tuple[int, ...]]] = []  # each call's draft

    def __call__(self, audio, prompt, given=None, draft=None):
        given_words = given.prefix.words if given else ()
        self.calls.append((round(audio.size / SR, 3), prompt, given_words, given.tokens if given else None))
        self.drafts.append(None if draft is None else tuple(draft))
        new = self.answers.pop(0) if self.answers else []
        # the given words come back first, as the real decode writes them (placed before the new ones)
        start = given.prefix.start if given else 0.0
        words = [(w, start + 0.01 * i, start + 0.01 * (i + 1)) for i, w in enumerate(given_words)] + list(new)
        yield token_event(0, " ".join(w for w, _, _ in words))
        yield scripted_result(words, tokens=range(1, len(words) + 1))


class Judged:
    """A policy with the transcript it commits to, kept as the streamed pass keeps them:
    each decision applied (its words committed, the rest tentative)."""

    def __init__(self, policy, committed: Sequence = ()):
        self.policy = policy
        self.transcript = Transcript(capitalises=policy.reopens_last_word)
        self.transcript.apply(Decision(tuple(committed), ()), 0.0)

    def update(self, hyp):
        decision = self.policy.update(self.transcript, hyp)
        self.transcript.apply(decision, 0.0)
        return decision

    @property
    def committed(self):
        return self.transcript.words
