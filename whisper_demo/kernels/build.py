"""Builds the decoder's kernels (matmul.cpp, team.cpp; quantize.cpp for the int8 encoder;
draw.cpp for the fallback's sampled tokens) with this machine's C++ compiler and loads them
through ctypes, once per source and CPU: `library()` is the loaded library, or None where it
cannot be had, and `describe_path()` says which path decoder steps take and why (logged once
when the library is first asked for).

The library is cached under models.cache_dir()/kernels, keyed by the sources, the CPU's
flags and the compiler, so a change to any of them builds it again (and the old build is
deleted). Loading a library runs its code, so a cached file is loaded only from a folder
and a file this user owns that no one else may write; a cached file that fails those
checks or fails to load is built again.

Not built where the CPU cannot run the kernels (they are x86-64 SIMD), where no compiler is
found, or where WHISPER_KV_NO_KERNELS is set; a failed build is said, not raised. Callers
then keep PyTorch's float32 matmul, which gives the same tokens, only slower.
bf16_attention.py builds its own kernel with load_cached and build_or_say_why.
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
from typing import Optional, Tuple

SOURCES = [Path(__file__).with_name(name) for name in ("matmul.cpp", "quantize.cpp", "draw.cpp", "team.cpp")]
HEADERS = [Path(__file__).with_name(name) for name in ("activations.h", "team.h")]
_lib = None
_error: Optional[str] = None
_lock = threading.Lock()
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
    lib.quantize_rows.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                                  ctypes.c_void_p, ctypes.c_int]
    lib.quantize_rows.restype = None
    lib.dequantize.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.dequantize.restype = None
    lib.draw_rows.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_void_p,
                              ctypes.c_void_p]
    lib.draw_rows.restype = ctypes.c_int
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
