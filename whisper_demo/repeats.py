"""A decode stuck in a loop, known from its last tokens before the window's end.

transcribe() learns that a window looped only when its decode has used all its tokens
(224), from the compression ratio of its text. window_decode.py stops such a decode
where the loop is plain when asked (decode.Transcription asks where a retry follows and the
tokens need not be transcribe's; batched.py for its retries), and batch_decode.py stops a
looping row of a batch.
"""

from typing import Sequence

# A greedy decode stuck in a loop ("uh, uh, uh, ..." or one sentence over and over) runs to
# the window's last token (224) before transcribe's test sees it. Where its last LOOP_TOKENS
# text tokens are one run of at most LOOP_PERIOD tokens repeated, it is stopped there: the
# test would fail it anyway (a ratio of 10-26 where the threshold is 2.4), and in a batch
# every step it takes holds the batch open. Real speech that repeats ("Montreal forced
# aligner" said again and again, compression ratio 2.9-3.7 over a window) varies more
# than that over 64 tokens.
LOOP_TOKENS = 64
LOOP_PERIOD = 16


def is_looping(tokens: Sequence[int], timestamp_begin: int, window: int = LOOP_TOKENS,
               max_period: int = LOOP_PERIOD) -> bool:
    """Whether the last `window` text tokens of `tokens` (timestamps left out: a loop's
    segments each get later times) repeat one run of at most `max_period` tokens."""
    if len(tokens) < window:  # before the filter: this runs every step of every row
        return False
    text = [t for t in tokens if t < timestamp_begin]
    if len(text) < window:
        return False
    tail = text[-window:]
    return any(tail[period:] == tail[:-period] for period in range(1, max_period + 1))
