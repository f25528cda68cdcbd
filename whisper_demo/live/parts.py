"""What a session's two passes share (SessionParts), and what one step of either reports
for the session's next LiveUpdate (PassStep).

Each part keeps one thing: the audio (buffer.py), the words (transcript.py), where
utterances end (utterances.py), what a decode is given (context.py), the panel's figures
(meter.py), the audio on its way in (inbox.py). The passes read and change them; the
session (session.py) owns them and decides the order of the passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

from ..events import DecodeResult, TokenEvent
from .buffer import AudioBuffer
from .config import LiveConfig
from .context import ContextKeeper
from .inbox import AudioInbox
from .meter import SessionMeter
from .revision import Revision
from .snapshots import BufferView
from .transcript import Transcript
from .utterances import Utterances
from .words import TimedWord


@dataclass(frozen=True)
class SessionParts:
    config: LiveConfig
    clock: Callable[[], float]
    buffer: AudioBuffer
    transcript: Transcript
    utterances: Utterances
    context: ContextKeeper
    meter: SessionMeter
    inbox: AudioInbox

    def commit_latencies(self, words: Sequence[TimedWord], now: float) -> Tuple[float, ...]:
        """Per word first shown committed now: from the arrival of the audio holding its
        end to now (the panel's speech -> commit)."""
        latencies = tuple(now - self.inbox.arrival_of(w.end, now) for w in words)
        self.meter.commit_s.extend(latencies)
        return latencies


@dataclass(frozen=True)
class PassStep:
    """What one step of a pass did: the session publishes it, with its own state, as a
    LiveUpdate."""

    decoded: bool  # a decode ran
    reason: str  # which rule committed or cut, or why no decode ran
    committed: int = 0  # words it committed (the last ones of the transcript)
    first_token_ms: Optional[float] = None
    latencies: Tuple[float, ...] = ()  # speech -> commit of each word it committed
    result: Optional[DecodeResult] = None
    last_event: Optional[TokenEvent] = None
    view: Optional[BufferView] = None  # the audio it read (None: the view stays as it was)
    revision: Optional[Revision] = None  # a final pass's
    final: bool = False  # the session's last step: every word is final
