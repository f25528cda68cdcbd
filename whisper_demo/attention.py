"""Inside the cache: a run's attention, gathered from its TokenEvents, as maps and data.

With DecodeOptions.attention each TokenEvent carries a StepAttention: what the step that
chose the token read in the self-attention cache (weights over every cached position) and
in the audio (the alignment heads' cross-attention over the window's frames). This module
collects them per 30 s window and turns them into the pictures' numbers and the JSON a
user downloads. No UI here (ui/attention_view.py draws), no decoding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from .events import TIMESTAMP_SECONDS, DecodeResult, TokenEvent


@dataclass
class WindowRecord:
    """One 30 s window's steps: the cache was refilled from the prompt at its first step."""

    index: int
    start: float  # stream seconds
    end: float
    prompt_tokens: int
    prefill_tokens: int
    encoder_ms: float
    events: List[TokenEvent] = field(default_factory=list)

    @property
    def generated(self) -> int:
        return len(self.events)

    def positions(self) -> tuple:
        """The token ids at every position the window's last step read."""
        return self.events[-1].attention.positions if self.events else ()

    def self_map(self, layer: Optional[int] = None) -> np.ndarray:
        """[steps, positions]: row i holds step i's weights over positions 0..p_i - 1 (mean
        over layers when layer is None) and zeros after: lower triangular, as step i can
        read only what was cached before it."""
        width = len(self.positions())
        out = np.zeros((len(self.events), width), dtype=np.float32)
        for i, event in enumerate(self.events):
            weights = event.attention.self_weights
            row = weights.mean(axis=0) if layer is None else weights[layer]
            out[i, : len(row)] = row
        return out

    def cross_map(self) -> np.ndarray:
        """[steps, frames]: where in the window's audio each step looked (20 ms frames)."""
        width = max((len(e.attention.cross_weights) for e in self.events), default=0)
        out = np.zeros((len(self.events), width), dtype=np.float32)
        for i, event in enumerate(self.events):
            row = event.attention.cross_weights
            out[i, : len(row)] = row
        return out

    def beam_sources(self) -> List[tuple]:
        return [e.attention.beam_sources for e in self.events]


class AttentionRecord:
    """A run's StepAttentions by window, filled event by event (the live view reads it)."""

    def __init__(self):
        self.windows: List[WindowRecord] = []
        self.result: Optional[DecodeResult] = None

    def add(self, event: TokenEvent) -> None:
        if event.attention is None:
            return
        if event.restart and self.windows and self.windows[-1].index == event.window:
            self.windows.pop()  # a fallback retry replaces the window's steps
        if not self.windows or self.windows[-1].index != event.window:
            self.windows.append(WindowRecord(
                index=event.window, start=event.window_start, end=event.window_end,
                prompt_tokens=event.prompt_tokens, prefill_tokens=event.prefill_tokens,
                encoder_ms=event.window_encoder_ms))
        self.windows[-1].events.append(event)

    @property
    def events(self) -> List[TokenEvent]:
        return [e for w in self.windows for e in w.events]

    def words(self) -> list:
        if self.result is None:
            return []
        return [w for s in self.result.segments for w in s.words]

    def to_json(self, labels: Dict[int, str]) -> str:
        """Tokens, weights and timestamps of the run. labels: token id -> its text."""
        def r(values) -> list:
            return [round(float(v), 5) for v in values]

        windows = []
        for w in self.windows:
            windows.append({
                "window": w.index, "start": w.start, "end": w.end,
                "prompt_tokens": w.prompt_tokens, "prefill_tokens": w.prefill_tokens,
                "encoder_ms": round(w.encoder_ms, 2),
                "positions": [{"token_id": t, "text": labels.get(t, "")} for t in w.positions()],
                "steps": [{
                    "step": e.step, "token_id": e.token_id, "text": labels.get(e.token_id, e.text),
                    "latency_ms": round(e.latency_ms, 3), "audio_time": round(e.attention.audio_time, 3),
                    "parent_beam": e.attention.parent, "beam_sources": list(e.attention.beam_sources),
                    # [layer][position], mean over heads
                    "self_weights": [r(row) for row in e.attention.self_weights],
                    "cross_weights": r(e.attention.cross_weights),  # 20 ms frames from "start"
                } for e in w.events],
            })
        result = self.result
        return json.dumps({
            "cache_mode": result.cache_mode if result else None,
            "beam_size": result.beam_size if result else None,
            "text": result.text if result else None,
            "frame_seconds": TIMESTAMP_SECONDS,
            "words": [{"text": w.text, "start": w.start, "end": w.end} for w in self.words()],
            "windows": windows,
        })


def token_labels(model, token_ids) -> Dict[int, str]:
    """Readable text for token ids, specials and timestamps included (<|0.00|>)."""
    from whisper.tokenizer import get_tokenizer

    tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages)
    labels = {}
    for token in set(token_ids):
        if token >= tokenizer.timestamp_begin:
            labels[token] = f"<|{(token - tokenizer.timestamp_begin) * TIMESTAMP_SECONDS:.2f}|>"
        else:
            labels[token] = tokenizer.encoding.decode_single_token_bytes(token).decode("utf-8", "replace")
    return labels
