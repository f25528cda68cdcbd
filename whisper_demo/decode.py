"""The cached decoder generator: one TokenEvent per token, as soon as it is chosen.

    for item in stream_transcribe(model, audio, DecodeOptions(cache="static")):
        if isinstance(item, TokenEvent): print(item.text, end="", flush=True)
        else: result = item  # the DecodeResult, always last

openai-whisper's `transcribe`, as a generator: the loop over 30 s windows (each window's
log-mel and segments in windowing.py), its temperature fallback and its prompt from the
previous windows' text, with word timestamps (timing.py). Each window is decoded token by
token by window_decode.py, openai-whisper's `DecodingTask` loop with a choice of KV cache.
"""

import math
import time
from typing import Iterator, List, Optional, Union

import numpy as np
import psutil
import torch
from whisper.audio import HOP_LENGTH, N_FRAMES, SAMPLE_RATE
from whisper.model import Whisper
from whisper.tokenizer import get_tokenizer

from .encoder import encode, encoder_frames
from .events import DecodeOptions, DecodeResult, Segment, StepAttention, TokenEvent
from .timing import add_word_timestamps
from .window_decode import RawAttention, WindowOutcome, decode_window
from .windowing import split_segments, window_mel

# openai-whisper transcribe()'s defaults for when to retry a window at a higher temperature
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0

_process = psutil.Process()


class _Returning:
    """Iterate a generator and keep what it returns: `for x in (r := _Returning(g)): ...`,
    then `r.value`. A loop left early (stream_transcribe closed) drops the iteration, which
    closes the generator through `yield from`, so its finally still frees the cache."""

    def __init__(self, generator):
        self.generator = generator
        self.value = None

    def __iter__(self):
        self.value = yield from self.generator


class _Stats:
    """Running totals of one stream_transcribe call, and the DecodeResult they end in."""

    def __init__(self):
        self.latencies_ms: List[float] = []
        self.encoder_ms = 0.0
        self.peak_self = 0
        self.peak_cross = 0
        self.peak_rss = 0
        self.skipped_windows = 0
        self.draft_offered = 0
        self.draft_accepted = 0
        self.draft_passes = 0
        self.prefix_given = 0

    def add_attempt(self, outcome: WindowOutcome) -> None:
        self.peak_self = max(self.peak_self, outcome.peak_self_cache_bytes)
        self.peak_cross = max(self.peak_cross, outcome.peak_cross_cache_bytes)
        self.draft_offered += outcome.draft_offered
        self.draft_accepted += outcome.draft_accepted
        self.draft_passes += outcome.draft_passes
        self.prefix_given = max(self.prefix_given, outcome.prefix_given)  # a retry is given it again

    def result(self, transcript: str, segments: List[Segment], language: str,
               options: DecodeOptions, no_speech_prob: float) -> DecodeResult:
        decode_seconds = sum(self.latencies_ms) / 1000
        latencies = np.array(self.latencies_ms) if self.latencies_ms else np.zeros(1)
        return DecodeResult(
            text=transcript.strip(),
            tokens=[t for s in segments for t in s.tokens],
            segments=segments,
            language=language,
            cache_mode=options.cache,
            beam_size=options.beam_size,
            n_tokens=len(self.latencies_ms),
            decode_seconds=decode_seconds,
            encoder_ms=self.encoder_ms,
            tokens_per_second=len(self.latencies_ms) / decode_seconds if decode_seconds else 0.0,
            mean_latency_ms=float(latencies.mean()),
            p95_latency_ms=float(np.percentile(latencies, 95)),
            peak_self_cache_bytes=self.peak_self,
            peak_cross_cache_bytes=self.peak_cross,
            peak_rss_bytes=self.peak_rss,
            latencies_ms=self.latencies_ms,
            skipped_windows=self.skipped_windows,
            no_speech_prob=no_speech_prob,
            draft_offered=self.draft_offered,
            draft_accepted=self.draft_accepted,
            draft_passes=self.draft_passes,
            prefix_given=self.prefix_given,
        )


def stream_transcribe(
    model: Whisper, audio: np.ndarray, options: Optional[DecodeOptions] = None
) -> Iterator[Union[TokenEvent, DecodeResult]]:
    """Transcribe float32 mono 16 kHz `audio`, yielding a TokenEvent per decoder step and,
    last, the DecodeResult. Closing the generator early frees its cache (and removes the
    hooks in "hooks" mode)."""
    options = options or DecodeOptions()
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    dtype = torch.float16 if model.decoder.token_embedding.weight.dtype == torch.float16 else torch.float32

    content_frames = len(audio) // HOP_LENGTH
    input_stride = N_FRAMES // model.dims.n_audio_ctx  # mel frames per timestamp step: 2
    time_precision = input_stride * HOP_LENGTH / SAMPLE_RATE  # 0.02 s

    stats = _Stats()
    language = options.language
    tokenizer = None
    all_tokens: List[int] = []  # every window's tokens, for the prompt of the next
    segments: List[Segment] = []
    transcript = ""
    step = 0
    no_speech_prob = 0.0
    prompt_tokens: List[int] = []
    window = -1
    seek = 0
    last_speech_end = 0.0  # of the previous window's words (word timestamps)

    while seek < content_frames:
        window += 1
        segment_size = min(N_FRAMES, content_frames - seek)
        time_offset = seek * HOP_LENGTH / SAMPLE_RATE
        window_audio = audio[seek * HOP_LENGTH : (seek + segment_size) * HOP_LENGTH]
        if _rms(window_audio) < options.silence_rms:
            # Digital silence: Whisper would only invent text here, so don't ask it.
            stats.skipped_windows += 1
            seek += segment_size
            all_tokens.clear()
            continue

        frames = encoder_frames(segment_size, options.encode_audio_only)
        mel_window = window_mel(audio, seek, segment_size, model.dims.n_mels, frames)
        encoder_before = stats.encoder_ms
        audio_features = _encode(model, mel_window.to(model.device, dtype).unsqueeze(0), stats)
        # where the decoder is: this window in the audio, and how many windows remain at most
        where = dict(window_start=time_offset,
                     window_end=(seek + segment_size) * HOP_LENGTH / SAMPLE_RATE,
                     audio_seconds=len(audio) / SAMPLE_RATE,
                     n_windows=window + math.ceil((content_frames - seek) / N_FRAMES),
                     window_encoder_ms=stats.encoder_ms - encoder_before)

        if tokenizer is None:
            language = language or _detect_language(model, audio_features)
            tokenizer = get_tokenizer(
                model.is_multilingual, num_languages=model.num_languages,
                language=language, task=options.task,
            )
            if options.prompt:
                prompt_tokens = tokenizer.encode(" " + options.prompt.strip())

        outcome = None
        text_before_window = transcript
        for attempt, temperature in enumerate(_temperatures(options)):
            first_of_attempt = True
            decoding = _Returning(decode_window(
                model, audio_features, tokenizer, options, language, temperature,
                prompt_tokens + all_tokens,
                # the draft is what an earlier decode of this same audio start said first
                draft=options.draft_tokens if seek == 0 else None,
                prefix=options.prefix_tokens if seek == 0 else None,
            ))
            for decoded in decoding:
                new_text = tokenizer.decode([t for t in decoded.window_tokens if t < tokenizer.eot])
                new_transcript = text_before_window + _stable(new_text)
                shown = new_transcript[len(transcript):] if new_transcript.startswith(transcript) else ""
                transcript = new_transcript
                rss = _process.memory_info().rss
                stats.latencies_ms.append(decoded.latency_ms)
                stats.peak_rss = max(stats.peak_rss, rss)
                yield TokenEvent(
                    step=step, window=window, token_id=decoded.token_id, text=shown,
                    transcript=transcript, latency_ms=decoded.latency_ms,
                    cache_tokens=decoded.cache_tokens, cache_capacity=model.dims.n_text_ctx,
                    self_cache_bytes=decoded.self_cache_bytes,
                    self_cache_reserved_bytes=decoded.self_cache_reserved_bytes,
                    cross_cache_bytes=decoded.cross_cache_bytes, rss_bytes=rss,
                    cache_mode=options.cache, beam_size=options.beam_size,
                    is_timestamp=decoded.is_timestamp, restart=attempt > 0 and first_of_attempt,
                    from_draft=decoded.from_draft, prompt_tokens=decoded.prompt_tokens,
                    prefill_tokens=decoded.prefill_tokens, **where,
                    attention=_place(decoded.attention, time_offset, segment_size, input_stride),
                )
                first_of_attempt = False
                step += 1
            outcome = decoding.value
            stats.add_attempt(outcome)
            if not _needs_fallback(outcome, tokenizer, options):
                break
            transcript = text_before_window  # the retry replaces this window's text

        no_speech_prob = outcome.no_speech_prob
        if outcome.silent:
            stats.skipped_windows += 1
            seek += segment_size
            all_tokens.clear()  # text from before a silence would prompt invented text after it
            continue

        window_segments, advance = split_segments(
            outcome.tokens, tokenizer, time_offset, segment_size, time_precision, input_stride
        )
        if options.word_timestamps or options.attention:  # the attention view plays words
            last_speech_end = add_word_timestamps(
                window_segments, model, tokenizer, audio_features, segment_size, time_offset,
                last_speech_end, cross_kv=outcome.cross_kv)
        outcome.cross_kv = None  # not held while the next window decodes
        segments.extend(s for s in window_segments if s.text.strip())
        transcript = text_before_window + tokenizer.decode(
            [t for t in outcome.tokens if t < tokenizer.eot])
        seek += advance
        if options.condition_on_previous_text and temperature < 0.5:
            all_tokens.extend(outcome.tokens)
        else:
            all_tokens.clear()  # openai-whisper drops the prompt after a high-temperature window

    yield stats.result(transcript, segments, language or "en", options, no_speech_prob)


def transcribe(model: Whisper, audio: np.ndarray, options: Optional[DecodeOptions] = None) -> DecodeResult:
    """Drain stream_transcribe and return its DecodeResult."""
    for item in stream_transcribe(model, audio, options):
        result = item
    return result


def _place(raw: Optional[RawAttention], time_offset: float, segment_size: int,
           input_stride: int) -> Optional[StepAttention]:
    """Crop the cross-attention to the window's real audio and find the cursor there."""
    if raw is None:
        return None
    frames = max(1, segment_size // input_stride)  # audio positions of real audio, 20 ms each
    cross = raw.cross_weights[:frames]
    cross = cross / max(float(cross.sum()), 1e-12)
    seconds_per_frame = input_stride * HOP_LENGTH / SAMPLE_RATE
    return StepAttention(self_weights=raw.self_weights, cross_weights=cross,
                         audio_time=time_offset + float(np.argmax(cross)) * seconds_per_frame,
                         positions=raw.positions, parent=raw.parent, beam_sources=raw.beam_sources)


def _encode(model, mel_window, stats: _Stats):
    started = time.perf_counter()
    audio_features = encode(model, mel_window)
    stats.encoder_ms += (time.perf_counter() - started) * 1000
    return audio_features


def _detect_language(model: Whisper, audio_features) -> str:
    if not model.is_multilingual:
        return "en"
    # No lock needed: a hooks decode runs its own copy of the decoder's modules (cache.py).
    with torch.inference_mode():
        _, probs = model.detect_language(audio_features)
    return max(probs[0], key=probs[0].get)


def _temperatures(options: DecodeOptions):
    return FALLBACK_TEMPERATURES if options.temperature_fallback else (0.0,)


def _needs_fallback(outcome: WindowOutcome, tokenizer, options: DecodeOptions) -> bool:
    """openai-whisper transcribe()'s test: too repetitive or too unlikely, unless silent."""
    if not options.temperature_fallback or outcome.silent:
        return False
    return (outcome.compression_ratio(tokenizer) > COMPRESSION_RATIO_THRESHOLD
            or outcome.avg_logprob < LOGPROB_THRESHOLD)


def _stable(text: str) -> str:
    """Hold back a trailing partial UTF-8 character until its last byte arrives."""
    return text.rstrip("\ufffd")


def _rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if samples.size else 0.0
