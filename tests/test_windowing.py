"""A window's log-mel is what openai-whisper's transcribe computes for it (LogMel).

To the bit on the Intel machines it was written on; on an AMD EPYC one value in a few
thousand of one short buffer came out one float32 step (1.2e-7) apart, as the FFT library
batches frames by the signal's length. So values are compared within 1e-6 (the log-mel
spans ~2; a frame taken from the wrong place or normalised over other audio is off by far
more)."""

import numpy as np
import torch
from whisper.audio import HOP_LENGTH, N_FRAMES, N_SAMPLES, log_mel_spectrogram, pad_or_trim

from whisper_demo.windowing import LogMel, window_mel


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


def test_the_windows_of_a_long_file_are_slices_of_transcribes_whole_file_mel(clip):
    # transcribe floors every value at 8 below the whole file's maximum and takes each
    # frame from its real neighbours at a window's edge: a window computed on its own
    # audio differs at both (the last frame of the first window here by 0.09).
    audio = np.concatenate([clip("speech_25s.wav"), clip("jfk.wav"), 1e-3 * clip("speech_25s.wav")])
    whole = log_mel_spectrogram(torch.from_numpy(audio), padding=N_SAMPLES)
    content_frames = audio.size // HOP_LENGTH
    mel = LogMel(audio, 80)
    assert mel.content_frames == whole.shape[-1] - N_FRAMES
    for seek in (0, 1234, N_FRAMES, content_frames - N_FRAMES, content_frames - 700):
        segment_size = min(N_FRAMES, content_frames - seek)
        assert_same(mel.window(seek, segment_size), pad_or_trim(whole[:, seek : seek + segment_size], N_FRAMES))


def test_language_detection_reads_the_padded_first_30_s_as_transcribe_does(clip):
    # Past the audio, detection sees the log-mel of transcribe's zero padding (the floor),
    # where a decoded window is padded with zeros.
    for audio in (clip("jfk.wav"), np.concatenate([clip("speech_25s.wav")] * 2)):
        whole = log_mel_spectrogram(torch.from_numpy(audio), padding=N_SAMPLES)
        assert_same(LogMel(audio, 80).first_30s(), pad_or_trim(whole, N_FRAMES))
    short = clip("jfk.wav")
    frames = short.size // HOP_LENGTH
    assert not torch.allclose(LogMel(short, 80).first_30s(), LogMel(short, 80).window(0, frames))


def test_a_single_window_keeps_the_segment_it_did_not_close():
    """transcribe leaves the words after a window's last closed segment to the next window;
    a single-window decode has none, so they become a segment to the window's end."""
    from whisper.tokenizer import get_tokenizer

    from whisper_demo.windowing import split_segments, unfinished_segment

    tokenizer = get_tokenizer(False, language="en")

    def stamp(seconds):
        return tokenizer.timestamp_begin + round(seconds / 0.02)

    first, second = tokenizer.encode(" Ask not"), tokenizer.encode(" what your")
    tokens = [stamp(0.0), *first, stamp(1.0), stamp(1.2), *second]  # cut before its end
    kept, advance = split_segments(tokens, tokenizer, 10.0, 500, 0.02, 2)
    assert [s.text for s in kept] == [" Ask not"] and advance == 100  # seek to 1.0 s
    rest = unfinished_segment(tokens, kept, tokenizer, 10.0, 500, 0.02)
    assert (rest.text, rest.start, rest.end, rest.tokens) == (" what your", 11.2, 15.0, tokens[-1 - len(second):])
    closed = tokens + [stamp(2.0)]  # a window closed by one timestamp leaves nothing
    assert unfinished_segment(closed, split_segments(closed, tokenizer, 10.0, 500, 0.02, 2)[0],
                              tokenizer, 10.0, 500, 0.02) is None
