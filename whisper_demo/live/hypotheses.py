"""A re-decode's result as the policies read it: its words in stream time, and for
AlignAtt where the alignment heads' attention peaked for each word's tokens."""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from ..events import DecodeResult, TokenEvent
from .decoders import Prefix
from .words import Hypothesis, normalize_word, timed_words

# (text the token adds, stream seconds where its attention peaked: None for a timestamp
# or a step without attention)
TokenPeak = Tuple[str, Optional[float]]


def token_peak(event: TokenEvent, offset_s: float) -> TokenPeak:
    """What AlignAtt needs of a decoder step. The first step after a given prefix carries
    the prefix's text too, even when it is a timestamp: the text is kept to spell words."""
    if event.attention is None or event.is_timestamp:
        return event.text, None
    return event.text, offset_s + event.attention.audio_time


def hypothesis(result: Optional[DecodeResult], offset_s: float, end_s: float,
               prefix: Optional[Prefix] = None, token_peaks: Sequence[TokenPeak] = ()) -> Hypothesis:
    """A re-decode's words in stream time (word timestamps are relative to the buffer),
    without the prefix it was given (those words are committed already)."""
    if result is None:
        return Hypothesis((), (), offset_s, end_s)
    words = tuple(timed_words(result.segments, offset_s))
    timed = any(peak is not None for _, peak in token_peaks)
    peaks = tuple(word_peaks([w.text for w in words], token_peaks)) if timed else ()
    after_committed = False
    if prefix is not None:
        given = [normalize_word(text) for text in prefix.words]
        if [w.norm for w in words[:len(given)]] == given:
            words, after_committed = words[len(given):], True
            peaks = peaks[len(given):]
    segment_ends = tuple(offset_s + s.end for s in result.segments[:-1])
    return Hypothesis(words, segment_ends, offset_s, end_s, after_committed, peaks)


def word_peaks(words: Sequence[str], token_peaks: Sequence[TokenPeak]) -> List[Tuple[float, ...]]:
    """Per word, the attention peaks of the tokens that spell it, matched by their
    characters (spaces aside); punctuation tokens left out (they read no audio). A word
    the tokens do not spell (text that differs) gets no peaks: AlignAtt will not commit it
    before a pause."""
    owner: List[int] = []  # for each character of the tokens' text, its token
    for index, (text, _) in enumerate(token_peaks):
        owner += [index] * len("".join(text.split()))
    peaks: List[Tuple[float, ...]] = []
    position = 0
    for word in words:
        length = len("".join(word.split()))
        tokens = sorted(set(owner[position:position + length]))
        position += length
        if position > len(owner):
            peaks.append(())
            continue
        timed = [t for t in tokens if token_peaks[t][1] is not None]
        reading = [t for t in timed if _reads_audio(token_peaks[t][0])] or timed  # "-": its own
        peaks.append(tuple(token_peaks[t][1] for t in reading))
    return peaks


def _reads_audio(text: str) -> bool:
    return bool(re.search(r"\w", text))
