"""The fast mode's encoder on CPUs without native bfloat16 (int8_encoder.py): int8 x int8
block linears with a scale per input row and per weight output. Its quantization is checked
against its definition, its compiled passes against PyTorch's, and its features against the
float32 encoder's on real speech (tiny.en), on any CPU where PyTorch multiplies int8."""

import pytest
import torch
import torch.nn.functional as F

import whisper_demo.precision as precision_module
from whisper_demo import kernels
from whisper_demo.encoder import encode, encoder_dtype
from whisper_demo.int8_encoder import (QUANT_MAX, Int8Linear, SmoothedNorm, int8_encoder, int8_matmul_supported,
                                       quantize_rows)
from features import distances, window_mel

needs_int8 = pytest.mark.skipif(not int8_matmul_supported(), reason="PyTorch does not multiply int8 fast here")
needs_kernels = pytest.mark.skipif(not kernels.available(), reason="the compiled kernels are not built here")

# Relative L2 distance of the int8 encoder's features from float32's over a window of speech:
# measured 2.9 % (jfk.wav) and 3.6 % (speech_25s.wav) on tiny.en, where CTranslate2's own
# int8 encoder (every linear int8, no smoothing) gives 3.8 % and 5.4 %. Two roundings of 1
# part in 254 per linear, over 12 linears, give a few percent; a lost bias or a wrong scale gives tens.
FEATURE_TOLERANCE = 0.06
FRAME_TOLERANCE = 0.08  # the 99th-percentile frame: measured 5.0 % and 5.3 % (CTranslate2: 6.8, 6.7)


def test_a_row_is_quantized_by_its_own_largest_magnitude_ties_to_even():
    rows = torch.tensor([[1.0, -2.0, 0.5, 254.0], [0.0, 0.0, 0.0, 0.0], [-3.0, 1.5, 0.0, 0.75]])
    quantized, scale = quantize_rows(rows)
    assert quantized.dtype == torch.int8
    assert scale[:, 0].tolist() == pytest.approx([2.0, 1e-12, 3.0 / QUANT_MAX])
    # 0.5 / 2 = 0.25 -> 0 and 1 / 2 -> 0.5 -> 0 (ties to even), -2 / 2 = -1, 254 / 2 = 127
    assert quantized[0].tolist() == [0, -1, 0, 127]
    assert quantized[1].tolist() == [0, 0, 0, 0]  # a silent row stays zero, no division by zero
    assert quantized[2].tolist() == [-127, 64, 0, 32]  # 63.5 -> 64, 31.75 -> 32
    assert ((quantized.float() * scale - rows).abs() <= scale / 2 + 1e-6).all()


@needs_int8
def test_an_int8_linear_is_the_float_linear_within_its_roundings():
    torch.manual_seed(0)
    weight, bias = torch.randn(96, 64), torch.randn(96)
    x = torch.randn(2, 40, 64) * torch.rand(2, 40, 1) * 10  # rows of different ranges
    exact = F.linear(x, weight, bias)
    got = Int8Linear(weight, bias)(x)
    assert got.shape == exact.shape
    error = float((got - exact).norm() / exact.norm())
    assert 0 < error < 0.01  # measured 0.4 %: two roundings of 1 part in 254
    broken = Int8Linear(weight * 1.05, bias)(x)  # a scale 5 % off is seen
    assert float((broken - exact).norm() / exact.norm()) > 0.03


@needs_int8
def test_a_smoothed_norm_keeps_the_product_and_spares_the_other_channels():
    torch.manual_seed(2)
    norm = torch.nn.LayerNorm(64)
    with torch.no_grad():
        norm.weight.fill_(1.0)
        norm.weight[5] = 40.0  # one channel that the gain makes large, as in Whisper's norms
    weight, bias = torch.randn(32, 64) * 0.1, torch.randn(32)
    x = torch.randn(300, 64)
    with torch.inference_mode():
        exact = F.linear(norm(x), weight, bias)
        smoothed = SmoothedNorm(norm, weight, bias)
        # the fold itself changes nothing: the norm's output over s times the weights times s
        folded = F.linear(F.layer_norm(x, (64,), smoothed.gain, smoothed.shift, norm.eps),
                          smoothed.linear.weight_t.t().float() * smoothed.linear.scale[:, None], bias)
        plain = Int8Linear(weight, bias)(norm(x))
        error = float((smoothed(x) - exact).norm() / exact.norm())
    assert float((folded - exact).norm() / exact.norm()) < 0.01  # only the weights' int8 rounding
    assert error < float((plain - exact).norm() / exact.norm()) / 2  # measured 4.5x closer


@needs_int8
@needs_kernels
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_the_compiled_passes_give_pytorchs_numbers(activation):
    torch.manual_seed(1)
    linear = Int8Linear(torch.randn(200, 48), torch.randn(200) if activation else None, activation)
    x = torch.randn(37, 48) * torch.rand(37, 1) * 5  # 37 rows: work items of 16 and a remainder
    compiled, plain = linear(x, use_kernels=True), linear(x, use_kernels=False)
    if activation is None:
        assert torch.equal(compiled, plain)  # the same operations in the same order
    else:  # the kernels' gelu takes a rational erf, within 1.4e-6 of the exact one
        assert float((compiled - plain).abs().max()) < 1e-5


@needs_kernels
def test_the_compiled_quantization_does_not_depend_on_the_threads():
    lib = kernels.library()
    x = torch.randn(70, 384) * torch.rand(70, 1)
    results = []
    for threads in (1, 2):
        quantized, scale = torch.empty(70, 384, dtype=torch.int8), torch.empty(70)
        lib.quantize_rows(x.data_ptr(), 70, 384, quantized.data_ptr(), scale.data_ptr(), threads)
        results.append((quantized, scale))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    expected, expected_scale = quantize_rows(x)
    assert torch.equal(results[0][0], expected) and torch.equal(results[0][1], expected_scale[:, 0])


@needs_int8
@pytest.mark.parametrize("name", ["jfk.wav", "speech_25s.wav"])
def test_int8_features_stay_within_tolerance_of_float32_on_real_speech(tiny_model, clip, name):
    mel = window_mel(clip, name)
    with torch.inference_mode():
        exact = tiny_model.encoder(mel)
    fast = int8_encoder(tiny_model)(mel)
    assert fast.dtype == torch.float32 and fast.shape == exact.shape
    whole, most_frames = distances(fast, exact)
    assert 0 < whole < FEATURE_TOLERANCE  # 0 would mean it silently ran in float32
    assert most_frames < FRAME_TOLERANCE


@needs_int8
def test_a_shorter_input_is_encoded_in_int8_as_closely(tiny_model, clip):
    mel = window_mel(clip, "jfk.wav", frames=1300)  # encode_audio_only: 11 s of speech and a margin
    exact = encode(tiny_model, mel, "exact")
    fast = int8_encoder(tiny_model)(mel)
    assert fast.shape == exact.shape == (1, 650, tiny_model.dims.n_audio_state)
    assert distances(fast, exact)[0] < FEATURE_TOLERANCE


def test_the_fast_mode_takes_int8_only_where_bfloat16_is_not_native(tiny_model, clip, monkeypatch):
    mel = window_mel(clip, "jfk.wav")
    monkeypatch.setattr(precision_module, "bf16_supported", lambda: True)
    monkeypatch.setattr(precision_module, "int8_matmul_supported", lambda: True)
    assert encoder_dtype(tiny_model, "int8") == "bfloat16"  # the closer of the two, where native
    assert encoder_dtype(tiny_model, "exact") == "float32"
    monkeypatch.setattr(precision_module, "bf16_supported", lambda: False)
    assert encoder_dtype(tiny_model, "int8") == "int8"
    assert encoder_dtype(tiny_model, "exact") == "float32"  # the exact mode never changes its encoder
    monkeypatch.setattr(precision_module, "int8_matmul_supported", lambda: False)
    assert encoder_dtype(tiny_model, "int8") == "float32"
    with torch.inference_mode():
        assert torch.equal(encode(tiny_model, mel, "int8"), tiny_model.encoder(mel))


@needs_int8
def test_a_window_is_encoded_in_a_batch_as_alone(tiny_model, clip):
    """Batched long files (batched.py) encode B pieces in one call and promise each piece's
    tokens alone: the int32 sums are exact and each row has its own scale, so a window's
    features do not depend on the windows beside it."""
    mels = [window_mel(clip, "jfk.wav"), window_mel(clip, "speech_25s.wav")]
    encoder = int8_encoder(tiny_model)
    together = encoder(torch.cat(mels))
    for row, mel in zip(together, mels):
        assert torch.equal(row, encoder(mel)[0])


@needs_int8
def test_the_int8_encoder_gives_the_same_words_on_clear_speech(tiny_model, clip, monkeypatch):
    from whisper_demo.decode import transcribe
    from whisper_demo.events import DecodeOptions
    from whisper_demo.text import word_error_rate

    monkeypatch.setattr(precision_module, "fast_encoder_dtype", lambda: "int8")  # as on an AVX2 CPU
    audio = clip("jfk.wav")
    exact = transcribe(tiny_model, audio, DecodeOptions())
    fast = transcribe(tiny_model, audio, DecodeOptions(precision="int8"))
    assert fast.encoder_dtype == "int8"
    assert word_error_rate(fast.text, exact.text) == 0
