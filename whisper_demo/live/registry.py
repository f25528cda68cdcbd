"""Live sessions by key (one per browser tab), how many may run, and the closing of idle ones.

A session holds a decode thread and up to a window of audio: a tab that goes away
without saying so must not keep them. The registry closes any session with no audio, or
with only silence, for `idle_timeout_s`, from a reaper thread that it starts on first use.

A session that still runs its decoder counts against `max_running`; past it a new one is
refused (SessionLimitReached), so that however many session keys clients make up, the
server decodes for at most that many at once. A closed session stays in the registry
(its text still shown to its tab, no thread, no audio) until it has been idle for
`idle_timeout_s` more, or its tab goes.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Generic, List, Optional, Protocol, TypeVar

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 300.0


class Closable(Protocol):
    def close(self) -> None: ...

    def idle_seconds(self) -> float: ...


class SessionLimitReached(RuntimeError):
    """max_running sessions already run; the message is for the visitor."""


def _running(entry) -> bool:
    """Whether an entry holds a decoder (entries without the notion always do)."""
    running = getattr(entry, "running", None)
    return bool(running()) if callable(running) else True


def _quiet_seconds(entry) -> float:
    """Seconds with no audio, or with audio but no voice in it, whichever is longer."""
    silent = getattr(entry, "silent_seconds", None)
    idle = entry.idle_seconds()
    return max(idle, silent()) if callable(silent) else idle


Entry = TypeVar("Entry", bound=Closable)


class SessionRegistry(Generic[Entry]):
    def __init__(self, idle_timeout_s: float = IDLE_TIMEOUT_S, reap_every_s: Optional[float] = None,
                 max_running: Optional[int] = None, full_message: str = "too many live sessions"):
        self.idle_timeout_s = idle_timeout_s
        self.max_running = max_running
        self.full_message = full_message
        self.reap_every_s = reap_every_s or min(30.0, idle_timeout_s / 4)
        self._entries: Dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._reaper: Optional[threading.Thread] = None
        self._stopped = threading.Event()

    def get(self, key: str) -> Optional[Entry]:
        with self._lock:
            return self._entries.get(key)

    def get_or_create(self, key: str, make: Callable[[], Entry],
                      reuse: Callable[[Entry], bool] = lambda entry: True) -> Entry:
        """The session under `key` if `reuse` accepts it, else a new one from `make` (the
        old one closed). Atomic: concurrent chunks of one stream find the same session.
        Raises SessionLimitReached when a new one would be one too many."""
        self._start_reaper()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and reuse(entry):
                return entry
            if self.max_running is not None:
                others = sum(1 for k, e in self._entries.items() if k != key and _running(e))
                if others >= self.max_running:
                    raise SessionLimitReached(self.full_message)
            new = make()
            self._entries[key] = new
        if entry is not None:
            _close(entry)
        return new

    def replace(self, key: str, make: Callable[[], Entry]) -> Entry:
        return self.get_or_create(key, make, reuse=lambda entry: False)

    def pop(self, key: str) -> Optional[Entry]:
        with self._lock:
            return self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def running(self) -> int:
        """How many sessions hold a decoder now."""
        with self._lock:
            return sum(1 for e in self._entries.values() if _running(e))

    def reap_idle(self) -> int:
        """Close the running sessions with no audio, or only silence, for idle_timeout_s,
        and forget closed ones idle for twice that; how many were closed or forgotten.
        A session that can say whether it runs (`running()`) stays, closed, for its tab to
        show; one that cannot is forgotten as it is closed."""
        limit = self.idle_timeout_s
        closing: List[Entry] = []
        with self._lock:
            for key, entry in list(self._entries.items()):
                if _running(entry) and _quiet_seconds(entry) > limit:
                    closing.append(entry)
                    if not callable(getattr(entry, "running", None)):
                        del self._entries[key]
                elif not _running(entry) and entry.idle_seconds() > 2 * limit:
                    closing.append(self._entries.pop(key))  # closing twice is harmless
        for entry in closing:
            _close(entry)
        return len(closing)

    def close_all(self) -> None:
        self._stopped.set()
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            _close(entry)

    def _start_reaper(self) -> None:
        with self._lock:
            if self._reaper is not None:
                return
            self._reaper = threading.Thread(target=self._reap_forever, name="live-reaper", daemon=True)
            self._reaper.start()

    def _reap_forever(self) -> None:
        while not self._stopped.wait(self.reap_every_s):
            self.reap_idle()


def _close(entry) -> None:
    try:
        entry.close()
    except Exception:  # never let one session stop the others or the reaper
        log.exception("closing a live session failed")
