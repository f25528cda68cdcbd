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

from .encoder import encode, encoder_dtype, encoder_frames
from .events import DecodeOptions, DecodeResult, Segment, StepAttention, TokenEvent
from .hallucination import last_word_end, skip_silence_around_hallucinations
from .timing import add_word_timestamps
from .window_decode import RawAttention, WindowOutcome, decode_window
from .windowing import FRAMES_PER_SECOND, LogMel, seek_clips, split_segments

# openai-whisper transcribe()'s temperatures for retrying a window that failed
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
DIGITAL_SILENCE_RMS = 1e-3  # about -60 dBFS (DecodeOptions.skip_digital_silence)

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
        self.encoder_dtype = "float32"  # what the encoder computed in (encoder.encoder_dtype)
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
            encoder_dtype=self.encoder_dtype,
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
    hooks in "hooks" mode).

    The windows follow openai-whisper's transcribe() step for step (seek, fallback, the
    no-speech rule, the prompt and its reset, word-timestamp seeking, clip_timestamps,
    hallucination_silence_threshold), so the result is its result. A window's tokens are
    shown as they are chosen; when the window is then retried, skipped as silent or ends
    in an unfinished segment (decoded again by the next window), the transcript of the
    next event, or the result, no longer holds them."""
    options = options or DecodeOptions()
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    dtype = torch.float16 if model.decoder.token_embedding.weight.dtype == torch.float16 else torch.float32
    mel = LogMel(audio, model.dims.n_mels)
    content_frames = mel.content_frames
    content_duration = content_frames * HOP_LENGTH / SAMPLE_RATE
    input_stride = N_FRAMES // model.dims.n_audio_ctx  # mel frames per timestamp step: 2
    time_precision = input_stride * HOP_LENGTH / SAMPLE_RATE  # 0.02 s
    clips = seek_clips(options.clip_timestamps, content_frames)

    stats = _Stats()
    generator = None if options.seed is None else torch.Generator(model.device).manual_seed(options.seed)
    language = options.language
    tokenizer = None
    prompt = _Prompt(options, model.dims.n_text_ctx)
    segments: List[Segment] = []
    transcript = ""
    step = 0
    no_speech_prob = 0.0
    window = -1
    last_speech_end = 0.0  # of the words so far (word timestamps)

    clip_index, seek = 0, clips[0][0]
    while clip_index < len(clips):  # transcribe()'s loop over clips and windows, as flat
        clip_start, clip_end = clips[clip_index]
        seek = max(seek, clip_start)
        if seek >= clip_end:
            clip_index += 1
            if clip_index < len(clips):
                seek = clips[clip_index][0]
            continue
        window += 1
        segment_size = min(N_FRAMES, content_frames - seek, clip_end - seek)
        time_offset = seek * HOP_LENGTH / SAMPLE_RATE
        window_end_time = (seek + N_FRAMES) * HOP_LENGTH / SAMPLE_RATE
        text_before_window = _text(tokenizer, prompt.said) if tokenizer else ""
        if options.skip_digital_silence and _rms(
                audio[seek * HOP_LENGTH : (seek + segment_size) * HOP_LENGTH]) < DIGITAL_SILENCE_RMS:
            stats.skipped_windows += 1
            seek += segment_size
            prompt.after_silence()
            continue

        frames = encoder_frames(segment_size, options.encode_audio_only)
        encoder_before = stats.encoder_ms
        audio_features = _encode(model, mel.window(seek, segment_size, frames).to(model.device, dtype).unsqueeze(0),
                                 stats, options.precision)
        # where the decoder is: this window in the audio, and how many windows remain at most
        where = dict(window_start=time_offset,
                     window_end=(seek + segment_size) * HOP_LENGTH / SAMPLE_RATE,
                     audio_seconds=len(audio) / SAMPLE_RATE,
                     n_windows=window + math.ceil((content_frames - seek) / N_FRAMES),
                     window_encoder_ms=stats.encoder_ms - encoder_before, encoder_dtype=stats.encoder_dtype)

        if tokenizer is None:
            if language is None:
                language = _detect_language(model, mel, audio_features, dtype, stats,
                                            from_window=options.detect_language_from_window
                                            or (seek == 0 and segment_size == N_FRAMES == frames),
                                            precision=options.precision)
            tokenizer = get_tokenizer(
                model.is_multilingual, num_languages=model.num_languages,
                language=language, task=options.task,
            )
            prompt.start(tokenizer)

        outcome = None
        for attempt, temperature in enumerate(_temperatures(options)):
            first_of_attempt = True
            decoding = _Returning(decode_window(
                model, audio_features, tokenizer, options, language, temperature, prompt.tokens(),
                # the draft is what an earlier decode of this same audio start said first
                draft=options.draft_tokens if seek == 0 else None,
                prefix=options.prefix_tokens if seek == 0 else None, generator=generator,
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
        if _is_silent(outcome, options):
            stats.skipped_windows += 1
            seek += segment_size
            prompt.after_silence()
            outcome.cross_kv = None
            transcript = text_before_window  # what was shown of it is taken back
            continue

        previous_seek = seek
        window_segments, advance = split_segments(
            outcome.tokens, tokenizer, time_offset, segment_size, time_precision, input_stride)
        compression_ratio = outcome.compression_ratio(tokenizer)  # the window's, once
        for segment in window_segments:
            segment.temperature, segment.avg_logprob = outcome.temperature, outcome.avg_logprob
            segment.compression_ratio, segment.no_speech_prob = compression_ratio, outcome.no_speech_prob
        seek += advance
        if options.word_timestamps or options.attention:  # the attention view plays words
            window_speech_end = add_word_timestamps(
                window_segments, model, tokenizer, audio_features, segment_size, time_offset,
                last_speech_end, cross_kv=outcome.cross_kv,
                probabilities=options.word_probabilities or options.hallucination_silence_threshold is not None,
                # a given prefix was not chosen: its words need no probability (and a
                # live prefix grows to ~60 tokens, a vocabulary projection each)
                probabilities_from=_given_text_tokens(options, tokenizer) if previous_seek == 0 else 0)
        outcome.cross_kv = None  # not held while the next window decodes
        if options.word_timestamps:
            single_timestamp_ending = _ends_single_timestamp(outcome.tokens, tokenizer)
            if not single_timestamp_ending:  # transcribe seeks to the last word's end
                end = last_word_end(window_segments)
                if end is not None and end > time_offset:
                    seek = round(end * FRAMES_PER_SECOND)
            if options.hallucination_silence_threshold is not None:
                cut = skip_silence_around_hallucinations(
                    window_segments, options.hallucination_silence_threshold, seek=seek,
                    previous_seek=previous_seek, segment_size=segment_size,
                    single_timestamp_ending=single_timestamp_ending, time_offset=time_offset,
                    window_end_time=window_end_time, last_speech_end=last_speech_end,
                    content_duration=content_duration, content_frames=content_frames)
                seek = cut.seek
                if cut.discard_window:
                    transcript = text_before_window
                    continue
            end = last_word_end(window_segments)
            if end is not None:
                last_speech_end = end
        elif options.attention:
            last_speech_end = window_speech_end

        for segment in window_segments:  # transcribe keeps these, empty
            if segment.start == segment.end or not segment.text.strip():
                segment.text, segment.tokens, segment.words = "", [], []
        segments.extend(s for s in window_segments if s.text)
        prompt.add(window_segments, outcome.temperature)
        transcript = _text(tokenizer, prompt.said)

    transcript = _text(tokenizer, prompt.said) if tokenizer else ""
    yield stats.result(transcript, segments, language or "en", options, no_speech_prob)


class _Prompt:
    """transcribe()'s all_tokens: the initial prompt, then the text of every kept segment,
    and where the prompt was last reset. A window is prompted with what follows the reset
    (the last n_text_ctx/2 - 1 tokens of it, window_decode cuts)."""

    def __init__(self, options: DecodeOptions, n_text_ctx: int):
        self.options = options
        self.all_tokens: List[int] = []
        self.initial: List[int] = []
        self.reset_since = 0
        self.room = n_text_ctx // 2 - 1

    def start(self, tokenizer) -> None:
        if self.options.prompt:
            self.initial = tokenizer.encode(" " + self.options.prompt.strip())
            self.all_tokens.extend(self.initial)
            self.room -= len(self.initial)

    def tokens(self) -> List[int]:
        if not self.options.carry_initial_prompt:
            return self.all_tokens[self.reset_since:]
        ignored = max(len(self.initial), self.reset_since)
        return self.initial + self.all_tokens[ignored:][-self.room:]

    @property
    def said(self) -> List[int]:
        """The transcript's tokens: everything kept, without the initial prompt."""
        return self.all_tokens[len(self.initial):]

    def add(self, window_segments: List[Segment], temperature: float) -> None:
        self.all_tokens.extend(t for s in window_segments for t in s.tokens)
        if not self.options.condition_on_previous_text or temperature > 0.5:
            self.reset_since = len(self.all_tokens)  # a high temperature's text prompts no more

    def after_silence(self) -> None:
        if self.options.reset_prompt_after_silence:
            self.reset_since = len(self.all_tokens)


def _text(tokenizer, tokens: List[int]) -> str:
    return tokenizer.decode([t for t in tokens if t < tokenizer.eot])


def _ends_single_timestamp(tokens: List[int], tokenizer) -> bool:
    stamps = [t >= tokenizer.timestamp_begin for t in tokens[-2:]]
    return stamps == [False, True]


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


def _encode(model, mel_window, stats: _Stats, precision: str):
    started = time.perf_counter()
    stats.encoder_dtype = encoder_dtype(model, precision)
    audio_features = encode(model, mel_window, precision)
    stats.encoder_ms += (time.perf_counter() - started) * 1000
    return audio_features


def _detect_language(model: Whisper, mel: LogMel, window_features, dtype, stats: _Stats,
                     from_window: bool, precision: str) -> str:
    """transcribe()'s detection: over the first 30 s of the file's padded log-mel, which is
    the first window's when that is a full 30 s at the start (its features serve then);
    from_window: the first decoded window's features in any case."""
    if not model.is_multilingual:
        return "en"
    features = window_features if from_window else _encode(
        model, mel.first_30s().to(model.device, dtype).unsqueeze(0), stats, precision)
    # No lock needed: a hooks decode runs its own copy of the decoder's modules (cache.py).
    with torch.inference_mode():
        _, probs = model.detect_language(features)
    return max(probs[0], key=probs[0].get)


def _temperatures(options: DecodeOptions):
    return FALLBACK_TEMPERATURES if options.temperature_fallback else (0.0,)


def _needs_fallback(outcome: WindowOutcome, tokenizer, options: DecodeOptions) -> bool:
    """openai-whisper transcribe()'s test: too repetitive or too unlikely, unless silent."""
    if not options.temperature_fallback or outcome.silent:
        return False
    repetitive = (options.compression_ratio_threshold is not None
                  and outcome.compression_ratio(tokenizer) > options.compression_ratio_threshold)
    improbable = options.logprob_threshold is not None and outcome.avg_logprob < options.logprob_threshold
    no_speech = options.no_speech_threshold is not None and outcome.no_speech_prob > options.no_speech_threshold
    return (repetitive or improbable) and not (no_speech and improbable)  # silence is no failure


def _is_silent(outcome: WindowOutcome, options: DecodeOptions) -> bool:
    """transcribe()'s no-speech rule: P(no speech) above the threshold and the text
    improbable (a confident transcript is kept, whatever P(no speech) says)."""
    if outcome.silent:  # judged at the first step (no_speech_before_decoding)
        return True
    if options.no_speech_threshold is None or outcome.no_speech_prob <= options.no_speech_threshold:
        return False
    return options.logprob_threshold is None or outcome.avg_logprob <= options.logprob_threshold


def _stable(text: str) -> str:
    """Hold back a trailing partial UTF-8 character until its last byte arrives."""
    return text.rstrip("\ufffd")


def _rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if samples.size else 0.0


def _given_text_tokens(options: DecodeOptions, tokenizer) -> int:
    """How many text tokens open the first window's transcript as given (prefix_tokens):
    their words need no probability. All of them need it for the hallucination check."""
    if options.hallucination_silence_threshold is not None:
        return 0
    return sum(1 for t in options.prefix_tokens or () if t < tokenizer.eot)
