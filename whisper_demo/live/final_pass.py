"""The final pass: one decode that heard a whole utterance gives it its final text.

The streamed pass (alignatt.py or policy.py) commits words within about a second, from a
buffer that ends where the speaker is still talking: the first words of an utterance are
decided from a short buffer, a word before a pause with little audio after it. At each end
of an utterance (the voice detector's pause, a cut of a long buffer, Stop) the session
decodes the buffer's whole audio since its last cut once more, as openai-whisper's
transcribe decodes a window: timestamp tokens, the temperature fallback (seeded: the same
audio gives the same words), the text before the buffer as the prompt, and the words
already final in the buffer given as the transcript's start, with the tokens the previous
final pass wrote for them (their timestamps included). What it writes after them becomes
final; production recognizers give interim and final results the same way.

This module is the decoder of that pass, which decodes it makes of one buffer, and two
pure pieces of it: which of its words are new, and where a long buffer is cut. The
session (session.py) decides when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from typing import Callable, Generator, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from whisper.tokenizer import get_tokenizer

from ..audio import SAMPLE_RATE
from ..decode import stream_transcribe
from ..events import DecodeOptions, DecodeResult, TokenEvent
from .decoder import MAX_TOKENS_BASE, MAX_TOKENS_PER_SECOND, Prefix, prefix_token_ids
from .policy import START_SLACK_S, TimedWord, normalize_word, timed_words

@dataclass(frozen=True)
class Given:
    """The final words already in the buffer: the final pass's transcript starts with them."""

    prefix: Prefix  # their text, and where the first starts (buffer seconds)
    # the tokens the last final pass of this buffer wrote for exactly these words (segment
    # timestamps included), or None: then they are spelt out as an open segment
    tokens: Optional[Tuple[int, ...]] = None


# (audio, prompt, given) -> TokenEvents, then a DecodeResult with word timestamps
FinalDecoder = Callable[[np.ndarray, Optional[str], Optional[Given]], Iterator[Union[TokenEvent, DecodeResult]]]


def final_options(options: Optional[DecodeOptions] = None, precision: str = "exact") -> DecodeOptions:
    """The live options as the final pass decodes: openai-whisper transcribe's defaults
    (timestamp tokens, the temperature fallback, its thresholds), word timestamps, greedy,
    in `precision` (LiveConfig.final_precision: exact, openai-whisper's own arithmetic, by
    default), and no attention (nothing reads it). Two differences: the language from the
    buffer's own window, as every live decode (a separate detection pass would cost an
    encoder pass), and when every temperature fails, the best attempt is kept, not the
    last (DecodeOptions.fallback_keeps_best, faster-whisper's rule)."""
    defaults = DecodeOptions()
    options = options or defaults
    return replace(options, beam_size=1, precision=precision, fallback_keeps_best=True, timestamps=True, word_timestamps=True,
                   temperature_fallback=defaults.temperature_fallback,
                   compression_ratio_threshold=defaults.compression_ratio_threshold,
                   logprob_threshold=defaults.logprob_threshold, no_speech_threshold=defaults.no_speech_threshold,
                   condition_on_previous_text=True, skip_digital_silence=False, no_speech_before_decoding=False,
                   reset_prompt_after_silence=False, detect_language_from_window=True, attention=False,
                   word_probabilities=False, draft_tokens=None, prefix_tokens=None, prompt=None,
                   single_window=False, encode_audio_only=False)


def model_final_decoder(model, options: Optional[DecodeOptions] = None, precision: str = "exact") -> FinalDecoder:
    """The model as the final pass's decoder (stream_transcribe with final_options)."""
    options = final_options(options, precision)
    tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages)

    def decode(audio: np.ndarray, prompt: Optional[str], given: Optional[Given] = None):
        prefix_tokens = None
        if given is not None and given.prefix.words:
            prefix_tokens = given.tokens or tuple(prefix_token_ids(given.prefix, tokenizer, timestamps=True))
        # A loop ("aaaa...") runs to the window's token limit, once per fallback temperature
        # before transcribe gives up on it: seconds of a live session's time. Speech is
        # 5-7 tokens a second.
        limit = MAX_TOKENS_BASE + int(MAX_TOKENS_PER_SECOND * audio.size / SAMPLE_RATE)
        return stream_transcribe(model, audio, replace(
            options, prompt=prompt, prefix_tokens=prefix_tokens,
            max_tokens_per_window=min(limit, model.dims.n_text_ctx // 2)))

    decode.options = options
    return decode


def final_words(decode: Callable[[int, Optional[str], Optional[Given]], Generator], buffer_start: int,
                prompt: Optional[str], final_in_buffer: Sequence[TimedWord], given: Optional[Given], *,
                speech_left: bool, utterance_start: int, prompt_chars: int):
    """The decodes of one final pass, over the buffer from `buffer_start` (stream samples)
    to the pass's end. decode(start, prompt, given) runs the final decoder on the audio from
    `start`: a generator of TokenEvents that returns its DecodeResult. Yields their
    TokenEvents; returns (the first decode's result, the words written after the final
    ones, whether those came from a later decode).

    `speech_left`: the voice detector heard speech after the judged audio (and the pass is
    not a cut's): a pass that writes no new words there decodes again. Every decode is
    chosen by the audio and the final text alone, never by what the streamed pass had
    committed, so the final text does not depend on when the decodes ran."""
    offset_s = buffer_start / SAMPLE_RATE
    given_end = final_in_buffer[-1].end if final_in_buffer else float("-inf")
    result = yield from decode(buffer_start, prompt, given)
    words = new_final_words(result, offset_s, given.prefix.words if given else (), given_end)
    if words or not speech_left:
        return result, words, False
    continued = False
    # A decode given the words before may stop right after them (it wrote the end of text
    # where the speaker went on): the rest is decoded as transcribe decodes its next
    # window, from the given words' end, with the text before as the prompt.
    if given:
        continued = True
        resume = int(round(given_end * SAMPLE_RATE))
        before = " ".join([prompt or ""] + [w.text for w in final_in_buffer]).strip()
        more = yield from decode(resume, before[-prompt_chars:].lstrip(), None)
        words = result_words(more, resume / SAMPLE_RATE)
    # Still nothing where speech was heard (tiny.en, given the text before, can end at once
    # on a hard word): the utterance's own audio, decoded alone as a session that began
    # with it would decode it. What it writes, or nothing, is final. (Keeping the streamed
    # words there instead made the final text depend on how far the streamed pass had
    # got: one hard clip ended otherwise in real time than in the fast feed.)
    if not words and (utterance_start > buffer_start or given or prompt):  # not the first decode again
        continued = True
        more = yield from decode(utterance_start, None, None)
        words = result_words(more, utterance_start / SAMPLE_RATE)
    return result, words, continued


def result_words(result: Optional[DecodeResult], offset_s: float) -> List[TimedWord]:
    """A decode's words in stream time (its word timestamps are relative to its audio,
    which starts at `offset_s`)."""
    if result is None:
        return []
    return timed_words(result.segments, offset_s)


def new_final_words(result: Optional[DecodeResult], offset_s: float, given: Sequence[str],
                    given_end: float = float("-inf")) -> List[TimedWord]:
    """The words of a final pass after the `given` ones (which end at `given_end`, stream
    seconds). The given words come back first, but not always word for word: word timing
    splits the text afresh, and a segment of no duration loses its words. So they are
    found by aligning the two texts: what follows the last word matched to a given one
    is new; with nothing matched, what starts after the given words' end."""
    words = result_words(result, offset_s)
    if not given:
        return words
    norms = [normalize_word(text) for text in given]
    matcher = SequenceMatcher(a=norms, b=[w.norm for w in words], autojunk=False)
    matched = [block.b + block.size for block in matcher.get_matching_blocks() if block.size]
    if matched:
        return words[max(matched):]
    return [w for w in words if w.start > given_end - START_SLACK_S]


def cut_point(words: Sequence[TimedWord], segment_ends: Sequence[float], given_end: Optional[float],
              before: float) -> Optional[float]:
    """Where a long buffer is cut (stream seconds), from the final pass of its first
    seconds: at the last but one boundary (a segment end, a sentence's last word, or the
    end of the words already final) up to `before` (LiveConfig.cut_keep_seconds before
    the end of the audio the pass heard), as
    whisper_streaming cuts at its last but one segment, so that the last sentence stays in
    the buffer with the words after it (cut right before them, tiny.en misheard "a small
    dog walked" as "a small dark walk"). With one boundary, there; with none, after the
    last word that ends before that point. None: nothing to cut after."""
    boundaries = {e for e in segment_ends if e <= before}
    boundaries |= {w.end for w in words if w.ends_sentence and w.end <= before}
    if given_end is not None:  # the words already final stay before the cut
        boundaries = {b for b in boundaries if b > given_end} | ({given_end} if given_end <= before else set())
    # a sentence's last word and the segment end after it name one boundary, twice
    ordered = sorted(boundaries)
    ordered = [b for b, later in zip(ordered, ordered[1:] + [float("inf")]) if later - b > 0.5]
    if len(ordered) >= 2:
        return ordered[-2]
    if ordered:
        return ordered[0]
    ends = [w.end for w in words if w.end <= before]
    return ends[-1] if ends else None


def midpoint(word: TimedWord) -> float:
    return (word.start + word.end) / 2
