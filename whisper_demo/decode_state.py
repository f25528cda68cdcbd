"""What one stream_transcribe call carries from window to window (decode.py): the prompt,
openai-whisper transcribe()'s `all_tokens`, and the running totals that end in the
DecodeResult.
"""

from typing import List

import numpy as np

from .events import DecodeOptions, DecodeResult, Segment
from .window_decode import WindowOutcome


class Returning:
    """Iterate a generator and keep what it returns: `for x in (r := Returning(g)): ...`,
    then `r.value`. A loop left early (stream_transcribe closed) drops the iteration, which
    closes the generator through `yield from`, so its finally still frees the cache."""

    def __init__(self, generator):
        self.generator = generator
        self.value = None

    def __iter__(self):
        self.value = yield from self.generator


class Prompt:
    """transcribe()'s all_tokens: the initial prompt, then the text of every kept segment,
    and where the prompt was last reset. A window is prompted with what follows the reset
    (the last n_text_ctx/2 - 1 tokens of it, window_decode cuts)."""

    def __init__(self, options: DecodeOptions, n_text_ctx: int):
        self.options = options
        self.all_tokens: List[int] = []
        self.initial: List[int] = []
        self.reset_since = 0
        self.room = n_text_ctx // 2 - 1

    def start(self, tokenizer) -> None:
        if self.options.prompt:
            self.initial = tokenizer.encode(" " + self.options.prompt.strip())
            self.all_tokens.extend(self.initial)
            self.room -= len(self.initial)

    def tokens(self) -> List[int]:
        if not self.options.carry_initial_prompt:
            return self.all_tokens[self.reset_since:]
        ignored = max(len(self.initial), self.reset_since)
        return self.initial + self.all_tokens[ignored:][-self.room:]

    @property
    def said(self) -> List[int]:
        """The transcript's tokens: everything kept, without the initial prompt."""
        return self.all_tokens[len(self.initial):]

    def add(self, window_segments: List[Segment], temperature: float) -> None:
        self.all_tokens.extend(t for s in window_segments for t in s.tokens)
        if not self.options.condition_on_previous_text or temperature > 0.5:
            self.reset_since = len(self.all_tokens)  # a high temperature's text prompts no more

    def after_silence(self) -> None:
        if self.options.reset_prompt_after_silence:
            self.reset_since = len(self.all_tokens)


def text(tokenizer, tokens: List[int]) -> str:
    """The text of `tokens`, timestamps and specials left out."""
    return tokenizer.decode([t for t in tokens if t < tokenizer.eot])


class Stats:
    """Running totals of one stream_transcribe call, and the DecodeResult they end in."""

    def __init__(self):
        self.latencies_ms: List[float] = []
        self.encoder_ms = 0.0
        self.encoder_dtype = "float32"  # what the encoder computed in (encoder.encoder_dtype)
        self.peak_self = 0
        self.peak_cross = 0
        self.peak_rss = 0
        self.skipped_windows = 0
        self.draft_offered = 0
        self.draft_accepted = 0
        self.draft_passes = 0
        self.prefix_given = 0

    def add_attempt(self, outcome: WindowOutcome) -> None:
        self.peak_self = max(self.peak_self, outcome.peak_self_cache_bytes)
        self.peak_cross = max(self.peak_cross, outcome.peak_cross_cache_bytes)
        self.draft_offered += outcome.draft_offered
        self.draft_accepted += outcome.draft_accepted
        self.draft_passes += outcome.draft_passes
        self.prefix_given = max(self.prefix_given, outcome.prefix_given)  # a retry is given it again

    def result(self, transcript: str, segments: List[Segment], language: str,
               options: DecodeOptions, no_speech_prob: float) -> DecodeResult:
        decode_seconds = sum(self.latencies_ms) / 1000
        latencies = np.array(self.latencies_ms) if self.latencies_ms else np.zeros(1)
        return DecodeResult(
            text=transcript.strip(),
            tokens=[t for s in segments for t in s.tokens],
            segments=segments,
            language=language,
            cache_mode=options.cache,
            beam_size=options.beam_size,
            n_tokens=len(self.latencies_ms),
            decode_seconds=decode_seconds,
            encoder_ms=self.encoder_ms,
            encoder_dtype=self.encoder_dtype,
            tokens_per_second=len(self.latencies_ms) / decode_seconds if decode_seconds else 0.0,
            mean_latency_ms=float(latencies.mean()),
            p95_latency_ms=float(np.percentile(latencies, 95)),
            peak_self_cache_bytes=self.peak_self,
            peak_cross_cache_bytes=self.peak_cross,
            peak_rss_bytes=self.peak_rss,
            latencies_ms=self.latencies_ms,
            skipped_windows=self.skipped_windows,
            no_speech_prob=no_speech_prob,
            draft_offered=self.draft_offered,
            draft_accepted=self.draft_accepted,
            draft_passes=self.draft_passes,
            prefix_given=self.prefix_given,
        )
