"""The fast mode's encoder: Whisper's audio encoder in bfloat16, on CPUs that multiply it natively.

The encoder is most of a short decode (a live re-decode: ~75 %), and in float32 half of it
is attention over 1500 positions, half the block linears. Cores with AVX512_BF16 (or AMX)
multiply bfloat16 at twice float32's rate and read half the bytes, so here:

- the weights are cast to bfloat16 once per model (not per op, as torch.autocast would),
  and the query, key and value projections are concatenated into one;
- the block linears and the convolutions run in bfloat16 (oneDNN), the MLP's GELU fused
  into its first linear where PyTorch offers that operator;
- attention, by what the CPU has (`attention_route`): on AMX cores PyTorch's fused attention
  (SDPA), whose bfloat16 path multiplies on AMX tiles (one tiny.en layer over 1500
  positions: 7 ms against the kernel's 23, as close to float32); with AVX512_BF16 alone
  the compiled kernel (bf16_attention.py: scores, a float32 softmax and the weighted sum of
  values for a block of 32 queries while they sit in the core's cache), where SDPA had
  measured as slow in bfloat16 as in float32; without the kernel (no compiler) the same
  attention written out in PyTorch, 256 queries at a time;
- layer norms are computed in float32 (their statistics over 384-1280 values lose most to
  rounding), the residual stream is kept in float32 (each block adds a small update to it),
  and the output features are float32, as the decoder expects.

The features differ from float32's by about 1-2 % (relative norm; tests/test_fast_encoder.py
holds them to a stated tolerance on real speech). Where the CPU lacks the instructions,
bfloat16 would be emulated and slower than float32, so `bf16_supported` says no and the
fast mode keeps the float32 encoder.
"""

from functools import lru_cache
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from . import bf16_attention, kernels
from .per_model import PerModel

PACKED_FOR_ROWS = 1500  # oneDNN picks its weight layout for this many input rows (a window); any count runs
QUERY_BLOCK = 256  # queries per attention block: 6-20 heads x 256 x 1500 scores in cache
# CPU flags (Linux /proc/cpuinfo) for native bfloat16 dot products
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
AMX_FLAG = "amx_bf16"  # bfloat16 tile multiplies, which PyTorch's fused attention uses
# weights kept in float32: the layer norms and the positional embedding (added in float32)
FLOAT32_MODULES = ("attn_ln", "mlp_ln", "ln_post", "positional_embedding")


def _module_of(weight_name: str) -> str:
    """"blocks.0.attn_ln.weight" -> "attn_ln"; "positional_embedding" -> itself."""
    parts = weight_name.split(".")
    return parts[-2] if len(parts) > 1 else parts[0]


@lru_cache(maxsize=1)
def bf16_supported() -> bool:
    """Whether this CPU multiplies bfloat16 natively and PyTorch can use it (oneDNN)."""
    if not torch.backends.mkldnn.is_available():
        return False
    return any(flag in _cpu_flags() for flag in BF16_FLAGS)  # none known (not Linux): float32


@lru_cache(maxsize=1)
def _cpu_flags() -> frozenset:
    """kernels.cpu_flags() as a set, read once: attention_route asks for each layer."""
    return frozenset(kernels.cpu_flags().split())


def attention_route() -> str:
    """How the encoder's self-attention runs here: "sdpa" (PyTorch's fused attention, on AMX
    cores), "kernel" (bf16_attention.py, AVX512_BF16 without AMX) or "blocks" (written out in
    PyTorch: no compiled kernel). SDPA's numbers for a window do not depend on the other
    windows of a batch nor on the thread count (tests/test_bf16_attention.py), as the
    kernel's do not: a batched piece is encoded as it would be alone."""
    if AMX_FLAG in _cpu_flags():
        return "sdpa"
    return "kernel" if bf16_attention.available() else "blocks"


@lru_cache(maxsize=1)
def _fused_linear_supported() -> bool:
    """Whether PyTorch has oneDNN's linear with a fused activation (an internal operator that
    torch.compile uses on CPU): it measured 0.8x of F.linear and a separate GELU here, and
    applies the GELU before rounding to bfloat16."""
    try:
        x, weight = torch.ones(2, 32, dtype=torch.bfloat16), torch.ones(16, 32, dtype=torch.bfloat16)
        y = torch.ops.mkldnn._linear_pointwise(x, weight, None, "gelu", [], "none")
        return bool(torch.allclose(y.float(), F.gelu(F.linear(x, weight)).float()))
    except (AttributeError, RuntimeError):
        return False


def _packed(weight: Tensor) -> Optional[Tensor]:
    """A linear's bfloat16 weight in oneDNN's blocked layout (what its linear would reorder it
    to on every call: 0.85-0.94x the time of an unpacked call here, the same numbers), or
    None where this PyTorch cannot."""
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_FOR_ROWS)
    except (AttributeError, RuntimeError):
        return None


def fused_attention(qkv: Tensor, n_head: int) -> Tensor:
    """PyTorch's fused attention on one q/k/v projection's heads (strided views, no copies
    in), the heads written back side by side for the output projection."""
    batch, positions, width = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
    q, k, v = (part.view(batch, positions, n_head, -1).transpose(1, 2) for part in qkv.split(width, dim=-1))
    out = F.scaled_dot_product_attention(q, k, v)
    return out.transpose(1, 2).reshape(batch, positions, width)


class Bf16Encoder:
    """A model's encoder weights in bfloat16 (made once, shared by every decode) and its
    forward pass. Holds weights only, no per-call state, so any thread may call it."""

    def __init__(self, encoder):
        state = encoder.state_dict()
        kept = {name for name in state if _module_of(name) in FLOAT32_MODULES}
        self.weights: Dict[str, Tensor] = {
            name: value.detach().float() if name in kept else value.detach().to(torch.bfloat16)
            for name, value in state.items()}
        self.n_layers = len(encoder.blocks)
        self.n_head = encoder.blocks[0].attn.n_head
        for layer in range(self.n_layers):  # one projection for queries, keys and values
            self._fuse_projections(f"blocks.{layer}.attn.")
        # the linears' weights in oneDNN's own layout instead, packed once rather than per call
        self.packed: Dict[str, Tensor] = {}
        if _fused_linear_supported():
            for name, weight in list(self.weights.items()):
                packed = _packed(weight) if weight.dim() == 2 and weight.dtype == torch.bfloat16 else None
                if packed is not None:
                    self.packed[name] = packed
                    del self.weights[name]

    def _fuse_projections(self, prefix: str) -> None:
        w = self.weights
        parts = [w.pop(prefix + part + ".weight") for part in ("query", "key", "value")]
        w[prefix + "qkv.weight"] = torch.cat(parts)
        key_bias = torch.zeros_like(w[prefix + "query.bias"])  # Whisper's key projection has none
        w[prefix + "qkv.bias"] = torch.cat([w.pop(prefix + "query.bias"), key_bias, w.pop(prefix + "value.bias")])

    def __call__(self, mel: Tensor) -> Tensor:
        """Features [batch, frames // 2, d] (float32) for a mel [batch, n_mels, frames]."""
        w = self.weights
        with torch.inference_mode():
            x = F.gelu(F.conv1d(mel.to(torch.bfloat16), w["conv1.weight"], w["conv1.bias"], padding=1))
            x = F.gelu(F.conv1d(x, w["conv2.weight"], w["conv2.bias"], stride=2, padding=1))
            # contiguous: the permuted layout would otherwise carry through every residual add,
            # and each layer norm and projection would copy it first
            x = x.permute(0, 2, 1).float().contiguous() + w["positional_embedding"][: x.shape[2]]
            for layer in range(self.n_layers):
                block = f"blocks.{layer}."
                x += self._attention(self._norm(x, block + "attn_ln"), block + "attn.")  # in place: no new 2-5 MB
                hidden = self._linear(self._norm(x, block + "mlp_ln"), block + "mlp.0", "gelu")
                x += self._linear(hidden, block + "mlp.2")
            return self._norm(x, "ln_post", out=torch.float32)

    def _norm(self, x: Tensor, name: str, out=torch.bfloat16) -> Tensor:
        w = self.weights
        return F.layer_norm(x, x.shape[-1:], w[name + ".weight"], w[name + ".bias"]).to(out)

    def _linear(self, x: Tensor, name: str, activation: str = "none") -> Tensor:
        bias = self.weights.get(name + ".bias")
        if name + ".weight" in self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed[name + ".weight"], bias, activation, [], "none")
        weight = self.weights[name + ".weight"]
        if _fused_linear_supported():
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, activation, [], "none")
        y = F.linear(x, weight, bias)
        return F.gelu(y) if activation == "gelu" else y

    def _attention(self, x: Tensor, prefix: str) -> Tensor:
        qkv = self._linear(x, prefix + "qkv")
        route = attention_route()
        if route == "sdpa":
            heads = fused_attention(qkv, self.n_head)
        elif route == "kernel" and qkv.shape[-1] == 3 * self.n_head * bf16_attention.HEAD_DIM:
            heads = bf16_attention.attention(qkv, self.n_head)
        else:
            heads = self._attention_in_blocks(qkv)
        return self._linear(heads, prefix + "out")

    def _attention_in_blocks(self, qkv: Tensor) -> Tensor:
        """The same attention in PyTorch (no compiler, another head width), a block of queries
        at a time so that one block's scores stay in cache."""
        batch, positions, width = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
        q, k, v = (part.view(batch, positions, self.n_head, -1).transpose(1, 2).contiguous()
                   for part in qkv.split(width, dim=-1))
        q = q * q.shape[-1] ** -0.5  # openai-whisper scales q and k by d**-0.25 each: the same product
        keys = k.transpose(-1, -2).contiguous()
        out = torch.empty_like(q)
        for start in range(0, positions, QUERY_BLOCK):
            scores = q[:, :, start:start + QUERY_BLOCK] @ keys
            torch.matmul(torch.softmax(scores, dim=-1), v, out=out[:, :, start:start + QUERY_BLOCK])
        return out.transpose(1, 2).reshape(batch, positions, width)

_encoders: PerModel[Bf16Encoder] = PerModel(lambda model: Bf16Encoder(model.encoder))


def bf16_encoder(model) -> Bf16Encoder:
    """The model's Bf16Encoder, made on first use and shared (the weights cast once)."""
    return _encoders(model)
