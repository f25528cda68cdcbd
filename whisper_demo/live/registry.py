"""Live sessions by key (one per browser tab), and the closing of idle ones.

A session holds a decode thread and up to a window of audio: a tab that goes away
without saying so must not keep them. The registry closes any session with no audio for
`idle_timeout_s`, from a reaper thread that it starts on first use.
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


Entry = TypeVar("Entry", bound=Closable)


class SessionRegistry(Generic[Entry]):
    def __init__(self, idle_timeout_s: float = IDLE_TIMEOUT_S, reap_every_s: Optional[float] = None):
        self.idle_timeout_s = idle_timeout_s
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
        old one closed). Atomic: concurrent chunks of one stream find the same session."""
        self._start_reaper()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and reuse(entry):
                return entry
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

    def reap_idle(self) -> int:
        """Close the sessions with no audio for idle_timeout_s; how many were closed."""
        with self._lock:
            idle: List[str] = [k for k, e in self._entries.items()
                               if e.idle_seconds() > self.idle_timeout_s]
            closing = [self._entries.pop(k) for k in idle]
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
