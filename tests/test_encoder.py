"""The encoder over a 30 s window (exact: the model's own) or over the audio only
(whisper.cpp's audio_ctx, DecodeOptions.encode_audio_only). On real tiny.en and real speech."""

import torch
from whisper.audio import N_FRAMES, N_SAMPLES, log_mel_spectrogram, pad_or_trim

from whisper_demo.decode import transcribe
from whisper_demo.encoder import FRAMES_PER_SECOND, MARGIN_SECONDS, encode, encoder_frames
from whisper_demo.events import DecodeOptions
from whisper_demo.text import word_error_rate


def test_a_full_window_is_encoded_by_the_models_own_encoder(tiny_model, clip):
    mel = log_mel_spectrogram(torch.from_numpy(clip("jfk.wav")), padding=N_SAMPLES)
    mel = pad_or_trim(mel, N_FRAMES).unsqueeze(0)
    with torch.inference_mode():
        assert torch.equal(encode(tiny_model, mel), tiny_model.encoder(mel))


def test_audio_only_encodes_whole_seconds_with_a_margin_and_never_more_than_a_window():
    assert encoder_frames(1100, audio_only=False) == N_FRAMES
    frames = encoder_frames(1050, audio_only=True)  # 10.5 s of audio
    assert frames % FRAMES_PER_SECOND == 0
    assert 1050 + MARGIN_SECONDS * FRAMES_PER_SECOND <= frames < 1050 + (MARGIN_SECONDS + 1) * FRAMES_PER_SECOND
    assert encoder_frames(2990, audio_only=True) == N_FRAMES


def test_a_shorter_input_gives_fewer_positions_and_the_same_words(tiny_model, clip):
    audio = clip("jfk.wav")
    full = transcribe(tiny_model, audio, DecodeOptions())
    short = transcribe(tiny_model, audio, DecodeOptions(encode_audio_only=True))
    # 11 s of speech: the cross-attention cache holds its positions and the margin's, not 30 s
    encoded_seconds = audio.size / 16000 + MARGIN_SECONDS + 1
    assert short.peak_cross_cache_bytes <= full.peak_cross_cache_bytes * encoded_seconds / 30
    assert word_error_rate(short.text, full.text) <= 0.05
