"""openai-whisper transcribe()'s 30 s windows, the parts that need no model.

decode.stream_transcribe walks long audio one 30 s window at a time. For each window it
needs the log-mel of that window (LogMel), and, once the window is decoded, its tokens
cut into timed segments plus how far to seek for the next window (split_segments). Both
follow openai-whisper's transcribe, so that results match it. unfinished_segment keeps the
words a window left unfinished when no window follows (DecodeOptions.single_window).
"""

from typing import List, Optional, Tuple

import numpy as np
import torch
from whisper.audio import HOP_LENGTH, N_FFT, N_FRAMES, SAMPLE_RATE, mel_filters, pad_or_trim

from .events import Segment

FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # log-mel frames: 100 a second


class LogMel:
    """openai-whisper transcribe()'s log-mel of the whole input, a window at a time.

    transcribe computes the log-mel of the whole file plus 30 s of zeros, floors every value
    at 8 below the file's maximum, and slices 30 s windows from it. This computes the same
    frames (each from the same 400 samples: the real neighbours at a window's edge, the
    reflection only at the start of the file) but skips the frames of zero padding beyond
    the audio, which are the floor and never the maximum: a live re-decode of a 5 s buffer
    would otherwise transform 35 s of audio. The file's log-mel is kept before the floor
    (4 bytes x n_mels x 100 a second: 115 MB an hour at 80 mels), not its STFT (13x that).
    """

    def __init__(self, audio: np.ndarray, n_mels: int, chunk_frames: int = N_FRAMES):
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        self.content_frames = audio.size // HOP_LENGTH
        # frames past these hold only zeros (a frame reaches N_FFT // 2 samples either side)
        frames = self.content_frames + N_FFT // HOP_LENGTH + 1
        window = torch.hann_window(N_FFT)
        filters = mel_filters("cpu", n_mels)
        with torch.inference_mode():
            # filled in place: a list of chunks joined at the end held the hour's log-mel twice
            self._log_spec = torch.empty(n_mels, frames)
            for first in range(0, frames, chunk_frames):
                last = min(frames, first + chunk_frames)
                piece = _padded_signal(audio, first * HOP_LENGTH, (last - 1) * HOP_LENGTH + N_FFT)
                stft = torch.stft(torch.from_numpy(piece), N_FFT, HOP_LENGTH, window=window,
                                  center=False, return_complex=True)
                power = filters @ (stft.abs() ** 2)
                torch.log10(torch.clamp(power, min=1e-10), out=self._log_spec[:, first:last])
            self._floor = self._log_spec.max() - 8.0

    def window(self, seek: int, segment_size: int, frames: int = N_FRAMES) -> torch.Tensor:
        """The window's log-mel [n_mels, frames]: transcribe's `mel[:, seek:seek+size]`,
        zero-padded (as pad_or_trim does) to `frames` (30 s, or fewer for an encoder that
        reads only the audio, encoder.py)."""
        with torch.inference_mode():
            mel = torch.maximum(self._log_spec[:, seek : seek + segment_size], self._floor)
            return pad_or_trim((mel + 4.0) / 4.0, frames)


    def first_30s(self) -> torch.Tensor:
        """transcribe()'s language-detection input: the first 3000 frames of the whole
        padded log-mel, so past the audio the frames of its zero padding (the floor), not
        the zeros a decoded window is padded with."""
        with torch.inference_mode():
            mel = self._log_spec[:, :N_FRAMES]
            silence = torch.full((mel.shape[0], N_FRAMES - mel.shape[1]), -10.0)  # log10(1e-10)
            mel = torch.maximum(torch.cat([mel, silence], dim=1), self._floor)
            return (mel + 4.0) / 4.0


def _padded_signal(audio: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Samples start..stop-1 of the signal transcribe's STFT frames: the audio with zeros
    after it, reflected N_FFT // 2 samples at its start (torch.stft's centring). Built a
    chunk at a time, so an hour of audio is never copied whole."""
    index = np.arange(start, stop) - N_FFT // 2
    index = np.abs(index)  # the reflection: sample -k is sample k
    out = np.zeros(stop - start, np.float32)
    inside = index < audio.size
    out[inside] = audio[index[inside]]
    return out


def window_mel(audio: np.ndarray, seek: int, segment_size: int, n_mels: int,
               frames: int = N_FRAMES) -> torch.Tensor:
    """One window of LogMel(audio, n_mels): for one-off callers (a benchmark's window)."""
    return LogMel(audio, n_mels).window(seek, segment_size, frames)


def split_segments(tokens, tokenizer, time_offset, segment_size, time_precision, input_stride):
    """Cut one window's tokens into timed segments and say how far to seek (in mel frames).

    The rules are openai-whisper transcribe()'s: text between two consecutive timestamps is
    a segment; if the window ends inside an unfinished segment, the next window starts at the
    last timestamp so that the words cut off are heard again.
    """
    tokens = torch.tensor(tokens, dtype=torch.long)
    if len(tokens) == 0:
        return [], segment_size
    is_timestamp = tokens.ge(tokenizer.timestamp_begin)
    single_timestamp_ending = is_timestamp[-2:].tolist() == [False, True]
    consecutive = (torch.where(is_timestamp[:-1] & is_timestamp[1:])[0] + 1).tolist()

    def segment(start, end, piece):
        text = [t for t in piece.tolist() if t < tokenizer.eot]
        return Segment(start=start, end=end, text=tokenizer.decode(text), tokens=piece.tolist())

    if not consecutive:
        duration = segment_size * HOP_LENGTH / SAMPLE_RATE
        stamps = tokens[is_timestamp]
        if len(stamps) > 0 and stamps[-1].item() != tokenizer.timestamp_begin:
            duration = (stamps[-1].item() - tokenizer.timestamp_begin) * time_precision
        return [segment(time_offset, time_offset + duration, tokens)], segment_size

    if single_timestamp_ending:
        consecutive.append(len(tokens))
    segments, last = [], 0
    for cut in consecutive:
        piece = tokens[last:cut]
        start = (piece[0].item() - tokenizer.timestamp_begin) * time_precision
        end = (piece[-1].item() - tokenizer.timestamp_begin) * time_precision
        segments.append(segment(time_offset + start, time_offset + end, piece))
        last = cut
    if single_timestamp_ending:
        return segments, segment_size
    return segments, (tokens[last - 1].item() - tokenizer.timestamp_begin) * input_stride


def unfinished_segment(tokens, kept: List[Segment], tokenizer, time_offset: float, segment_size: int,
                       time_precision: float) -> Optional[Segment]:
    """The tokens after a window's last closed segment, which split_segments leaves to the
    next window, as a segment that ends with the window's audio: for a decode that has no
    next window (DecodeOptions.single_window). None when they hold no text."""
    rest = list(tokens[sum(len(s.tokens) for s in kept):])
    said = [t for t in rest if t < tokenizer.eot]
    if not said:
        return None
    stamps = [t for t in rest if t >= tokenizer.timestamp_begin]
    start = (time_offset + (stamps[0] - tokenizer.timestamp_begin) * time_precision if stamps
             else kept[-1].end if kept else time_offset)
    end = time_offset + segment_size * HOP_LENGTH / SAMPLE_RATE
    return Segment(start=start, end=max(start, end), text=tokenizer.decode(said), tokens=rest)


def seek_clips(clip_timestamps, content_frames: int) -> List[Tuple[int, int]]:
    """transcribe()'s clip_timestamps as (start, end) mel frames: pairs of seconds, the last
    clip open to the end of the audio when the count is odd; no timestamps: all of it."""
    points = [round(t * FRAMES_PER_SECOND) for t in clip_timestamps] or [0]
    if len(points) % 2 == 1:
        points.append(content_frames)
    return list(zip(points[::2], points[1::2]))
