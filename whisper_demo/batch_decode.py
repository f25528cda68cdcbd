"""B pieces decoded at once, greedy, one decoder step for all of them (batched.py).

The loop is window_decode.WindowDecode's greedy loop with a row per piece instead of a
row per beam: openai-whisper's DecodingTask gives the start-of-transcript tokens, the
logit filters (logit_filters.WindowFilters, which already work over rows) and the greedy
pick (window_decode.ArgmaxGreedy); batch_cache.BatchCache runs the decoder. A row whose
piece wrote end-of-text leaves the batch; its WindowOutcome is what decode_window would
return for that piece alone at temperature 0 (no prompt, no fallback). A row stuck in a
loop leaves it too, marked `looping`: its tokens are the alone decode's up to there.
"""

import contextlib
import time
from dataclasses import dataclass
from typing import Generator, List

import torch
from torch import Tensor
from whisper.decoding import DecodingOptions, DecodingTask
from whisper.tokenizer import Tokenizer

from . import kernels
from .batch_cache import BatchCache
from .events import DecodeOptions
from .repeats import is_looping
from .logit_filters import WindowFilters
from .runner import decoder_runner
from .window_decode import ArgmaxGreedy, WindowOutcome, until_eot


@dataclass(frozen=True)
class BatchStep:
    """One decoder step of a batch: its time, the rows it ran and the cache after it."""

    latency_ms: float
    rows: int  # pieces decoded by this step
    tokens: List[List[int]]  # per piece of the batch, its sampled tokens so far (ended at end-of-text)
    picked: List[int]  # per piece, the token this step gave it (-1: finished before)
    cache_tokens: int
    self_cache_bytes: int
    self_cache_reserved_bytes: int
    cross_cache_bytes: int
    prefill_tokens: int


def batch_task(model, options: DecodeOptions, language: str, fp16: bool) -> DecodingTask:
    """The DecodingTask a piece alone would get from decode_window: greedy, no prompt."""
    return DecodingTask(model, DecodingOptions(
        task=options.task, language=language, temperature=0.0,
        sample_len=options.max_tokens_per_window, without_timestamps=not options.timestamps,
        fp16=fp16))


class BatchDecode:
    """The pieces' encoder outputs `features` (each [1, n_audio_ctx, d]) decoded together;
    `steps()` yields a BatchStep per step and returns a WindowOutcome per piece."""

    def __init__(self, model, features: List[Tensor], tokenizer: Tokenizer, options: DecodeOptions,
                 language: str):
        self.tokenizer, self.n_ctx = tokenizer, model.dims.n_text_ctx
        device = features[0].device
        self.task = batch_task(model, options, language, features[0].dtype == torch.float16)
        self.filters = WindowFilters.of_task(self.task, model.dims.n_vocab, device)
        self.greedy = ArgmaxGreedy(0.0, tokenizer.eot)
        runner = decoder_runner(model, options.precision)
        with torch.inference_mode():  # the cross K/V are projected here, once per batch
            self.cache = BatchCache(runner, features)
        self.step_context = kernels.step_threads if runner.kind is not None else contextlib.nullcontext
        initial = list(self.task.initial_tokens)
        self.tokens = torch.tensor([initial] * len(features), device=device)
        self.sum_logprobs = torch.zeros(len(features), device=device)
        self.live = list(range(len(features)))  # the piece of each row
        self.sampled: List[List[int]] = [[] for _ in features]
        self.outcomes = [WindowOutcome(temperature=0.0) for _ in features]

    def steps(self) -> Generator[BatchStep, None, List[WindowOutcome]]:
        try:
            for i in range(self.task.sample_len):
                yield self._step(i)
                self._drop_finished()
                if not self.live or self.tokens.shape[-1] > self.n_ctx:
                    break
            for row in range(len(self.live)):  # out of steps or of context: as they are
                self._finish(row)
            return self.outcomes
        finally:
            self.cache.release()

    def _step(self, i: int) -> BatchStep:
        started = time.perf_counter()
        rows = len(self.live)
        with torch.inference_mode(), self.step_context():
            if i == 0:
                logits, sot_logits = self.cache.prefill(self.tokens, self.task.sot_index)
                self._no_speech(sot_logits)
            else:
                logits = self.cache.step(self.tokens[:, -1:])
            self.filters.apply(logits, self.tokens)
            self.tokens, _ = self.greedy.update(self.tokens, logits, self.sum_logprobs)
        latency_ms = (time.perf_counter() - started) * 1000
        picked = [-1] * len(self.sampled)
        for row, piece in enumerate(self.live):
            picked[piece] = int(self.tokens[row, -1])
            if picked[piece] != self.tokenizer.eot:
                self.sampled[piece].append(picked[piece])
        cache = self.cache
        return BatchStep(latency_ms=latency_ms, rows=rows, tokens=[list(s) for s in self.sampled],
                         picked=picked, cache_tokens=cache.length,
                         self_cache_bytes=cache.self_cache_bytes(),
                         self_cache_reserved_bytes=cache.self_cache_reserved_bytes(),
                         cross_cache_bytes=cache.cross_cache_bytes(),
                         prefill_tokens=len(self.task.initial_tokens))

    def _no_speech(self, sot_logits: Tensor) -> None:
        """Each piece's P(no speech) at start-of-transcript, as decode_window's first step."""
        no_speech = self.tokenizer.no_speech
        if no_speech is None:
            return
        for row, piece in enumerate(self.live):
            self.outcomes[piece].no_speech_prob = sot_logits[row].softmax(-1)[no_speech].item()

    def _drop_finished(self) -> None:
        """Rows whose piece just wrote end-of-text, or is stuck in a loop (repeats.is_looping:
        the row would hold the batch open to the window's last token for text transcribe's
        test fails): their outcome, and out of the batch."""
        ended = (self.tokens[:, -1] == self.tokenizer.eot).tolist()
        timestamp_begin = self.tokenizer.timestamp_begin
        for row, piece in enumerate(self.live):
            if not ended[row] and is_looping(self.sampled[piece], timestamp_begin):
                ended[row] = self.outcomes[piece].looping = True
        if not any(ended):
            return
        for row in range(len(self.live)):
            if ended[row]:
                self._finish(row)
        keep = [row for row in range(len(self.live)) if not ended[row]]
        self.live = [self.live[row] for row in keep]
        if keep:
            index = torch.tensor(keep, device=self.tokens.device)
            self.tokens, self.sum_logprobs = self.tokens[index], self.sum_logprobs[index]
            self.cache.drop_rows(keep)

    def _finish(self, row: int) -> None:
        """decode_window's _finish for one greedy row: its tokens up to end-of-text, and
        their average log probability (end-of-text's included, as openai-whisper's)."""
        outcome = self.outcomes[self.live[row]]
        tokens = until_eot(self.tokens[row, self.task.sample_begin:].tolist(), self.tokenizer)
        outcome.tokens = tokens
        outcome.avg_logprob = float(self.sum_logprobs[row]) / (len(tokens) + 1)
        outcome.peak_self_cache_bytes = self.cache.self_cache_bytes()
        outcome.peak_cross_cache_bytes = self.cache.cross_cache_bytes()
