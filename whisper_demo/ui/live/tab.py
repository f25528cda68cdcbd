"""LiveTab: the Live tab's handlers, composed of the sessions both microphones share
(sessions.py), the browser microphone's (microphone/browser_mic.py) and this computer's
(desktop_mic.py). layout.py wires each event to the part that handles it.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from ..microphone.browser_mic import BrowserMic
from ..store import Defaults, ModelStore
from .desktop_mic import DesktopMic
from .sessions import LiveSessions


class LiveTab:
    """The Live tab's handlers, for either microphone, over the tab's sessions."""

    def __init__(self, store: ModelStore, defaults: Defaults, idle_timeout_s: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.live = LiveSessions(store, defaults, idle_timeout_s, clock=clock)
        self.browser = BrowserMic(self.live)
        self.desktop = DesktopMic(self.live)
        self.sessions = self.live.sessions  # SessionRegistry of TabSession, by the tab's session hash
        self.mic_streams = self.live.mic_streams  # the browser microphones' recordings (the route's)
        self.panel_box = None  # the idle panel, redrawn by the header's model switch (layout.py)

    def _options(self, cache_on, mode):
        """The decode options a new session of this tab gets (LiveSessions.options)."""
        return self.live.options(cache_on, mode)
