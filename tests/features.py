"""Helpers the fast encoders' tests share: a window's log-mel and how far features moved."""

import torch
from whisper.audio import N_FRAMES, N_SAMPLES, log_mel_spectrogram, pad_or_trim


def window_mel(clip, name, frames=N_FRAMES):
    """The log-mel [1, n_mels, frames] of a 30 s window of the example `name` (padded)."""
    mel = log_mel_spectrogram(torch.from_numpy(clip(name)), padding=N_SAMPLES)
    return pad_or_trim(mel, N_FRAMES)[:, :frames].unsqueeze(0)


def distances(fast, exact):
    """(the whole window's relative L2 distance, the 99th percentile of each frame's own)."""
    whole = float((fast - exact).norm() / exact.norm())
    frames = (fast - exact).norm(dim=-1) / exact.norm(dim=-1)
    return whole, float(torch.quantile(frames.flatten(), 0.99))
