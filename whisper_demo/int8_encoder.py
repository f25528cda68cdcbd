"""The fast mode's encoder on CPUs without native bfloat16: the block linears multiply int8 by int8.

On an AVX2 CPU (no AVX512_BF16, no AMX) bfloat16 is emulated, slower than float32, so the
fast mode's encoder had been the model's float32 one, which runs at about the cores' float32
peak: two thirds of a short file's time on such a machine. Its block linears (about half
of it) are where int8 helps: PyTorch's `torch._int_mm` (oneDNN, exact int32 sums) multiplies
a window's 1500 rows by tiny.en's matrices about 2x faster than float32's MKL with AVX2
alone, 4-5x with VNNI (docs/encoder.md, "Without bfloat16"). So, much as CTranslate2's int8
compute type does:

- each weight matrix (but one, below) is int8 with one scale per output (symmetric, made
  once per model);
- each input row is quantized on the fly with its own scale (its largest magnitude / 127):
  a position's activations share a range, the encoder's positions do not;
- before q/k/v and the MLP, the layer norm's large channels are moved into the weights
  (SmoothedNorm, SmoothQuant's fold, from the weights alone): base's 99th-percentile frame
  moved 36 % from float32's where it had moved 47 % (jfk.wav; tiny.en's ~5 % either way);
- the int32 sums are scaled back to float32, the bias added and, for the MLP's hidden layer,
  the gelu applied;
- the attention's output projection stays float32 (8 % of the linears' work): with it in
  int8 a few frames moved by 140-230 % of their norm and the whole window by 3.9-5.6 %
  (CTranslate2's int8 encoder, every linear int8: 3.8-5.4 %, the same frames worst), and a
  long file lost a window's words; with it in float32 the window moves by 2.9-3.6 %;
- everything else stays float32 too: the convolutions, the layer norms, the residual stream
  and the attention (PyTorch's fused attention; its scores are where rounding would cost most).

The bfloat16 encoder's features differ from float32's by 1-2 %: tests/test_fast_encoder.py
and tests/test_int8_encoder.py hold both to stated bounds on real speech, and `bench
accuracy` measures what the words do (docs/encoder.md).
"""

from functools import lru_cache
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from . import kernels
from .bf16_encoder import fused_attention
from .per_model import PerModel

QUANT_MAX = 127  # symmetric int8: -127..127 (-128 unused, so negating a value never overflows)


@lru_cache(maxsize=1)
def int8_matmul_supported() -> bool:
    """Whether this PyTorch multiplies int8 by int8 on the CPU (`torch._int_mm`, oneDNN) and
    the CPU has the 256-bit integer instructions that make it fast (AVX2), checked on a
    small product against float64."""
    if not torch.backends.mkldnn.is_available() or "avx2" not in kernels.cpu_flags().split():
        return False
    try:
        a = torch.arange(-48, 48, dtype=torch.int8).reshape(3, 32)
        b = torch.arange(-64, 64, dtype=torch.int8).reshape(32, 4)
        return bool(torch.equal(torch._int_mm(a, b).double(), a.double() @ b.double()))
    except (AttributeError, RuntimeError):
        return False


def quantize_rows(x: Tensor):
    """x [rows, in] float32 -> (int8 [rows, in], scale [rows, 1]): x ~ q * scale, a scale per row."""
    scale = (torch.linalg.vector_norm(x, ord=float("inf"), dim=-1, keepdim=True) / QUANT_MAX).clamp_min_(1e-12)
    return torch.round(x * (1 / scale)).to(torch.int8), scale


class Int8Linear:
    """y = x @ W.T + bias, then `activation`, with W int8 (a scale per output) and x
    quantized per row: the int32 sums are exact, the rounding is in the two quantizations.

    The passes before and after the matmul run in the compiled kernels (kernels/quantize.cpp:
    one pass each, where PyTorch's operators took as long as the matmul) when they are built,
    else in PyTorch, with the same numbers but the gelu's erf (the kernels' rational one)."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor], activation: Optional[str] = None):
        quantized, self.scale = kernels.int8_per_output(weight.detach().float())  # as the decoder's
        self.weight_t = quantized.t().contiguous()  # [in, out]: what torch._int_mm takes
        self.bias = None if bias is None else bias.detach().float().contiguous()
        if activation not in (None, "gelu"):
            raise ValueError(f"activation must be None or 'gelu', not {activation!r}")
        self.activation = activation

    def __call__(self, x: Tensor, use_kernels: Optional[bool] = None) -> Tensor:
        rows = x.reshape(-1, x.shape[-1]).float().contiguous()
        if use_kernels is None:
            use_kernels = kernels.available()
        y = self._with_kernels(rows) if use_kernels else self._with_torch(rows)
        return y.view(*x.shape[:-1], -1)

    def _with_torch(self, rows: Tensor) -> Tensor:
        quantized, row_scale = quantize_rows(rows)
        y = torch._int_mm(quantized, self.weight_t).float()
        y.mul_(row_scale).mul_(self.scale)
        if self.bias is not None:
            y.add_(self.bias)
        return F.gelu(y) if self.activation == "gelu" else y

    def _with_kernels(self, rows: Tensor) -> Tensor:
        lib = kernels.library()
        count, width = rows.shape
        threads = torch.get_num_threads()
        quantized = torch.empty(count, width, dtype=torch.int8)
        row_scale = torch.empty(count, dtype=torch.float32)
        lib.quantize_rows(rows.data_ptr(), count, width, quantized.data_ptr(), row_scale.data_ptr(), threads)
        sums = torch._int_mm(quantized, self.weight_t)
        out = torch.empty(count, self.weight_t.shape[1], dtype=torch.float32)
        lib.dequantize(sums.data_ptr(), count, out.shape[1], row_scale.data_ptr(), self.scale.data_ptr(),
                       None if self.bias is None else self.bias.data_ptr(), int(self.activation == "gelu"),
                       out.data_ptr(), threads)
        return out


class SmoothedNorm:
    """A layer norm whose output is quantized by the next linear, with each channel's range
    moved into the linear's weights (SmoothQuant, Xiao et al. 2023, with its alpha of 0.5):
    channel j of the norm's output is divided by s_j and column j of the weights multiplied
    by it, so the product is the same, but a channel that the norm's gain makes large no
    longer takes a row's whole int8 range. s_j = sqrt(g_j / w_j), with g_j = |gain_j| +
    |bias_j| (the channel's scale, from the weights alone: no calibration audio) and w_j the
    column's largest weight. Folded into the norm's own gain and bias: no cost per call."""

    def __init__(self, norm, weight: Tensor, bias: Optional[Tensor], activation: Optional[str] = None):
        gain, shift = norm.weight.detach().float(), norm.bias.detach().float()
        weight = weight.detach().float()
        channel_scale = (gain.abs() + shift.abs()).clamp_min(1e-5)
        column_scale = weight.abs().amax(dim=0).clamp_min(1e-5)
        smooth = (channel_scale / column_scale).sqrt()
        self.gain, self.shift, self.eps = gain / smooth, shift / smooth, norm.eps
        self.linear = Int8Linear(weight * smooth, bias, activation)

    def __call__(self, x: Tensor) -> Tensor:
        return self.linear(F.layer_norm(x, x.shape[-1:], self.gain, self.shift, self.eps))


class Int8Encoder:
    """A model's encoder with int8 block linears (made once, shared by every decode) and its
    forward pass. Holds weights only, no per-call state, so any thread may call it."""

    def __init__(self, encoder):
        self.encoder = encoder  # its convolutions, layer norms and positional embedding, as they are
        self.attention_in: Dict[int, SmoothedNorm] = {}  # attn_ln, then q, k and v in one projection
        self.mlp_in: Dict[int, SmoothedNorm] = {}  # mlp_ln, then the MLP's first linear and its gelu
        self.mlp_out: Dict[int, Int8Linear] = {}
        for layer, block in enumerate(encoder.blocks):
            attn = block.attn
            qkv_weight = torch.cat([attn.query.weight, attn.key.weight, attn.value.weight])
            qkv_bias = torch.cat([attn.query.bias, torch.zeros_like(attn.query.bias), attn.value.bias])  # no key bias
            self.attention_in[layer] = SmoothedNorm(block.attn_ln, qkv_weight, qkv_bias)
            self.mlp_in[layer] = SmoothedNorm(block.mlp_ln, block.mlp[0].weight, block.mlp[0].bias, "gelu")
            self.mlp_out[layer] = Int8Linear(block.mlp[2].weight, block.mlp[2].bias)
        self.n_head = encoder.blocks[0].attn.n_head

    def __call__(self, mel: Tensor) -> Tensor:
        """Features [batch, frames // 2, d] (float32) for a mel [batch, n_mels, frames]."""
        encoder = self.encoder
        with torch.inference_mode():
            x = F.gelu(encoder.conv1(mel))
            x = F.gelu(encoder.conv2(x))
            x = x.permute(0, 2, 1).contiguous() + encoder.positional_embedding[: x.shape[2]]
            for layer, block in enumerate(encoder.blocks):
                heads = fused_attention(self.attention_in[layer](x), self.n_head)
                x += block.attn.out(heads)  # float32: see the module's docstring
                x += self.mlp_out[layer](self.mlp_in[layer](x))
            return encoder.ln_post(x)


_encoders: PerModel[Int8Encoder] = PerModel(lambda model: Int8Encoder(model.encoder))


def int8_encoder(model) -> Int8Encoder:
    """The model's Int8Encoder, made on first use and shared (the weights quantized once)."""
    return _encoders(model)
