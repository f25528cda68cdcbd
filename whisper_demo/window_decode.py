"""One 30 s window, decoded token by token: openai-whisper's DecodingTask._main_loop as a
generator.

openai-whisper does the modelling: its tokenizer, SOT sequence, beam-search TokenDecoder
and sequence ranker come from a `whisper.decoding.DecodingTask`, and so do its logit
filters, which logit_filters.py applies as tensor operations over all beams with the same
outputs (ArgmaxGreedy, below, is its greedy decoder with the same picks). What this module
adds is the loop itself, turned into a generator that times every step, the choice of KV
cache (cache.py), and the previous hypothesis as a draft (speculative.py). decode.py runs
it over the windows of long audio: the split of openai-whisper's decoding.py (one window)
and transcribe.py (the windows).

The loop reads as openai-whisper's: decode_window makes a WindowDecode (the task, the
cache, the filters, the draft: everything a window can set up once), whose steps() runs
_step per token (the forward or a draft pass's row, the filters, the pick), _record for
what a Step reports, _finish to rank the candidates, and _release on every way out.
"""

import time
import zlib
from dataclasses import dataclass, field
from typing import Generator, List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from whisper.decoding import DecodingOptions, DecodingTask, GreedyDecoder
from whisper.tokenizer import Tokenizer

from . import sampling
from .cache import make_cache
from .events import DecodeOptions
from .logit_filters import WindowFilters
from .repeats import is_looping
from .speculative import SAMPLED_FIRST_PASS, DraftVerifier, usable_draft


@dataclass
class WindowOutcome:
    """What one decoding attempt of one 30 s window produced."""

    tokens: List[int] = field(default_factory=list)  # text + timestamps, no specials
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0
    temperature: float = 0.0  # of this attempt
    silent: bool = False  # judged silent before any token was emitted (no_speech_before_decoding)
    peak_self_cache_bytes: int = 0
    peak_cross_cache_bytes: int = 0
    draft_offered: int = 0  # draft tokens checked in this attempt
    draft_accepted: int = 0  # of those, confirmed by the model
    draft_passes: int = 0  # decoder forwards that checked draft tokens
    prefix_given: int = 0  # tokens the window's transcript was given to start with
    looping: bool = False  # stopped before its end: its last tokens repeat (repeats.is_looping)
    # the decode's cross-attention K/V, kept for word timing when it can use them as they
    # are (saves projecting the audio again: ~18 ms of a tiny.en live re-decode)
    cross_kv: Optional[list] = None

    def compression_ratio(self, tokenizer: Tokenizer) -> float:
        """openai-whisper's: gzip's ratio over the window's text (timestamps left out, stripped)."""
        text = tokenizer.decode(self.tokens).strip().encode("utf-8")
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
    """A step's attention before decode.stream_transcribe places it in the audio (StepAttention)."""

    self_weights: np.ndarray  # [layers, positions]
    cross_weights: np.ndarray  # [n_audio_ctx], all frames of the window, padding included
    positions: tuple
    parent: int
    beam_sources: tuple


class SeededSampler(GreedyDecoder):
    """openai-whisper's GreedyDecoder at a temperature above 0, its draws those of
    `Categorical(logits / temperature).sample()` from `generator` (None: torch's global
    one, as openai-whisper; DecodeOptions.seed gives a generator of the decode's own, so
    seeded with n it draws what transcribe draws after torch.manual_seed(n)), in fewer
    operations (sampling.draw)."""

    def __init__(self, temperature: float, eot: int, generator: Optional[torch.Generator]):
        super().__init__(temperature, eot)
        self.generator = generator

    def update(self, tokens, logits, sum_logprobs):
        next_tokens = sampling.draw(logits, self.temperature, self.generator)
        return _append_picks(tokens, logits, next_tokens, sum_logprobs, self.eot)


class ArgmaxGreedy(GreedyDecoder):
    """openai-whisper's GreedyDecoder at temperature 0, its pick found by numpy's argmax on a
    CPU: the same index (the first of equal maxima, as torch's), ~3 us for a row of 51,864
    logits where torch's argmax takes ~65 us on a step's one thread."""

    def update(self, tokens, logits, sum_logprobs):
        if logits.device.type != "cpu":
            return super().update(tokens, logits, sum_logprobs)
        next_tokens = torch.from_numpy(logits.numpy().argmax(axis=-1))
        return _append_picks(tokens, logits, next_tokens, sum_logprobs, self.eot)


def _append_picks(tokens, logits, next_tokens, sum_logprobs, eot: int):
    """GreedyDecoder.update after its pick, unchanged: each beam's log-probability of its
    pick added, a finished beam kept at the end of text, the picks appended."""
    logprobs = F.log_softmax(logits.float(), dim=-1)
    current_logprobs = logprobs[torch.arange(logprobs.shape[0]), next_tokens]
    sum_logprobs += current_logprobs * (tokens[:, -1] != eot)
    next_tokens[tokens[:, -1] == eot] = eot
    tokens = torch.cat([tokens, next_tokens[:, None]], dim=-1)
    return tokens, (tokens[:, -1] == eot).all()


def decode_window(model, audio_features, tokenizer: Tokenizer, options: DecodeOptions, language: str,
                  temperature: float, previous_tokens: List[int], draft=None,
                  prefix=None, generator: Optional[torch.Generator] = None, memo=None,
                  stop_loops: bool = False) -> Generator[Step, None, WindowOutcome]:
    """openai-whisper's DecodingTask._main_loop as a generator over steps.

    Yields a Step per decoder step and returns the window's WindowOutcome. The cache is
    released on every way out, including when the consumer closes the generator.

    draft: tokens this window is expected to start with (DecodeOptions.draft_tokens).
    With one hypothesis (greedy, or one sampled sequence: a fallback retry, drafted by the
    attempt before it) and the static cache, the steps take their logits from forwards
    over the draft (speculative.DraftVerifier) while it agrees with the model, and from
    their own forward otherwise. Each step still filters its logits and picks (or draws)
    its token exactly as below, so the tokens are the decode's own either way.

    prefix: tokens the window's transcript begins with (DecodeOptions.prefix_tokens),
    given rather than decoded: they go into the first forward with the start-of-transcript
    tokens, and the loop starts after them as if it had picked them, so openai-whisper's
    timestamp rules read them as this window's text (a timestamp may not go back before
    theirs). They are the start of outcome.tokens.

    generator: what a window sampled at a temperature above 0 draws from (SeededSampler);
    None: torch's global generator, as openai-whisper.

    memo: a cache.WindowMemo shared by the attempts at this window (decode.py's fallback):
    the audio's cross-attention K/V and the first forward over the same tokens are
    computed once for them all, to the same numbers.

    stop_loops: end the decode where its last tokens are a plain loop (repeats.is_looping):
    the outcome is marked `looping`, its tokens those up to there.
    """
    window = WindowDecode(model, audio_features, tokenizer, options, language, temperature,
                          previous_tokens, draft, prefix, generator, memo, stop_loops)
    return (yield from window.steps())


class WindowDecode:
    """One decoding attempt of one window, in the steps of openai-whisper's DecodingTask
    (`task`: its initial tokens, token decoder and sequence ranker), with our KV cache, our
    logit filters (logit_filters.WindowFilters: openai-whisper's, as tensor operations made
    once per window) and the draft. `steps()` runs it."""

    def __init__(self, model, audio_features, tokenizer: Tokenizer, options: DecodeOptions,
                 language: str, temperature: float, previous_tokens: List[int], draft, prefix,
                 generator: Optional[torch.Generator], memo=None, stop_loops: bool = False):
        self.model, self.audio_features, self.tokenizer = model, audio_features, tokenizer
        self.options = options
        self.outcome = WindowOutcome(temperature=temperature)
        self.beam = options.beam_size > 1 and temperature == 0
        self.n_ctx = model.dims.n_text_ctx
        # openai-whisper's transcribe keeps the last n_ctx/2 - 1 tokens of history
        self.prompt = previous_tokens[-(self.n_ctx // 2 - 1):]
        self.task = self._decoding_task(language, temperature)
        self.filters = WindowFilters.of_task(self.task, model.dims.n_vocab, audio_features.device)
        self._choose_token_decoder(temperature, generator)
        self.prefix = self._given_prefix(prefix)
        self.prefilled = len(self.task.initial_tokens) + len(self.prefix)
        self.cache = self._cache(memo)
        tokens = torch.tensor([list(self.task.initial_tokens) + self.prefix], device=audio_features.device)
        self.tokens = tokens.repeat_interleave(self.task.n_group, dim=0)
        self.sum_logprobs = torch.zeros(self.task.n_group, device=audio_features.device)
        self.completed = False
        self.verifier = self._verifier(draft, temperature)
        # A sampled retry's first step takes the forward over the prompt that every attempt
        # at the window shares (cache.WindowMemo) rather than a draft pass, which would run
        # that prompt again; its draft is checked from the second step on.
        self.first_checked_step = 1 if temperature > 0 else 0
        self.stop_loops = stop_loops

    def _decoding_task(self, language: str, temperature: float) -> DecodingTask:
        options = self.options
        return DecodingTask(self.model, DecodingOptions(
            task=options.task, language=language, temperature=temperature,
            beam_size=options.beam_size if self.beam else None,
            sample_len=options.max_tokens_per_window,
            without_timestamps=not options.timestamps,
            prompt=self.prompt or None,
            fp16=self.audio_features.dtype == torch.float16,
        ))

    def _choose_token_decoder(self, temperature: float, generator) -> None:
        """openai-whisper's token decoder (beam search), or ours where it picks the same
        tokens cheaper: greedy, and sampling (from the decode's own generator where
        DecodeOptions.seed gives one)."""
        task = self.task
        if temperature > 0:
            task.decoder = SeededSampler(temperature, self.tokenizer.eot, generator)
        elif temperature == 0 and not self.beam:
            task.decoder = ArgmaxGreedy(temperature, self.tokenizer.eot)

    def _given_prefix(self, prefix) -> List[int]:
        prefix = usable_draft(prefix, self.tokenizer, self.model.dims.n_vocab) if prefix else []
        prefix = prefix[: max(0, self.n_ctx // 2 - len(self.task.initial_tokens))]  # room left to decode
        self.outcome.prefix_given = len(prefix)
        return prefix

    def _cache(self, memo):
        options, task = self.options, self.task
        cache = make_cache(options.cache, self.model, self.prefilled, task.n_group, options.precision)
        if hasattr(cache, "memo"):  # the static cache; the others recompute what they need
            cache.memo = memo
        task.inference = cache
        task.decoder.inference = cache  # the beam search decoder reorders the cache through it
        task.decoder.reset()
        cache.capture_attention = options.attention
        return cache

    def _verifier(self, draft, temperature: float) -> Optional[DraftVerifier]:
        """The draft's checker, where it applies: one hypothesis (greedy, or sampling one
        sequence: a sampled step's draw is made from its row's logits as in its own step,
        from the same generator in the same order, so the draft changes no draw), the
        static cache (other caches cannot drop rejected positions), no attention wanted (a
        draft pass covers several steps: no per-step weights)."""
        options = self.options
        if not (options.cache == "static" and not self.beam and self.task.n_group == 1 and draft
                and not options.attention):
            return None
        return DraftVerifier(usable_draft(draft, self.tokenizer, self.model.dims.n_vocab), self.cache,
                             self.audio_features, self.task.sot_index, self.tokenizer,
                             first_pass=SAMPLED_FIRST_PASS if temperature > 0 else None)

    # --- the loop -------------------------------------------------------------------------

    def steps(self) -> Generator[Step, None, WindowOutcome]:
        """A Step per decoder step; returns the outcome. The cache is released on every way
        out, the generator closed early included."""
        try:
            for i in range(self.task.sample_len):
                step = self._step(i)
                if step is None:  # judged silent at the first step
                    return self.outcome
                yield step
                if self.completed or self.tokens.shape[-1] > self.n_ctx:
                    break
                if self.stop_loops and is_looping(step.window_tokens, self.tokenizer.timestamp_begin):
                    self.outcome.looping = True
                    break
            return self._finish()
        finally:
            self._release()

    def _step(self, i: int) -> Optional[Step]:
        """One timed step: the forward (or a draft pass's row), the filters, the pick."""
        started = time.perf_counter()
        with torch.inference_mode(), self.cache.step_context():
            logits, from_verifier = self._logits(i)
            if logits is None:
                return None
            self.filters.apply(logits, self.tokens)
            read = self.tokens  # the hypotheses this step's forward ran
            self.tokens, self.completed = self.task.decoder.update(self.tokens, logits, self.sum_logprobs)
            from_draft = from_verifier and self.verifier.check(self.tokens)
            if self.verifier and i < self.first_checked_step:
                self.verifier.follow(self.tokens)
        latency_ms = (time.perf_counter() - started) * 1000
        return self._record(read, latency_ms, from_draft)

    def _logits(self, i: int):
        """(the last position's logits, whether a draft pass gave them); (None, False) when
        the first step judges the window silent (no_speech_before_decoding)."""
        task = self.task
        # draft tokens a pass may check: steps left, and positions left in the cache
        room = min(task.sample_len - i, self.n_ctx - self.tokens.shape[1])
        checked = self.verifier and i >= self.first_checked_step
        from_verifier = self.verifier.logits(self.tokens, room) if checked else None
        if from_verifier:
            last_logits, sot_logits = from_verifier
        else:
            last_logits, sot_logits = self.cache.step_logits(self.tokens, self.audio_features, task.sot_index)
        if i == 0 and self._judged_silent(sot_logits):
            return None, False
        return last_logits, bool(from_verifier)

    def _judged_silent(self, sot_logits) -> bool:
        """The no-speech probability at the first step; True when the window is decided
        silent before anything is shown (a silent window adds no text)."""
        options, no_speech = self.options, self.tokenizer.no_speech
        if no_speech is None:
            return False
        self.outcome.no_speech_prob = sot_logits[0].softmax(-1)[no_speech].item()
        self.outcome.silent = (options.no_speech_before_decoding and options.no_speech_threshold is not None
                               and self.outcome.no_speech_prob > options.no_speech_threshold)
        return self.outcome.silent

    def _record(self, read, latency_ms: float, from_draft: bool) -> Step:
        """The Step of the step just run, and the outcome's peak cache sizes."""
        cache, outcome, tokenizer = self.cache, self.outcome, self.tokenizer
        attention = (raw_attention(cache, read, self.task.n_group, self.beam)
                     if self.options.attention else None)
        self_bytes, cross_bytes = cache.self_cache_bytes(), cache.cross_cache_bytes()
        outcome.peak_self_cache_bytes = max(outcome.peak_self_cache_bytes, self_bytes)
        outcome.peak_cross_cache_bytes = max(outcome.peak_cross_cache_bytes, cross_bytes)
        best = self.tokens[0, self.task.sample_begin:].tolist()
        return Step(token_id=best[-1], is_timestamp=best[-1] >= tokenizer.timestamp_begin,
                    latency_ms=latency_ms, window_tokens=until_eot(best, tokenizer),
                    cache_tokens=cache.cache_tokens(), self_cache_bytes=self_bytes,
                    self_cache_reserved_bytes=cache.self_cache_reserved_bytes(),
                    cross_cache_bytes=cross_bytes, from_draft=from_draft,
                    prompt_tokens=len(self.prompt), prefill_tokens=self.prefilled,
                    attention=attention)

    def _finish(self) -> WindowOutcome:
        """openai-whisper's end of a window: the decoder's candidates, ranked."""
        task, n_group, outcome = self.task, self.task.n_group, self.outcome
        with torch.inference_mode():
            final, sum_lp = task.decoder.finalize(
                self.tokens.reshape(1, n_group, -1), self.sum_logprobs.reshape(1, n_group))
        candidates = [until_eot(t[task.sample_begin:].tolist(), self.tokenizer) for t in final[0]]
        chosen = task.sequence_ranker.rank([[torch.tensor(c) for c in candidates]], sum_lp)[0]
        outcome.tokens = candidates[chosen]
        # the prefix was given, not picked: its tokens have no log-probabilities here
        outcome.avg_logprob = float(sum_lp[0][chosen]) / (len(outcome.tokens) - len(self.prefix) + 1)
        return outcome

    def _release(self) -> None:
        outcome, verifier = self.outcome, self.verifier
        if verifier:  # also for a window returned as silent
            outcome.draft_offered, outcome.draft_accepted = verifier.offered, verifier.accepted
            outcome.draft_passes = verifier.passes
        if (self.options.word_timestamps or self.options.attention) and not outcome.silent:
            outcome.cross_kv = self.cache.exact_cross_kv()
        self.cache.cleanup_caching()


def raw_attention(cache, read, n_group: int, beam: bool) -> RawAttention:
    """The weights the step's forward kept (cache.captured), for the hypothesis that the
    best one after the update came from. Outside the timed step: copying them out is the
    view's cost, not the decoder's."""
    self_rows, cross_rows = cache.attention_rows(n_group)
    sources = tuple(cache.beam_sources or ()) if beam else ()
    parent = sources[0] if sources else 0
    return RawAttention(self_weights=self_rows[:, parent].numpy(),
                        cross_weights=cross_rows[parent].numpy(),
                        positions=tuple(read[parent].tolist()), parent=parent, beam_sources=sources)


def until_eot(tokens: List[int], tokenizer) -> List[int]:
    return tokens[: tokens.index(tokenizer.eot)] if tokenizer.eot in tokens else tokens
