"""What a live session's panel shows of its decodes: how many ran of each pass, what the
last one cost, and the latencies (the newest `history` samples of each, for the medians).

    meter = SessionMeter(history=2000)
    meter.decoded(wall_s, cpu_s, result)        # a streamed decode ended
    meter.final_decoded(wall_s, cpu_s, result)  # a final pass's decode ended
    stats = meter.stats(audio_seconds=..., ...) # a LiveStats: the panel's figures

The session counts; this only keeps and summarises, so the session's code reads as what
it decides, not as bookkeeping.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Optional

from ..events import DecodeResult
from .snapshots import LiveStats, percentile


@dataclass
class SessionMeter:
    history: int = 2000  # latency samples kept for the medians
    decodes: int = 0  # streamed decodes run
    skipped: int = 0  # streamed decodes that were due and not run (nothing new to hear)
    loops: int = 0  # streamed decodes that fell into a loop
    final_passes: int = 0  # the final pass's decodes
    streamed_judged: int = 0  # streamed (committed) words a final pass has judged
    revised: int = 0  # of them, changed or removed by it
    rewritten: int = 0  # final words a later pass over their audio wrote otherwise
    last_first_token_ms: Optional[float] = None
    last_decode_ms: Optional[float] = None  # either pass's
    last_cpu_ms: Optional[float] = None
    last_encoder_ms: Optional[float] = None
    last_final_ms: Optional[float] = None
    last_result: Optional[DecodeResult] = None
    # chunk end -> first token, per streamed decode; speech -> commit, per committed word;
    # pause heard -> final text, per pause
    first_token_ms: Deque[float] = field(init=False)
    commit_s: Deque[float] = field(init=False)
    final_delay_s: Deque[float] = field(init=False)

    def __post_init__(self) -> None:
        self.first_token_ms = deque(maxlen=self.history)
        self.commit_s = deque(maxlen=self.history)
        self.final_delay_s = deque(maxlen=self.history)

    def decoded(self, wall_s: float, cpu_s: float, result: Optional[DecodeResult]) -> None:
        """A decode of either pass ended: its wall and CPU time, its result."""
        self.last_decode_ms = wall_s * 1000
        self.last_cpu_ms = cpu_s * 1000
        self.last_encoder_ms = result.encoder_ms if result is not None else None
        self.last_result = result

    def final_decoded(self, wall_s: float, cpu_s: float, result: Optional[DecodeResult]) -> None:
        self.final_passes += 1
        self.decoded(wall_s, cpu_s, result)
        self.last_final_ms = self.last_decode_ms

    def first_token(self, ms: Optional[float]) -> None:
        """A streamed decode's first token came `ms` after its newest audio arrived (None: it wrote none)."""
        self.last_first_token_ms = ms
        if ms is not None:
            self.first_token_ms.append(ms)

    def stats(self, *, unprompted: bool, audio_seconds: float, buffer_seconds: float, dropped_seconds: float,
              lost_seconds: float) -> LiveStats:
        """The panel's figures: these counts and latencies, with the session's own."""
        ft, cs, fd = list(self.first_token_ms), list(self.commit_s), list(self.final_delay_s)
        result = self.last_result
        return LiveStats(
            decodes=self.decodes, skipped=self.skipped, loops=self.loops, unprompted=unprompted,
            first_token_ms_median=percentile(ft, 50), first_token_ms_p95=percentile(ft, 95),
            commit_s_median=percentile(cs, 50), commit_s_p95=percentile(cs, 95),
            last_first_token_ms=self.last_first_token_ms, last_decode_ms=self.last_decode_ms,
            last_encoder_ms=self.last_encoder_ms,
            last_tokens=result.n_tokens if result else 0,
            last_from_draft=result.draft_accepted if result else 0,
            last_draft_passes=result.draft_passes if result else 0,
            last_given=result.prefix_given if result else 0,
            audio_seconds=audio_seconds, buffer_seconds=buffer_seconds, dropped_seconds=dropped_seconds,
            lost_seconds=lost_seconds, final_passes=self.final_passes,
            streamed_judged=self.streamed_judged, revised_words=self.revised, rewritten_words=self.rewritten,
            last_final_ms=self.last_final_ms, final_delay_s_median=percentile(fd, 50),
            final_delay_s_p95=percentile(fd, 95), last_cpu_ms=self.last_cpu_ms)
