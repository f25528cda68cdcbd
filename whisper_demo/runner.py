"""Whisper's text decoder as plain tensor functions, for the static and off cache modes.

This is openai-whisper's TextDecoder.forward written out so that keys and values go to
buffers the caller owns instead of through module hooks. A runner is built once per
(model, precision) and shared by every decode: it holds weights, never per-decode state.

Precision (precision.py says what each means on a model):
- "exact": the model's own weights.
- "int8": with the kernels, the vocabulary projection as an int8 weight-only matmul
  (kernels.PackedLinear "i8": one scale per vocabulary row, the activations stay float32).
  A decoder step is bound by reading weights from memory, and this one matrix is 80 MB of
  tiny.en's ~130 MB per step in float32; int8 reads a quarter of that. Not torch's dynamic
  int8 (fbgemm), which quantizes the activation too, with one scale per call: the final
  layer norm's outlier channels (|x| up to ~90 where most are ~6) set that scale, the other
  channels lose their precision, and the logits moved enough (mean |d log p| 0.026 against
  0.005 weight-only, teacher-forced on real speech) to flip near-ties; chained over a long
  file, each flip changes the next window's prompt, and the fast mode fell into loops that
  exact did not (docs/benchmarks.md, bench e2e). Without the kernels the fast mode projects
  in float32, as exact: torch has no int8 weight-only matmul that is faster at a step's rows.

A decoder step (1-8 rows) on a float32 CPU model goes through whisper_demo/kernels when
they build (a C++ compiler is there):
- exact: every decoder matrix is kept as float16, which holds Whisper's float16-valued
  weights exactly in half the bytes (kernels.PackedLinear multiplies in float32). Forwards
  of more rows (a prompt, a draft) keep PyTorch's float32 matmul on the model's own weights.
- int8: the 32 small linears of the blocks are int8 weight-only (one scale per output; with
  torch's dynamic quantization they cost more than they saved, the activation quantized on
  every call), and the cross-attention K/V are float16, read by kernels.attend.
In both, a step's self-attention (one row per beam) and cross-attention are kernels too,
gelu is fused into the MLP's first matmul, and a step's parallel work runs on the kernels'
own thread team with torch's operators on the calling thread alone (kernels.step_threads).
Query, key and value are one matmul per layer in every case. Without the kernels, PyTorch's
float32 matmuls (the layout of the tied vocabulary projection aside, see below), the same
tokens. What each measured is in docs/benchmarks.md.
"""

import math
import threading
import weakref
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from whisper.model import Whisper

from . import kernels
from .precision import Precision, precision_for

Linear = Callable[[Tensor], Tensor]


def linear(layer: nn.Linear) -> Linear:
    weight, bias = layer.weight, layer.bias
    return lambda x: F.linear(x, weight, bias)


# Rows up to which a forward's float32 linears use the packed kernels in the exact mode;
# more rows (a prompt, a draft) are a real matrix product, where MKL's float32 wins.
PACKED_MAX_ROWS = 8


def step_linear(weight: Tensor, bias: Optional[Tensor], kind: Optional[str],
                activation: Optional[str] = None) -> Linear:
    """x -> x @ weight.T + bias, then `activation` ("gelu"): packed (kind "f16" or "i8") for
    the few rows of a step, PyTorch's F.linear otherwise (kind None, or many rows in "f16")."""
    def unpacked(x: Tensor) -> Tensor:
        y = F.linear(x, weight, bias)
        return F.gelu(y) if activation == "gelu" else y

    if kind is None:
        return unpacked
    packed = kernels.PackedLinear(weight, bias, kind, activation)
    if kind == "i8":  # int8 always packed: a row gives the same numbers in any batch
        return packed

    def apply(x: Tensor) -> Tensor:
        if x.numel() <= PACKED_MAX_ROWS * x.shape[-1]:
            return packed(x)
        return unpacked(x)
    return apply


def layer_norm(module: nn.LayerNorm) -> Linear:
    """openai-whisper's LayerNorm (float32 inside, the input's dtype out) without the module
    call: 12 per step for tiny.en, a few microseconds each."""
    shape, weight, bias, eps = module.normalized_shape, module.weight, module.bias, module.eps

    def apply(x: Tensor) -> Tensor:
        if x.dtype == torch.float32:
            return F.layer_norm(x, shape, weight, bias, eps)
        return F.layer_norm(x.float(), shape, weight.float(), bias.float(), eps).to(x.dtype)
    return apply


class BlockWeights:
    """The maps of one decoder block, as functions of a tensor. `kind`: None (PyTorch's
    float32 matmuls), "f16" or "i8" (kernels.PackedLinear for the few rows of a step)."""

    def __init__(self, block, kind: Optional[str] = None):
        attn, cross = block.attn, block.cross_attn
        self.query, self.key, self.value, self.out = map(linear, (attn.query, attn.key, attn.value, attn.out))
        self.cross_query, self.cross_out = linear(cross.query), linear(cross.out)
        self.cross_key, self.cross_value = linear(cross.key), linear(cross.value)
        mlp_in, self.mlp_out = block.mlp[0], linear(block.mlp[2])
        # the MLP's hidden layer, gelu(x @ W.T + b): one kernel pass for a step's few rows
        self.mlp_hidden = step_linear(mlp_in.weight.detach(), mlp_in.bias.detach(), kind, "gelu")
        self.attn_ln, self.cross_attn_ln, self.mlp_ln = map(layer_norm, (block.attn_ln, block.cross_attn_ln, block.mlp_ln))
        # query, key and value as one matmul (key has no bias in Whisper: zeros there)
        qkv_weight = torch.cat([attn.query.weight, attn.key.weight, attn.value.weight]).detach()
        qkv_bias = torch.cat([attn.query.bias, torch.zeros_like(attn.query.bias), attn.value.bias]).detach()
        self.qkv = step_linear(qkv_weight, qkv_bias, kind)
        if kind is not None:
            self.out, self.cross_query, self.cross_out, self.mlp_out = (
                step_linear(layer.weight.detach(), layer.bias.detach(), kind)
                for layer in (attn.out, cross.query, cross.out, block.mlp[2]))


class DecoderRunner:
    def __init__(self, model: Whisper, precision: str = "exact"):
        self.precision: Precision = precision_for(model, precision)  # refuses what cannot run here
        decoder = model.decoder
        self.n_head = model.dims.n_text_head
        self.n_ctx = model.dims.n_text_ctx
        self.d_model = model.dims.n_text_state
        self.token_embedding = decoder.token_embedding.weight
        self.positional_embedding = decoder.positional_embedding
        # kernels.available() builds them on first use: asked only where they would run
        packed = self.precision.packs_steps and kernels.available()
        self.kind = self.precision.step_weights if packed else None
        self.blocks = [BlockWeights(block, self.kind) for block in decoder.blocks]
        self.ln = decoder.ln
        if self.kind is not None:
            # The tied embedding packed as the blocks are: float16 in exact (it holds the
            # weights exactly: 40 MB a step instead of 80, tiny.en), int8 weight-only in the
            # fast mode (20 MB; the activations stay float32, see the top of this file for
            # why not torch's dynamic int8). Any number of rows, each row's logits the same
            # whatever else is in the call, no float32 copy kept.
            self.project = kernels.PackedLinear(self.token_embedding, None, self.kind)
        else:
            # The output projection is tied to the embedding ([vocab, d]). `x @ W.T` walks W
            # against its layout; a contiguous [d, vocab] copy makes this, the largest matmul
            # of a step, about twice as fast on CPU. Same numbers, different memory layout.
            vocab_projection = self.token_embedding.detach().t().contiguous()
            self.project = lambda x: x @ vocab_projection.to(x.dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.token_embedding.dtype

    def _split_heads(self, x: Tensor) -> Tensor:
        """[batch, ctx, d] -> [batch, heads, ctx, d/heads]"""
        return x.view(*x.shape[:2], self.n_head, -1).transpose(1, 2)

    def _merge_heads(self, x: Tensor) -> Tensor:
        return x.transpose(1, 2).flatten(start_dim=2)

    def cross_keys_values(self, audio_features: Tensor) -> List[Tuple[Tensor, Tensor]]:
        """Project the encoder output once per window: per layer (K, V), head-split.
        In the int8 mode with the kernels they are kept as float16 (half the bytes a step
        reads), K in the transposed layout kernels.attend reads (still a [1, heads, 1500,
        head_dim] view). A real matrix product (1500 rows): torch's threads, also where a
        step's first forward calls it inside step_threads (one thread there: 4.9 against
        2.4 ms a projection, eight a window, 2 cores)."""
        with kernels.torch_threads():
            kv = [(self._split_heads(b.cross_key(audio_features)).contiguous(),
                   self._split_heads(b.cross_value(audio_features)).contiguous())
                  for b in self.blocks]
        if self.kind == "i8":
            kv = [(kernels.cross_key_layout(k, torch.float16), v.half()) for k, v in kv]
        elif self.kind == "f16":
            kv = [(kernels.cross_key_layout(k, torch.float32), v) for k, v in kv]
        return kv

    def forward(self, tokens: Tensor, offset: int, self_kv, cross_kv, logit_positions=None,
                cross_qk: Optional[List[Tensor]] = None, project: bool = True,
                self_weights: Optional[List[Tensor]] = None) -> Tensor:
        """Run `tokens` ([beams, n]) placed at positions offset..offset+n-1.

        self_kv: per layer (K, V) buffers [beams, heads, n_ctx or more, head_dim]; the new
        keys and values are written at those positions, and attention reads 0..offset+n-1.
        cross_kv: per layer (K, V) [1, heads, n_audio_ctx, head_dim], shared by all beams;
        or per layer ([K per row], [V per row]): each row reads its own audio (batched.py).
        cross_qk: a list to receive, per layer, the cross-attention logits (q.k / sqrt(d),
        float32, [1, heads, beams * n, n_audio_ctx]) that word timing reads. Asking for them
        computes that attention explicitly instead of with the fused kernel.
        self_weights: a list to receive, per layer, the self-attention weights (softmax,
        float32, [beams, heads, n, offset + n]) that the attention view shows; as with
        cross_qk, asking for them computes self-attention explicitly.
        Returns float32 logits [beams, n or len(logit_positions), vocab]; with project=False
        the final layer-normed states at those positions instead, for `logits(states)`.
        """
        # a prompt or a draft (many rows): real matrix products, on torch's threads
        with kernels.torch_threads(when=tokens.numel() > PACKED_MAX_ROWS):
            return self._forward(tokens, offset, self_kv, cross_kv, logit_positions, cross_qk, project,
                                 self_weights)

    def _forward(self, tokens, offset, self_kv, cross_kv, logit_positions, cross_qk, project,
                 self_weights) -> Tensor:
        n_beams, n_new = tokens.shape
        end = offset + n_new
        x = F.embedding(tokens, self.token_embedding) + self.positional_embedding[offset:end]
        x = x.to(self.dtype)
        # Several new tokens must not see each other's future. At offset 0 that is the fused
        # kernel's is_causal (the prompt prefill, as before: exact mode's numbers unchanged);
        # at an offset (a draft after cached tokens) is_causal would align the triangle to
        # the top-left, so new token i gets an explicit mask: every cached position, and the
        # new ones up to itself. A single new token sees everything: no mask.
        causal = n_new > 1 and offset == 0
        mask = None
        if n_new > 1 and offset > 0:
            mask = torch.ones(n_new, end, dtype=torch.bool, device=x.device).tril(diagonal=offset)
        step_kernels = self.kind is not None and n_new == 1  # one new token per beam

        for b, (k_cache, v_cache), (k_cross, v_cross) in zip(self.blocks, self_kv, cross_kv):
            # self-attention: write this step's K/V in place, attend over everything so far
            h = b.attn_ln(x)
            q, k, v = b.qkv(h).split(self.d_model, dim=-1)
            q = self._split_heads(q)
            k_cache[:, :, offset:end] = self._split_heads(k)
            v_cache[:, :, offset:end] = self._split_heads(v)
            if step_kernels and self_weights is None and kernels.can_self_attend(q, k_cache, v_cache):
                a = kernels.self_attend(q, k_cache, v_cache, end)  # a step: one row per beam
            elif self_weights is None:
                a = F.scaled_dot_product_attention(
                    q, k_cache[:, :, :end], v_cache[:, :, :end], attn_mask=mask, is_causal=causal)
            else:
                a = self._explicit_attention(q, k_cache[:, :, :end], v_cache[:, :, :end], offset,
                                             self_weights)
            x = x + b.out(self._merge_heads(a))

            # cross-attention: every beam reads the same audio K/V. Beams are stacked as
            # query rows of one batch, so the shared K/V are never copied per beam.
            h = b.cross_attn_ln(x)
            q = self._split_heads(b.cross_query(h).reshape(1, n_beams * n_new, -1))
            if isinstance(k_cross, list):  # a batch of pieces (batched.py): one audio per row
                a = self._cross_attend_rows(q, k_cross, v_cross, n_new, cross_qk)
            else:
                a = self._cross_attend(q, k_cross, v_cross, cross_qk)
            x = x + b.cross_out(self._merge_heads(a).reshape(n_beams, n_new, -1))

            x = x + b.mlp_out(b.mlp_hidden(b.mlp_ln(x)))

        if logit_positions is not None:
            x = x[:, logit_positions]
        return self.logits(self.ln(x)) if project else self.ln(x)

    def _cross_attend(self, q: Tensor, k_cross: Tensor, v_cross: Tensor,
                      cross_qk: Optional[List[Tensor]]) -> Tensor:
        """q [1, heads, rows, head_dim] against one audio's K/V [1, heads, n_audio_ctx, head_dim]."""
        if cross_qk is None and self.kind is not None and kernels.can_attend(q, k_cross, v_cross):
            return kernels.attend(q, k_cross, v_cross)  # float16 K/V (int8 mode), any rows
        if cross_qk is None:
            # K kept in the kernels' transposed layout (cross_key_layout) has no unit stride
            # on head_dim, which sends torch's CPU attention to its slow math path (21 ms a
            # layer for a 200-token prompt against 6): a contiguous copy of K costs ~0.3 ms
            # and is what openai-whisper's own decoder hands the same kernel.
            k_cross = k_cross.to(q.dtype)
            if k_cross.stride(-1) != 1:
                k_cross = k_cross.contiguous()
            return F.scaled_dot_product_attention(q, k_cross, v_cross.to(q.dtype))
        k_cross, v_cross = k_cross.to(q.dtype), v_cross.to(q.dtype)  # float16 in int8 mode
        qk = (q @ k_cross.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
        cross_qk.append(qk)
        return qk.softmax(dim=-1).to(v_cross.dtype) @ v_cross

    def _cross_attend_rows(self, q: Tensor, k_rows: List[Tensor], v_rows: List[Tensor], n_new: int,
                           cross_qk: Optional[List[Tensor]]) -> Tensor:
        """q [1, heads, rows * n_new, head_dim], row i (its n_new queries) against its own
        audio's K/V: one kernel call for a step's rows, where the kernels take them (each
        row's numbers are those of a call for it alone), else row by row."""
        if n_new == 1 and cross_qk is None and self.kind is not None and kernels.can_attend_rows(q, k_rows, v_rows):
            return kernels.attend_rows(q, k_rows, v_rows)
        return torch.cat([self._cross_attend(q[:, :, i * n_new:(i + 1) * n_new], k, v, cross_qk)
                          for i, (k, v) in enumerate(zip(k_rows, v_rows))], dim=2)

    @staticmethod
    def _explicit_attention(q: Tensor, k: Tensor, v: Tensor, offset: int, out: List[Tensor]) -> Tensor:
        """Self-attention as softmax(q.k / sqrt(d)) @ v, keeping the weights (appended to
        `out`): new token i (at offset + i) reads positions 0..offset + i."""
        qk = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
        n_new, end = q.shape[-2], k.shape[-2]
        if n_new > 1:
            visible = torch.ones(n_new, end, dtype=torch.bool, device=q.device).tril(diagonal=offset)
            qk = qk.masked_fill(~visible, float("-inf"))
        weights = qk.softmax(dim=-1)
        out.append(weights)
        return weights.to(v.dtype) @ v

    def logits(self, states: Tensor) -> Tensor:
        """Float32 logits of layer-normed states [..., d_model]: each row's logits depend on
        that row alone, so a draft's rows may be projected together."""
        return self.project(states).float()


_runners: "weakref.WeakKeyDictionary[Whisper, Dict[str, DecoderRunner]]" = weakref.WeakKeyDictionary()
_runners_lock = threading.Lock()


def decoder_runner(model: Whisper, precision: str = "exact") -> DecoderRunner:
    """One DecoderRunner per model and precision, made on first use and shared."""
    with _runners_lock:
        per_model = _runners.setdefault(model, {})
        if precision not in per_model:
            per_model[precision] = DecoderRunner(model, precision)
        return per_model[precision]
