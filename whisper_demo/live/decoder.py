"""The decoder a live session calls: the model, asked for word timestamps, bounded in
length, given the words already committed from the buffer as the start of its transcript
and the previous hypothesis as a draft; and the test for a decode that looped.

The session takes any callable of this shape (tests pass a scripted one), so it never
imports the model or the decoding loop itself.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from whisper.tokenizer import get_tokenizer

from ..audio import SAMPLE_RATE
from ..decode import stream_transcribe
from ..events import DecodeOptions, DecodeResult, TokenEvent

# Fast speech is 4-5 words (5-7 tokens) a second, with a timestamp pair per segment.
MAX_TOKENS_PER_SECOND = 10
MAX_TOKENS_BASE = 20

TIME_PRECISION = 0.02  # seconds per timestamp token


@dataclass(frozen=True)
class Prefix:
    """Words already committed from the buffer: the re-decode's transcript starts with
    them (given, not decoded) and goes on after them."""

    words: Tuple[str, ...]  # as Whisper wrote them, punctuation included
    start: float  # buffer seconds where the first of them starts

    @property
    def text(self) -> str:
        return " ".join(self.words)


# (audio, prompt, draft, prefix) -> TokenEvents, then a DecodeResult with word timestamps.
# The draft is what the previous decode of the same buffer start and prompt said (its
# tokens, the previous prefix included).
Decoder = Callable[[np.ndarray, Optional[str], Optional[Tuple[int, ...]], Optional[Prefix]],
                   Iterator[Union[TokenEvent, DecodeResult]]]


def model_decoder(model, options: Optional[DecodeOptions] = None, alignatt: bool = False) -> Decoder:
    """The real decoder: stream_transcribe with word timestamps, the prompt, the committed
    words of the buffer as the transcript's given start, and the previous hypothesis as a
    draft that one decoder pass confirms (speculative.py).

    alignatt: decode for the AlignAtt policy: each TokenEvent carries the step's attention
    (no draft then: a pass that confirms several draft tokens has no per-token attention),
    and no timestamp tokens, as SimulStreaming decodes. With them, given committed words
    that end a phrase, tiny.en closed the segment and ended the decode there, 4 s of
    decodes in a row, while the next sentence was already in the buffer."""
    # A live re-decode takes what is fast where transcribe() is thorough: no retry at higher
    # temperatures (a loop is the policy's to handle, decoder.looped), digital silence and
    # no-speech windows skipped before any token, no prompt carried across a silence, the
    # language read from the buffer's own window (events.DecodeOptions says each), and the
    # encoder run over the buffer's audio and 8 s of silence, not a 30 s window (encoder.py;
    # whisper.cpp's audio_ctx): its cost falls with the buffer (tiny.en on this 2-core AVX2
    # CPU: first token 216 ms instead of 483, words committed 0.4 s sooner) while the final
    # pass, which decodes a whole window as transcribe does, gives the text that stays.
    options = replace(options or DecodeOptions(), word_timestamps=True, timestamps=not alignatt,
                      temperature_fallback=False, skip_digital_silence=True,
                      no_speech_before_decoding=True, reset_prompt_after_silence=True,
                      detect_language_from_window=True, attention=alignatt, single_window=True,
                      encode_audio_only=True)
    # Text is encoded alike in every language and task; only the special tokens differ.
    tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages)

    def decode(audio: np.ndarray, prompt: Optional[str], draft: Optional[Tuple[int, ...]] = None,
               prefix: Optional[Prefix] = None):
        # A loop ("aaaa...") would otherwise run to 224 tokens: seconds of a live decode.
        limit = MAX_TOKENS_BASE + int(MAX_TOKENS_PER_SECOND * audio.size / SAMPLE_RATE)
        prefix_tokens = None
        if prefix is not None and prefix.words:
            # the previous decode of this buffer said the committed words with its own
            # timestamps: keep them; otherwise spell the words out after their start time
            split = split_after(draft, prefix.text, tokenizer) if draft else None
            if split is not None:
                prefix_tokens, draft = split
            else:
                prefix_tokens, draft = prefix_token_ids(prefix, tokenizer, options.timestamps), None
        return stream_transcribe(model, audio, replace(
            options, prompt=prompt, draft_tokens=draft, prefix_tokens=prefix_tokens,
            max_tokens_per_window=min(limit, model.dims.n_text_ctx // 2)))

    decode.options = options  # what the panel shows (cache mode, beams)
    decode.tokenizer = tokenizer
    decode.model = model  # the final pass decodes with the same model and cache (final_pass.py)
    return decode


def prefix_token_ids(prefix: Prefix, tokenizer, timestamps: bool = True) -> List[int]:
    """The prefix as a segment's opening: its start time as a timestamp token (when the
    decode writes timestamps), then its text as Whisper spells it (a space before each word)."""
    text = tokenizer.encode(" " + prefix.text)
    if not timestamps:
        return text
    start = tokenizer.timestamp_begin + max(0, int(prefix.start / TIME_PRECISION))
    return [start, *text]


def split_after(tokens: Sequence[int], text: str, tokenizer) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    """(the tokens that say `text`, the tokens after them), or None when `tokens` do not
    start with that text. Timestamps between words stay with the words before them."""
    wanted = " ".join(text.split())
    spoken: List[int] = []
    for i, token in enumerate(list(tokens) + [None]):
        said = " ".join(tokenizer.decode(spoken).split())
        if said == wanted and (token is None or token < tokenizer.eot):
            return tuple(tokens[:i]), tuple(tokens[i:])
        if not wanted.startswith(said) or token is None:
            return None
        if token < tokenizer.eot:
            spoken.append(token)
    return None


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
