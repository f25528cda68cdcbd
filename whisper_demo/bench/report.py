"""The benchmark's report: what decode_speed.py measured, shown and judged.

One Summary per contender (decode_speed.summarise makes them); from those, the table printed to
the terminal, the ratios between contenders, the issue's targets met or not, and the
latency-per-position chart. Measuring is decode_speed.py's; nothing here runs a decode.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

# The speed targets: (label, numerator, denominator, column, beam sizes, at most)
TARGETS = (
    ("exact greedy / CT2 float32", "static", "ctranslate2 float32", "ms_per_token", (1,), 0.9),
    ("exact greedy / whisper.decode", "static", "whisper.decode", "ms_per_token", (1,), 0.5),
    ("exact beam / CT2 float32", "static", "ctranslate2 float32", "ms_per_token", "beam", 1.0),
    ("fast greedy / CT2 int8", "static int8", "ctranslate2 int8", "ms_per_token", (1,), 0.9),
    ("fast beam / CT2 int8", "static int8", "ctranslate2 int8", "ms_per_token", "beam", 0.9),
    ("exact encoder / CT2 float32 encoder", "static", "ctranslate2 float32", "encoder_ms", "any", 1.0),
    # the fast mode's encoder (bfloat16 where the CPU has it, else int8 linears)
    ("fast encoder / exact encoder", "static int8", "static", "encoder_ms", "any", 0.55),
    ("fast encoder / CT2 int8 encoder", "static int8", "ctranslate2 int8", "encoder_ms", "any", 0.55),
)
WER_TARGET_POINTS = 0.3  # the fast mode's WER at most this many points above the exact mode's
NOT_MEASURED = "not measured"  # a target with nothing to judge it by: it fails, and says so


def judged(value: Optional[float], at_most: float, strictly: bool = False) -> Optional[bool]:
    """Whether `value` meets its target (at most `at_most`, or below it `strictly`); None
    when nothing was measured: an empty measure meets nothing."""
    if value is None:
        return None
    return value < at_most if strictly else value <= at_most


def verdict(met: Optional[bool]) -> str:
    """A target as printed: met, NOT met, or not measured (None; it fails the target)."""
    return NOT_MEASURED if met is None else ("met" if met else "NOT met")


@dataclass
class Summary:
    """One contender's row of the report: its runs summed up (medians and peaks over repeats)."""

    name: str
    tokens: int
    ms_per_token: float  # median over repeats of the mean
    ms_per_token_min: float
    first10_ms: Optional[float]
    last10_ms: Optional[float]
    decode_ms: float
    encoder_ms: float
    peak_cache_bytes: int
    peak_rss_bytes: int
    same_tokens: Optional[bool]
    curve_ms: List[float] = field(default_factory=list)  # per-position median, for the chart


def print_table(summaries: List[Summary], out=None):
    out = out or sys.stdout
    header = (f"{'contender':<22}{'tokens':>7}{'ms/tok':>8}{'min':>7}{'first10%':>9}{'last10%':>8}"
              f"{'decode ms':>10}{'enc ms':>8}{'cache MB':>9}{'RSS MB':>8}  same")
    print(header, file=out)
    print("-" * len(header), file=out)
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    for s in summaries:
        same = "-" if s.same_tokens is None else ("yes" if s.same_tokens else "NO")
        print(f"{s.name:<22}{s.tokens:>7}{s.ms_per_token:>8.1f}{s.ms_per_token_min:>7.1f}"
              f"{fmt(s.first10_ms):>9}{fmt(s.last10_ms):>8}{s.decode_ms:>10.0f}{s.encoder_ms:>8.0f}"
              f"{s.peak_cache_bytes / 2**20:>9.1f}{s.peak_rss_bytes / 2**20:>8.0f}  {same}", file=out)


def ratios(summaries: List[Summary]) -> Dict[str, float]:
    by = {s.name: s for s in summaries}
    out = {}

    def ratio(key, a, b, field="ms_per_token"):
        if a in by and b in by and getattr(by[b], field):
            out[key] = getattr(by[a], field) / getattr(by[b], field)
    ratio("static / whisper.decode", "static", "whisper.decode")
    ratio("static int8 / ctranslate2 int8", "static int8", "ctranslate2 int8")
    ratio("static int8 / whisper.decode", "static int8", "whisper.decode")
    ratio("static / ctranslate2 float32", "static", "ctranslate2 float32")
    ratio("static / ctranslate2 int8", "static", "ctranslate2 int8")
    ratio("cache speedup (off / static)", "off", "static", "decode_ms")
    ratio("hooks / static", "hooks", "static")
    ratio("static encoder / ctranslate2 float32 encoder", "static", "ctranslate2 float32", "encoder_ms")
    ratio("static int8 encoder / static encoder", "static int8", "static", "encoder_ms")
    ratio("static int8 encoder / ctranslate2 int8 encoder", "static int8", "ctranslate2 int8", "encoder_ms")
    if "static" in by and by["static"].first10_ms:
        out["static flatness (last10% / first10%)"] = by["static"].last10_ms / by["static"].first10_ms
    if "off" in by and by["off"].first10_ms:
        out["off rise (last10% / first10%)"] = by["off"].last10_ms / by["off"].first10_ms
    return out


def target_checks(summaries: List[Summary], beam_size: int) -> List[dict]:
    """The issue's targets that this run's beam size and contenders can show; one whose
    contenders ran but lack the column's figure (none, or zero) is not measured: ratio None."""
    by = {s.name: s for s in summaries}
    checks = []
    for label, a, b, column, beams, most in TARGETS:
        applies = beams == "any" or (beam_size > 1 if beams == "beam" else beam_size in beams)
        if not applies or a not in by or b not in by:
            continue
        top, bottom = getattr(by[a], column), getattr(by[b], column)
        value = top / bottom if top and bottom else None
        if beams == "beam":
            label = label.replace("beam", f"beam {beam_size}")
        checks.append({"target": label, "ratio": value, "at_most": most, "met": bool(judged(value, most))})
    return checks


def print_ratios(found: Dict[str, float], out=None):
    out = out or sys.stdout
    for key, value in found.items():
        print(f"{key:<46}{value:6.2f}", file=out)


def print_targets(checks: List[dict], out=None):
    out = out or sys.stdout
    for c in checks:
        value = "-" if c["ratio"] is None else f"{c['ratio']:.2f}x"
        met = None if c["ratio"] is None else c["met"]
        print(f"target: {c['target']} = {value} (target <= {c['at_most']}) {verdict(met)}", file=out)


def plot(summaries: List[Summary], path: Path, title: str):
    import matplotlib
    matplotlib.use("Agg")  # no screen needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=110)
    for i, s in enumerate(summaries):
        if s.curve_ms:
            ax.plot(range(len(s.curve_ms)), s.curve_ms, label=s.name, linewidth=1.6, color=f"C{i}")
        else:  # engines that don't expose per-step times: their mean, dashed
            ax.axhline(s.ms_per_token, linestyle="--", linewidth=1.2, color=f"C{i}",
                       label=f"{s.name} (mean)")
    ax.set_xlabel("token position")
    ax.set_ylabel("ms per token")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
