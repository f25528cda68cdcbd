"""The decoder a live session calls: the model, asked for word timestamps, bounded in
length, given the previous hypothesis as a draft; and the test for a decode that looped.

The session takes any callable of this shape (tests pass a scripted one), so it never
imports the model or the decoding loop itself.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Callable, Iterator, Optional, Tuple, Union

import numpy as np

from ..audio import SAMPLE_RATE
from ..decode import stream_transcribe
from ..events import DecodeOptions, DecodeResult, TokenEvent

# Fast speech is 4-5 words (5-7 tokens) a second, with a timestamp pair per segment.
MAX_TOKENS_PER_SECOND = 10
MAX_TOKENS_BASE = 20

# (audio, prompt, draft) -> TokenEvents, then a DecodeResult with word timestamps. The
# draft is what the previous decode of the same buffer start and prompt said (its tokens).
Decoder = Callable[[np.ndarray, Optional[str], Optional[Tuple[int, ...]]],
                   Iterator[Union[TokenEvent, DecodeResult]]]


def model_decoder(model, options: Optional[DecodeOptions] = None) -> Decoder:
    """The real decoder: stream_transcribe with word timestamps, the prompt, and the
    previous hypothesis as a draft that one decoder pass confirms (speculative.py)."""
    options = replace(options or DecodeOptions(), word_timestamps=True, timestamps=True)

    def decode(audio: np.ndarray, prompt: Optional[str], draft: Optional[Tuple[int, ...]] = None):
        # A loop ("aaaa...") would otherwise run to 224 tokens: seconds of a live decode.
        limit = MAX_TOKENS_BASE + int(MAX_TOKENS_PER_SECOND * audio.size / SAMPLE_RATE)
        return stream_transcribe(model, audio, replace(
            options, prompt=prompt, draft_tokens=draft,
            max_tokens_per_window=min(limit, model.dims.n_text_ctx // 2)))

    decode.options = options  # what the panel shows (cache mode, beams)
    return decode


COMPRESSION_RATIO_LIMIT = 2.4  # openai-whisper transcribe()'s test for a looping decode


def looped(text: str) -> bool:
    """Text that repeats itself ("aaaa...", a phrase over and over): gzip shrinks it more
    than 2.4x, the test openai-whisper's transcribe applies before it retries a window."""
    data = text.encode("utf-8")
    return len(data) > 40 and len(data) / len(zlib.compress(data)) > COMPRESSION_RATIO_LIMIT
