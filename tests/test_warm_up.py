"""warm_up.py: what a fresh process builds on its first decode is built at start instead.

No timing here: the test checks that the lazily built things exist after the warm-up, for
a model that no decode has touched yet, and that the log says what was warmed."""

import copy
import logging

import pytest
from whisper.tokenizer import get_tokenizer

from whisper_demo import bf16_encoder, int8_encoder, runner, timing
from whisper_demo.events import DecodeOptions
from whisper_demo.precision import precision_for
from whisper_demo.warm_up import live_session, warm_up


@pytest.fixture
def untouched(tiny_model):
    """A model object no decode has used: its per-model caches (packed decoder weights, the
    bfloat16 encoder) are empty, as in a fresh process."""
    model = copy.deepcopy(tiny_model)
    assert model not in runner._runners and model not in bf16_encoder._encoders
    assert model not in int8_encoder._encoders
    return model


def test_warm_up_builds_what_the_first_decode_would(untouched, caplog):
    page = DecodeOptions()
    live = DecodeOptions(precision="int8", word_timestamps=True, attention=True, timestamps=False)
    with caplog.at_level(logging.INFO, logger="whisper_demo"):
        warmed = warm_up(untouched, {"transcribe": page, "live": live, "compare": page})
    # each precision's packed decoder weights, and the fast encoder where the CPU has one
    assert set(runner._runners[untouched]) == {"exact", "int8"}
    fast_encoder = precision_for(untouched, "int8").encoder_dtype
    assert (untouched in bf16_encoder._encoders) == (fast_encoder == "bfloat16")
    assert (untouched in int8_encoder._encoders) == (fast_encoder == "int8")
    assert timing._compiled.is_set()  # word timing's DTW, compiled
    # the tokenizer, and its special tokens' pattern (tiktoken compiles it on first encode)
    tokenizer = get_tokenizer(False, num_languages=untouched.num_languages, language="en", task="transcribe")
    assert "non_speech_tokens" in vars(tokenizer)
    names = [w.what for w in warmed]
    assert names == ["kernels", "bf16 attention", "word timing (DTW compile)",
                     "transcribe decode (exact)", "live decode (int8)"]  # the same options once
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("warm-up done"))
    assert all(name in line for name in names)


def test_a_failed_step_is_logged_and_the_rest_still_warms(untouched, monkeypatch, caplog):
    def broken():
        raise OSError("no compiler here")

    monkeypatch.setattr(timing, "warm_up", broken)
    with caplog.at_level(logging.INFO, logger="whisper_demo"):
        warmed = warm_up(untouched, {"transcribe": DecodeOptions()})
    assert [w.what for w in warmed] == ["kernels", "bf16 attention", "transcribe decode (exact)"]
    assert any("word timing" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


def test_a_live_session_step_runs_the_streamed_pass_and_the_final_pass(untouched):
    update = live_session(untouched, DecodeOptions(precision="int8"))()
    assert update.final and update.final_words  # stopped, the speech given its final text
    assert update.stats.decodes >= 1 and update.stats.final_passes == 1
    # the streamed decodes in the fast mode, the final pass in openai-whisper's arithmetic
    assert set(runner._runners[untouched]) == {"exact", "int8"}
