"""The vocabulary every part of live/ speaks: a word with its times in the stream, one
re-decode's words (Hypothesis), and a policy's answer to it (Decision).

Times are stream seconds, from the session's first sample.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

# A word that starts this close before the committed end is still new: word timings
# jitter by about that much from one decode of the same audio to the next.
START_SLACK_S = 0.1


def normalize_word(text: str) -> str:
    """What agreement compares: lower case, no punctuation (Whisper re-punctuates freely)."""
    norm = re.sub(r"[^\w']", "", text.lower()).strip("'")
    return norm or text.strip().lower()


@dataclass(frozen=True)
class TimedWord:
    text: str  # as Whisper wrote it, punctuation included, no surrounding spaces
    start: float  # stream seconds
    end: float
    # the decode's probability of the word (the mean of its tokens'; None: not known, as for
    # words a decode was given): which of two decodes of the same audio is surer of it
    probability: Optional[float] = field(default=None, compare=False)

    @property
    def norm(self) -> str:
        return normalize_word(self.text)

    @property
    def ends_sentence(self) -> bool:
        return self.text.rstrip("\"')]").endswith((".", "?", "!", "…"))

    @property
    def midpoint(self) -> float:
        """Which side of a cut a word falls on."""
        return (self.start + self.end) / 2


def timed_words(segments, offset_s: float) -> List[TimedWord]:
    """A decode's words (its segments' word timestamps, relative to its audio, which starts
    at `offset_s`) in stream time. Whisper's word timing starts a new word at every
    punctuation token, so "28.8" comes as " 28" and ".8", and "850-2" as " 850" and "-2":
    a word that starts with punctuation and no space belongs to the word before it (joined
    by spaces, the text read "28 .8", which the offline transcript writes "28.8")."""
    words: List[TimedWord] = []
    for word in (w for segment in segments for w in segment.words):
        text = word.text.strip()
        if not text:
            continue
        start, end = offset_s + word.start, offset_s + word.end
        probability = getattr(word, "probability", None)
        probability = None if probability is None or probability != probability else float(probability)  # nan
        attached = words and not word.text[:1].isspace() and not text[0].isalnum() and not _punctuation_only(text)
        if attached:
            before = words[-1].probability
            both = None if before is None or probability is None else before * probability
            words[-1] = TimedWord(words[-1].text + text, words[-1].start, end, both)
        else:
            words.append(TimedWord(text, start, end, probability))
    return words


def _punctuation_only(text: str) -> bool:
    return not re.search(r"\w", text)


@dataclass(frozen=True)
class Hypothesis:
    """One re-decode of the buffer, in stream time."""

    words: Tuple[TimedWord, ...]
    segment_ends: Tuple[float, ...] = ()  # where Whisper closed a segment (not the last one)
    buffer_start: float = 0.0
    buffer_end: float = 0.0
    # The decode was given every committed word of its buffer and wrote these after them
    # (the session strips the given words): none of them was committed before.
    after_committed: bool = False
    # Per word, where the alignment heads' cross-attention peaked for each of its tokens
    # (stream seconds; punctuation left out): what AlignAtt reads. () when the decoder
    # gave no attention (alignatt.py).
    peaks: Tuple[Tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class Decision:
    """A policy's answer to one hypothesis."""

    committed: Tuple[TimedWord, ...]  # newly committed, in order
    tentative: Tuple[TimedWord, ...]  # the rest of this hypothesis (may still change)
    reason: str = ""  # which rule committed, for the log and the panel
    edge: Optional[float] = None  # AlignAtt: a token read past this (stream seconds) stops the commit
