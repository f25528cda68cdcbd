"""The fast encoder's self-attention as one compiled kernel (kernels/bf16_attention.cpp).

Written out in PyTorch (bf16_encoder.py's fallback), attention over 1500 positions was two
thirds of the bfloat16 encoder: the bfloat16 softmax alone a third, the batched matmuls
another, and the copies between head layouts the rest. The kernel does scores, softmax and
the weighted sum for a block of 32 queries while they sit in the core's cache, with the
CPU's bfloat16 dot products, reading q, k and v straight from the fused projection's
output and writing the heads back side by side for the output projection.

Compiled on first use with this machine's compiler and loaded through ctypes, cached under
models.cache_dir()/kernels with the same ownership checks as the decoder's kernels
(kernels/build.py). `available()` is False where the CPU lacks AVX512_BF16, no compiler
is found, the build fails or WHISPER_KV_NO_KERNELS is set; bf16_encoder.py then writes the
attention out in PyTorch (the same computation, rounded slightly differently, slower).
"""

import ctypes
import logging
import threading
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from . import kernels

SOURCE = Path(__file__).parent / "kernels" / "bf16_attention.cpp"
HEAD_DIM = 64  # every Whisper model's; the kernel is written for it
_lib: Optional[ctypes.CDLL] = None
_error: Optional[str] = None
_lock = threading.Lock()
log = logging.getLogger(__name__)


def _build() -> ctypes.CDLL:
    if kernels.unsupported_cpu() or "avx512_bf16" not in kernels.cpu_flags().split():
        raise RuntimeError("this CPU lacks AVX512_BF16")
    lib = kernels.load_cached("bf16_attention", [SOURCE])
    c = ctypes
    lib.bf16_attention.argtypes = [c.c_void_p, c.c_long, c.c_void_p, c.c_long, c.c_void_p, c.c_long,
                                   c.c_long, c.c_long, c.c_float, c.c_void_p, c.c_long, c.c_int]
    lib.bf16_attention.restype = None
    lib.bf16_attention_head_dim.restype = c.c_int
    if lib.bf16_attention_head_dim() != HEAD_DIM:
        raise RuntimeError("the compiled kernel's head width differs from this module's")
    return lib


def library() -> Optional[ctypes.CDLL]:
    global _lib, _error
    with _lock:
        if _lib is None and _error is None:
            _lib, _error = kernels.build_or_say_why(_build)  # not built: PyTorch's attention instead
            log.info("bf16 attention: %s", "compiled kernel" if _lib else f"not available ({_error})")
        return _lib


def available() -> bool:
    return library() is not None


def unavailable_reason() -> Optional[str]:
    library()
    return _error


def attention(qkv: Tensor, heads: int) -> Tensor:
    """Self-attention of one fused projection: qkv [batch, positions, 3 * width] bfloat16
    (queries, keys, values side by side, width = heads * 64), contiguous. Returns the heads'
    outputs side by side, [batch, positions, width] bfloat16, as the output projection reads
    them; the scores are scaled by 1/sqrt(64)."""
    batch, positions, three_width = qkv.shape
    width = three_width // 3
    if (qkv.dtype != torch.bfloat16 or not qkv.is_contiguous() or qkv.device.type != "cpu"
            or width != heads * HEAD_DIM or three_width != 3 * width):
        raise ValueError(f"attention takes a contiguous CPU bfloat16 [batch, positions, 3 x {heads} x "
                         f"{HEAD_DIM}], not {list(qkv.shape)} {qkv.dtype}")
    out = torch.empty(batch, positions, width, dtype=torch.bfloat16)
    element = qkv.element_size()
    for b in range(batch):
        base = qkv[b].data_ptr()
        library().bf16_attention(base, three_width, base + width * element, three_width,
                                 base + 2 * width * element, three_width, positions, heads,
                                 HEAD_DIM ** -0.5, out[b].data_ptr(), width, torch.get_num_threads())
    return out
