"""One run's TokenEvents gathered for the cache panel while it decodes: the step latencies
so far, the last event, and the 30 s windows it went through (long audio).
"""

from __future__ import annotations

import time
from typing import List, Optional

from ...events import TokenEvent


class WindowStats:
    """One 30 s window of a run, from its TokenEvents."""

    def __init__(self, event: TokenEvent, first_step: int):
        self.window = event.window
        self.first_step = first_step  # index into the run's latencies
        self.start, self.end = event.window_start, event.window_end
        self.prompt, self.prefill = event.prompt_tokens, event.prefill_tokens
        self.prefill_ms = event.latency_ms  # the first step runs the prefill
        self.encoder_ms = event.window_encoder_ms
        self.steps = 0


class RunStats:
    """Aggregates one run's events for the panel: latencies so far, the last event, and
    the windows (long audio)."""

    def __init__(self):
        self.latencies_ms: List[float] = []
        self.last_event: Optional[TokenEvent] = None
        self.windows: List[WindowStats] = []
        self.started = time.perf_counter()

    def add(self, event: TokenEvent) -> None:
        if not self.windows or self.windows[-1].window != event.window or event.restart:
            self.windows.append(WindowStats(event, len(self.latencies_ms)))
        self.windows[-1].steps += 1
        self.latencies_ms.append(event.latency_ms)
        self.last_event = event

    @property
    def wall_seconds(self) -> float:
        return time.perf_counter() - self.started
