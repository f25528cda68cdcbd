"""MKL's thread count for the calling thread alone, where PyTorch was built with MKL.

Why: a decoder step runs torch's operators on its calling thread alone (step_threads sets
the thread's OpenMP count to 1), and the kernels' own helper takes the other core. But
some of torch's elementwise operators (exp, log1p: a sampled step's normalisation and
draw, sampling.py) call MKL's vector math, which threads by MKL's count, not by the
thread's OpenMP count: they put an OpenMP thread on the other core, where it stayed busy
after the call while the next forward's kernels wanted that core for their helper. The
forward after a sampled pick ran at one thread's speed (tiny.en int8, 2 cores: 2.2 ->
3.0 ms; after a greedy pick, or after 1 ms of other work, 2.2). MKL keeps a count per
thread as well (mkl_set_num_threads_local); this sets it.

libtorch_cpu exports MKL's service functions. The Fortran-style entry is used: it takes
its argument by reference, as Fortran calls do (in this build the C-style names are the
same code, and an int passed by value crashed). Where torch has no MKL, or the library is
not found, nothing is set.
"""

import ctypes
import os
from functools import lru_cache
from typing import Optional

import torch


@lru_cache(maxsize=None)
def _service():
    """(set_num_threads_local, get_max_threads) from torch's MKL, or None."""
    if not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        set_local, get_max = lib.mkl_set_num_threads_local_, lib.mkl_get_max_threads_
    except (OSError, AttributeError):
        return None
    set_local.restype, set_local.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]
    get_max.restype, get_max.argtypes = ctypes.c_int, []
    return set_local, get_max


def set_local_threads(threads: int) -> Optional[int]:
    """Sets the calling thread's MKL thread count (0: MKL's global count again). Returns
    the thread's count before (0 where it had none of its own), or None without MKL."""
    service = _service()
    if service is None:
        return None
    return service[0](ctypes.byref(ctypes.c_int(threads)))


def max_threads() -> Optional[int]:
    """How many threads MKL would use for a call made on this thread now, or None."""
    service = _service()
    return service[1]() if service is not None else None
