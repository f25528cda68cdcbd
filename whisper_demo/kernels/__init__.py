"""Compact-weight matmuls and attention for decoder steps, compiled on first use with this
machine's C++ compiler (matmul.cpp; team.cpp shares a call's work between threads) and
called through ctypes.

Why: a decoder step multiplies 1 row (greedy) or 5 (beam 5) by every weight matrix, so its
time is the time to read the weights. Whisper's released weights are float16 values; kept
as float16 they are the same numbers in half the bytes (the exact mode), and as int8 with a
scale per output column in a quarter (the fast mode). PyTorch's CPU matmuls take float32
weights (its float16 and int8 weight-only paths measured 3-20x slower here, see the README).

This module holds the kernels' Python side: PackedLinear, the attention calls and the
threads a call uses (step_threads, torch_threads). Building, caching and loading the
library is build.py's: `available()` is False where no compiler is found or the build
fails; callers then keep PyTorch's float32 matmul, which gives the same tokens, only
slower. `describe_path()` says which path decoder steps take and why.
"""

import contextlib
import ctypes
import functools
import threading
from typing import List, Optional

import torch
from torch import Tensor

from . import mkl_threads
from .build import library
# The build's names that callers use as kernels.X (kernels.available(), kernels.load_cached)
from .build import (  # noqa: F401
    available, build_or_say_why, cpu_flags, describe_path, first_line, load_cached, unavailable_reason,
    unsupported_cpu,
)

@functools.lru_cache(maxsize=1)
def panel_width() -> int:
    """The packed panels' width (the library's NB): asked once, as can_attend runs every step."""
    return library().panel_width()


# Calls that read less than this run on their caller's thread alone: below it, handing
# half the work to a helper (team.cpp) saves less than the handing costs.
PARALLEL_MIN_BYTES = 256 << 10


_step = threading.local()  # .threads: the team's thread count inside step_threads()


def threads_for(nbytes: int) -> int:
    """How many threads a kernel call that reads `nbytes` uses: torch's count (the one
    `torch.set_num_threads` sets; inside step_threads, the count torch had) when the call is
    big enough, else 1."""
    if nbytes < PARALLEL_MIN_BYTES:
        return 1
    return getattr(_step, "threads", None) or torch.get_num_threads()


@contextlib.contextmanager
def step_threads():
    """A decoder step: torch's own operators run on the calling thread alone, and only the
    kernels' team (team.cpp) uses the other threads. Why: with OMP_WAIT_POLICY=PASSIVE each
    of torch's parallel operators wakes a sleeping thread (~50 us here, as long as the
    operator) and waits for it at a barrier, and when another process holds the other core
    that wait can last milliseconds per operator (README, "A step's threads"). Only the
    calling thread's OpenMP count changes (torch reads it per thread): other decodes keep
    theirs. MKL's count for the thread as well: torch's exp and log1p thread by it
    (mkl_threads.py says what that cost)."""
    lib = library()
    outer = lib.openmp_threads()
    previous = getattr(_step, "threads", None)
    _step.threads = previous or outer
    lib.set_openmp_threads(1)
    outer_mkl = mkl_threads.set_local_threads(1)
    try:
        yield
    finally:
        if outer_mkl is not None:
            mkl_threads.set_local_threads(outer_mkl)
        lib.set_openmp_threads(outer)
        _step.threads = previous


def team_back_offs() -> int:
    """How many times the kernels' team saw a helper descheduled (another process wanted
    the core) and let calls run on their callers alone for a while (team.cpp)."""
    lib = library()
    return lib.team_back_offs() if lib else 0


@contextlib.contextmanager
def torch_threads(when: bool = True):
    """Inside step_threads, give torch its threads back (if `when`) for a real matrix
    product (a prompt's or a draft's many rows, where MKL on every thread wins); elsewhere
    nothing."""
    threads = getattr(_step, "threads", None)
    if threads is None or not when:
        yield
        return
    lib = library()
    lib.set_openmp_threads(threads)
    mkl_inside = mkl_threads.set_local_threads(threads)
    try:
        yield
    finally:
        if mkl_inside is not None:
            mkl_threads.set_local_threads(mkl_inside)
        lib.set_openmp_threads(1)


# The kernel's activation codes (matmul.cpp): gelu with libm's erff, or with a rational erf
# that vectorizes (a few float32 ulps away; int8 weights only, see PackedLinear).
ACTIVATIONS = {None: 0, "gelu": 1}
GELU_RATIONAL = 2


def int8_per_output(weight: Tensor):
    """A weight [out, in] as symmetric int8 with one scale per output: (int8 [out, in],
    float32 scale [out]), weight ~ int8 * scale[:, None]; -128 unused."""
    scale = (weight.abs().amax(dim=1).clamp_min(1e-12) / 127).contiguous()
    return torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


class PackedLinear:
    """y = x @ W.T * scale + bias for a torch Linear's weight W [out, in], with W stored
    packed as float16 ("f16": exact for float16-valued weights) or int8 ("i8": symmetric,
    one scale per output), then `activation` ("gelu": F.gelu, fused into the same pass).
    Call with float32 x [..., in] on the CPU.

    The gelu's erf is libm's with float16 weights (the exact mode: its numbers stay those
    its tokens were tested with) and a rational function with int8 weights (the fast mode:
    a prompt's 200 rows x 1536 outputs a layer, where one libm call per output took half
    the matmul's time; its erf is within 4.2e-7 of the true one, beside the weights' rounding
    of up to 0.4 %)."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor], kind: str,
                 activation: Optional[str] = None):
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
            stored, self.scale = int8_per_output(weight)
            self._fn = lib.matmul_i8
        else:
            raise ValueError(f"kind must be f16 or i8, not {kind!r}")
        panels = -(-self.n_out // width)
        padded = torch.zeros(panels * width, self.n_in, dtype=stored.dtype)
        padded[: self.n_out] = stored
        # [panels, width, in] -> [panels, in, width]: each k of a panel is contiguous
        self.packed = padded.view(panels, width, self.n_in).transpose(1, 2).contiguous()
        self.bias = None if bias is None else bias.detach().float().cpu().contiguous()
        self.activation = GELU_RATIONAL if kind == "i8" and activation == "gelu" else ACTIVATIONS[activation]
        self.threads: Optional[int] = None  # None: threads_for(its bytes)
        self._packed_ptr = self.packed.data_ptr()
        self._scale_ptr = None if self.scale is None else self.scale.data_ptr()
        self._bias_ptr = None if self.bias is None else self.bias.data_ptr()

    def _threads(self, rows: int = 1) -> int:
        # the work is the weights once per row: a prompt's 200 rows through a small matrix
        # are worth the helpers that one row through it is not
        return self.threads or threads_for(self.packed.nbytes * rows)

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes

    def __call__(self, x: Tensor) -> Tensor:
        n_in = self.n_in
        # the kernel reads rows x n_in floats from x and writes rows x n_out into out: a
        # wrong width would read and write past them (heap corruption, not an exception)
        if x.dim() == 0 or x.shape[-1] != n_in:
            raise ValueError(f"PackedLinear takes [..., {n_in}] inputs, not {list(x.shape)}")
        if x.device.type != "cpu":
            raise ValueError(f"PackedLinear runs on the CPU, not on {x.device}")
        if x.dtype != torch.float32 or not x.is_contiguous():
            x = x.float().contiguous()
        rows = x.numel() // n_in
        out = torch.empty(*x.shape[:-1], self.n_out, dtype=torch.float32)
        self._fn(x.data_ptr(), rows, n_in, self._packed_ptr, n_in, self.n_out, self._scale_ptr,
                 self._bias_ptr, out.data_ptr(), self.n_out, self.activation, self._threads(rows))
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
    """Whether `attend` takes these: a step's few rows, K from cross_key_layout (its lines a
    whole number of panels long: the kernel reads them a panel at a time), V contiguous."""
    dim = q.shape[-1]
    return (q.shape[0] == 1 and q.shape[2] <= 64 and dim % 32 == 0 and dim <= 256
            and k.stride(-2) == 1 and k.stride(-1) >= k.shape[-2] and k.stride(-1) % panel_width() == 0
            and v.is_contiguous()
            and k.dtype == v.dtype and k.dtype in (torch.float32, torch.float16))


def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """scaled_dot_product_attention(q, k, v) for a decoder step's cross-attention: q [1,
    heads, rows, head_dim] float32, k from cross_key_layout, v [1, heads, length, head_dim]
    contiguous, float32 or float16 (k and v alike). Returns [1, heads, rows, head_dim]."""
    lib = library()
    if not (q.dim() == k.dim() == v.dim() == 4 and can_attend(q, k, v)):
        raise ValueError(f"attend cannot take q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}")
    _, heads, rows, dim = q.shape
    length = k.shape[2]
    if (k.shape[0], k.shape[1], k.shape[3]) != (1, heads, dim) or v.shape != k.shape or q.dtype != torch.float32:
        raise ValueError(f"attend: q {list(q.shape)} {q.dtype} does not match k {list(k.shape)}, "
                         f"v {list(v.shape)}")
    qr = q[0].transpose(0, 1).contiguous()  # [rows, heads, dim]
    out = torch.empty(rows, heads, dim, dtype=torch.float32)
    fn = lib.attend_f16 if k.dtype == torch.float16 else lib.attend_f32
    fn(qr.data_ptr(), rows, heads, dim, k.data_ptr(), v.data_ptr(), length, k.stride(-1),
       dim ** -0.5, out.data_ptr(), threads_for(k.nbytes + v.nbytes))
    return out.transpose(0, 1).unsqueeze(0)


def can_attend_rows(q: Tensor, ks: List[Tensor], vs: List[Tensor]) -> bool:
    """Whether `attend_rows` takes these: one query row per audio, each audio as `attend`
    takes it, all of one dtype, shape and layout."""
    _, heads, rows, dim = q.shape
    return (len(ks) == len(vs) == rows > 0 and all(can_attend(q[:, :, :1], k, v) for k, v in zip(ks, vs))
            and len({(k.dtype, k.shape, k.stride()) for k in ks}) == 1
            and all(v.shape == ks[0].shape for v in vs) and q.dtype == torch.float32
            and (ks[0].shape[0], ks[0].shape[1], ks[0].shape[3]) == (1, heads, dim))


def attend_rows(q: Tensor, ks: List[Tensor], vs: List[Tensor]) -> Tensor:
    """`attend` for a batch of pieces, one call: q [1, heads, rows, head_dim] float32, row
    r against its own audio's ks[r] (cross_key_layout) and vs[r] (all of one dtype and
    length). Each row's numbers are `attend`'s for that row alone. Returns [1, heads, rows,
    head_dim]."""
    _, heads, rows, dim = q.shape
    if not can_attend_rows(q, ks, vs):
        raise ValueError(f"attend_rows cannot take q {list(q.shape)} against {len(ks)} audios")
    qr = q[0].transpose(0, 1).contiguous()  # [rows, heads, dim]
    out = torch.empty(rows, heads, dim, dtype=torch.float32)
    k_pointers = (ctypes.c_void_p * rows)(*[k.data_ptr() for k in ks])
    v_pointers = (ctypes.c_void_p * rows)(*[v.data_ptr() for v in vs])
    lib = library()
    fn = lib.attend_rows_f16 if ks[0].dtype == torch.float16 else lib.attend_rows_f32
    read = sum(k.nbytes + v.nbytes for k, v in zip(ks, vs))
    fn(qr.data_ptr(), rows, heads, dim, ctypes.addressof(k_pointers), ctypes.addressof(v_pointers),
       ks[0].shape[2], ks[0].stride(-1), dim ** -0.5, out.data_ptr(), threads_for(read))
    return out.transpose(0, 1).unsqueeze(0)


def can_self_attend(q: Tensor, k_cache: Tensor, v_cache: Tensor) -> bool:
    """Whether `self_attend` takes these: one new row per beam, float32 cache buffers."""
    return (q.shape[2] == 1 and q.shape[-1] % 16 == 0 and q.dtype == torch.float32
            and k_cache.dtype == v_cache.dtype == torch.float32 and q.device.type == "cpu"
            and k_cache.is_contiguous() and v_cache.is_contiguous())


def self_attend(q: Tensor, k_cache: Tensor, v_cache: Tensor, length: int) -> Tensor:
    """scaled_dot_product_attention(q, k_cache[:, :, :length], v_cache[:, :, :length]) for a
    decoder step: q [beams, heads, 1, head_dim], each beam reading its own cache ([beams,
    heads, n_ctx, head_dim] buffers). Returns [beams, heads, 1, head_dim]."""
    if not (q.dim() == k_cache.dim() == v_cache.dim() == 4 and can_self_attend(q, k_cache, v_cache)):
        raise ValueError(f"self_attend cannot take q {list(q.shape)}, caches {list(k_cache.shape)}")
    beams, heads, _, dim = q.shape
    if (k_cache.shape[:2] != (beams, heads) or k_cache.shape[3] != dim or v_cache.shape != k_cache.shape
            or not 0 < length <= k_cache.shape[2]):
        raise ValueError(f"self_attend: q {list(q.shape)}, caches {list(k_cache.shape)} and "
                         f"{list(v_cache.shape)}, length {length} do not fit together")
    q = q.contiguous()
    out = torch.empty_like(q)
    read = 2 * beams * heads * length * dim * 4
    library().self_attend_f32(q.data_ptr(), beams, heads, dim, k_cache.data_ptr(), v_cache.data_ptr(),
                              length, k_cache.shape[2], dim ** -0.5, out.data_ptr(), threads_for(read))
    return out
