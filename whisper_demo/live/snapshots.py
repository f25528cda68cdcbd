"""What a live session publishes: immutable snapshots (its stats, and one LiveUpdate per
re-decode or skipped one) that the page, the terminal and the benchmark read while the
session's own thread goes on changing its state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from ..events import DecodeResult, TokenEvent


@dataclass(frozen=True)
class LiveStats:
    """Latency and work figures of a session so far."""

    decodes: int
    skipped: int  # re-decodes not run: no speech, or nothing new said
    loops: int  # re-decodes that looped (their words get no vote)
    unprompted: bool  # the buffer's decodes kept looping on the prompt: now decoded without it
    first_token_ms_median: Optional[float]  # newest chunk's arrival -> first token
    first_token_ms_p95: Optional[float]
    commit_s_median: Optional[float]  # a word's end arriving -> the word committed
    commit_s_p95: Optional[float]
    last_first_token_ms: Optional[float]
    last_decode_ms: Optional[float]  # wall time of the last re-decode, encoder included
    last_encoder_ms: Optional[float]  # the encoder's part of it
    last_tokens: int  # decoder steps of the last re-decode
    last_from_draft: int  # of them, confirmed from the previous hypothesis (speculative.py)
    last_draft_passes: int  # the decoder forwards that confirmed them
    last_given: int  # tokens of the committed words it was given to start from (not decoded)
    audio_seconds: float  # received so far
    buffer_seconds: float  # held for re-decoding
    dropped_seconds: float  # discarded: a decoder too slow for the stream (never silently)
    lost_seconds: float  # should have arrived by now and did not (chunks lost on the way)


@dataclass(frozen=True)
class LiveUpdate:
    committed: str  # everything committed so far
    tentative: str  # the current hypothesis after the committed text (may still change)
    new_committed: str  # what this update committed ("" if nothing)
    decoded: bool  # whether a re-decode ran for this update
    first_token_ms: Optional[float]
    commit_latencies_s: Tuple[float, ...]  # speech -> commit for each newly committed word
    stats: LiveStats
    result: Optional[DecodeResult] = None  # of this re-decode
    last_event: Optional[TokenEvent] = None  # its last decoder step (cache panel)
    trimmed_seconds: float = 0.0  # audio cut from the buffer's start
    final: bool = False  # from finish()
    reason: str = ""  # which rule committed or cut, or why no decode ran


def percentile(values, q) -> Optional[float]:
    return float(np.percentile(np.asarray(values), q)) if len(values) else None
