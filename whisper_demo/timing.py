"""Word timestamps: where in the audio each word of a window was said.

The method is openai-whisper's (`whisper.timing`): the cross-attention of the model's
alignment heads, standardised and median-filtered, then dynamic time warping between text
tokens and audio frames; punctuation is merged into its word and over-long words at
sentence and segment edges are clipped the way `add_word_timestamps` does.

What differs is where the attention comes from. openai-whisper's `find_alignment` runs the
whole model again (encoder included) with forward hooks on the shared decoder modules. Here
one functional decoder pass (runner.py) reads the audio features the decode already has: no
second encoder pass, no hooks on a model other decodes are using, and no vocabulary
projection (the alignment needs no logits), and when the decode ran in exact precision
with the static cache, not even the audio's cross-attention K/V, which it projected
already. On tiny.en this costs one batched decoder forward plus the DTW: ~14 ms of a live
re-decode of a 3-12 s buffer (~31 ms when the K/V are projected again).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import List, Sequence

import numpy as np
import torch
from whisper.audio import HOP_LENGTH, SAMPLE_RATE
from whisper.timing import WordTiming, dtw, median_filter, merge_punctuations
from whisper.tokenizer import Tokenizer

from .runner import decoder_runner

TOKENS_PER_SECOND = SAMPLE_RATE / (2 * HOP_LENGTH)  # 50 audio positions per second
MEDIAN_FILTER_WIDTH = 7  # openai-whisper's default
PREPEND_PUNCTUATION = "\"'“¿([{-"
APPEND_PUNCTUATION = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END_MARKS = ".。!！?？"


_compiled = threading.Event()
_compile_lock = threading.Lock()


def warm_up() -> None:
    """Compile openai-whisper's DTW (numba) now. The first call in a process compiles it,
    which took 3-9 s here: a live session must not pay that on its first decode, so the
    app and the live worker call this before they need it. Later calls return at once."""
    if _compiled.is_set():
        return
    with _compile_lock:
        if not _compiled.is_set():
            dtw(torch.zeros(2, 3, dtype=torch.float64))
            _compiled.set()


@dataclass(frozen=True)
class Word:
    """One word and when it was said, in seconds from the start of the audio."""

    text: str  # as Whisper wrote it, with its leading space and punctuation
    start: float
    end: float
    # the mean probability of its tokens (openai-whisper's word "probability"); computed
    # only when asked for (add_word_timestamps(probabilities=True)): nan otherwise
    probability: float = float("nan")


def align_words(model, tokenizer: Tokenizer, audio_features: torch.Tensor,
                text_tokens: Sequence[int], num_frames: int, cross_kv=None,
                probabilities: bool = False, probabilities_from: int = 0) -> List[WordTiming]:
    """openai-whisper's `find_alignment`, over audio features already computed. Times are
    in seconds from the start of the window; num_frames is the window's mel frames of
    real audio (the padding after it is not searched). cross_kv: the exact runner's
    cross_keys_values of these features, if the decode already projected them.
    probabilities: also each word's probability (the vocabulary projection at every text
    position, which the times alone do not need); nan otherwise, and for the tokens before
    `probabilities_from` (a given prefix)."""
    if not text_tokens:
        return []
    runner = decoder_runner(model, "exact")
    tokens = [*tokenizer.sot_sequence, tokenizer.no_timestamps, *text_tokens, tokenizer.eot]
    device = audio_features.device
    with torch.inference_mode():
        if cross_kv is None:
            cross_kv = runner.cross_keys_values(audio_features[:1])
        head_dim = runner.d_model // runner.n_head
        shape = (1, runner.n_head, len(tokens), head_dim)
        scratch = [(torch.empty(shape, dtype=runner.dtype, device=device),
                    torch.empty(shape, dtype=runner.dtype, device=device)) for _ in runner.blocks]
        cross_qk: List[torch.Tensor] = []
        first = len(tokenizer.sot_sequence)  # the no-timestamps token predicts the first word
        skip = min(probabilities_from, len(text_tokens))
        positions = list(range(first + skip, first + len(text_tokens))) if probabilities else []
        logits = runner.forward(torch.tensor([tokens], device=device), 0, scratch, cross_kv,
                                logit_positions=positions, cross_qk=cross_qk)
        token_probs = [float("nan")] * len(text_tokens)
        if positions:
            probs = logits[0, :, : tokenizer.eot].float().softmax(dim=-1)
            chosen = torch.tensor(list(text_tokens[skip:]))
            token_probs[skip:] = probs[torch.arange(len(chosen)), chosen].tolist()
        layers, heads = model.alignment_heads.indices()
        weights = torch.stack([cross_qk[layer][0, head] for layer, head in zip(layers.tolist(), heads.tolist())])
        weights = weights[:, :, : num_frames // 2].softmax(dim=-1)
        std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
        weights = median_filter((weights - mean) / std, MEDIAN_FILTER_WIDTH)
        matrix = weights.mean(dim=0)[len(tokenizer.sot_sequence): -1].cpu()
    text_indices, time_indices = dtw(-matrix.double())

    words, word_tokens = tokenizer.split_to_word_tokens(list(text_tokens) + [tokenizer.eot])
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / TOKENS_PER_SECOND
    starts, ends = jump_times[boundaries[:-1]], jump_times[boundaries[1:]]
    word_probs = [float(np.mean(token_probs[i:j])) for i, j in zip(boundaries[:-1], boundaries[1:])]
    return [WordTiming(word, toks, float(start), float(end), probability)
            for word, toks, start, end, probability in zip(words, word_tokens, starts, ends, word_probs)]


def add_word_timestamps(segments, model, tokenizer: Tokenizer, audio_features: torch.Tensor,
                        num_frames: int, time_offset: float, last_speech_end: float,
                        cross_kv=None, probabilities: bool = False, probabilities_from: int = 0) -> float:
    """Give each of one window's segments its `words` (Word, in stream seconds), following
    openai-whisper's `add_word_timestamps`. Returns the end of the last speech, which the
    next window's call takes as `last_speech_end`. cross_kv, probabilities: see align_words."""
    per_segment = [[t for t in s.tokens if t < tokenizer.eot] for s in segments]
    alignment = align_words(model, tokenizer, audio_features,
                            list(itertools.chain.from_iterable(per_segment)), num_frames, cross_kv,
                            probabilities, probabilities_from)
    if not alignment:
        return last_speech_end
    durations = np.array([t.end - t.start for t in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    longest = median * 2

    # A word next to a sentence end may swallow the pause after it: clip it.
    for i in range(1, len(alignment)):
        if alignment[i].end - alignment[i].start > longest:
            if alignment[i].word in SENTENCE_END_MARKS:
                alignment[i].end = alignment[i].start + longest
            elif alignment[i - 1].word in SENTENCE_END_MARKS:
                alignment[i].start = alignment[i].end - longest
    merge_punctuations(alignment, PREPEND_PUNCTUATION, APPEND_PUNCTUATION)

    index = 0
    for segment, tokens in zip(segments, per_segment):
        words, taken = [], 0
        while index < len(alignment) and taken < len(tokens):
            timing = alignment[index]
            if timing.word:  # rounded first, as openai-whisper does, so the clipping compares alike
                words.append([timing.word, round(time_offset + timing.start, 2),
                              round(time_offset + timing.end, 2), timing.probability])
            taken += len(timing.tokens)
            index += 1
        if words:
            _clip_segment_edges(words, segment, median, longest, last_speech_end)
            last_speech_end = segment.end
        segment.words = [Word(text, start, end, probability) for text, start, end, probability in words]
    return last_speech_end


def _clip_segment_edges(words, segment, median: float, longest: float, last_speech_end: float) -> None:
    """openai-whisper's clipping of the first word after a pause and of segment edges that
    the DTW stretched into silence; the segment's own timestamps win where they are tighter."""
    first, last = words[0], words[-1]
    if first[2] - last_speech_end > median * 4 and (
            first[2] - first[1] > longest
            or (len(words) > 1 and words[1][2] - first[1] > longest * 2)):
        if len(words) > 1 and words[1][2] - words[1][1] > longest:
            boundary = max(words[1][2] / 2, words[1][2] - longest)
            first[2] = words[1][1] = boundary
        first[1] = max(0.0, first[2] - longest)
    if segment.start < first[2] and segment.start - 0.5 > first[1]:
        first[1] = max(0.0, min(first[2] - median, segment.start))
    else:
        segment.start = first[1]
    if segment.end > last[1] and segment.end + 0.5 < last[2]:
        last[2] = max(last[1] + median, segment.end)
    else:
        segment.end = last[2]
