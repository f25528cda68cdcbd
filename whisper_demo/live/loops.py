"""A decode that looped ("aaaa...", a phrase over and over), and where in it the decoder
stopped hearing and went on writing. Pure functions over text."""

from __future__ import annotations

import zlib
from typing import Sequence

COMPRESSION_RATIO_LIMIT = 2.4  # openai-whisper transcribe()'s test for a looping decode


def looped(text: str) -> bool:
    """Text that repeats itself ("aaaa...", a phrase over and over): gzip shrinks it more
    than 2.4x, the test openai-whisper's transcribe applies before it retries a window."""
    data = text.encode("utf-8")
    return len(data) > 40 and len(data) / len(zlib.compress(data)) > COMPRESSION_RATIO_LIMIT


LOOP_COPIES = 3  # a phrase written a third time in a row, in a decode that looped


def loop_start(norms: Sequence[str], longest: int = 5) -> int:
    """Index of the first word of the third copy in a row of a 1-`longest` word phrase
    (len(norms) if there is none): where a decode that looped() stopped hearing and went
    on writing. Twice is speech often enough ("no, no"); the tentative words shown stop
    there, so the page does not fill with "-f -f -f ..." while the speaker goes on."""
    for i in range(len(norms)):
        for n in range(1, longest + 1):
            start = i - (LOOP_COPIES - 1) * n
            if start >= 0 and i + n <= len(norms) and all(
                    norms[i:i + n] == norms[start + k * n:start + (k + 1) * n] for k in range(LOOP_COPIES - 1)):
                return i
    return len(norms)
