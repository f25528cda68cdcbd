"""The two decoders a live session calls, built from the model and the user's options:

- the streamed pass's (model_decoder): a quick re-decode of the utterance in progress,
  asked for word timestamps, given the words already committed from the buffer as the
  start of its transcript and the previous hypothesis as a draft;
- the final pass's (model_final_decoder): one decode of the buffer as openai-whisper's
  transcribe decodes a window.

Each pass's options come from a named preset (STREAMED_PASS, FINAL_PASS) that says what
the pass decides; nothing else is reset by name. The session takes any callables of these
shapes (tests pass scripted ones), so it never imports the model or the decoding loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from whisper.tokenizer import get_tokenizer

from ..decode import stream_transcribe
from ..events import DecodeOptions, DecodeResult, TokenEvent
from .buffer import to_seconds

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


@dataclass(frozen=True)
class Given:
    """The final words already in the buffer: the final pass's transcript starts with them."""

    prefix: Prefix  # their text, and where the first starts (buffer seconds)
    # the tokens the last final pass of this buffer wrote for exactly these words (segment
    # timestamps included), or None: then they are spelt out as an open segment
    tokens: Optional[Tuple[int, ...]] = None


# (audio, prompt, draft, prefix) -> TokenEvents, then a DecodeResult with word timestamps.
# The draft is what the previous decode of the same buffer start and prompt said (its
# tokens, the previous prefix included).
Decoder = Callable[[np.ndarray, Optional[str], Optional[Tuple[int, ...]], Optional[Prefix]],
                   Iterator[Union[TokenEvent, DecodeResult]]]
# (audio, prompt, given, draft) -> TokenEvents, then a DecodeResult with word timestamps.
# The draft: what the previous final decode of the same audio start wrote (its tokens).
FinalDecoder = Callable[[np.ndarray, Optional[str], Optional[Given], Optional[Tuple[int, ...]]],
                        Iterator[Union[TokenEvent, DecodeResult]]]


# ---------------------------------------------------------------------- the presets

# A live re-decode takes what is fast where transcribe() is thorough: no retry at higher
# temperatures (a loop is the policy's to handle, loops.looped), digital silence and
# no-speech windows skipped before any token, no prompt carried across a silence, the
# language read from the buffer's own window (events.DecodeOptions says each), one window,
# and the encoder run over the buffer's audio and 8 s of silence, not a 30 s window
# (encoder.py; whisper.cpp's audio_ctx): its cost falls with the buffer (tiny.en on this
# 2-core AVX2 CPU: first token 216 ms instead of 483, words committed 0.4 s sooner) while
# the final pass, which decodes a whole window as transcribe does, gives the text that
# stays. The rest (cache mode, precision, beams, thresholds, ...) is the user's.
STREAMED_PASS = dict(word_timestamps=True, temperature_fallback=False, skip_digital_silence=True,
                     no_speech_before_decoding=True, reset_prompt_after_silence=True,
                     detect_language_from_window=True, single_window=True, encode_audio_only=True)

# The final pass decodes as openai-whisper's transcribe does by default (timestamp tokens,
# the temperature fallback, its thresholds), greedy, with word timestamps and their
# probabilities (the test for a closing phrase it invents reads them: final_pass.py) and no
# attention (nothing reads it). Two differences: the language from the buffer's own window, as every
# live decode (a separate detection pass would cost an encoder pass), and when every
# temperature fails, the best attempt is kept, not the last (faster-whisper's rule). It is
# built from this preset, not from the user's options: a new DecodeOptions field takes its
# default here unless it is named in FINAL_PASS_TAKES.
FINAL_PASS = DecodeOptions(word_timestamps=True, word_probabilities=True, fallback_keeps_best=True,
                           detect_language_from_window=True)
# what the final pass takes from the user's options: the cache mode, what is said and
# what is wanted of it, and the seed of the fallback's draws
FINAL_PASS_TAKES = ("cache", "language", "task", "seed", "carry_initial_prompt", "hallucination_silence_threshold")


def streamed_options(options: Optional[DecodeOptions] = None, alignatt: bool = False) -> DecodeOptions:
    """The user's options as the streamed pass decodes (STREAMED_PASS). alignatt: each
    TokenEvent carries the step's attention, and no timestamp tokens (model_decoder)."""
    return replace(options or DecodeOptions(), **STREAMED_PASS, timestamps=not alignatt, attention=alignatt)


def final_options(options: Optional[DecodeOptions] = None, precision: Optional[str] = None) -> DecodeOptions:
    """The final pass's options (FINAL_PASS, with the user's FINAL_PASS_TAKES), in
    `precision` (LiveConfig.final_precision; None: the options' own, the streamed pass's)."""
    options = options or DecodeOptions()
    return replace(FINAL_PASS, precision=precision or options.precision,
                   **{name: getattr(options, name) for name in FINAL_PASS_TAKES})


def token_limit(model, audio: np.ndarray) -> int:
    """A decode's token limit for its audio: a loop ("aaaa...") would otherwise run to 224
    tokens (once per fallback temperature in the final pass), seconds of a live session."""
    return min(MAX_TOKENS_BASE + int(MAX_TOKENS_PER_SECOND * to_seconds(audio.size)), model.dims.n_text_ctx // 2)


# ---------------------------------------------------------------------- the decoders


def model_decoder(model, options: Optional[DecodeOptions] = None, alignatt: bool = False) -> Decoder:
    """The streamed pass's decoder: stream_transcribe with word timestamps, the prompt, the
    committed words of the buffer as the transcript's given start, and the previous
    hypothesis as a draft that one decoder pass confirms (speculative.py).

    alignatt: decode for the AlignAtt policy: each TokenEvent carries the step's attention
    (no draft then: a pass that confirms several draft tokens has no per-token attention),
    and no timestamp tokens, as SimulStreaming decodes. With them, given committed words
    that end a phrase, tiny.en closed the segment and ended the decode there, 4 s of
    decodes in a row, while the next sentence was already in the buffer."""
    options = streamed_options(options, alignatt)
    # Text is encoded alike in every language and task; only the special tokens differ.
    tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages)

    def decode(audio: np.ndarray, prompt: Optional[str], draft: Optional[Tuple[int, ...]] = None,
               prefix: Optional[Prefix] = None):
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
            max_tokens_per_window=token_limit(model, audio)))

    decode.options = options  # what the panel shows (cache mode, beams)
    decode.tokenizer = tokenizer
    decode.model = model  # the final pass decodes with the same model and cache (final_decoder_like)
    return decode


def model_final_decoder(model, options: Optional[DecodeOptions] = None,
                        precision: Optional[str] = None) -> FinalDecoder:
    """The final pass's decoder: stream_transcribe with final_options."""
    options = final_options(options, precision)
    tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages)

    def decode(audio: np.ndarray, prompt: Optional[str], given: Optional[Given] = None,
               draft: Optional[Tuple[int, ...]] = None):
        prefix_tokens = None
        if given is not None and given.prefix.words:
            # the last decode from this start said the given words with its own timestamps:
            # keep them, its tokens after them the draft; otherwise spell the words out
            split = split_after(draft, given.prefix.text, tokenizer) if draft and not given.tokens else None
            if split is not None:
                prefix_tokens, draft = split
            else:
                prefix_tokens, draft = given.tokens or tuple(prefix_token_ids(given.prefix, tokenizer)), None
        return stream_transcribe(model, audio, replace(
            options, prompt=prompt, prefix_tokens=prefix_tokens, draft_tokens=draft,
            max_tokens_per_window=token_limit(model, audio)))

    decode.options = options
    return decode


def final_decoder_like(decoder: Decoder, precision: Optional[str]) -> FinalDecoder:
    """The final pass's decoder for a streamed one: its model and the user's options (the
    cache mode), in the final pass's precision (None: the streamed decoder's)."""
    model = getattr(decoder, "model", None)
    if model is None:
        raise ValueError("this decoder has no model to make the final pass's decoder of: "
                         "pass LiveSession(..., final_decoder=...)")
    return model_final_decoder(model, decoder.options, precision)


# ---------------------------------------------------------------------- the given words as tokens


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
