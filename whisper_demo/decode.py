"""The cached decoder generator: one TokenEvent per token, as soon as it is chosen.

    for item in stream_transcribe(model, audio, DecodeOptions(cache="static")):
        if isinstance(item, TokenEvent): print(item.text, end="", flush=True)
        else: result = item  # the DecodeResult, always last

openai-whisper's `transcribe`, as a generator, in four steps (stream_transcribe reads as
them): prepare the audio's log-mel and the options (Transcription); the loop over 30 s
windows (Transcription.windows: seek, clips); a window's decode and its temperature
fallback (Transcription.decode); what is kept of it: segments, word timestamps, the next
seek and the prompt from its text (Transcription.keep). Each window is decoded token by
token by window_decode.py, openai-whisper's `DecodingTask` loop with a choice of KV cache;
its log-mel and segments are windowing.py's; the prompt and the running totals,
decode_state.py's.
"""

import math
import time
from dataclasses import dataclass, field
from typing import Generator, Iterator, List, Optional, Union

import numpy as np
import psutil
import torch
from whisper.audio import HOP_LENGTH, N_FRAMES, SAMPLE_RATE
from whisper.model import Whisper
from whisper.tokenizer import get_tokenizer

from . import batched
from .cache import WindowMemo
from .decode_state import Prompt, Returning, Stats, text
from .encoder import encode, encoder_dtype, encoder_frames
from .events import DecodeOptions, DecodeResult, Segment, StepAttention, TokenEvent
from .fallback import best_failed, is_silent, needs_fallback, temperatures
from .hallucination import last_word_end, skip_silence_around_hallucinations
from .precision import keeps_transcribe_tokens
from .timing import add_word_timestamps
from .window_decode import RawAttention, Step, WindowOutcome, decode_window
from .windowing import FRAMES_PER_SECOND, LogMel, seek_clips, split_segments, unfinished_segment

DIGITAL_SILENCE_RMS = 1e-3  # about -60 dBFS (DecodeOptions.skip_digital_silence)

_process = psutil.Process()


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
    if batched.applies(options, len(audio)):
        yield from batched.stream_batched(model, audio, options)
        return
    task = Transcription(model, audio, options)
    for window in task.windows():
        outcome = yield from task.decode(window)
        if outcome is not None:  # None: skipped as silent
            task.keep(window, outcome)
    yield task.result()


def transcribe(model: Whisper, audio: np.ndarray, options: Optional[DecodeOptions] = None) -> DecodeResult:
    """Drain stream_transcribe and return its DecodeResult."""
    for item in stream_transcribe(model, audio, options):
        result = item
    return result


@dataclass
class Window:
    """One window of the seek loop: where it lies in the audio, and the text before it."""

    index: int  # 0, 1, ... in the order decoded (TokenEvent.window)
    seek: int  # its first log-mel frame
    size: int  # its log-mel frames of audio (transcribe's segment_size): 3000 at most
    text_before: str  # the transcript kept before it: a retry or a skip goes back to it
    features: Optional[torch.Tensor] = None  # the encoder's output, once encoded
    # where the decoder is, for its TokenEvents (window_start, window_end, n_windows, ...)
    where: dict = field(default_factory=dict)

    @property
    def time_offset(self) -> float:
        return self.seek * HOP_LENGTH / SAMPLE_RATE

    @property
    def end_time(self) -> float:  # of the 30 s it spans, padding included (transcribe's)
        return (self.seek + N_FRAMES) * HOP_LENGTH / SAMPLE_RATE


class Transcription:
    """One stream_transcribe call: the audio's log-mel and the options, and what carries
    from window to window (the seek, the language and tokenizer, the prompt, the segments
    kept, the transcript shown), in transcribe()'s order."""

    def __init__(self, model: Whisper, audio: np.ndarray, options: DecodeOptions):
        self.model = model
        self.options = options
        self.audio = np.ascontiguousarray(audio, dtype=np.float32)
        half = model.decoder.token_embedding.weight.dtype == torch.float16
        self.dtype = torch.float16 if half else torch.float32
        self.mel = LogMel(self.audio, model.dims.n_mels)
        self.input_stride = N_FRAMES // model.dims.n_audio_ctx  # mel frames per timestamp step: 2
        self.time_precision = self.input_stride * HOP_LENGTH / SAMPLE_RATE  # 0.02 s
        self.clips = seek_clips(options.clip_timestamps, self.mel.content_frames)
        # the fallback's draws: from a generator of this decode's own (DecodeOptions.seed)
        self.generator = (None if options.seed is None
                          else torch.Generator(model.device).manual_seed(options.seed))
        # The fast mode's tokens need not be transcribe's (precision.keeps_transcribe_tokens),
        # so its fallback takes two rules of faster-whisper's where transcribe's cost time or
        # words: an attempt stuck in a loop is stopped where the loop is plain, when the
        # compression test would send the window to a retry anyway; and when every
        # temperature fails, the best attempt is kept (DecodeOptions.fallback_keeps_best), not
        # the one sampled at 1.0 (whose junk can end the window early and drop its speech).
        fast = not keeps_transcribe_tokens(options.precision)
        self.stop_loops = fast and options.temperature_fallback and options.compression_ratio_threshold is not None
        self.keeps_best_attempt = fast or options.fallback_keeps_best
        self.stats = Stats()
        self.language = options.language
        self.tokenizer = None  # once the language is known (the first window)
        self.prompt = Prompt(options, model.dims.n_text_ctx)
        self.segments: List[Segment] = []
        self.transcript = ""  # as shown: the text kept, then the window's tokens so far
        self.step = 0
        self.no_speech_prob = 0.0
        self.last_speech_end = 0.0  # of the words so far (word timestamps)
        self.seek = 0

    # --- the window loop ----------------------------------------------------------------

    def windows(self) -> Iterator[Window]:
        """transcribe()'s loop over clips and the windows in each, as flat. Each window
        starts at self.seek, which decode() or keep() moves on before the next is made.
        single_window: the first window only."""
        index = 0
        for clip_start, clip_end in self.clips:
            self.seek = clip_start
            while True:
                self.seek = max(self.seek, clip_start)
                if self.seek >= clip_end:
                    break
                size = min(N_FRAMES, self.mel.content_frames - self.seek, clip_end - self.seek)
                kept = text(self.tokenizer, self.prompt.said) if self.tokenizer else ""
                yield Window(index, self.seek, size, kept)
                index += 1
                if self.options.single_window:
                    return

    def _skip(self, window: Window) -> None:
        """A window judged silent: nothing kept, the next starts after it."""
        self.stats.skipped_windows += 1
        self.seek += window.size
        self.prompt.after_silence()

    # --- a window's decode and its fallback ---------------------------------------------

    def decode(self, window: Window) -> Generator[TokenEvent, None, Optional[WindowOutcome]]:
        """Encode the window and decode it at rising temperatures until an attempt passes
        transcribe()'s tests, yielding every token. Returns the attempt to keep, or None
        for a window skipped as silent (digital silence, or transcribe's no-speech rule)."""
        options = self.options
        start, stop = window.seek * HOP_LENGTH, (window.seek + window.size) * HOP_LENGTH
        if options.skip_digital_silence and _rms(self.audio[start:stop]) < DIGITAL_SILENCE_RMS:
            self._skip(window)
            return None
        frames = self._encode_window(window)
        if self.tokenizer is None:
            self._start_tokenizer(window, frames)
        outcome = best = None
        memo = WindowMemo()  # what every attempt at this window computes alike
        for attempt, temperature in enumerate(temperatures(options)):
            # A retry is drafted by the attempt before it: at 0.2 a sampled decode mostly
            # says what the greedy one said, and a draft pass checks many such tokens in one
            # forward. Its draws stay those of the retry alone (window_decode._verifier).
            draft = _retry_draft(outcome) if outcome is not None else None
            outcome = yield from self._attempt(window, temperature, memo, restart=attempt > 0, draft=draft)
            self.stats.add_attempt(outcome)
            if not needs_fallback(outcome, self.tokenizer, options):
                break
            if self.keeps_best_attempt:
                best = best_failed(best, outcome, self.tokenizer, options)
            self.transcript = window.text_before  # the retry replaces this window's text
        else:  # every temperature failed
            outcome = best or outcome
        self.no_speech_prob = outcome.no_speech_prob
        if is_silent(outcome, options):
            outcome.cross_kv = None
            self._skip(window)
            self.transcript = window.text_before  # what was shown of it is taken back
            return None
        return outcome

    def _encode_window(self, window: Window) -> int:
        """The window's encoder output (window.features) and where it lies (window.where);
        returns the mel frames encoded."""
        model, stats = self.model, self.stats
        frames = encoder_frames(window.size, self.options.encode_audio_only)
        before = stats.encoder_ms
        mel = self.mel.window(window.seek, window.size, frames).to(model.device, self.dtype).unsqueeze(0)
        window.features = _encode(model, mel, stats, self.options.precision)
        # where the decoder is: this window in the audio, and how many windows remain at most
        window.where = dict(
            window_start=window.time_offset,
            window_end=(window.seek + window.size) * HOP_LENGTH / SAMPLE_RATE,
            audio_seconds=len(self.audio) / SAMPLE_RATE,
            n_windows=window.index + math.ceil((self.mel.content_frames - window.seek) / N_FRAMES),
            window_encoder_ms=stats.encoder_ms - before, encoder_dtype=stats.encoder_dtype)
        return frames

    def _start_tokenizer(self, window: Window, frames: int) -> None:
        """The language (given, or detected as transcribe does), its tokenizer, the prompt."""
        model, options = self.model, self.options
        if self.language is None:
            whole_first_window = window.seek == 0 and window.size == N_FRAMES == frames
            self.language = _detect_language(
                model, self.mel, window.features, self.dtype, self.stats,
                from_window=options.detect_language_from_window or whole_first_window,
                precision=options.precision)
        self.tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages,
                                       language=self.language, task=options.task)
        self.prompt.start(self.tokenizer)

    def _attempt(self, window: Window, temperature: float, memo: WindowMemo, restart: bool,
                 draft: Optional[List[int]] = None) -> Generator[TokenEvent, None, WindowOutcome]:
        """One decode of the window at one temperature: a TokenEvent per step. `draft`: the
        tokens a retry is expected to write (else, for the audio's start, the options')."""
        options = self.options
        first = window.seek == 0  # the draft and the prefix are said of the audio's start
        if draft is None and first:
            draft = options.draft_tokens
        decoding = Returning(decode_window(
            self.model, window.features, self.tokenizer, options, self.language, temperature,
            self.prompt.tokens(), draft=draft,
            prefix=options.prefix_tokens if first else None, generator=self.generator, memo=memo,
            stop_loops=self.stop_loops))
        for decoded in decoding:
            yield self._event(window, decoded, restart)
            restart = False
        return decoding.value

    def _event(self, window: Window, decoded: Step, restart: bool) -> TokenEvent:
        """The TokenEvent of one decoder step: the token, the transcript now, the costs."""
        tokenizer = self.tokenizer
        new_text = tokenizer.decode([t for t in decoded.window_tokens if t < tokenizer.eot])
        transcript = window.text_before + _stable(new_text)
        shown = transcript[len(self.transcript):] if transcript.startswith(self.transcript) else ""
        self.transcript = transcript
        rss = _process.memory_info().rss
        self.stats.latencies_ms.append(decoded.latency_ms)
        self.stats.peak_rss = max(self.stats.peak_rss, rss)
        options = self.options
        event = TokenEvent(
            step=self.step, window=window.index, token_id=decoded.token_id, text=shown,
            transcript=transcript, latency_ms=decoded.latency_ms,
            cache_tokens=decoded.cache_tokens, cache_capacity=self.model.dims.n_text_ctx,
            self_cache_bytes=decoded.self_cache_bytes,
            self_cache_reserved_bytes=decoded.self_cache_reserved_bytes,
            cross_cache_bytes=decoded.cross_cache_bytes, rss_bytes=rss,
            cache_mode=options.cache, beam_size=options.beam_size,
            is_timestamp=decoded.is_timestamp, restart=restart,
            from_draft=decoded.from_draft, prompt_tokens=decoded.prompt_tokens,
            prefill_tokens=decoded.prefill_tokens, **window.where,
            attention=_place(decoded.attention, window.time_offset, window.size, self.input_stride),
        )
        self.step += 1
        return event

    # --- what is kept of a window ---------------------------------------------------------

    def keep(self, window: Window, outcome: WindowOutcome) -> None:
        """The window's segments and their words, kept; the seek moved past what they say
        (transcribe's rules, word timestamps' included); the prompt grown by their text."""
        tokenizer, options = self.tokenizer, self.options
        window_segments, advance = split_segments(
            outcome.tokens, tokenizer, window.time_offset, window.size, self.time_precision,
            self.input_stride)
        if options.single_window:  # no next window to decode its unfinished segment again
            rest = unfinished_segment(outcome.tokens, window_segments, tokenizer, window.time_offset,
                                      window.size, self.time_precision)
            window_segments += [rest] if rest is not None else []
        compression_ratio = outcome.compression_ratio(tokenizer)  # the window's, once
        for segment in window_segments:
            segment.temperature, segment.avg_logprob = outcome.temperature, outcome.avg_logprob
            segment.compression_ratio, segment.no_speech_prob = compression_ratio, outcome.no_speech_prob
        self.seek += advance
        if options.word_timestamps or options.attention:  # the attention view plays words
            speech_end = self._add_words(window, outcome, window_segments)
        outcome.cross_kv = None  # not held while the next window decodes
        if options.word_timestamps:
            if not self._seek_after_words(window, outcome, window_segments):
                self.transcript = window.text_before  # the window was discarded
                return
        elif options.attention:
            self.last_speech_end = speech_end
        for segment in window_segments:  # transcribe keeps these, empty
            if segment.start == segment.end or not segment.text.strip():
                segment.text, segment.tokens, segment.words = "", [], []
        self.segments.extend(s for s in window_segments if s.text)
        self.prompt.add(window_segments, outcome.temperature)
        self.transcript = text(tokenizer, self.prompt.said)

    def _add_words(self, window: Window, outcome: WindowOutcome, window_segments: List[Segment]) -> float:
        """Word timestamps on the window's segments; returns where its speech ends."""
        options = self.options
        return add_word_timestamps(
            window_segments, self.model, self.tokenizer, window.features, window.size,
            window.time_offset, self.last_speech_end, cross_kv=outcome.cross_kv,
            probabilities=options.word_probabilities or options.hallucination_silence_threshold is not None,
            # a given prefix was not chosen: its words need no probability (and a live
            # prefix grows to ~60 tokens, a vocabulary projection each)
            probabilities_from=_given_text_tokens(options, self.tokenizer) if window.seek == 0 else 0)

    def _seek_after_words(self, window: Window, outcome: WindowOutcome,
                          window_segments: List[Segment]) -> bool:
        """With word timestamps, transcribe seeks to the last word's end of a window not
        closed by a timestamp, and skips silences around hallucinations
        (hallucination_silence_threshold). Returns False when the window is discarded."""
        single_timestamp_ending = _ends_single_timestamp(outcome.tokens, self.tokenizer)
        if not single_timestamp_ending:
            end = last_word_end(window_segments)
            if end is not None and end > window.time_offset:
                self.seek = round(end * FRAMES_PER_SECOND)
        threshold = self.options.hallucination_silence_threshold
        if threshold is not None:
            cut = skip_silence_around_hallucinations(
                window_segments, threshold, seek=self.seek, previous_seek=window.seek,
                segment_size=window.size, single_timestamp_ending=single_timestamp_ending,
                time_offset=window.time_offset, window_end_time=window.end_time,
                last_speech_end=self.last_speech_end,
                content_duration=self.mel.content_frames * HOP_LENGTH / SAMPLE_RATE,
                content_frames=self.mel.content_frames)
            self.seek = cut.seek
            if cut.discard_window:
                return False
        end = last_word_end(window_segments)
        if end is not None:
            self.last_speech_end = end
        return True

    # --- the result -----------------------------------------------------------------------

    def result(self) -> DecodeResult:
        transcript = text(self.tokenizer, self.prompt.said) if self.tokenizer else ""
        return self.stats.result(transcript, self.segments, self.language or "en", self.options,
                                 self.no_speech_prob)


def _retry_draft(outcome: WindowOutcome) -> Optional[List[int]]:
    """What the attempt before a retry wrote, after the prefix it was given (the retry is
    given that prefix too): the retry's draft."""
    written = outcome.tokens[outcome.prefix_given:]
    return written or None


def _ends_single_timestamp(tokens: List[int], tokenizer) -> bool:
    stamps = [t >= tokenizer.timestamp_begin for t in tokens[-2:]]
    return stamps == [False, True]


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


def _encode(model, mel_window, stats: Stats, precision: str):
    started = time.perf_counter()
    stats.encoder_dtype = encoder_dtype(model, precision)
    audio_features = encode(model, mel_window, precision)
    stats.encoder_ms += (time.perf_counter() - started) * 1000
    return audio_features


def _detect_language(model: Whisper, mel: LogMel, window_features, dtype, stats: Stats,
                     from_window: bool, precision: str) -> str:
    """transcribe()'s detection: over the first 30 s of the file's padded log-mel, which is
    the first window's when that is a full 30 s at the start (its features serve then);
    from_window: the first decoded window's features in any case."""
    if not model.is_multilingual:
        return "en"
    features = window_features if from_window else _encode(
        model, mel.first_30s().to(model.device, dtype).unsqueeze(0), stats, precision)
    if features.shape[1] != model.dims.n_audio_ctx:
        return _language_of_short_features(model, features)
    # No lock needed: a hooks decode runs its own copy of the decoder's modules (cache.py).
    with torch.inference_mode():
        _, probs = model.detect_language(features)
    return max(probs[0], key=probs[0].get)


def _language_of_short_features(model: Whisper, features) -> str:
    """openai-whisper's detect_language over features of fewer positions than a window
    (DecodeOptions.encode_audio_only): its own takes those for a log-mel and encodes them
    again. The same step: the most likely language token after start-of-transcript."""
    tokenizer = get_tokenizer(True, num_languages=model.num_languages)
    with torch.inference_mode():
        start = torch.tensor([[tokenizer.sot]], device=features.device)
        logits = model.logits(start, features)[0, 0]
    language_tokens = torch.tensor(tokenizer.all_language_tokens, device=logits.device)
    best = int(logits[language_tokens].argmax())
    return tokenizer.all_language_codes[best]


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
