"""openai-whisper transcribe()'s 30 s windows, the parts that need no model.

decode.stream_transcribe walks long audio one 30 s window at a time. For each window it
needs the log-mel of that window (window_mel), and, once the window is decoded, its tokens
cut into timed segments plus how far to seek for the next window (split_segments). Both
follow openai-whisper's transcribe, so that results match it.
"""

import numpy as np
import torch
from whisper.audio import HOP_LENGTH, N_FFT, N_FRAMES, N_SAMPLES, SAMPLE_RATE, log_mel_spectrogram, pad_or_trim

from .events import Segment


def window_mel(audio: np.ndarray, seek: int, segment_size: int, n_mels: int,
               frames: int = N_FRAMES) -> torch.Tensor:
    """The log-mel of one 30 s window, [n_mels, frames], computed from that window's audio
    only, so that memory does not grow with the length of the file (openai-whisper's
    transcribe computes the whole file's log-mel first: ~1.5 GB of STFT per hour). For
    audio up to 30 s this is exactly transcribe's mel.

    transcribe pads the audio with 30 s of zeros; only the frames that touch the audio are
    kept, and a frame of zeros is the floor of the log-mel, never its maximum, so padding
    by one FFT window gives the same numbers (tested) for a fraction of the STFT: a live
    re-decode of a 5 s buffer transformed 35 s of audio for every decode."""
    start = seek * HOP_LENGTH
    samples = torch.from_numpy(audio[start : start + N_SAMPLES])
    with torch.inference_mode():
        mel = log_mel_spectrogram(samples, n_mels, padding=N_FFT)
    return pad_or_trim(mel[:, :segment_size], frames)


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
