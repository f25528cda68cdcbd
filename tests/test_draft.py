"""Self-speculative decoding (DecodeOptions.draft_tokens) and the core pieces it stands on:
a multi-token forward at any offset, and a static cache that drops rejected positions.
On the real tiny.en model and real speech."""

import pytest
import torch
from whisper.audio import N_SAMPLES, log_mel_spectrogram, pad_or_trim

from whisper_demo.cache import StaticCache
from whisper_demo.runner import decoder_runner

SOT_AND_TEXT = [50257, 50363, 383, 1893, 286, 262, 1578, 1829, 11, 616, 3397]  # tiny.en ids


@pytest.fixture(scope="module")
def jfk_features(tiny_model, clip):
    mel = log_mel_spectrogram(torch.from_numpy(clip("jfk.wav")), padding=N_SAMPLES)
    mel = pad_or_trim(mel[:, : mel.shape[-1] - N_SAMPLES // 160], 3000)
    with torch.inference_mode():
        return tiny_model.encoder(mel.unsqueeze(0))


def _buffers(runner, n_beams=1):
    shape = (n_beams, runner.n_head, runner.n_ctx, runner.d_model // runner.n_head)
    return [(torch.zeros(shape), torch.zeros(shape)) for _ in runner.blocks]


@pytest.mark.parametrize("prefix", [1, 4])
def test_a_multi_token_forward_at_an_offset_equals_one_token_at_a_time(tiny_model, jfk_features, prefix):
    runner = decoder_runner(tiny_model)
    tokens = torch.tensor([SOT_AND_TEXT])
    with torch.inference_mode():
        cross = runner.cross_keys_values(jfk_features)
        one_by_one, self_kv = [], _buffers(runner)
        for p in range(tokens.shape[1]):
            one_by_one.append(runner.forward(tokens[:, p : p + 1], p, self_kv, cross))
        one_by_one = torch.cat(one_by_one, dim=1)

        together = _buffers(runner)
        head = runner.forward(tokens[:, :prefix], 0, together, cross)
        rest = runner.forward(tokens[:, prefix:], prefix, together, cross)
    assert torch.allclose(torch.cat([head, rest], dim=1), one_by_one, atol=1e-4, rtol=1e-4)
    # and the keys/values it wrote are the ones the single steps wrote
    n = tokens.shape[1]
    for (k1, v1), (k2, v2) in zip(self_kv, together):
        assert torch.allclose(k1[:, :, :n], k2[:, :, :n], atol=1e-4)
        assert torch.allclose(v1[:, :, :n], v2[:, :, :n], atol=1e-4)


def test_truncate_lets_the_next_forward_overwrite_rejected_positions(tiny_model, jfk_features):
    tokens = torch.tensor([SOT_AND_TEXT])
    wrong = tokens.clone()
    wrong[0, 6:] = 1000  # a draft that went wrong after position 5
    with torch.inference_mode():
        reference = StaticCache(tiny_model, 1, 1, "exact")
        expected = reference.logits_at(tokens, jfk_features, range(tokens.shape[1]))

        cache = StaticCache(tiny_model, 1, 1, "exact")
        cache.logits_at(wrong, jfk_features, range(wrong.shape[1]))
        assert cache.cache_tokens() == wrong.shape[1]
        cache.truncate(6)
        assert cache.cache_tokens() == 6
        after = cache.logits_at(tokens, jfk_features, range(6, tokens.shape[1]))
    assert torch.allclose(after, expected[:, 6:], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError):
        cache.truncate(tokens.shape[1] + 1)
