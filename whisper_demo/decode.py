"""The cached decoder generator: one TokenEvent per token, as soon as it is chosen.

    for item in stream_transcribe(model, audio, DecodeOptions(cache="static")):
        if isinstance(item, TokenEvent): print(item.text, end="", flush=True)
        else: result = item  # the DecodeResult, always last

openai-whisper does the modelling: its tokenizer, SOT sequence, logit filters, greedy and
beam-search TokenDecoders, sequence ranker and language detection all come from a
`whisper.decoding.DecodingTask`. What this module adds is the loop itself (its `_main_loop`,
turned into a generator that times every step), the choice of KV cache (cache.py), and the
30 s windowing of openai-whisper's `transcribe` (the loop over windows here; each
window's log-mel and segments in windowing.py), so that long audio streams too.
"""

import math
import time
import zlib
from dataclasses import dataclass, field
from typing import Generator, Iterator, List, Optional, Union

import numpy as np
import psutil
import torch
from whisper.audio import HOP_LENGTH, N_FRAMES, SAMPLE_RATE
from whisper.decoding import DecodingOptions, DecodingTask
from whisper.model import Whisper
from whisper.tokenizer import Tokenizer, get_tokenizer

from .cache import make_cache
from .encoder import encode, encoder_frames
from .events import DecodeOptions, DecodeResult, Segment, StepAttention, TokenEvent
from .speculative import DraftVerifier, usable_draft
from .timing import add_word_timestamps
from .windowing import split_segments, window_mel

# openai-whisper transcribe()'s defaults for when to retry a window at a higher temperature
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0

_process = psutil.Process()


@dataclass
class WindowOutcome:
    """What one decoding attempt of one 30 s window produced."""

    tokens: List[int] = field(default_factory=list)  # text + timestamps, no specials
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0
    silent: bool = False  # judged silent before any token was emitted
    peak_self_cache_bytes: int = 0
    peak_cross_cache_bytes: int = 0
    draft_offered: int = 0  # draft tokens checked in this attempt
    draft_accepted: int = 0  # of those, confirmed by the model
    draft_passes: int = 0  # decoder forwards that checked draft tokens
    # the decode's cross-attention K/V, kept for word timing when it can use them as they
    # are (saves projecting the audio again: ~18 ms of a tiny.en live re-decode)
    cross_kv: Optional[list] = None

    def compression_ratio(self, tokenizer: Tokenizer) -> float:
        text = tokenizer.decode(self.tokens).encode("utf-8")
        return len(text) / len(zlib.compress(text)) if text else 0.0


@dataclass(frozen=True)
class Step:
    """One decoder step of one window, with the cache's numbers right after it."""

    token_id: int  # the token appended to the best hypothesis
    is_timestamp: bool
    latency_ms: float
    window_tokens: List[int]  # the best hypothesis of this window so far, up to end-of-text
    cache_tokens: int
    self_cache_bytes: int
    self_cache_reserved_bytes: int
    cross_cache_bytes: int
    from_draft: bool = False  # a draft token the model confirmed (TokenEvent.from_draft)
    prompt_tokens: int = 0  # previous text prefilled as this window's prompt
    prefill_tokens: int = 0  # positions the window's first forward filled (prompt + SOT)
    attention: Optional["RawAttention"] = None  # with DecodeOptions.attention


@dataclass(frozen=True)
class RawAttention:
    """A step's attention before stream_transcribe places it in the audio (StepAttention)."""

    self_weights: np.ndarray  # [layers, positions]
    cross_weights: np.ndarray  # [n_audio_ctx], all frames of the window, padding included
    positions: tuple
    parent: int
    beam_sources: tuple


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
    """Running totals of one stream_transcribe call."""

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
            decoding = _Returning(_decode_window(
                model, audio_features, tokenizer, options, language, temperature,
                prompt_tokens + all_tokens,
                # the draft is what an earlier decode of this same audio start said first
                draft=options.draft_tokens if seek == 0 else None,
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
            stats.peak_self = max(stats.peak_self, outcome.peak_self_cache_bytes)
            stats.peak_cross = max(stats.peak_cross, outcome.peak_cross_cache_bytes)
            stats.draft_offered += outcome.draft_offered
            stats.draft_accepted += outcome.draft_accepted
            stats.draft_passes += outcome.draft_passes
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

    decode_seconds = sum(stats.latencies_ms) / 1000
    latencies = np.array(stats.latencies_ms) if stats.latencies_ms else np.zeros(1)
    text_tokens = [t for s in segments for t in s.tokens]
    yield DecodeResult(
        text=transcript.strip(),
        tokens=text_tokens,
        segments=segments,
        language=language or "en",
        cache_mode=options.cache,
        beam_size=options.beam_size,
        n_tokens=len(stats.latencies_ms),
        decode_seconds=decode_seconds,
        encoder_ms=stats.encoder_ms,
        tokens_per_second=len(stats.latencies_ms) / decode_seconds if decode_seconds else 0.0,
        mean_latency_ms=float(latencies.mean()),
        p95_latency_ms=float(np.percentile(latencies, 95)),
        peak_self_cache_bytes=stats.peak_self,
        peak_cross_cache_bytes=stats.peak_cross,
        peak_rss_bytes=stats.peak_rss,
        latencies_ms=stats.latencies_ms,
        skipped_windows=stats.skipped_windows,
        no_speech_prob=no_speech_prob,
        draft_offered=stats.draft_offered,
        draft_accepted=stats.draft_accepted,
        draft_passes=stats.draft_passes,
    )


def transcribe(model: Whisper, audio: np.ndarray, options: Optional[DecodeOptions] = None) -> DecodeResult:
    """Drain stream_transcribe and return its DecodeResult."""
    for item in stream_transcribe(model, audio, options):
        result = item
    return result


def _decode_window(model, audio_features, tokenizer, options, language, temperature,
                   previous_tokens, draft=None) -> Generator[Step, None, WindowOutcome]:
    """openai-whisper's DecodingTask._main_loop as a generator over steps.

    Yields a Step per decoder step and returns the window's WindowOutcome. The cache is
    released on every way out, including when the consumer closes the generator.

    draft: tokens this window is expected to start with (DecodeOptions.draft_tokens).
    With greedy decoding and the static cache, the steps take their logits from forwards
    over the draft (speculative.DraftVerifier) while it agrees with the model, and from
    their own forward otherwise. Each step still filters its logits and picks its token
    exactly as below, so the picks are the greedy decode's either way.
    """
    outcome = WindowOutcome()
    beam = options.beam_size > 1 and temperature == 0
    n_ctx = model.dims.n_text_ctx
    # openai-whisper's transcribe keeps the last n_ctx/2 - 1 tokens of history
    prompt = previous_tokens[-(n_ctx // 2 - 1):]
    task = DecodingTask(model, DecodingOptions(
        task=options.task, language=language, temperature=temperature,
        beam_size=options.beam_size if beam else None,
        sample_len=options.max_tokens_per_window,
        without_timestamps=not options.timestamps,
        prompt=prompt or None,
        fp16=audio_features.dtype == torch.float16,
    ))
    n_group = task.n_group
    cache = make_cache(options.cache, model, len(task.initial_tokens), n_group, options.precision)
    task.inference = cache
    task.decoder.inference = cache  # the beam search decoder reorders the cache through it
    task.decoder.reset()

    tokens = torch.tensor([task.initial_tokens], device=audio_features.device)
    tokens = tokens.repeat_interleave(n_group, dim=0)
    sum_logprobs = torch.zeros(n_group, device=audio_features.device)
    sample_begin = task.sample_begin
    verifier = None
    cache.capture_attention = options.attention
    if (options.cache == "static" and options.beam_size == 1 and temperature == 0 and draft
            and not options.attention):  # a draft pass covers several steps: no per-step weights
        # beams and sampling pick differently; other caches cannot drop rejected positions
        verifier = DraftVerifier(usable_draft(draft, tokenizer, model.dims.n_vocab), cache,
                                 audio_features, task.sot_index, tokenizer)
    try:
        for i in range(task.sample_len):
            started = time.perf_counter()
            with torch.inference_mode(), cache.step_context():
                # draft tokens a pass may check: steps left, and positions left in the cache
                room = min(task.sample_len - i, n_ctx - tokens.shape[1])
                from_verifier = verifier.logits(tokens, room) if verifier else None
                if from_verifier:
                    last_logits, sot_logits = from_verifier
                else:
                    last_logits, sot_logits = cache.step_logits(tokens, audio_features, task.sot_index)
                if i == 0 and tokenizer.no_speech is not None:
                    outcome.no_speech_prob = sot_logits[0].softmax(-1)[tokenizer.no_speech].item()
                    if outcome.no_speech_prob > options.no_speech_threshold:
                        # Decided before anything is shown: a silent window adds no text.
                        outcome.silent = True
                        return outcome
                for logit_filter in task.logit_filters:
                    logit_filter.apply(last_logits, tokens)
                read = tokens  # the hypotheses this step's forward ran
                tokens, completed = task.decoder.update(tokens, last_logits, sum_logprobs)
                from_draft = bool(from_verifier) and verifier.check(tokens)
            latency_ms = (time.perf_counter() - started) * 1000
            attention = _raw_attention(cache, read, n_group, beam) if options.attention else None

            outcome.peak_self_cache_bytes = max(outcome.peak_self_cache_bytes, cache.self_cache_bytes())
            outcome.peak_cross_cache_bytes = max(outcome.peak_cross_cache_bytes, cache.cross_cache_bytes())
            best = tokens[0, sample_begin:].tolist()
            yield Step(token_id=best[-1], is_timestamp=best[-1] >= tokenizer.timestamp_begin,
                       latency_ms=latency_ms, window_tokens=_until_eot(best, tokenizer),
                       cache_tokens=cache.cache_tokens(), self_cache_bytes=cache.self_cache_bytes(),
                       self_cache_reserved_bytes=cache.self_cache_reserved_bytes(),
                       cross_cache_bytes=cache.cross_cache_bytes(), from_draft=from_draft,
                       prompt_tokens=len(prompt), prefill_tokens=len(task.initial_tokens),
                       attention=attention)
            if completed or tokens.shape[-1] > n_ctx:
                break

        with torch.inference_mode():
            final, sum_lp = task.decoder.finalize(
                tokens.reshape(1, n_group, -1), sum_logprobs.reshape(1, n_group))
        candidates = [[_until_eot(t[sample_begin:].tolist(), tokenizer) for t in final[0]]]
        chosen = task.sequence_ranker.rank(
            [[torch.tensor(c) for c in candidates[0]]], sum_lp)[0]
        outcome.tokens = candidates[0][chosen]
        outcome.avg_logprob = float(sum_lp[0][chosen]) / (len(outcome.tokens) + 1)
        return outcome
    finally:
        if verifier:  # also for a window returned as silent
            outcome.draft_offered, outcome.draft_accepted = verifier.offered, verifier.accepted
            outcome.draft_passes = verifier.passes
        if (options.word_timestamps or options.attention) and not outcome.silent:
            outcome.cross_kv = cache.exact_cross_kv()
        cache.cleanup_caching()


def _raw_attention(cache, read, n_group: int, beam: bool) -> RawAttention:
    """The weights the step's forward kept (cache.captured), for the hypothesis that the
    best one after the update came from. Outside the timed step: copying them out is the
    view's cost, not the decoder's."""
    self_rows, cross_rows = cache.attention_rows(n_group)
    sources = tuple(cache.beam_sources or ()) if beam else ()
    parent = sources[0] if sources else 0
    return RawAttention(self_weights=self_rows[:, parent].numpy(),
                        cross_weights=cross_rows[parent].numpy(),
                        positions=tuple(read[parent].tolist()), parent=parent, beam_sources=sources)


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


def _until_eot(tokens: List[int], tokenizer) -> List[int]:
    return tokens[: tokens.index(tokenizer.eot)] if tokenizer.eot in tokens else tokens


def _stable(text: str) -> str:
    """Hold back a trailing partial UTF-8 character until its last byte arrives."""
    return text.rstrip("\ufffd")


def _rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if samples.size else 0.0
