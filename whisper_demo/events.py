"""What the decoder tells the outside world: options in, events and a result out.

Every number a UI shows comes from a TokenEvent or a DecodeResult, so these are the
whole vocabulary between decode.py and its consumers (ui/, live/, mic.py, bench/).
"""

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from .precision import check_precision

CACHE_MODES = ("static", "hooks", "off")
# Whisper's unit of time: one timestamp token, one encoder position (2 mel frames of 10 ms)
TIMESTAMP_SECONDS = 0.02


@dataclass(frozen=True)
class DecodeOptions:
    cache: str = "static"  # "static" (ours), "hooks" (openai-whisper's), "off"
    beam_size: int = 1  # 1 = greedy
    # one of PRECISIONS: "exact", or "int8", the fast mode (static and off modes, CPU):
    # quantized decoder matmuls and a bfloat16 encoder where the CPU has it, else int8
    # encoder linears (precision.py)
    precision: str = "exact"
    language: Optional[str] = None  # None: "en" for .en models, detected otherwise
    task: str = "transcribe"  # or "translate"
    timestamps: bool = True  # needed to seek through audio longer than 30 s
    # --- long-form decoding: openai-whisper transcribe()'s options, with its defaults ------
    prompt: Optional[str] = None  # transcribe's initial_prompt: text that came before this audio
    carry_initial_prompt: bool = False  # the prompt opens every window's prompt, not just the first
    condition_on_previous_text: bool = True  # previous windows' text as the prompt
    temperature_fallback: bool = True  # re-decode a failed window at 0.2, 0.4, ... 1.0
    compression_ratio_threshold: Optional[float] = 2.4  # above it a window failed (repetitive)
    logprob_threshold: Optional[float] = -1.0  # below it (average per token) a window failed
    # A window is skipped as silent when P(no speech) is above this AND its average log
    # probability is below logprob_threshold (transcribe's rule).
    no_speech_threshold: Optional[float] = 0.6
    # (start, end, start, end, ...) seconds of the audio to transcribe; an odd count runs
    # the last clip to the end. () = all of it.
    clip_timestamps: Tuple[float, ...] = ()
    # With word_timestamps: skip silences longer than this (seconds) around a segment whose
    # words look hallucinated (improbable, too short or too long).
    hallucination_silence_threshold: Optional[float] = None
    # The windows that fall back sample at temperatures above 0. A number: they draw from a
    # generator of this decode's own, seeded with it: the draws transcribe makes after
    # torch.manual_seed(seed), whatever else samples in the process meanwhile, so the same
    # audio gives the same words on every run, beside other decodes too. 0 by default: a
    # person who transcribes a file twice expects the same text, and a WER no noise.
    # None: torch's global generator, as transcribe does (openai-whisper's unseeded draws).
    seed: Optional[int] = 0
    # --- deliberate differences from transcribe, off by default (README, "Long audio") ---
    # Windows quieter than about -60 dBFS are skipped without decoding (transcribe decodes
    # them, and almost always skips them after as no speech).
    skip_digital_silence: bool = False
    # When every temperature of the fallback fails, keep the attempt with the best average
    # log probability among those not too repetitive (else among all), as faster-whisper
    # does, instead of the last one (transcribe): the last is sampled at 1.0, and on hard
    # speech it is noise ("Montreal. First." at 0.0, just under the log-probability
    # threshold, became "Deborah and Tim... tick tick tick" at 1.0). The live final pass
    # and the fast mode use it; off by default in the exact mode, so that decodes equal
    # transcribe's.
    fallback_keeps_best: bool = False
    # A window is judged silent on P(no speech) alone at its first step, before any token is
    # shown, instead of after decoding it (transcribe). Saves decoding silence.
    no_speech_before_decoding: bool = False
    # The previous windows' text is not given as the prompt after a window skipped as silent
    # (transcribe keeps it).
    reset_prompt_after_silence: bool = False
    # The language is detected from the first window's encoder output, not from a separate
    # encoder pass over the first 30 s of the file with its padding (transcribe). Saves an
    # encoder pass on audio under 30 s (a live re-decode).
    detect_language_from_window: bool = False
    max_tokens_per_window: Optional[int] = None  # default: n_text_ctx // 2 as openai-whisper
    # Decode the first window only, and keep all it wrote (a segment it did not close ends
    # with its audio): a live buffer is one window. Otherwise a window not closed by a
    # timestamp (always, without timestamp tokens) seeks to its last word's end with word
    # timestamps, as transcribe does, and a buffer under 30 s gets a second window of its
    # last frames: a second encoder pass for a few words at most.
    single_window: bool = False
    # whisper.cpp's audio_ctx: encode only the window's audio (plus a margin, encoder.py)
    # instead of 30 s with padding. Faster for short audio (a live buffer); not exact.
    encode_audio_only: bool = False
    word_timestamps: bool = False  # Segment.words: when each word was said (timing.py)
    # With word_timestamps: each Word's probability too (the mean of its tokens', from the
    # alignment pass, as openai-whisper computes it). A live AlignAtt decode reads it.
    word_probabilities: bool = False
    # Self-speculative decoding for re-decodes of a growing buffer: the tokens (text and
    # timestamps, no specials: DecodeResult.tokens) a previous decode of the same audio start
    # produced for its first window. That window's greedy decode checks many of them per
    # forward and keeps each one the model itself picks: the tokens are those of a decode
    # without it (speculative.py). Used by greedy decoding with the static cache (exact or
    # int8); ignored otherwise (beams, sampling, the hooks and off modes).
    draft_tokens: Optional[Tuple[int, ...]] = None
    # The first window's transcript is taken to begin with these tokens (text and
    # timestamps): given, not decoded. They are prefilled in the window's first forward,
    # after the prompt and the start-of-transcript tokens, and the model goes on from
    # them; they are part of the result (its tokens, segments and words). A live session
    # passes the words it has already committed from its buffer, so that a re-decode does
    # not transcribe them again (and cannot hear them differently, skip them or write
    # them twice): openai-whisper's `prefix`, but seen by the timestamp rules as text the
    # window already has.
    prefix_tokens: Optional[Tuple[int, ...]] = None
    # Inside the cache: each TokenEvent carries the step's attention (TokenEvent.attention).
    # Self-attention is then computed explicitly (softmax weights kept) instead of by the
    # fused kernel, so this costs time (the bench reports how much); off by default, and a
    # draft is not used while it is on (a draft pass would cover several steps at once).
    attention: bool = False
    # Long audio in batches (batched.py): above 1, audio over 30 s is cut at Silero's pauses
    # into pieces of at most 30 s, decoded this many at once (greedy, no prompt; a piece
    # that loops is decoded again alone with the temperature fallback). Up to 8 in the
    # exact precision, each piece's tokens are those of decoding it alone (batch_cache.py).
    # 0 or 1: the seek loop, window after window (transcribe's).
    batch_size: int = 0

    def __post_init__(self):
        if self.cache not in CACHE_MODES:
            raise ValueError(f"cache must be one of {CACHE_MODES}, not {self.cache!r}")
        check_precision(self.precision, self.cache)
        if self.beam_size < 1:
            raise ValueError("beam_size must be at least 1")
        if self.batch_size < 0:
            raise ValueError("batch_size must be 0 (off) or more")
        object.__setattr__(self, "clip_timestamps", tuple(float(t) for t in self.clip_timestamps))
        if any(t < 0 for t in self.clip_timestamps):
            raise ValueError("clip_timestamps are seconds from the start: none below 0")
        for name in ("draft_tokens", "prefix_tokens"):
            if getattr(self, name) is not None:
                # a tuple keeps the options hashable and equal by value, whatever was passed
                object.__setattr__(self, name, tuple(int(t) for t in getattr(self, name)))


@dataclass(frozen=True, eq=False)  # arrays: compared by identity
class StepAttention:
    """What the decoder step that chose a token read (DecodeOptions.attention).

    The query is the one at the last position of the hypothesis the token was appended to
    (the position whose output chose the token); with beam search, the row of the beam
    that the best hypothesis came from (`parent`).
    """

    # [layers, positions] mean over heads of the softmax weights over every cached position
    # 0..positions-1 (prompt, start-of-transcript tokens, then the tokens so far). Each row
    # sums to 1. Positions grow by one per step; a new window starts again from its prompt.
    self_weights: np.ndarray
    # [frames] the cross-attention of the model's alignment heads (mean over them) over the
    # window's audio frames (20 ms each; only the frames of real audio, not the padding),
    # renormalised to sum to 1 over those frames.
    cross_weights: np.ndarray
    audio_time: float  # stream seconds where cross_weights peaks: the audio cursor
    positions: Tuple[int, ...]  # the token id at each self-attention position
    parent: int = 0  # beam row the best hypothesis came from at this step
    # beam search: for each beam row after this step's reorder, the row it came from; the
    # cache rows are copied in this order (StaticCache.rearrange_kv_cache). () when greedy.
    beam_sources: Tuple[int, ...] = ()


@dataclass(frozen=True)
class TokenEvent:
    """One decoder step: the token chosen, what it cost, and the state of the cache."""

    step: int  # 0, 1, 2, ... over the whole call (all windows)
    window: int  # which 30 s window this token belongs to
    token_id: int  # the token appended to the best hypothesis
    text: str  # text this token adds ("" for timestamps, specials, partial UTF-8)
    transcript: str  # the whole transcript so far, as it should be shown now
    latency_ms: float  # wall time of this decode step
    cache_tokens: int  # self-attention positions held per beam (0 when cache is off)
    cache_capacity: int  # n_text_ctx: the most positions the decoder can hold
    self_cache_bytes: int  # self-attention K/V bytes in use, all layers, all beams
    self_cache_reserved_bytes: int  # what is allocated (static preallocates n_text_ctx)
    cross_cache_bytes: int  # cross-attention K/V bytes (one copy, shared by beams)
    rss_bytes: int  # process resident memory after this step
    cache_mode: str
    beam_size: int
    is_timestamp: bool = False
    restart: bool = False  # True on the first token of a retried window (fallback)
    # A draft token (DecodeOptions.draft_tokens) that the model confirmed. A forward that
    # checks a draft (one per pass, speculative.py) is charged to the step that runs it, the
    # first of the pass (its latency_ms); each later step of the pass carries only its own
    # filtering and choice (well under 1 ms), so latencies still add up to decoder time.
    from_draft: bool = False
    # Where the decoder is in the audio (long files go window by window, 30 s at most each).
    window_start: float = 0.0  # stream seconds where this token's window starts
    window_end: float = 0.0  # and ends (its audio, not the padding)
    audio_seconds: float = 0.0  # the whole input's duration
    n_windows: int = 1  # windows expected: ceil(duration / 30 s), grown if seeking cuts short
    # How this window's cache was filled: prompt tokens (the previous windows' text) plus the
    # start-of-transcript tokens, prefilled by the window's first step in one forward; every
    # later step adds the one token generated. The cross-attention K/V are projected again
    # from the window's new audio at that first step.
    prompt_tokens: int = 0  # previous text given as the prompt (0 for the first window)
    prefill_tokens: int = 0  # positions the first step of this window filled (prompt + SOT + prefix)
    window_encoder_ms: float = 0.0  # the encoder time of this window's audio
    encoder_dtype: str = "float32"  # what the encoder computed in: "bfloat16" in the fast mode where the CPU has it
    attention: Optional[StepAttention] = field(default=None, compare=False)  # DecodeOptions.attention
    # In batches (DecodeOptions.batch_size): the pieces this step decoded at once (its rows;
    # each piece that has ended leaves), of the batch's pieces; 0 when not batched. The
    # cache numbers are then of all the rows: self K/V per row, one audio's cross K/V per row.
    batch_rows: int = 0
    batch_pieces: int = 0
    # A batch of skipped stretches is encoded over its longest stretch's audio (plus the
    # margin), not 30 s (batched.batch_features): those seconds; 0 for a full window.
    batch_encoded_seconds: float = 0.0


@dataclass
class Segment:
    start: float  # seconds from the start of the audio
    end: float
    text: str
    tokens: List[int]
    words: list = field(default_factory=list)  # timing.Word, with DecodeOptions.word_timestamps
    # how its window was decoded (openai-whisper's segment fields of the same names)
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0


@dataclass
class DecodeResult:
    text: str
    tokens: List[int]  # text and timestamp tokens of all windows, no specials
    segments: List[Segment]
    language: str
    cache_mode: str
    beam_size: int
    n_tokens: int  # decoder steps taken
    decode_seconds: float  # decoder time only (encoder excluded)
    encoder_ms: float  # summed over windows
    tokens_per_second: float
    mean_latency_ms: float
    p95_latency_ms: float
    peak_self_cache_bytes: int
    peak_cross_cache_bytes: int
    peak_rss_bytes: int
    latencies_ms: List[float] = field(default_factory=list)
    skipped_windows: int = 0  # windows judged silent (no text kept)
    no_speech_prob: float = 0.0  # of the last window decoded
    draft_offered: int = 0  # draft tokens checked (0 when there was none, or it was ignored)
    draft_accepted: int = 0  # of those, how many the model confirmed (TokenEvent.from_draft)
    draft_passes: int = 0  # decoder forwards that checked draft tokens (speculative.py)
    prefix_given: int = 0  # DecodeOptions.prefix_tokens taken as said (not decoded)
    encoder_dtype: str = "float32"  # as TokenEvent.encoder_dtype
