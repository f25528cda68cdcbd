"""The fast encoder's self-attention as one compiled kernel (kernels/bf16_attention.cpp).

Written out in PyTorch (bf16_encoder.py's fallback), attention over 1500 positions was two
thirds of the bfloat16 encoder: the bfloat16 softmax alone a third, the batched matmuls
another, and the copies between head layouts the rest. The kernel does scores, softmax and
the weighted sum for a block of 32 queries while they sit in the core's cache, with the
CPU's bfloat16 dot products, reading q, k and v straight from the fused projection's
output and writing the heads back side by side for the output projection.

Compiled on first use with this machine's compiler and loaded through ctypes, cached under
models.cache_dir()/kernels with the same ownership checks as the decoder's kernels
(kernels/__init__.py). `available()` is False where the CPU lacks AVX512_BF16, no compiler
is found, the build fails or WHISPER_KV_NO_KERNELS is set; bf16_encoder.py then writes the
attention out in PyTorch (the same computation, rounded slightly differently, slower).
"""

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
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


def _compile(compiler: str, folder: Path, library: Path) -> None:
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        built = Path(scratch) / library.name
        subprocess.run([compiler, "-O3", "-march=native", "-std=c++17", "-fopenmp", "-shared", "-fPIC",
                        "-o", str(built), str(SOURCE)], check=True, capture_output=True, timeout=300)
        os.chmod(built, 0o755)
        os.replace(built, library)  # atomic: a concurrent build never sees half a file


def _load(compiler: str) -> ctypes.CDLL:
    from .models import cache_dir

    flags = kernels._cpu_flags()
    key = hashlib.sha256(SOURCE.read_bytes() + flags.encode() + compiler.encode()).hexdigest()[:16]
    folder = cache_dir() / "kernels"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    kernels._tighten(folder)
    problem = kernels._safe_to_load(folder)
    if problem:
        raise kernels.UnsafeCache(f"not loading kernels from {folder}: {problem}")
    library = folder / f"bf16_attention-{key}.so"
    if library.exists():
        problem = kernels._safe_to_load(library)
        if problem is None:
            try:
                return ctypes.CDLL(str(library))
            except OSError as error:
                problem = f"it does not load ({error})"
        log.warning("bf16 attention: cached %s is unusable (%s); building it again", library.name, problem)
    _compile(compiler, folder, library)
    return ctypes.CDLL(str(library))


def _build() -> ctypes.CDLL:
    if kernels.unsupported_cpu() or "avx512_bf16" not in kernels._cpu_flags().split():
        raise RuntimeError("this CPU lacks AVX512_BF16")
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not compiler:
        raise RuntimeError("no C++ compiler (g++) found")
    lib = _load(compiler)
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
            if os.environ.get("WHISPER_KV_NO_KERNELS"):
                _error = "disabled by WHISPER_KV_NO_KERNELS"
            else:
                try:
                    _lib = _build()
                except Exception as error:  # no compiler, a failed build: PyTorch's attention instead
                    _error = f"{type(error).__name__}: {kernels._first_line(error)}"
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
