"""Compact-weight matmuls for decoder steps, compiled on first use with this machine's C++
compiler (matmul.cpp) and called through ctypes.

Why: a decoder step multiplies 1 row (greedy) or 5 (beam 5) by every weight matrix, so its
time is the time to read the weights. Whisper's released weights are float16 values; kept
as float16 they are the same numbers in half the bytes (the exact mode), and as int8 with a
scale per output column in a quarter (the fast mode). PyTorch's CPU matmuls take float32
weights (its float16 and int8 weight-only paths measured 3-20x slower here, see the README).

`available()` is False where no compiler is found or the build fails; callers then keep
PyTorch's float32 matmul, which gives the same tokens, only slower. The library is cached
under models.cache_dir()/kernels, keyed by the source and the CPU's flags.
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("matmul.cpp")
_lib = None
_error: Optional[str] = None
_lock = threading.Lock()
_FLOAT_P = ctypes.POINTER(ctypes.c_float)


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def _build() -> ctypes.CDLL:
    from ..models import cache_dir

    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not compiler:
        raise RuntimeError("no C++ compiler (g++) found")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + _cpu_flags().encode() + compiler.encode()).hexdigest()[:16]
    folder = cache_dir() / "kernels"
    library = folder / f"matmul-{key}.so"
    if not library.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            built = Path(scratch) / library.name
            # -fopenmp: the same libgomp soname as torch's, so one thread pool serves both
            subprocess.run([compiler, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
                            "-o", str(built), str(SOURCE)], check=True, capture_output=True, timeout=300)
            os.replace(built, library)  # atomic: a concurrent build never sees half a file
    lib = ctypes.CDLL(str(library))
    for name, weight in (("matmul_f16", ctypes.c_void_p), ("matmul_i8", ctypes.c_void_p)):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, weight, ctypes.c_long,
                       ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_long, ctypes.c_int]
        fn.restype = None
    for name in ("attend_f32", "attend_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_void_p,
                       ctypes.c_int]
        fn.restype = None
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
                except Exception as error:  # no compiler, a failed build: PyTorch's matmul instead
                    _error = f"{type(error).__name__}: {error}"
        return _lib


def available() -> bool:
    return library() is not None


def unavailable_reason() -> Optional[str]:
    library()
    return _error


def panel_width() -> int:
    return library().panel_width()


# Matrices smaller than this run on one thread: waking a second thread for a few hundred
# KB costs more than it saves, and far more when another process holds the other core.
PARALLEL_MIN_BYTES = 4 << 20


class PackedLinear:
    """y = x @ W.T * scale + bias for a torch Linear's weight W [out, in], with W stored
    packed as float16 ("f16": exact for float16-valued weights) or int8 ("i8": symmetric,
    one scale per output). Call with float32 x [..., in] on the CPU."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor], kind: str):
        lib = library()
        width = lib.panel_width()
        weight = weight.detach().float().cpu()
        self.n_out, self.n_in = weight.shape
        self.kind = kind
        self.scale = None
        if kind == "f16":
            stored = weight.half()
            if not torch.equal(stored.float(), weight):
                raise ValueError("weights are not float16 values: f16 packing would change them")
            self._fn = lib.matmul_f16
        elif kind == "i8":
            self.scale = (weight.abs().amax(dim=1).clamp_min(1e-12) / 127).contiguous()
            stored = torch.round(weight / self.scale[:, None]).clamp(-127, 127).to(torch.int8)
            self._fn = lib.matmul_i8
        else:
            raise ValueError(f"kind must be f16 or i8, not {kind!r}")
        panels = -(-self.n_out // width)
        padded = torch.zeros(panels * width, self.n_in, dtype=stored.dtype)
        padded[: self.n_out] = stored
        # [panels, width, in] -> [panels, in, width]: each k of a panel is contiguous
        self.packed = padded.view(panels, width, self.n_in).transpose(1, 2).contiguous()
        self.bias = None if bias is None else bias.detach().float().cpu().contiguous()
        self.parallel = self.packed.nbytes >= PARALLEL_MIN_BYTES
        self.threads: Optional[int] = None  # None: torch.get_num_threads() when parallel
        self._packed_ptr = self.packed.data_ptr()
        self._scale_ptr = None if self.scale is None else self.scale.data_ptr()
        self._bias_ptr = None if self.bias is None else self.bias.data_ptr()

    def _threads(self) -> int:
        if not self.parallel:
            return 1
        return self.threads or torch.get_num_threads()

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes

    def __call__(self, x: Tensor) -> Tensor:
        n_in = self.n_in
        if x.dtype != torch.float32 or not x.is_contiguous():
            x = x.float().contiguous()
        rows = x.numel() // n_in
        out = torch.empty(*x.shape[:-1], self.n_out, dtype=torch.float32)
        self._fn(x.data_ptr(), rows, n_in, self._packed_ptr, n_in, self.n_out, self._scale_ptr,
                 self._bias_ptr, out.data_ptr(), self.n_out, self._threads())
        return out

def cross_key_layout(k: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """K [1, heads, length, head_dim] as `attend` reads it: stored transposed, [1, heads,
    head_dim, length padded to the panel width], returned as a [1, heads, length, head_dim]
    view of that storage, so that PyTorch code (word timing) still reads it as K."""
    _, heads, length, dim = k.shape
    width = panel_width()
    padded = -(-length // width) * width
    kt = torch.zeros(1, heads, dim, padded, dtype=dtype, device=k.device)
    kt[..., :length] = k.transpose(-1, -2)
    return kt[..., :length].transpose(-1, -2)


def can_attend(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether `attend` takes these: a step's few rows, K from cross_key_layout, V contiguous."""
    dim = q.shape[-1]
    return (q.shape[0] == 1 and q.shape[2] <= 64 and dim % 32 == 0 and dim <= 256
            and k.stride(-2) == 1 and k.stride(-1) >= k.shape[-2] and v.is_contiguous()
            and k.dtype == v.dtype and k.dtype in (torch.float32, torch.float16))


def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """scaled_dot_product_attention(q, k, v) for a decoder step's cross-attention: q [1,
    heads, rows, head_dim] float32, k from cross_key_layout, v [1, heads, length, head_dim]
    contiguous, float32 or float16 (k and v alike). Returns [1, heads, rows, head_dim]."""
    lib = library()
    _, heads, rows, dim = q.shape
    length = k.shape[2]
    qr = q[0].transpose(0, 1).contiguous()  # [rows, heads, dim]
    out = torch.empty(rows, heads, dim, dtype=torch.float32)
    fn = lib.attend_f16 if k.dtype == torch.float16 else lib.attend_f32
    fn(qr.data_ptr(), rows, heads, dim, k.data_ptr(), v.data_ptr(), length, k.stride(-1),
       dim ** -0.5, out.data_ptr(), min(torch.get_num_threads(), heads))
    return out.transpose(0, 1).unsqueeze(0)
