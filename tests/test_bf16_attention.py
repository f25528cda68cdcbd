"""The fast encoder's attention kernel (bf16_attention.py, kernels/bf16_attention.cpp): it
computes what float32 attention computes, to bfloat16's precision, on real speech's queries,
keys and values and on awkward lengths; the encoder uses it where the CPU has AVX512_BF16
but no AMX (with AMX, PyTorch's fused attention is faster), and falls back to PyTorch (as
closely) where it is not built.

On a CPU without AVX512_BF16 the kernel cannot run: there the tests check that it says so
and is not used, rather than skipping (a skip fails in CI)."""

import pytest
import torch
import torch.nn.functional as F
from whisper.audio import N_FRAMES, N_SAMPLES, log_mel_spectrogram, pad_or_trim

from whisper_demo import bf16_attention
from whisper_demo import bf16_encoder as bf16_encoder_module
from whisper_demo.bf16_encoder import Bf16Encoder
from whisper_demo.kernels import cpu_flags

HAS_BF16 = "avx512_bf16" in cpu_flags().split()
HAS_AMX = "amx_bf16" in cpu_flags().split()
# Relative L2 distance from float32 attention over the same bfloat16 q, k, v: measured
# 0.17-0.19 % (real speech, tiny.en's four layers; random data), the written-out PyTorch
# attention 0.3-0.5 %. bfloat16 probabilities round by 0.4 %; a wrong scale, a mis-ordered
# head or a lost key is tens of percent.
ATTENTION_TOLERANCE = 0.01
# the encoder's features, as tests/test_fast_encoder.py holds them
FEATURE_TOLERANCE = 0.03


def float32_attention(qkv, heads):
    batch, positions, width = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
    q, k, v = (part.float().view(batch, positions, heads, -1).transpose(1, 2) for part in qkv.split(width, -1))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, positions, width)


def relative(found, expected):
    return float((found.float() - expected).norm() / expected.norm())


def test_the_kernel_is_built_where_the_cpu_multiplies_bfloat16():
    if HAS_BF16:
        assert bf16_attention.available(), bf16_attention.unavailable_reason()
    else:
        assert not bf16_attention.available()
        assert "AVX512_BF16" in bf16_attention.unavailable_reason()


def _speech_projections(model, clip):
    """Each layer's fused q/k/v projection over a window of real speech, as the encoder computes it."""
    mel = pad_or_trim(log_mel_spectrogram(torch.from_numpy(clip("speech_25s.wav")), padding=N_SAMPLES),
                      N_FRAMES).unsqueeze(0)
    encoder = Bf16Encoder(model.encoder)
    seen = []
    kept = encoder._attention

    def recording(x, prefix):
        seen.append(encoder._linear(x, prefix + "qkv"))
        return kept(x, prefix)

    encoder._attention = recording
    encoder(mel)
    return seen, encoder.n_head


def test_the_kernel_attends_as_float32_does_on_real_speech(tiny_model, clip):
    if not HAS_BF16:
        assert not bf16_attention.available()
        return
    projections, heads = _speech_projections(tiny_model, clip)
    assert len(projections) == tiny_model.dims.n_audio_layer
    for qkv in projections:
        expected = float32_attention(qkv, heads)
        assert relative(bf16_attention.attention(qkv, heads), expected) < ATTENTION_TOLERANCE
    # the tolerance tells a wrong computation apart: the same heads unscaled, or shifted by one
    qkv = projections[-1]
    unscaled = torch.cat([qkv[..., :qkv.shape[-1] // 3] * 8, qkv[..., qkv.shape[-1] // 3:]], -1)
    assert relative(bf16_attention.attention(unscaled, heads), expected) > 5 * ATTENTION_TOLERANCE
    assert relative(bf16_attention.attention(qkv, heads).roll(64, -1), expected) > 5 * ATTENTION_TOLERANCE


@pytest.mark.parametrize("positions,heads,batch", [(1, 6, 1), (31, 6, 1), (33, 8, 2), (650, 6, 1), (1500, 20, 1)])
def test_the_kernel_takes_any_length_and_head_count(positions, heads, batch):
    if not HAS_BF16:
        assert not bf16_attention.available()
        return
    torch.manual_seed(positions)
    qkv = (torch.randn(batch, positions, 3 * heads * 64) * 2).to(torch.bfloat16)
    found = bf16_attention.attention(qkv, heads)
    assert found.shape == (batch, positions, heads * 64) and found.dtype == torch.bfloat16
    assert relative(found, float32_attention(qkv, heads)) < ATTENTION_TOLERANCE


def test_the_kernel_refuses_what_it_would_misread():
    qkv = torch.zeros(1, 10, 3 * 6 * 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError):
        bf16_attention.attention(qkv.float(), 6)  # float32
    with pytest.raises(ValueError):
        bf16_attention.attention(qkv, 4)  # another head count than the width holds
    with pytest.raises(ValueError):
        bf16_attention.attention(qkv[:, ::2], 6)  # every other position: not contiguous


def _window(clip, name):
    return pad_or_trim(log_mel_spectrogram(torch.from_numpy(clip(name)), padding=N_SAMPLES), N_FRAMES).unsqueeze(0)


def _routes_here():
    """Every route this machine can run: SDPA and the PyTorch blocks anywhere (slowly without
    the instructions), the kernel where it is built."""
    return ["sdpa", "blocks"] + (["kernel"] if HAS_BF16 else [])


def test_the_encoder_attends_by_the_cpu_s_route_and_every_route_stays_close(tiny_model, clip, monkeypatch):
    assert bf16_encoder_module.attention_route() == ("sdpa" if HAS_AMX else "kernel" if HAS_BF16 else "blocks")
    mel = _window(clip, "jfk.wav")
    with torch.inference_mode():
        exact = tiny_model.encoder(mel)
    calls = []
    kernel = bf16_attention.attention
    monkeypatch.setattr(bf16_attention, "attention", lambda *a: calls.append(1) or kernel(*a))
    for route in _routes_here():
        monkeypatch.setattr(bf16_encoder_module, "attention_route", lambda route=route: route)
        calls.clear()
        features = Bf16Encoder(tiny_model.encoder)(mel)
        assert len(calls) == (tiny_model.dims.n_audio_layer if route == "kernel" else 0), route
        assert 0 < relative(features, exact) < FEATURE_TOLERANCE, route


def test_a_window_is_encoded_the_same_in_a_batch_and_alone(tiny_model, clip, monkeypatch):
    """What lets a batched piece be decoded as it would be alone (batched.py): no route's
    numbers for one window depend on the other windows beside it."""
    windows = torch.cat([_window(clip, "jfk.wav"), _window(clip, "speech_25s.wav")])
    encoder = Bf16Encoder(tiny_model.encoder)
    for route in _routes_here():
        monkeypatch.setattr(bf16_encoder_module, "attention_route", lambda route=route: route)
        together = encoder(windows)
        for row in range(2):
            assert torch.equal(together[row:row + 1], encoder(windows[row:row + 1])), route
