"""Which decodes each browser session has running, so that Stop can wait for them to close.

Stop cancels a session's decode; Gradio then closes the handler's generator, which closes the
decoder (cache freed, hooks removed) and ends the run's updates. The "stopped" note that Stop
sends next must be the last panel update the page receives, so Stop's follow-up handler
waits here until every decode of its session has closed.
"""

from __future__ import annotations

import threading
from typing import Dict, Optional, Set


class RunningDecodes:
    """Browser session -> one event per running decode, set when that decode has closed."""

    def __init__(self):
        self._running: Dict[str, Set[threading.Event]] = {}
        self._lock = threading.Lock()

    def started(self, request) -> Optional[threading.Event]:
        """A decode of `request`'s session began: the event to pass to closed(). None
        without a session (a direct call): no Stop can wait for it then."""
        key = getattr(request, "session_hash", None)
        if key is None:
            return None
        finished = threading.Event()
        with self._lock:
            self._running.setdefault(key, set()).add(finished)
        return finished

    def closed(self, request, finished: Optional[threading.Event]) -> None:
        """The decode that started() returned `finished` for has closed."""
        if finished is None:
            return
        finished.set()
        with self._lock:
            events = self._running.get(request.session_hash, set())
            events.discard(finished)
            if not events:
                self._running.pop(request.session_hash, None)

    def wait_closed(self, request, timeout: float) -> None:
        """Until every decode of `request`'s session has closed (each waited on up to
        `timeout` s)."""
        key = getattr(request, "session_hash", None)
        with self._lock:
            pending = list(self._running.get(key, ())) if key else []
        for finished in pending:
            finished.wait(timeout)
