"""A decode stuck in a loop (repeats.py): how it is known, where the fast mode stops it,
and how transcribe's fallback rules then judge it. The decoding tests run the real
tiny.en model on real speech."""

import pytest
import torch
from whisper.audio import N_SAMPLES
from whisper.tokenizer import get_tokenizer

from whisper_demo.decode import Transcription
from whisper_demo.events import DecodeOptions
from whisper_demo.fallback import best_failed, fails_tests
from whisper_demo.repeats import LOOP_TOKENS, is_looping
from whisper_demo.window_decode import WindowOutcome, decode_window

TIMESTAMP_BEGIN = 50363  # tiny.en's <|0.00|>


def test_a_decode_stuck_in_a_loop_is_known_from_its_last_tokens():
    ts = 50000  # timestamp_begin: tokens from here are times
    assert is_looping([7, 8] * 32, ts)  # "uh, uh, ..."
    assert is_looping(list(range(100, 116)) * 4, ts)  # a 16-token sentence, four times
    assert not is_looping(list(range(100, 117)) * 4, ts)  # 17 tokens: longer than a loop's period
    assert not is_looping([7, 8] * 31 + [7], ts)  # under 64 text tokens
    assert not is_looping([7, 8] * 31 + [9, 8], ts)  # the last token breaks it
    # a loop of whole segments, each with later timestamps: the times are left out
    looping_segments = [t for i in range(16) for t in (ts + 2 * i, 5, 6, 7, 8, ts + 2 * i + 1)]
    assert is_looping(looping_segments, ts)
    assert not is_looping(list(range(1000, 1200)), ts)  # speech: no run repeats


# --- transcribe's rules over an attempt stopped as a loop (no model) -----------------------

class _Tokenizer:
    """decode() is all compression_ratio asks of a tokenizer."""

    def decode(self, tokens):
        return " ".join(f"w{t}" for t in tokens)


def test_an_attempt_stopped_as_a_loop_fails_transcribes_test_whatever_its_ratio():
    options = DecodeOptions()
    # seven distinct words: its text compresses far less than 2.4x, but it was stopped looping
    stopped = WindowOutcome(tokens=list(range(7)), avg_logprob=-0.1, looping=True)
    assert stopped.compression_ratio(_Tokenizer()) < options.compression_ratio_threshold
    assert fails_tests(stopped, _Tokenizer(), options)
    assert not fails_tests(WindowOutcome(tokens=list(range(7)), avg_logprob=-0.1), _Tokenizer(), options)
    # without the compression test there is no repetition test to fail
    assert not fails_tests(stopped, _Tokenizer(), DecodeOptions(compression_ratio_threshold=None))


def test_of_failed_attempts_one_stopped_as_a_loop_is_kept_last():
    options = DecodeOptions(fallback_keeps_best=True)
    stopped = WindowOutcome(tokens=list(range(7)), avg_logprob=-0.2, looping=True)
    improbable = WindowOutcome(tokens=list(range(7)), avg_logprob=-1.5)
    assert best_failed(stopped, improbable, _Tokenizer(), options) is improbable
    assert best_failed(improbable, stopped, _Tokenizer(), options) is improbable


# --- where a decode stops at its loop (tiny.en, real speech: conftest.jfk_features) -------

def _decode(model, features, stop_loops: bool, prefix) -> WindowOutcome:
    tokenizer = get_tokenizer(False)
    steps = decode_window(model, features, tokenizer, DecodeOptions(), "en", 0.0, [],
                          prefix=prefix, stop_loops=stop_loops)
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def test_a_decode_stops_where_its_tokens_loop_only_when_asked(tiny_model, jfk_features):
    tokenizer = get_tokenizer(False)
    loop = tokenizer.encode(" uh,") * (LOOP_TOKENS // 2)  # a transcript that starts as a loop
    prefix = [TIMESTAMP_BEGIN] + loop
    assert is_looping(prefix, TIMESTAMP_BEGIN)
    stopped = _decode(tiny_model, jfk_features, True, prefix)
    assert stopped.looping
    assert len(stopped.tokens) == len(prefix) + 1  # the first step's token, then the stop
    assert stopped.avg_logprob < 0  # the attempt's own log probability, for the rules above
    # the same decode not asked to stop runs on past where the loop was seen
    went_on = _decode(tiny_model, jfk_features, False, prefix)
    assert not went_on.looping and len(went_on.tokens) > len(prefix) + 1
    assert went_on.tokens[: len(stopped.tokens)] == stopped.tokens


@pytest.mark.parametrize("precision, options, stops, keeps_best", [
    ("int8", {}, True, True),  # the fast mode: a retry follows a loop; the best failed attempt is kept
    ("exact", {}, False, False),  # exact decodes a loop to its end and keeps the last, as transcribe
    ("exact", dict(fallback_keeps_best=True), False, True),  # the live final pass's option
    ("int8", dict(temperature_fallback=False), False, True),  # no retry: the loop is the text
    ("int8", dict(compression_ratio_threshold=None), False, True),  # no test would fail it
], ids=["fast", "exact", "exact-keeps-best", "no-fallback", "no-compression-test"])
def test_the_fast_mode_stops_loops_where_a_retry_follows_and_keeps_the_best_attempt(
        tiny_model, precision, options, stops, keeps_best):
    task = Transcription(tiny_model, torch.zeros(N_SAMPLES).numpy(), DecodeOptions(precision=precision, **options))
    assert task.stop_loops is stops
    assert task.keeps_best_attempt is keeps_best
