"""This machine's CPU in a few words, for a benchmark's header and chart.

A whole-file ratio depends on the CPU more than on most code changes (docs/benchmarks.md:
the same commit's fast encoder is float32 on an AVX2-only core and bfloat16 on AMX), so a
printed or charted figure says which CPU gave it.
"""

from pathlib import Path
from typing import Optional

# what the speed of our kernels and of the fast encoder turns on, best first
VECTOR_UNITS = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512 BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))


def describe(cpuinfo: Optional[str] = None) -> str:
    """"AMD EPYC 7B13, AVX2" from /proc/cpuinfo's text (read here when not given); "" where
    there is none (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return ""
    fields = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first core's
    name = " ".join(fields.get("model name", "").split())
    flags = set(fields.get("flags", "").split())
    unit = next((label for flag, label in VECTOR_UNITS if flag in flags), "")
    return ", ".join(part for part in (name, unit) if part)
