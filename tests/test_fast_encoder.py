"""The fast mode's encoder (bf16_encoder.py): bfloat16 features stay close to float32's on
real speech, the exact mode keeps the model's own encoder, and every result says which ran.
On real tiny.en; the bfloat16 encoder is called directly too, so its numerics are checked
on any CPU (without native bfloat16 it is slower there, never used, but computes the same)."""

import numpy as np
import pytest
import torch

import whisper_demo.precision as precision_module
from whisper_demo.bf16_encoder import bf16_encoder, bf16_supported
from whisper_demo.decode import stream_transcribe, transcribe
from whisper_demo.encoder import encode, encoder_dtype
from whisper_demo.events import DecodeOptions, DecodeResult, TokenEvent
from whisper_demo.bench.accuracy import Transcript, compare
from whisper_demo.text import word_error_rate
from features import distances, window_mel

# Relative L2 distance of the bfloat16 features from float32's over a window of speech:
# measured 1.1-1.6 % (tiny.en) and 1.2-1.3 % (base) on jfk.wav and speech_25s.wav. bfloat16 keeps 8 bits of
# mantissa (0.4 % per rounding), so a few percent is what the format gives; a wrong scale,
# a lost bias or a mis-ordered head would be tens of percent.
FEATURE_TOLERANCE = 0.03
# and almost every frame as close: the 99th percentile of each frame's distance relative
# to its own norm (measured 1.8 %). A handful of frames move more (3 of 1500 by 10-82 % in
# speech_25s.wav, low-norm frames; under torch.autocast in bfloat16 such frames move by up to 29 %):
# what that does to the words is measured by the accuracy benchmark, on 2,000 words.
FRAME_TOLERANCE = 0.05


@pytest.mark.parametrize("name", ["jfk.wav", "speech_25s.wav"])
def test_bfloat16_features_stay_within_tolerance_of_float32_on_real_speech(tiny_model, clip, name):
    mel = window_mel(clip, name)
    with torch.inference_mode():
        exact = tiny_model.encoder(mel)
    fast = bf16_encoder(tiny_model)(mel)
    assert fast.dtype == torch.float32 and fast.shape == exact.shape
    whole, most_frames = distances(fast, exact)
    assert 0 < whole < FEATURE_TOLERANCE  # 0 would mean it silently ran in float32
    assert most_frames < FRAME_TOLERANCE


def test_a_shorter_input_is_encoded_in_bfloat16_as_closely(tiny_model, clip):
    mel = window_mel(clip, "jfk.wav", frames=1300)  # encode_audio_only: 11 s of speech and a margin
    exact = encode(tiny_model, mel, "exact")
    fast = bf16_encoder(tiny_model)(mel)
    assert fast.shape == exact.shape == (1, 650, tiny_model.dims.n_audio_state)
    assert distances(fast, exact)[0] < FEATURE_TOLERANCE


def test_the_fast_mode_encodes_in_bfloat16_only_where_the_cpu_has_it(tiny_model, clip, monkeypatch):
    mel = window_mel(clip, "jfk.wav")
    assert encoder_dtype(tiny_model, "exact") == "float32"
    fallback = "int8" if precision_module.int8_matmul_supported() else "float32"  # test_int8_encoder.py
    assert encoder_dtype(tiny_model, "int8") == ("bfloat16" if bf16_supported() else fallback)
    monkeypatch.setattr(precision_module, "bf16_supported", lambda: False)
    monkeypatch.setattr(precision_module, "int8_matmul_supported", lambda: False)
    assert encoder_dtype(tiny_model, "int8") == "float32"
    with torch.inference_mode():
        assert torch.equal(encode(tiny_model, mel, "int8"), tiny_model.encoder(mel))


def test_results_and_events_say_what_the_encoder_computed_in(tiny_model, clip, monkeypatch):
    monkeypatch.setattr(precision_module, "bf16_supported", lambda: True)  # as on this project's CPU
    audio = clip("jfk.wav")
    for precision, dtype in (("exact", "float32"), ("int8", "bfloat16")):
        items = list(stream_transcribe(tiny_model, audio, DecodeOptions(precision=precision)))
        assert {i.encoder_dtype for i in items if isinstance(i, TokenEvent)} == {dtype}
        result = items[-1]
        assert isinstance(result, DecodeResult) and result.encoder_dtype == dtype


def test_the_fast_encoder_gives_the_same_words_on_clear_speech(tiny_model, clip, monkeypatch):
    monkeypatch.setattr(precision_module, "bf16_supported", lambda: True)
    audio = clip("jfk.wav")
    exact = transcribe(tiny_model, audio, DecodeOptions())
    fast = transcribe(tiny_model, audio, DecodeOptions(precision="int8"))
    assert fast.encoder_dtype == "bfloat16"
    assert word_error_rate(fast.text, exact.text) == 0


def _transcripts(mode, edits, texts):
    return [Transcript(f"r{i}", "dev", mode, text, e, 10, "float32") for i, (e, text) in enumerate(zip(edits, texts))]


def test_the_accuracy_comparison_counts_differing_words_and_brackets_the_difference():
    by_mode = {"exact": _transcripts("exact", [1, 2, 0, 3], ["a b", "c d", "e", "f g"]),
               "fast": _transcripts("fast", [1, 3, 0, 5], ["a b", "c x", "e", "h i"])}
    found = compare(by_mode, "exact", "fast")
    assert found.difference_points == pytest.approx((9 - 6) / 40 * 100)
    assert found.words_differ == 3 and found.recordings_differ == 2
    low, high = found.interval_points
    assert low <= found.difference_points <= high and low >= 0  # fast is never better in one
    assert np.isclose(found.wer_a, 6 / 40) and np.isclose(found.wer_b, 9 / 40)


def test_the_panel_says_what_the_encoder_computed_in(tiny_model, clip, monkeypatch):
    from whisper_demo.ui.render.panel import panel_html

    audio = clip("short_3s.wav")
    monkeypatch.setattr(precision_module, "bf16_supported", lambda: True)
    fast = transcribe(tiny_model, audio, DecodeOptions(precision="int8"))
    monkeypatch.setattr(precision_module, "bf16_supported", lambda: False)  # a CPU without it
    monkeypatch.setattr(precision_module, "int8_matmul_supported", lambda: True)
    int8 = transcribe(tiny_model, audio, DecodeOptions(precision="int8"))
    monkeypatch.setattr(precision_module, "int8_matmul_supported", lambda: False)  # nor int8
    plain = transcribe(tiny_model, audio, DecodeOptions(precision="int8"))
    assert "features, per 30 s window · bfloat16" in panel_html(fast, tiny_model)
    assert "features, per 30 s window · int8" in panel_html(int8, tiny_model)
    assert "features, per 30 s window · float32" in panel_html(plain, tiny_model)
