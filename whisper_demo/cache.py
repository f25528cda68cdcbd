"""KV cache strategies for Whisper's text decoder.

Each strategy implements openai-whisper's `Inference` interface (logits, rearrange_kv_cache,
cleanup_caching), so its BeamSearchDecoder and logit filters drive ours unchanged:

- NoCache:      every step runs the decoder over the whole token sequence and projects the
                audio features to cross-attention keys/values again. Cost grows per step.
- HooksCache:   openai-whisper's own PyTorchInference: forward hooks on the key/value
                Linear layers torch.cat each new row onto the cache (a full copy per step).
                Each decode installs them on its own copy of the decoder's modules, which
                shares the model's weights: nothing is ever installed on the shared model,
                so hooks decodes need no lock and never wait for one another.
- StaticCache:  ours. Keys/values for n_text_ctx positions are allocated once per decode and
                written in place; cross-attention K/V are computed once per window and shared
                by all beams. Per-step cost stays flat.

StaticCache and NoCache run the decoder through runner.DecoderRunner, a functional
forward over the model's own weights. It calls none of the decoder's key/value modules, so
all state of a static or off decode is local to it.
"""

import contextlib
import copy
import itertools

import torch
from torch import Tensor
from whisper.decoding import Inference, PyTorchInference
from whisper.model import Whisper

from . import kernels
from .runner import decoder_runner

def self_cache_bytes(model: Whisper, tokens: int, beams: int, element_size: int) -> int:
    """2 (K and V) x layers x d_model x tokens x beams x bytes per element."""
    dims = model.dims
    return 2 * dims.n_text_layer * dims.n_text_state * tokens * beams * element_size


def cross_cache_bytes(model: Whisper, element_size: int) -> int:
    """2 x layers x n_audio_ctx (1500) x d_model x bytes per element, one audio."""
    dims = model.dims
    return 2 * dims.n_text_layer * dims.n_audio_ctx * dims.n_text_state * element_size


class CacheStrategy(Inference):
    """openai-whisper's Inference plus the numbers our live panel shows."""

    mode: str

    def __init__(self, model: Whisper, initial_token_length: int):
        self.model = model
        self.initial_token_length = initial_token_length
        self.element_size = model.decoder.token_embedding.weight.element_size()
        self.steps = 0
        # DecodeOptions.attention: keep the attention weights of each forward (captured)
        self.capture_attention = False
        self.captured = None  # (self-attention weights per layer, cross q.k per layer)
        self.beam_sources = None  # the source rows of the last beam reorder

    def attention_rows(self, n_beams: int):
        """The last forward's attention at its last position, per beam: self-attention
        [layers, beams, positions] (mean over heads) and the alignment heads' cross-attention
        [beams, n_audio_ctx] (softmax, mean over those heads), as float32 CPU tensors."""
        self_weights, cross_qk = self.captured
        rows = torch.stack([w[:, :, -1].mean(dim=1) for w in self_weights]).float().cpu()
        layers, heads = self.model.alignment_heads.indices()
        cross = []
        for layer, head in zip(layers.tolist(), heads.tolist()):
            qk = cross_qk[layer][0, head]  # [beams * n_new, frames]
            n_new = qk.shape[0] // n_beams
            cross.append(qk[n_new - 1 :: n_new].softmax(dim=-1))
        return rows, torch.stack(cross).mean(dim=0).float().cpu()

    def _capture_lists(self):
        """Lists for runner.forward to fill when the attention is wanted, else (None, None)."""
        if not self.capture_attention:
            return None, None
        self.captured = ([], [])
        return self.captured

    def step_logits(self, tokens: Tensor, audio_features: Tensor, sot_index: int):
        """One decoder step: (logits of the last position, logits at the start-of-transcript
        token on the first step, else None). Only those rows go through the vocabulary
        projection, the costliest matmul of a step."""
        first = self.steps == 0
        self.steps += 1
        last = tokens.shape[1] - 1
        logits = self.logits_at(tokens, audio_features, [sot_index, last] if first else [last])
        return logits[:, -1], (logits[:, 0] if first else None)

    def draft_logits(self, tokens: Tensor, audio_features: Tensor, sot_index: int, n_draft: int):
        """A step that also checks a draft: `tokens` end with `n_draft` draft tokens, which
        run with the step's own new token(s) in one forward. Returns (rows, logits at the
        start-of-transcript token on the first step, else None): rows(j) [beams, vocab] is
        what the j-th step from here would see if the draft's first j tokens are right, for
        j in 0..n_draft. The caller truncate()s the cache where the draft turns out wrong."""
        first = self.steps == 0
        self.steps += 1
        n = tokens.shape[1]
        rows = list(range(n - n_draft - 1, n))
        logits = self.logits_at(tokens, audio_features, [sot_index, *rows] if first else rows)
        logits, sot_logits = (logits[:, 1:], logits[:, 0]) if first else (logits, None)
        return (lambda j: logits[:, j]), sot_logits

    def logits_at(self, tokens: Tensor, audio_features: Tensor, positions) -> Tensor:
        raise NotImplementedError

    def step_context(self):
        """Entered around each decoder step (its forward, logit filters and token choice)."""
        return contextlib.nullcontext()

    def exact_cross_kv(self):
        """The cross-attention K/V this decode projected from the audio, if they are what
        word timing (timing.align_words, the exact runner) would project itself; else None."""
        return None

    def cache_tokens(self) -> int:
        return 0

    def self_cache_bytes(self) -> int:
        return 0

    def self_cache_reserved_bytes(self) -> int:
        return self.self_cache_bytes()

    def cross_cache_bytes(self) -> int:
        return 0


class WindowMemo:
    """What every decoding attempt at one window computes alike, kept for the next attempt.

    transcribe's fallback decodes a failing window again at rising temperatures (up to six
    attempts), each with the same audio and the same initial tokens (the start of
    transcript after the same prompt). Each attempt projected the audio to cross-attention
    K/V (~45 ms, tiny.en, 2 cores) and ran the prompt's first forward (~100 ms for 200
    tokens) again, to the same numbers: a tenth of a 10-minute file's time went there. A
    StaticCache given a memo takes both from it instead: the K/V tensors themselves (read,
    never written), and a copy of the first forward's keys, values and logits when that
    forward's tokens are the same (same beams too: a batch of other rows is another matrix
    product). Anything else is computed as before."""

    def __init__(self):
        self.audio = None  # what the K/V were projected from: (runner, features' storage, shape)
        self.cross_kv = None
        self.prefill = None  # (key, keys and values per layer, logits) of the first forward

    def cross_kv_for(self, runner, audio_features: Tensor, project):
        audio = (id(runner), audio_features.data_ptr(), tuple(audio_features.shape))
        if self.audio != audio:
            self.audio, self.cross_kv, self.prefill = audio, project(audio_features), None
        return self.cross_kv


class StaticCache(CacheStrategy):
    mode = "static"

    def __init__(self, model: Whisper, initial_token_length: int, n_beams: int, precision: str):
        super().__init__(model, initial_token_length)
        self.runner = decoder_runner(model, precision)
        self.n_beams = n_beams
        self.length = 0  # positions filled, per beam
        self.self_kv = None  # allocated at the first call, on the audio's device
        self.cross_kv = None
        self.memo = None  # a WindowMemo shared by the attempts at one window, if given

    def _allocate(self, audio_features: Tensor):
        r = self.runner
        shape = (self.n_beams, r.n_head, r.n_ctx, r.d_model // r.n_head)
        like = dict(dtype=r.dtype, device=audio_features.device)
        self.self_kv = [(torch.empty(shape, **like), torch.empty(shape, **like)) for _ in r.blocks]
        features = audio_features[:1]
        self.cross_kv = (self.memo.cross_kv_for(r, features, r.cross_keys_values) if self.memo
                         else r.cross_keys_values(features))
        # the sizes a step reports, measured on the buffers once per window (they are fixed
        # but for the positions filled, which each add the same bytes)
        tensors = [t for kv in self.self_kv for t in kv]
        self._position_bytes = sum(t[:, :, :1].nbytes for t in tensors)
        self._reserved_bytes = sum(t.untyped_storage().nbytes() for t in tensors)
        self._cross_bytes = sum(k.nbytes + v.nbytes for k, v in self.cross_kv)

    def logits(self, tokens: Tensor, audio_features: Tensor) -> Tensor:
        return self.logits_at(tokens, audio_features, range(self.length, tokens.shape[1]))

    def logits_at(self, tokens: Tensor, audio_features: Tensor, positions) -> Tensor:
        if self.self_kv is None:
            self._allocate(audio_features)
        offset = self.length
        rows = [p - offset for p in positions]  # rows among the tokens new to the cache
        if offset == 0 and self.memo is not None and not self.capture_attention:
            logits = self._first_forward_once(tokens, rows)
        else:
            self_weights, cross_qk = self._capture_lists()
            logits = self.runner.forward(tokens[:, offset:], offset, self.self_kv, self.cross_kv, rows,
                                         self_weights=self_weights, cross_qk=cross_qk)
        self.length = tokens.shape[1]
        return logits

    def _first_forward_once(self, tokens: Tensor, rows) -> Tensor:
        """The first forward of a decode, or its copy from an earlier attempt at the same
        window over the same tokens (WindowMemo): the keys and values of its positions
        written into this decode's buffers, its logits returned (a copy: the logit filters
        write into them)."""
        n = tokens.shape[1]
        key = (tuple(tokens.shape), tuple(tokens.flatten().tolist()), tuple(rows))
        kept = self.memo.prefill
        if kept is None or kept[0] != key:
            logits = self.runner.forward(tokens, 0, self.self_kv, self.cross_kv, rows)
            kept = (key, [(k[:, :, :n].clone(), v[:, :, :n].clone()) for k, v in self.self_kv],
                    logits.clone())
            self.memo.prefill = kept
            return logits
        for (k, v), (k_kept, v_kept) in zip(self.self_kv, kept[1]):
            k[:, :, :n] = k_kept
            v[:, :, :n] = v_kept
        return kept[2].clone()

    def step_context(self):
        # with the kernels, torch's operators run on one thread and the kernels' team on the
        # rest (kernels.step_threads says why); PyTorch's float32 path keeps torch's threads
        return kernels.step_threads() if self.runner.kind is not None else contextlib.nullcontext()

    def truncate(self, length: int):
        """Keep only the first `length` positions, e.g. after a draft was rejected there.
        Nothing is cleared: the next forward writes its positions from `length` on, and
        attention never reads past the positions it has written."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate {self.length} cached positions to {length}")
        self.length = length

    def rearrange_kv_cache(self, source_indices):
        self.beam_sources = list(source_indices)
        if source_indices != list(range(len(source_indices))):
            index = torch.tensor(source_indices, device=self.self_kv[0][0].device)
            for k, v in self.self_kv:
                k[:, :, : self.length] = k[index, :, : self.length]
                v[:, :, : self.length] = v[index, :, : self.length]

    def exact_cross_kv(self):
        return self.cross_kv if self.runner.precision.exact_cross_kv else None

    def cleanup_caching(self):
        self.self_kv = None
        self.cross_kv = None
        self.length = 0
        self.steps = 0

    def cache_tokens(self) -> int:
        return self.length

    def self_cache_bytes(self) -> int:
        """Measured on the buffers: the bytes of the positions filled so far (the bytes of
        one position of each K and V, measured at allocation, times `length`), not the
        README's formula (docs/kv-cache.md), which the tests and the panel compare this with."""
        if self.self_kv is None:
            return 0
        return self._position_bytes * self.length

    def self_cache_reserved_bytes(self) -> int:
        """The memory behind the buffers (their storages, which a view could hide)."""
        return 0 if self.self_kv is None else self._reserved_bytes

    def cross_cache_bytes(self) -> int:
        return 0 if self.cross_kv is None else self._cross_bytes


class NoCache(CacheStrategy):
    """Recompute everything at every step: what decoding costs without a KV cache."""

    mode = "off"

    def __init__(self, model: Whisper, initial_token_length: int, precision: str):
        super().__init__(model, initial_token_length)
        self.runner = decoder_runner(model, precision)

    def logits(self, tokens: Tensor, audio_features: Tensor) -> Tensor:
        return self.logits_at(tokens, audio_features, range(tokens.shape[1]))

    def logits_at(self, tokens: Tensor, audio_features: Tensor, positions) -> Tensor:
        return recompute(self.runner, tokens, audio_features, list(positions), *self._capture_lists())

    def rearrange_kv_cache(self, source_indices):
        self.beam_sources = list(source_indices)  # nothing cached, nothing to reorder

    def cleanup_caching(self):
        self.steps = 0


class HooksCache(CacheStrategy, PyTorchInference):
    """openai-whisper's PyTorchInference, unchanged, run on this decode's own decoder
    modules (see with_own_decoder_modules), plus the panel's numbers."""

    mode = "hooks"

    def __init__(self, model: Whisper, initial_token_length: int):
        CacheStrategy.__init__(self, model, initial_token_length)
        # From here on self.model is the private view: its install_kv_cache_hooks and
        # decoder are this decode's alone.
        PyTorchInference.__init__(self, with_own_decoder_modules(model), initial_token_length)
        self.self_modules = set(self.kv_modules)

    def logits_at(self, tokens: Tensor, audio_features: Tensor, positions) -> Tensor:
        # openai-whisper's decoder projects every position it runs (all of the initial
        # tokens on the first call, then just the new one); pick the rows asked for.
        logits = self.logits(tokens, audio_features)
        if self.capture_attention:
            # openai-whisper's modules use the fused kernel and keep no weights: get them the
            # slow way, as the off mode does (a second decoder pass over all tokens).
            recompute(decoder_runner(self.model), tokens, audio_features, [], *self._capture_lists())
        first_position = tokens.shape[1] - logits.shape[1]
        return logits[:, [p - first_position for p in positions]]

    def rearrange_kv_cache(self, source_indices):
        self.beam_sources = list(source_indices)
        PyTorchInference.rearrange_kv_cache(self, source_indices)

    def cleanup_caching(self):
        self.steps = 0
        PyTorchInference.cleanup_caching(self)

    def cache_tokens(self) -> int:
        key = self.model.decoder.blocks[0].attn.key
        cached = self.kv_cache.get(key)
        return 0 if cached is None else cached.shape[1]

    def self_cache_bytes(self) -> int:
        return sum(t.nbytes for m, t in self.kv_cache.items() if m in self.self_modules)

    def cross_cache_bytes(self) -> int:
        return sum(t.nbytes for m, t in self.kv_cache.items() if m not in self.self_modules)


def recompute(runner, tokens: Tensor, audio_features: Tensor, positions, self_weights=None,
              cross_qk=None) -> Tensor:
    """The decoder over all of `tokens` from scratch: scratch K/V sized to this call only
    and dropped after it, cross-attention K/V projected again. Nothing is kept."""
    shape = (tokens.shape[0], runner.n_head, tokens.shape[1], runner.d_model // runner.n_head)
    like = dict(dtype=runner.dtype, device=audio_features.device)
    scratch = [(torch.empty(shape, **like), torch.empty(shape, **like)) for _ in runner.blocks]
    cross = runner.cross_keys_values(audio_features[:1])
    return runner.forward(tokens, 0, scratch, cross, logit_positions=positions,
                          self_weights=self_weights, cross_qk=cross_qk)


def make_cache(mode: str, model: Whisper, initial_token_length: int, n_beams: int,
               precision: str = "exact") -> CacheStrategy:
    if mode == "static":
        return StaticCache(model, initial_token_length, n_beams, precision)
    if mode == "hooks":
        return HooksCache(model, initial_token_length)  # openai-whisper's modules as they are
    if mode == "off":
        return NoCache(model, initial_token_length, precision)
    raise ValueError(f"unknown cache mode {mode!r}")


def with_own_decoder_modules(model: Whisper) -> Whisper:
    """A view of `model` whose decoder is a fresh tree of modules over the same parameters
    and buffers (nothing is copied but Python objects).

    openai-whisper's hooks mode registers forward hooks on the decoder's key/value Linear
    layers; on the shared model they would fire in every other decode and in language
    detection, which needed a process-wide lock held from a decode's first step until its
    generator was closed, so a slow or abandoned reader stalled everyone. On a private copy
    the hooks see only this decode. Measured: 4 ms (tiny.en) and 6 ms (base) per window on
    a 2-core CPU, once per window and outside the timed steps (a hooks step is ~20 ms).
    """
    shared = {id(t): t for t in itertools.chain(model.decoder.parameters(), model.decoder.buffers())}
    decoder = copy.deepcopy(model.decoder, memo=shared)
    view = copy.copy(model)  # shallow: the encoder, dims and alignment heads are the model's
    view.__dict__["_modules"] = {**model._modules, "decoder": decoder}
    return view


def hook_count(model: Whisper) -> int:
    """Forward hooks installed anywhere in the shared model: always 0, as no decode installs
    any there (the hooks mode uses its own modules); the server log reports it as a check."""
    return sum(len(m._forward_hooks) for m in model.modules())
