"""One browser tab's live state (TabSession): its decode worker, and this computer's
microphone when it records that instead of the browser's.

The Live tab's handlers (live/sessions.py and the microphones' modules) keep one per tab in
a SessionRegistry; the view (render/live_view.py) renders its worker's immutable LiveView.
A session runs for at most `max_seconds` of wall clock since Record (the server's
--max-live-minutes): past it its microphone's audio is refused and, at the page's next
redraw, the rest is made final and its text kept (end_for_length).
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from ...events import DecodeOptions
from ...live import LiveConfig, LiveSession, LiveUpdate, LiveWorker, model_decoder

DEFAULT_POLICY = LiveConfig().policy


class TabSession:
    """One browser tab's live state: its decode worker, and an optional desktop mic."""

    def __init__(self, model, options: DecodeOptions, source: str = "browser", desktop=None,
                 policy: str = DEFAULT_POLICY, max_seconds: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.model = model
        self.source = source
        self.desktop = desktop  # mic.DesktopMicSource when recording this computer's mic
        self.policy = policy  # LiveConfig.policy: which words are final (the desktop mic keeps the default)
        self.worker: LiveWorker = desktop.worker if desktop is not None else LiveWorker(
            LiveSession(self._decoder(options), LiveConfig(policy=policy)), yield_cpu=True)
        self.rendered_version = -1
        self.sent_html: list = [None] * 4  # transcript, stats, panel, chart as last sent
        self.final: Optional[LiveUpdate] = None
        self.mic_stream = None  # microphone.mic_stream.MicStream: the page's recording (browser source)
        self.clock = clock
        self.created = clock()
        self.max_seconds = max_seconds  # None: no length limit
        self.closed = False
        self.too_long = False  # ended at the length limit (end_for_length)
        self.warned = False  # its page was told why it ended (ended_note)
        self.buttons_reset = False  # its page offers Record again (after Stop, or when it ended by itself)

    @property
    def active(self) -> bool:
        return self.final is None and not self.worker.done.is_set()

    def set_options(self, options: DecodeOptions) -> None:
        """From the next re-decode on (the worker reads its decoder once per decode)."""
        self.worker.session.set_decoder(self._decoder(options))

    def _decoder(self, options: DecodeOptions):
        # AlignAtt reads each token's attention: its decoder must be asked for it
        return model_decoder(self.model, options, alignatt=LiveConfig(policy=self.policy).reads_attention)

    def finish(self, timeout: float = 120.0) -> Optional[LiveUpdate]:
        if self.desktop is not None:
            self.final = self.desktop.stop(timeout)
        else:
            self.final = self.worker.finish(timeout)
        return self.final

    def close(self) -> None:
        self.closed = True
        if self.mic_stream is not None:
            self.mic_stream.discard()  # its ticket is forgotten at once
        if self.desktop is not None:
            self.desktop.close()
        self.worker.close()

    def idle_seconds(self) -> float:
        return self.worker.session.idle_seconds()

    def silent_seconds(self) -> float:
        return self.worker.session.silent_seconds()

    def running(self) -> bool:
        """Whether it holds a decode thread (what the registry's session limit counts)."""
        return not self.closed and not self.worker.done.is_set()

    def ended_note(self) -> str:
        """Why a session that took no more audio ended, for its page ("" if it did not)."""
        error = self.worker.view().error
        if error is not None:
            return (f"Live transcription stopped: {type(error).__name__}: {error}. The text so far "
                    f"is kept here; press Record to start again.")
        if self.too_long:
            return self.length_note()
        if self.closed:
            return ("Live transcription closed: no audio, or only silence, for too long (this "
                    "server's limit). The text so far is kept here; press Record to start again.")
        return ""

    def refusal(self) -> Optional[str]:
        """None while the session takes audio; else why not, for the page's microphone."""
        if self.active:
            return self.length_note() if self.past_max_length() else None
        return self.ended_note() or "This recording has been stopped; press Record to start again."

    def past_max_length(self) -> bool:
        return self.max_seconds is not None and self.clock() - self.created > self.max_seconds

    def length_note(self) -> str:
        minutes = (self.max_seconds or 0) / 60
        return (f"Live transcription stopped: this server ends a live session {minutes:g} "
                f"minute{'' if minutes == 1 else 's'} after Record (--max-live-minutes). The text so far "
                f"is kept here; press Record to start again.")

    def end_for_length(self) -> bool:
        """Past the length limit: no more audio, and the rest made final (its text stays).
        Whether it ended it now (once: a later call, or one within the limit, does nothing)."""
        if self.too_long or not self.active or not self.past_max_length():
            return False
        self.too_long = True
        if self.mic_stream is not None:
            self.mic_stream.discard()
        self.finish()
        return True

    def heard_seconds(self) -> float:
        view = self.worker.view()
        return view.stats.audio_seconds if view.stats else self.worker.session.audio_seconds
