"""openai-whisper transcribe()'s temperature fallback, as rules over one decoded window.

A window is decoded greedily first; transcribe retries it at higher temperatures while
its text is too repetitive (gzip compression ratio) or too unlikely (average log
probability), unless the window is silence; it then drops a window its no-speech test
calls silent. decode.py (a window of a file) and batched.py (a piece of a batch) apply
these rules alike, so they live here, apart from both loops.

Pure functions over window_decode's WindowOutcome and the user's DecodeOptions.
"""

from __future__ import annotations

from typing import Optional, Tuple

from .events import DecodeOptions
from .window_decode import WindowOutcome

# openai-whisper transcribe()'s temperatures for retrying a window that failed
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def temperatures(options: DecodeOptions) -> Tuple[float, ...]:
    """The temperatures a window is tried at, in order."""
    return FALLBACK_TEMPERATURES if options.temperature_fallback else (0.0,)


def needs_fallback(outcome: WindowOutcome, tokenizer, options: DecodeOptions) -> bool:
    """openai-whisper transcribe()'s test: too repetitive or too unlikely, unless silent."""
    return options.temperature_fallback and fails_tests(outcome, tokenizer, options)


def fails_tests(outcome: WindowOutcome, tokenizer, options: DecodeOptions) -> bool:
    """transcribe()'s tests of a decode, whether or not a fallback follows: too repetitive
    (compression ratio) or too unlikely (average log probability), unless silent."""
    if outcome.silent:
        return False
    repetitive = options.compression_ratio_threshold is not None and (
        outcome.looping or outcome.compression_ratio(tokenizer) > options.compression_ratio_threshold)
    improbable = options.logprob_threshold is not None and outcome.avg_logprob < options.logprob_threshold
    no_speech = options.no_speech_threshold is not None and outcome.no_speech_prob > options.no_speech_threshold
    return (repetitive or improbable) and not (no_speech and improbable)  # silence is no failure


def best_failed(best: Optional[WindowOutcome], outcome: WindowOutcome, tokenizer,
                options: DecodeOptions) -> WindowOutcome:
    """Of two attempts that failed transcribe()'s tests, the one to keep if all fail
    (DecodeOptions.fallback_keeps_best): not too repetitive first, then the better average
    log probability. The other lets go of its cross-attention K/V."""
    def key(attempt: WindowOutcome):
        threshold = options.compression_ratio_threshold
        repetitive = attempt.looping or (threshold is not None and attempt.compression_ratio(tokenizer) > threshold)
        return (not repetitive, attempt.avg_logprob)

    if best is None:
        return outcome
    kept, dropped = (outcome, best) if key(outcome) > key(best) else (best, outcome)
    dropped.cross_kv = None
    return kept


def is_silent(outcome: WindowOutcome, options: DecodeOptions) -> bool:
    """transcribe()'s no-speech rule: P(no speech) above the threshold and the text
    improbable (a confident transcript is kept, whatever P(no speech) says)."""
    if outcome.silent:  # judged at the first step (no_speech_before_decoding)
        return True
    if options.no_speech_threshold is None or outcome.no_speech_prob <= options.no_speech_threshold:
        return False
    return options.logprob_threshold is None or outcome.avg_logprob <= options.logprob_threshold
