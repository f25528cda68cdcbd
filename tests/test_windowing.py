"""A window's log-mel is what openai-whisper's transcribe computes for it.

To the bit on the Intel machines it was written on; on an AMD EPYC one value in a few
thousand of one short buffer came out one float32 step (1.2e-7) apart, as the FFT library
batches frames by the signal's length. So values are compared within 1e-6 (the log-mel
spans ~2; a frame taken from the wrong place or normalised over other audio is off by far
more)."""

import numpy as np
import torch
from whisper.audio import HOP_LENGTH, N_FRAMES, N_SAMPLES, log_mel_spectrogram, pad_or_trim

from whisper_demo.windowing import window_mel


def assert_same(mel: torch.Tensor, reference: torch.Tensor) -> None:
    torch.testing.assert_close(mel, reference, atol=1e-6, rtol=0)


def transcribe_mel(audio: np.ndarray, seek: int, segment_size: int) -> torch.Tensor:
    """openai-whisper transcribe()'s window: the whole audio's log-mel (30 s of zero
    padding after it), the window's frames, zero-padded to 30 s."""
    mel = log_mel_spectrogram(torch.from_numpy(audio), padding=N_SAMPLES)
    return pad_or_trim(mel[:, seek : seek + segment_size], N_FRAMES)


def test_a_window_of_a_live_buffer_is_transcribes_mel(clip):
    # Buffers of real speech cut at any sample (live buffers end anywhere), quiet ones
    # too: padding by one FFT window instead of 30 s must not change a value.
    speech = np.concatenate([clip("jfk.wav"), clip("speech_25s.wav")])
    rng = np.random.default_rng(0)
    for _ in range(12):
        start = int(rng.integers(0, speech.size - N_SAMPLES // 2))
        length = int(rng.integers(HOP_LENGTH, N_SAMPLES))
        for audio in (speech[start : start + length], 1e-4 * speech[start : start + length]):
            frames = audio.size // HOP_LENGTH
            assert_same(window_mel(audio, 0, frames, 80), transcribe_mel(audio, 0, frames))


def test_digital_silence_gives_transcribes_mel_too():
    audio = np.zeros(3 * 16000 + 77, np.float32)
    frames = audio.size // HOP_LENGTH
    assert_same(window_mel(audio, 0, frames, 80), transcribe_mel(audio, 0, frames))


def test_the_windows_of_a_long_file_are_transcribes_mel_of_each_window(clip):
    # Past 30 s transcribe normalises over the whole file and window_mel over the window
    # (bounded memory), so the reference here is transcribe's computation on the window.
    audio = np.concatenate([clip("speech_25s.wav")] * 2)
    first = audio[:N_SAMPLES]
    assert_same(window_mel(audio, 0, N_FRAMES, 80), transcribe_mel(first, 0, N_FRAMES))
    seek = N_FRAMES
    segment_size = audio.size // HOP_LENGTH - seek
    window = audio[seek * HOP_LENGTH :]
    assert_same(window_mel(audio, seek, segment_size, 80), transcribe_mel(window, 0, segment_size))
