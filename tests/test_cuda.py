"""On a CUDA GPU: the house rules hold there too (float16 model, models.py). Collected only
with WHISPER_KV_GPU=1 (scripts/gpu-check sets it), so CI, which has no GPU and fails on
skips, never sees these tests."""

import pytest
import torch
import whisper
from whisper.audio import N_FRAMES, N_SAMPLES

from whisper_demo.decode import transcribe
from whisper_demo.events import DecodeOptions

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def cuda_model():
    from whisper_demo.models import load_model

    return load_model("tiny.en", device="cuda", progress=False)


def test_greedy_tokens_identical_in_every_cache_mode_on_cuda(cuda_model, clip):
    audio = clip("jfk.wav")
    tokens = {mode: transcribe(cuda_model, audio, DecodeOptions(cache=mode)).tokens
              for mode in ("static", "hooks", "off")}
    assert len(tokens["static"]) > 20
    assert tokens["static"] == tokens["hooks"] == tokens["off"]


def test_static_matches_whisper_decode_on_cuda(cuda_model, clip):
    audio = clip("jfk.wav")
    mel = whisper.log_mel_spectrogram(torch.from_numpy(audio), padding=N_SAMPLES)
    mel = whisper.pad_or_trim(mel[:, : mel.shape[-1] - N_FRAMES], N_FRAMES)
    reference = whisper.decode(cuda_model, mel.cuda().half(), whisper.DecodingOptions(fp16=True, language="en"))
    assert transcribe(cuda_model, audio, DecodeOptions(cache="static")).tokens == reference.tokens


def test_beam_search_identical_between_hooks_and_static_on_cuda(cuda_model, clip):
    audio = clip("jfk.wav")
    static = transcribe(cuda_model, audio, DecodeOptions(cache="static", beam_size=5))
    hooks = transcribe(cuda_model, audio, DecodeOptions(cache="hooks", beam_size=5))
    assert static.tokens == hooks.tokens


def test_int8_is_refused_on_cuda(cuda_model, clip):
    with pytest.raises(ValueError, match="CPU"):
        transcribe(cuda_model, clip("short_3s.wav"), DecodeOptions(precision="int8"))
