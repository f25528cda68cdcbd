"""Long audio in batches (DecodeOptions.batch_size): pieces cut at pauses, B decoded at once.

decode.stream_transcribe's seek loop decodes one 30 s window after another, because each
window starts where the previous one's text ended. Here the audio is first cut at Silero's
pauses into pieces of at most 30 s of audio, a pause over 0.6 s inside a piece shortened
to 0.6 s (pieces.py: Whisper encodes 30 s whatever it is given, so a window should hold
speech, not silence); the pieces are then independent, so B of them are decoded together
(batch_decode.py): one decoder step reads the weights once for B pieces. The segments are
put back in the file's time (Piece.file_seconds) and stitched into the DecodeResult that
stream_transcribe returns, so the page, the downloads and the API take it as they are.

Choices, and why:
- No prompt: a piece is decoded without the text before it. The pieces of one batch are
  decoded at the same time, so the text before all but the first is not known yet; giving
  the previous batch's text to some rows would give the rows different prompt lengths
  (positions), and a prompt is also what carries a hallucination from window to window.
  faster-whisper's batched pipeline decodes its pieces without one too.
- Greedy at temperature 0 in the batch. A piece whose decode is a loop (all its tokens
  used, and over transcribe()'s compression ratio threshold; or stopped as one:
  repeats.is_looping, so that one looping row does not hold its batch open to token
  224) is decoded again alone at rising temperatures, as transcribe does
  (DecodeOptions.temperature_fallback); other
  failures of transcribe's tests are kept (BatchedTranscription._fallback says why;
  faster-whisper's batched pipeline keeps its first decode of every piece).
  transcribe()'s no-speech rule drops a silent piece.
- Timestamp tokens as DecodeOptions.timestamps says (on by default): the logit filters
  already work over rows, and they give a piece's segments their own times; without
  them a piece is one segment spanning its audio.
- The batch's pieces are encoded in one call (batch_features): about twice as fast as one
  call each on this CPU, and each piece's features equal its encoding alone.
- Each piece's tokens are those of decode_window on that piece alone, at temperature 0
  with no prompt, in the exact precision and the int8 one (batch_cache.py says why;
  tests/test_batched.py checks both), up to where a looping row is stopped.
- Speech a piece's decode skipped (its segments leave a second or more of Silero's speech
  uncovered: pieces.unheard_speech) is decoded again as pieces of its own, in batches
  after the others, once, greedily (no fallback); such a decode is written only if it
  passes transcribe()'s tests (log probability, compression ratio): a stretch of a second
  or two decoded with no context around it is where Whisper invents ("I'm not sure if I
  can." for a second of a hard clip whose reference is "montreal forced aligner").
  A batch of such stretches is encoded over its longest stretch's audio and encoder.py's
  8 s margin, not 30 s (batch_features): their 30 s windows had cost 12-20 % of a
  10-minute file's time for a few seconds of speech each, and the written text was the
  same within an error (docs/long-audio.md).
  A segment that wrote too few tokens for the speech under it (pieces.too_few_tokens:
  " for a stilliner." timed over 25 s of read speech) did not hear it either: its speech
  is decoded again the same way, and that decode, if written, replaces it.
  docs/long-audio.md has what it changed.
"""

import time
from dataclasses import replace
from typing import Iterator, List, Union

import numpy as np
import psutil
import torch
from whisper.audio import HOP_LENGTH, N_FRAMES, SAMPLE_RATE
from whisper.model import Whisper
from whisper.tokenizer import get_tokenizer

from .batch_decode import BatchDecode, BatchStep
from .cache import WindowMemo
from .decode_state import Returning, Stats, text
from .encoder import FRAMES_PER_SECOND, encode, encoder_dtype, encoder_frames
from .events import TIMESTAMP_SECONDS, DecodeOptions, DecodeResult, Segment, TokenEvent
from .fallback import FALLBACK_TEMPERATURES, fails_tests, is_silent
from .pieces import (HEARD_MARGIN_SECONDS, MAX_PIECE_SECONDS, MIN_UNHEARD_SECONDS, Piece, Span, audio_regions,
                     regions_to_pieces, too_few_tokens, unheard_speech, voiced_length)
from .timing import add_word_timestamps
from .window_decode import WindowOutcome, decode_window
from .windowing import LogMel, split_segments, unfinished_segment

WINDOW_SAMPLES = N_FRAMES * HOP_LENGTH  # 30 s
DEFAULT_BATCH_SIZE = 8  # the page's "Long files in batches": faster-whisper batched's size in bench e2e
_process = psutil.Process()


def _samples(seconds: float) -> int:
    return round(seconds * SAMPLE_RATE)


def _in_batches(pieces: List[Piece], size: int) -> Iterator[List[Piece]]:
    for first in range(0, len(pieces), size):
        yield pieces[first:first + size]


def applies(options: DecodeOptions, n_samples: int) -> bool:
    """Whether stream_transcribe decodes in batches: asked for (batch_size > 1), audio over
    one window, and what the batch decodes: the static cache, greedy, no attention view, no
    clips, prefix or draft (those are the seek loop's)."""
    return (options.batch_size > 1 and n_samples > WINDOW_SAMPLES and options.cache == "static"
            and options.beam_size == 1 and not options.attention and not options.clip_timestamps
            and not options.prefix_tokens and not options.draft_tokens)


def piece_mel(model: Whisper, audio: np.ndarray, piece: Piece, frames: int = N_FRAMES) -> torch.Tensor:
    """A piece's log-mel [1, n_mels, frames] as transcribe would compute it for the piece as
    a file: its own (floored below its own maximum), zero-padded to 30 s (or `frames`)."""
    samples = piece.samples(audio)
    dtype = torch.float16 if model.decoder.token_embedding.weight.dtype == torch.float16 else torch.float32
    mel = LogMel(samples, model.dims.n_mels).window(0, len(samples) // HOP_LENGTH, frames)
    return mel.to(model.device, dtype).unsqueeze(0)


def piece_features(model: Whisper, audio: np.ndarray, piece: Piece, precision: str) -> torch.Tensor:
    """A piece's encoder output [1, n_audio_ctx, d], the piece encoded alone."""
    return encode(model, piece_mel(model, audio, piece), precision)


def longest_audio_frames(batch: List[Piece]) -> int:
    """Mel frames of audio in the batch's longest piece."""
    return max(p.length for p in batch) // HOP_LENGTH


def batch_features(model: Whisper, audio: np.ndarray, batch: List[Piece], precision: str,
                   audio_only: bool = False) -> List[torch.Tensor]:
    """The encoder outputs of a batch's pieces, from one encoder call over all of them:
    about twice as fast as one call each here (tiny.en, 2 cores), and each row is what the
    piece alone gives, bit for bit (the encoder's rows never mix; tests/test_batched.py
    checks it where the matrix library could have blocked a larger product otherwise).

    audio_only: each piece is encoded over the batch's longest audio and encoder.py's
    margin, not 30 s (whisper.cpp's audio_ctx, as the live streamed pass encodes): for the
    skipped stretches, a few seconds each, whose 30 s windows cost as much as full pieces."""
    frames = encoder_frames(longest_audio_frames(batch), audio_only)
    features = encode(model, torch.cat([piece_mel(model, audio, p, frames) for p in batch]), precision)
    return [features[i:i + 1] for i in range(len(batch))]


def piece_segments(outcome: WindowOutcome, piece: Piece, tokenizer) -> List[Segment]:
    """A piece's tokens as timed segments in the piece's own time (split_segments, and the
    words after its last timestamp pair as a segment ending with the piece), kept inside
    the piece: file_times puts them in the file."""
    frames = piece.length // HOP_LENGTH
    stride = 2  # mel frames per timestamp step (and per encoder position)
    segments, _ = split_segments(outcome.tokens, tokenizer, 0.0, frames, TIMESTAMP_SECONDS, stride)
    rest = unfinished_segment(outcome.tokens, segments, tokenizer, 0.0, frames, TIMESTAMP_SECONDS)
    segments += [rest] if rest is not None else []
    high = piece.length / SAMPLE_RATE
    ratio = outcome.compression_ratio(tokenizer)
    for s in segments:
        s.start, s.end = min(max(s.start, 0.0), high), min(max(s.end, 0.0), high)
        s.end = max(s.start, s.end)
        s.avg_logprob, s.compression_ratio = outcome.avg_logprob, ratio
        s.no_speech_prob, s.temperature = outcome.no_speech_prob, outcome.temperature
    return [s for s in segments if s.text.strip()]


def file_times(piece: Piece, segments: List[Segment]) -> None:
    """Segments (and their words) timed in a piece's own audio, moved to the file's time."""
    for s in segments:
        s.start, s.end = piece.file_seconds(s.start), piece.file_seconds(s.end, is_end=True)
        s.words = [replace(w, start=round(piece.file_seconds(w.start), 2),
                           end=round(piece.file_seconds(w.end, is_end=True), 2))
                   for w in s.words] if s.words else s.words


def stream_batched(model: Whisper, audio: np.ndarray,
                   options: DecodeOptions) -> Iterator[Union[TokenEvent, DecodeResult]]:
    """stream_transcribe in batches: a TokenEvent per batch step, then the DecodeResult."""
    run = BatchedTranscription(model, np.ascontiguousarray(audio, dtype=np.float32), options)
    for index, batch in enumerate(run.batches()):
        yield from run.decode(index, batch)
    yield run.result()


class BatchedTranscription:
    """One stream_batched call: the pieces, the language, the segments kept, the totals."""

    def __init__(self, model: Whisper, audio: np.ndarray, options: DecodeOptions):
        self.model, self.audio, self.options = model, audio, options
        self.stats = Stats()
        self.regions = audio_regions(audio)
        self.pieces = regions_to_pieces(self.regions)
        self.n_batches = -(-len(self.pieces) // options.batch_size)
        self.heard: List[Span] = []  # what the decodes so far wrote for, or called silent
        self.unheard: List[Piece] = []  # the speech they skipped, decoded after them
        self.sparse: List[Segment] = []  # segments that wrote too few tokens for their speech
        self.language = options.language
        self.tokenizer = None
        self.segments: List[Segment] = []
        self.kept_text = ""
        self.step = 0
        self.no_speech_prob = 0.0
        self.last_speech_end = 0.0
        # the fallback's draws, as Transcription's (DecodeOptions.seed)
        self.generator = (None if options.seed is None
                          else torch.Generator(model.device).manual_seed(options.seed))

    def batches(self) -> Iterator[List[Piece]]:
        """The pieces, B at a time; then the speech their decodes skipped, B at a time (the
        second round is not checked again: a stretch twice left unwritten stays so)."""
        yield from _in_batches(self.pieces, self.options.batch_size)
        self.unheard = [Piece((span,)) for span in unheard_speech(
            self.regions, self.heard, _samples(MIN_UNHEARD_SECONDS), _samples(HEARD_MARGIN_SECONDS),
            _samples(MAX_PIECE_SECONDS))]
        self.n_batches += -(-len(self.unheard) // self.options.batch_size)
        yield from _in_batches(self.unheard, self.options.batch_size)

    def decode(self, batch_index: int, batch: List[Piece]) -> Iterator[TokenEvent]:
        """Encode the batch's pieces, decode them together (an event per step), keep them."""
        started = time.perf_counter()
        stretches = batch[0] in self.unheard
        features = batch_features(self.model, self.audio, batch, self.options.precision, audio_only=stretches)
        encoder_ms = (time.perf_counter() - started) * 1000
        encoded_seconds = longest_audio_frames(batch) / FRAMES_PER_SECOND if stretches else 0.0
        self.stats.encoder_ms += encoder_ms
        self.stats.encoder_dtype = encoder_dtype(self.model, self.options.precision)
        if self.tokenizer is None:
            self._start_tokenizer(features[0])
        decoding = Returning(BatchDecode(self.model, features, self.tokenizer, self.options,
                                         self.language).steps())
        for step in decoding:
            yield self._event(step, batch, batch_index, encoder_ms, encoded_seconds)
        self._keep(batch, decoding.value, features)

    def _start_tokenizer(self, first_features: torch.Tensor) -> None:
        model = self.model
        if self.language is None:
            if model.is_multilingual:
                with torch.inference_mode():
                    _, probs = model.detect_language(first_features)
                self.language = max(probs[0], key=probs[0].get)
            else:
                self.language = "en"
        self.tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages,
                                       language=self.language, task=self.options.task)

    def _event(self, step: BatchStep, batch: List[Piece], batch_index: int, encoder_ms: float,
               encoded_seconds: float) -> TokenEvent:
        """The TokenEvent of a batch step: the transcript so far (the batches before, then
        each piece of this one as far as it has got), the cache of all its rows."""
        tokenizer, stats = self.tokenizer, self.stats
        written = " ".join(text(tokenizer, tokens).strip() for tokens in step.tokens)
        transcript = (self.kept_text + " " + written).strip()
        picked = next((t for t in step.picked if t >= 0), tokenizer.eot)
        rss = _process.memory_info().rss
        stats.latencies_ms.append(step.latency_ms)
        stats.peak_rss = max(stats.peak_rss, rss)
        stats.peak_self = max(stats.peak_self, step.self_cache_bytes)
        stats.peak_cross = max(stats.peak_cross, step.cross_cache_bytes)
        event = TokenEvent(
            step=self.step, window=batch_index, token_id=picked, text="", transcript=transcript,
            latency_ms=step.latency_ms, cache_tokens=step.cache_tokens,
            cache_capacity=self.model.dims.n_text_ctx, self_cache_bytes=step.self_cache_bytes,
            self_cache_reserved_bytes=step.self_cache_reserved_bytes,
            cross_cache_bytes=step.cross_cache_bytes, rss_bytes=rss, cache_mode=self.options.cache,
            beam_size=1, is_timestamp=picked >= tokenizer.timestamp_begin,
            window_start=batch[0].start / SAMPLE_RATE, window_end=batch[-1].end / SAMPLE_RATE,
            audio_seconds=len(self.audio) / SAMPLE_RATE, n_windows=self.n_batches,
            prefill_tokens=step.prefill_tokens, window_encoder_ms=encoder_ms,
            encoder_dtype=stats.encoder_dtype, batch_rows=step.rows, batch_pieces=len(batch),
            batch_encoded_seconds=encoded_seconds)
        self.step += 1
        return event

    def _keep(self, batch: List[Piece], outcomes: List[WindowOutcome], features) -> None:
        """Each piece's segments (decoded again where its greedy decode failed transcribe's
        tests), unless transcribe's no-speech rule calls it silent; what each decode heard
        (its segments' times, or the whole piece if silent), for unheard_speech."""
        options = self.options
        for piece, outcome, piece_features_ in zip(batch, outcomes, features):
            skipped_stretch = piece in self.unheard
            if not skipped_stretch:  # a stretch's loop fails the tests below: not five decodes more
                outcome = self._fallback(piece_features_, outcome)
            self.no_speech_prob = outcome.no_speech_prob
            if is_silent(outcome, options):
                self.stats.skipped_windows += 1
                self.heard += piece.parts
                continue
            if skipped_stretch and (outcome.looping or fails_tests(outcome, self.tokenizer, options)):
                continue  # a short stretch decoded alone, unsure of itself: where Whisper invents
            segments = piece_segments(outcome, piece, self.tokenizer)
            if options.word_timestamps and segments:
                self._time_words(piece, segments, piece_features_, skipped_stretch)
            file_times(piece, segments)
            if skipped_stretch and segments:  # a decode that wrote nothing replaces nothing
                self._replace_sparse(piece)
            self._hear(segments, skipped_stretch)
            self.segments.extend(segments)
        self.segments.sort(key=lambda s: s.start)  # a skipped stretch's segments among the others
        self.kept_text = text(self.tokenizer, [t for s in self.segments for t in s.tokens]).strip()

    def _hear(self, segments: List[Segment], skipped_stretch: bool) -> None:
        """The segments' times as heard, but for a segment of a piece that wrote too few
        tokens for the speech under it (pieces.too_few_tokens): its speech is decoded again
        as skipped, and that decode, if written, replaces it (_replace_sparse)."""
        eot = self.tokenizer.eot
        for s in segments:
            span = (_samples(s.start), _samples(s.end))
            said = sum(1 for t in s.tokens if t < eot)
            if not skipped_stretch and too_few_tokens(said, voiced_length(self.regions, span)):
                self.sparse.append(s)
            else:
                self.heard.append(span)

    def _replace_sparse(self, stretch: Piece) -> None:
        """A skipped stretch's decode is written: the sparse segments over its speech, which
        heard it as a few words, leave the text for it."""
        over = [s for s in self.sparse if _samples(s.start) < stretch.end and stretch.start < _samples(s.end)]
        self.segments = [s for s in self.segments if not any(s is o for o in over)]

    def _time_words(self, piece: Piece, segments: List[Segment], features: torch.Tensor,
                    skipped_stretch: bool) -> None:
        """Word timestamps for a piece's segments (in the piece's time), given where the
        speech before them ended (transcribe's last_speech_timestamp, in the file's time):
        for a skipped stretch, decoded after the pieces around it, the end of the segments
        before it."""
        start = piece.start / SAMPLE_RATE
        speech_before = (max((s.end for s in self.segments if s.end <= start), default=0.0)
                         if skipped_stretch else self.last_speech_end)
        end = add_word_timestamps(segments, self.model, self.tokenizer, features,
                                  piece.length // HOP_LENGTH, 0.0, speech_before - start,
                                  probabilities=self.options.word_probabilities)
        if not skipped_stretch and any(s.words for s in segments):  # else `end` is what it was given
            self.last_speech_end = piece.file_seconds(end, is_end=True)

    def _fallback(self, features: torch.Tensor, outcome: WindowOutcome) -> WindowOutcome:
        """transcribe()'s temperature fallback, for a piece whose greedy decode is a loop:
        the piece alone (decode_window) at 0.2, 0.4, ... until an attempt is not; if none
        is, the least repetitive. A loop here is a decode that used all its tokens (224
        for 30 s at most, where speech has ~120) and is too repetitive (transcribe's
        compression ratio test); transcribe's tests alone also fire on speech that repeats
        itself (the dev set's "Montreal forced aligner" recordings, ratios of 2.9 and 3.7)
        and on hard speech (log probability), where sampling seldom helps, and retrying
        those took the decoder of a 185 s file from 4.7 s to 17 s (tiny.en)."""
        tried = [outcome]
        memo = WindowMemo()  # the piece's K/V and first forward, once for its attempts
        for temperature in FALLBACK_TEMPERATURES[1:]:
            if not self._looped(outcome):
                return outcome
            outcome = self._attempt(features, temperature, memo, before=outcome)
            tried.append(outcome)
        return outcome if not self._looped(outcome) else min(
            tried, key=lambda o: o.compression_ratio(self.tokenizer))

    def _attempt(self, features: torch.Tensor, temperature: float, memo: WindowMemo,
                 before: WindowOutcome) -> WindowOutcome:
        """One sampled attempt at a piece alone, drafted by the attempt `before` it and
        stopped where it is stuck in a loop (as the batch stops its rows): such an attempt
        fails, and its last steps would be wasted."""
        attempt = Returning(decode_window(
            self.model, features, self.tokenizer, self.options, self.language, temperature, [],
            draft=before.tokens or None, generator=self.generator, memo=memo, stop_loops=True))
        for step in attempt:
            self.stats.latencies_ms.append(step.latency_ms)
        return attempt.value

    def _looped(self, outcome: WindowOutcome) -> bool:
        """Whether a decode is a loop: stopped as one, or all its tokens used and too
        repetitive for transcribe's compression ratio test."""
        options, threshold = self.options, self.options.compression_ratio_threshold
        sample_len = options.max_tokens_per_window or self.model.dims.n_text_ctx // 2
        return (options.temperature_fallback and threshold is not None and not outcome.silent
                and (outcome.looping or (len(outcome.tokens) >= sample_len
                                         and outcome.compression_ratio(self.tokenizer) > threshold)))

    def result(self) -> DecodeResult:
        return self.stats.result(self.kept_text, self.segments, self.language or "en", self.options,
                                 self.no_speech_prob)

