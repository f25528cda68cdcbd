"""Compact-weight matmuls and attention for decoder steps, compiled on first use with this
machine's C++ compiler (matmul.cpp; team.cpp shares a call's work between threads) and
called through ctypes.

Why: a decoder step multiplies 1 row (greedy) or 5 (beam 5) by every weight matrix, so its
time is the time to read the weights. Whisper's released weights are float16 values; kept
as float16 they are the same numbers in half the bytes (the exact mode), and as int8 with a
scale per output column in a quarter (the fast mode). PyTorch's CPU matmuls take float32
weights (its float16 and int8 weight-only paths measured 3-20x slower here, see the README).

`available()` is False where no compiler is found or the build fails; callers then keep
PyTorch's float32 matmul, which gives the same tokens, only slower. `describe_path()` says
which path decoder steps take and why (logged once when the library is first asked for).
The library is cached under models.cache_dir()/kernels, keyed by the source and the CPU's
flags. Loading a library runs its code, so a cached file is loaded only from a folder and
a file this user owns that no one else may write; a cached file that fails those checks
or fails to load is built again.
"""

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import List, Optional, Tuple

import torch
from torch import Tensor

SOURCES = [Path(__file__).with_name(name) for name in ("matmul.cpp", "team.cpp")]
HEADERS = [Path(__file__).with_name("team.h")]
_lib = None
_error: Optional[str] = None
_lock = threading.Lock()
_FLOAT_P = ctypes.POINTER(ctypes.c_float)
log = logging.getLogger(__name__)


class UnsafeCache(RuntimeError):
    """The kernels' cache folder could be written by someone else: nothing is loaded from it."""


def cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def _safe_to_load(path: Path) -> Optional[str]:
    """Why `path` (a file or folder) must not be trusted with code, or None: it must belong
    to this user and be writable by no one else."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"{path} belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _tighten(folder: Path) -> None:
    """Our own folder that others may write to (made under a umask of 002, say): take their
    write access away before anything in it is trusted. Someone else's is left as it is."""
    info = folder.lstat()
    mode = stat.S_IMODE(info.st_mode)
    if (not stat.S_ISLNK(info.st_mode) and hasattr(os, "getuid") and info.st_uid == os.getuid()
            and mode & (stat.S_IWGRP | stat.S_IWOTH)):
        os.chmod(folder, mode & ~(stat.S_IWGRP | stat.S_IWOTH))
        log.warning("kernels: %s was writable by other users; it no longer is", folder)


def _compile(compiler: str, library: Path, sources, std: str) -> None:
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        built = Path(scratch) / library.name
        # -fopenmp links libgomp.so.1, the soname torch loads: step_threads sets its count
        subprocess.run([compiler, "-O3", "-march=native", f"-std={std}", "-pthread", "-fopenmp",
                        "-shared", "-fPIC", "-o", str(built), *map(str, sources)],
                       check=True, capture_output=True, timeout=300)
        os.chmod(built, 0o755)
        os.replace(built, library)  # atomic: a concurrent build never sees half a file


def compiler() -> str:
    """This machine's C++ compiler ($CXX, else g++ or c++); RuntimeError when there is none."""
    found = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not found:
        raise RuntimeError("no C++ compiler (g++) found")
    return found


def load_cached(name: str, sources, std: str = "c++17", headers=()) -> ctypes.CDLL:
    """The library `name` compiled from `sources`, cached under models.cache_dir()/kernels and
    keyed by the sources, this CPU's flags and the compiler: built when missing, and built
    again when it fails the ownership checks or fails to load (a damaged or foreign file)."""
    from ..models import cache_dir

    cxx = compiler()
    code = b"".join(Path(path).read_bytes() for path in [*sources, *headers])
    key = hashlib.sha256(code + cpu_flags().encode() + cxx.encode()).hexdigest()[:16]
    folder = cache_dir() / "kernels"
    library = folder / f"{name}-{key}.so"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    _tighten(folder)
    problem = _safe_to_load(folder)
    if problem:
        raise UnsafeCache(f"not loading kernels from {folder}: {problem}")
    if library.exists():
        problem = _safe_to_load(library)
        if problem is None:
            try:
                return ctypes.CDLL(str(library))
            except OSError as error:
                problem = f"it does not load ({error})"
        log.warning("kernels: cached %s is unusable (%s); building it again", library.name, problem)
    _compile(cxx, library, sources, std)
    _prune_stale(library, name)
    return ctypes.CDLL(str(library))


def _prune_stale(library: Path, name: str) -> None:
    """Delete this user's other builds of `name`: a new build means the sources, the CPU or
    the compiler changed, and each old build is a few hundred KB no one will load again.
    (A home folder shared by machines of different CPUs rebuilds on each: rare, and correct.)"""
    for old in library.parent.glob(f"{name}-*.so"):
        if old != library and _safe_to_load(old) is None:
            with contextlib.suppress(OSError):
                old.unlink()
                log.info("kernels: removed the stale build %s", old.name)


def unsupported_cpu() -> Optional[str]:
    """Why this CPU cannot run the kernels, or None. They are x86-64 SIMD (AVX2 and F16C,
    AVX-512 where present): elsewhere (ARM, an old x86) they are not built at all, rather
    than failing to compile."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return f"the kernels are x86-64 code (AVX2, AVX-512) and this CPU is {machine}"
    flags = set(cpu_flags().split())
    missing = [flag for flag in ("avx2", "f16c") if flags and flag not in flags]
    return f"this CPU lacks {' and '.join(missing)}" if missing else None


def _build() -> ctypes.CDLL:
    unsupported = unsupported_cpu()
    if unsupported:
        raise RuntimeError(unsupported)
    # C++20 for std::atomic wait/notify (team.cpp: a helper sleeps on a futex)
    lib = load_cached("matmul", SOURCES, "c++20", HEADERS)
    for name, weight in (("matmul_f16", ctypes.c_void_p), ("matmul_i8", ctypes.c_void_p)):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, weight, ctypes.c_long,
                       ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_long, ctypes.c_int, ctypes.c_int]
        fn.restype = None
    for name in ("attend_f32", "attend_f16", "self_attend_f32"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_void_p,
                       ctypes.c_int]
        fn.restype = None
    for name in ("attend_rows_f32", "attend_rows_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_void_p,
                       ctypes.c_int]
        fn.restype = None
    lib.set_openmp_threads.argtypes = [ctypes.c_int]
    lib.set_openmp_threads.restype = None
    lib.openmp_threads.restype = ctypes.c_int
    lib.team_back_offs.restype = ctypes.c_long
    return lib


def build_or_say_why(build) -> Tuple[Optional[ctypes.CDLL], Optional[str]]:
    """(library, None) from `build`, or (None, why not): WHISPER_KV_NO_KERNELS, no compiler,
    a failed build. Callers then take PyTorch's path, which computes the same thing slower."""
    if os.environ.get("WHISPER_KV_NO_KERNELS"):
        return None, "disabled by WHISPER_KV_NO_KERNELS"
    try:
        return build(), None
    except Exception as error:
        return None, f"{type(error).__name__}: {first_line(error)}"


def library() -> Optional[ctypes.CDLL]:
    global _lib, _error
    with _lock:
        if _lib is None and _error is None:
            _lib, _error = build_or_say_why(_build)
            log.info("kernels: %s", _describe())
        return _lib


def first_line(error: BaseException) -> str:
    text = str(error)
    if isinstance(error, subprocess.CalledProcessError) and error.stderr:
        text = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else error.stderr
    return (text.strip().splitlines() or [""])[0][:300]


def _describe() -> str:
    if _lib is not None:
        return ("compiled kernels loaded: decoder steps use packed float16/int8 matmuls and "
                "attention kernels")
    return f"not available ({_error}): decoder steps use PyTorch's float32 matmul (same tokens, slower)"


def describe_path() -> str:
    """Which path decoder steps take, and why (for the log and the page's panel)."""
    library()
    return _describe()


def available() -> bool:
    return library() is not None


def unavailable_reason() -> Optional[str]:
    library()
    return _error


def panel_width() -> int:
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
    theirs."""
    lib = library()
    outer = lib.openmp_threads()
    previous = getattr(_step, "threads", None)
    _step.threads = previous or outer
    lib.set_openmp_threads(1)
    try:
        yield
    finally:
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
    try:
        yield
    finally:
        lib.set_openmp_threads(1)


ACTIVATIONS = {None: 0, "gelu": 1}


class PackedLinear:
    """y = x @ W.T * scale + bias for a torch Linear's weight W [out, in], with W stored
    packed as float16 ("f16": exact for float16-valued weights) or int8 ("i8": symmetric,
    one scale per output), then `activation` ("gelu": F.gelu, fused into the same pass).
    Call with float32 x [..., in] on the CPU."""

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
        self.activation = ACTIVATIONS[activation]
        self.threads: Optional[int] = None  # None: threads_for(its bytes)
        self._packed_ptr = self.packed.data_ptr()
        self._scale_ptr = None if self.scale is None else self.scale.data_ptr()
        self._bias_ptr = None if self.bias is None else self.bias.data_ptr()

    def _threads(self) -> int:
        return self.threads or threads_for(self.packed.nbytes)

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
                 self._bias_ptr, out.data_ptr(), self.n_out, self.activation, self._threads())
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
