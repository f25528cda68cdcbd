"""How much of the server one visitor may take, with defaults that keep a 2-core machine
answering everyone else. The operator sets each one by flag (app.py).

Why these defaults, on 2 cores with tiny.en:
- live sessions: one. `python -m whisper_demo.bench live_load` (docs/serving.md) posts real
  recordings in real time through the page's route: one session holds speech -> commit at
  1.0 / 1.6 s (median / p95); two at once keep the median (1.2 s) but a word in twenty
  waits 11 s for its final text, past the 3 s target. A second visitor is told the server
  is busy rather than given a live tab that falls behind; a bigger machine raises it.
- quiet minutes: a session holds a decode thread, a voice detector and up to a Whisper
  window of audio; a tab left recording a silent room must give them back.
- chunk size and length: the browser sends 0.1 s chunks (~10 KB of 48 kHz WAV); a chunk
  is read whole, so a large one is refused by its size and its header before decoding.
- decode budget: audio seconds x beams x runs (Compare runs twice). Twice the longest file
  allowed (1200 for the default 600 s) lets that file through greedily, Compare included;
  beam 5 takes up to 240 s, Compare with beam 5 up to 120 s, so no single request holds
  one of the two decode slots for long.
- models in memory: each model is hundreds of MB to several GB; the least recently used
  is let go when another is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

DEFAULT_MAX_LIVE_SESSIONS = 1  # the live_load benchmark's largest k on 2 cores (above)
DEFAULT_LIVE_QUIET_MINUTES = 3.0
# A live session holds a decode thread and one of --max-live-sessions places; an hour is
# longer than any talk this demo is for, and frees the place of a tab left recording a
# room that is never quiet (the quiet limit would never close it)
DEFAULT_MAX_LIVE_MINUTES = 60.0
DEFAULT_MAX_CHUNK_BYTES = 1 << 20
DEFAULT_MAX_CHUNK_SECONDS = 5.0
DEFAULT_DECODE_BUDGET = 1200.0
DEFAULT_MAX_MODELS = 2
# Uploads, recorded clips and the files the page serves back stay in Gradio's cache this
# long (a visitor may still download them), then are deleted; checked every CACHE_SWEEP_S.
DEFAULT_CACHE_MINUTES = 30.0
CACHE_SWEEP_S = 300

_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}


class LimitExceeded(ValueError):
    """A request larger than the server allows; the message says which limit and flag."""


@dataclass(frozen=True)
class Limits:
    max_live_sessions: Optional[int] = DEFAULT_MAX_LIVE_SESSIONS  # None: no limit
    live_quiet_seconds: float = DEFAULT_LIVE_QUIET_MINUTES * 60
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES
    max_chunk_seconds: float = DEFAULT_MAX_CHUNK_SECONDS
    decode_budget: Optional[float] = DEFAULT_DECODE_BUDGET  # audio s x beams x runs; None: none
    max_models: Optional[int] = DEFAULT_MAX_MODELS  # None: keep every model loaded
    cache_seconds: float = DEFAULT_CACHE_MINUTES * 60


def parse_size(text: str) -> int:
    """"200mb" -> bytes (b, kb, mb, gb, tb; powers of 1024, as Gradio reads max_file_size)."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(b|kb|mb|gb|tb)?\s*", text.lower())
    if not match:
        raise ValueError(f"a size like 1mb or 500kb, not {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2) or "b"])


def check_decode_budget(audio_seconds: float, beam_size: int, runs: int,
                        budget: Optional[float]) -> None:
    """Raise LimitExceeded when audio_seconds x beam_size x runs is over `budget`."""
    if budget is None:
        return
    cost = audio_seconds * max(1, int(beam_size)) * max(1, int(runs))
    if cost <= budget:
        return
    what = f"{audio_seconds:.0f} s of audio x beam {beam_size}" + (f" x {runs} runs" if runs > 1 else "")
    longest = budget / (max(1, int(beam_size)) * max(1, int(runs)))
    raise LimitExceeded(
        f"This decode is larger than the server allows: {what} = {cost:.0f}, the budget is "
        f"{budget:g} (audio seconds x beam size; Compare counts twice). With these settings "
        f"audio up to {longest:.0f} s fits; use a smaller beam or a shorter clip. The operator "
        f"sets the budget with --decode-budget.")


def live_sessions_full_message(limit: int) -> str:
    return (f"Live transcription is busy: {limit} live session{'s' if limit != 1 else ''} "
            f"already running on this server, the most it takes (--max-live-sessions). "
            f"Try again in a few minutes.")

