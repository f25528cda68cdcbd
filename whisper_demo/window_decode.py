"""One 30 s window, decoded token by token: openai-whisper's DecodingTask._main_loop as a
generator.

openai-whisper does the modelling: its tokenizer, SOT sequence, logit filters, greedy and
beam-search TokenDecoders and sequence ranker come from a `whisper.decoding.DecodingTask`.
What this module adds is the loop itself, turned into a generator that times every step,
the choice of KV cache (cache.py), and the previous hypothesis as a draft
(speculative.py). decode.py runs it over the windows of long audio: the split of
openai-whisper's decoding.py (one window) and transcribe.py (the windows).
"""

import time
import zlib
from dataclasses import dataclass, field
from typing import Generator, List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch.distributions import Categorical
from whisper.decoding import DecodingOptions, DecodingTask, GreedyDecoder
from whisper.tokenizer import Tokenizer

from .cache import make_cache
from .events import DecodeOptions
from .speculative import DraftVerifier, usable_draft


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
    """openai-whisper's GreedyDecoder at a temperature above 0, drawing from `generator`
    instead of torch's global generator (DecodeOptions.seed). The draws are those of
    `Categorical(logits / temperature).sample()`, so a generator seeded with n gives what
    transcribe gives after torch.manual_seed(n)."""

    def __init__(self, temperature: float, eot: int, generator: torch.Generator):
        super().__init__(temperature, eot)
        self.generator = generator

    def update(self, tokens, logits, sum_logprobs):
        probs = Categorical(logits=logits / self.temperature).probs
        next_tokens = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, True,
                                        generator=self.generator).T.reshape(probs.shape[:-1])
        # the rest is GreedyDecoder.update's, unchanged
        logprobs = F.log_softmax(logits.float(), dim=-1)
        current_logprobs = logprobs[torch.arange(logprobs.shape[0]), next_tokens]
        sum_logprobs += current_logprobs * (tokens[:, -1] != self.eot)
        next_tokens[tokens[:, -1] == self.eot] = self.eot
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=-1)
        return tokens, (tokens[:, -1] == self.eot).all()


def decode_window(model, audio_features, tokenizer: Tokenizer, options: DecodeOptions, language: str,
                  temperature: float, previous_tokens: List[int], draft=None,
                  prefix=None, generator: Optional[torch.Generator] = None
                  ) -> Generator[Step, None, WindowOutcome]:
    """openai-whisper's DecodingTask._main_loop as a generator over steps.

    Yields a Step per decoder step and returns the window's WindowOutcome. The cache is
    released on every way out, including when the consumer closes the generator.

    draft: tokens this window is expected to start with (DecodeOptions.draft_tokens).
    With greedy decoding and the static cache, the steps take their logits from forwards
    over the draft (speculative.DraftVerifier) while it agrees with the model, and from
    their own forward otherwise. Each step still filters its logits and picks its token
    exactly as below, so the picks are the greedy decode's either way.

    prefix: tokens the window's transcript begins with (DecodeOptions.prefix_tokens),
    given rather than decoded: they go into the first forward with the start-of-transcript
    tokens, and the loop starts after them as if it had picked them, so openai-whisper's
    timestamp rules read them as this window's text (a timestamp may not go back before
    theirs). They are the start of outcome.tokens.

    generator: what a window sampled at a temperature above 0 draws from (SeededSampler);
    None: torch's global generator, as openai-whisper.
    """
    outcome = WindowOutcome(temperature=temperature)
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
    if temperature > 0 and generator is not None:
        task.decoder = SeededSampler(temperature, tokenizer.eot, generator)
    prefix = usable_draft(prefix, tokenizer, model.dims.n_vocab) if prefix else []
    prefix = prefix[: max(0, n_ctx // 2 - len(task.initial_tokens))]  # room left to decode
    prefilled = len(task.initial_tokens) + len(prefix)
    outcome.prefix_given = len(prefix)
    cache = make_cache(options.cache, model, prefilled, n_group, options.precision)
    task.inference = cache
    task.decoder.inference = cache  # the beam search decoder reorders the cache through it
    task.decoder.reset()

    tokens = torch.tensor([list(task.initial_tokens) + prefix], device=audio_features.device)
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
                    if (options.no_speech_before_decoding and options.no_speech_threshold is not None
                            and outcome.no_speech_prob > options.no_speech_threshold):
                        # Decided before anything is shown: a silent window adds no text.
                        outcome.silent = True
                        return outcome
                for logit_filter in task.logit_filters:
                    logit_filter.apply(last_logits, tokens)
                read = tokens  # the hypotheses this step's forward ran
                tokens, completed = task.decoder.update(tokens, last_logits, sum_logprobs)
                from_draft = bool(from_verifier) and verifier.check(tokens)
            latency_ms = (time.perf_counter() - started) * 1000
            attention = raw_attention(cache, read, n_group, beam) if options.attention else None

            outcome.peak_self_cache_bytes = max(outcome.peak_self_cache_bytes, cache.self_cache_bytes())
            outcome.peak_cross_cache_bytes = max(outcome.peak_cross_cache_bytes, cache.cross_cache_bytes())
            best = tokens[0, sample_begin:].tolist()
            yield Step(token_id=best[-1], is_timestamp=best[-1] >= tokenizer.timestamp_begin,
                       latency_ms=latency_ms, window_tokens=until_eot(best, tokenizer),
                       cache_tokens=cache.cache_tokens(), self_cache_bytes=cache.self_cache_bytes(),
                       self_cache_reserved_bytes=cache.self_cache_reserved_bytes(),
                       cross_cache_bytes=cache.cross_cache_bytes(), from_draft=from_draft,
                       prompt_tokens=len(prompt), prefill_tokens=prefilled,
                       attention=attention)
            if completed or tokens.shape[-1] > n_ctx:
                break

        with torch.inference_mode():
            final, sum_lp = task.decoder.finalize(
                tokens.reshape(1, n_group, -1), sum_logprobs.reshape(1, n_group))
        candidates = [[until_eot(t[sample_begin:].tolist(), tokenizer) for t in final[0]]]
        chosen = task.sequence_ranker.rank(
            [[torch.tensor(c) for c in candidates[0]]], sum_lp)[0]
        outcome.tokens = candidates[0][chosen]
        # the prefix was given, not picked: its tokens have no log-probabilities here
        outcome.avg_logprob = float(sum_lp[0][chosen]) / (len(outcome.tokens) - len(prefix) + 1)
        return outcome
    finally:
        if verifier:  # also for a window returned as silent
            outcome.draft_offered, outcome.draft_accepted = verifier.offered, verifier.accepted
            outcome.draft_passes = verifier.passes
        if (options.word_timestamps or options.attention) and not outcome.silent:
            outcome.cross_kv = cache.exact_cross_kv()
        cache.cleanup_caching()


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
