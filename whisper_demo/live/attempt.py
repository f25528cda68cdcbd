"""One call to a live session's decoder, and what came of it: the TokenEvents pass
through as they come; the first token's delay, the result, what the attention read and
whether the decode looped are kept for the session."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Union

from ..events import DecodeResult, TokenEvent
from .loops import looped
from .hypotheses import TokenPeak, token_peak


@dataclass
class Attempt:
    """What came of a re-decode's call to the decoder."""

    newest_arrival: Optional[float]  # wall time of the newest audio it heard
    first_token_ms: Optional[float] = None  # from that arrival to its first token
    last_event: Optional[TokenEvent] = None
    result: Optional[DecodeResult] = None
    looped: bool = False
    stopped: bool = False  # stopped before its end (decode_attempt's `stop`): no result
    token_peaks: List[TokenPeak] = field(default_factory=list)  # what AlignAtt reads


def decode_attempt(decoding: Iterator[Union[TokenEvent, DecodeResult]], newest_arrival: Optional[float],
                   clock: Callable[[], float], offset_s: float, stop: Optional[Callable[[], bool]] = None):
    """Run a decode (the decoder's generator over the buffer, which starts at `offset_s`
    stream seconds): its TokenEvents; returns what came of it (an Attempt). `stop`, asked
    after each token: True ends the decode there (the session no longer needs it). A decode that
    looped ("aaaa...", a phrase over and over) is found when it ends, by openai-whisper's
    test on its whole text (loops.looped). Not earlier: the text so far can fail the
    test where the whole text passes (a run of "uh, uh, uh, ..." before the speech goes
    on), and stopping such decodes as loops left a buffer with no vote until its audio was
    dropped (the last 20 s of a 57 s recording lost). A true loop ends at the decoder's
    token limit."""
    attempt = Attempt(newest_arrival)
    try:
        for item in decoding:
            if isinstance(item, TokenEvent):
                attempt.token_peaks.append(token_peak(item, offset_s))
                if attempt.first_token_ms is None and attempt.newest_arrival is not None:
                    attempt.first_token_ms = (clock() - attempt.newest_arrival) * 1000
                attempt.last_event = item
                yield item
                if stop is not None and stop():
                    attempt.stopped = True
                    return attempt
            else:
                attempt.result = item
    finally:
        decoding.close()
    attempt.looped = attempt.result is not None and looped(attempt.result.text)
    return attempt
