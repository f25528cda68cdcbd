"""What every browser session shares: the loaded models, and the app's defaults.

One ModelStore per process. A model is loaded once, on first request, and kept: the next
user who picks it gets the same object at once. Which names may be loaded at all is the
sharing policy's call (sharing.py: on a shared server, the offline models or the ones the
operator named); past `max_models` loaded, the least recently used one is let go (the
startup model, registered with put(), stays). Aliases of one file ("large" and
"large-v3") are one entry. Loading is serialised per name (two
sessions asking for "base" at the same moment load it once, the second waits for the
first), while a request for an already loaded model never waits behind a load of another.

Nothing per-session lives on the model: a decode's cache belongs to that decode (cache.py;
the hooks mode hooks its own copy of the decoder's modules), so sharing the object between
sessions is safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set

from whisper.model import Whisper

from ..audio import DEFAULT_MAX_SECONDS
from ..events import DecodeOptions
from ..limits import DEFAULT_MAX_LIVE_MINUTES, Limits
from ..model_sources import ModelError
from ..sharing import SharingPolicy

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Defaults:
    """What the command line decided, handed to every tab."""

    model: str = "tiny.en"
    device: Optional[str] = None
    max_audio_seconds: Optional[float] = DEFAULT_MAX_SECONDS
    options: DecodeOptions = field(default_factory=DecodeOptions)
    # The Live tab's precision. app.py makes it the fast mode on the CPU: measured per
    # session it commits as accurate a text as exact (docs/live.md), and its bfloat16
    # encoder takes a quarter of a re-decode's encoder time, which a live word waits for.
    live_precision: str = "exact"
    # How many decodes may run at once (per event; see ui/__init__.py for why 2 on CPU)
    concurrency: int = 2
    max_queue: int = 16
    # What a visitor may make the server do (sharing.py) and how much of it (limits.py)
    policy: SharingPolicy = field(default_factory=SharingPolicy)
    limits: Limits = field(default_factory=Limits)
    # The longest a live session runs from Record (--max-live-minutes); None: no limit.
    # Past it the session is ended, its text kept (live/tab_session.py)
    max_live_seconds: Optional[float] = DEFAULT_MAX_LIVE_MINUTES * 60

    def offered_models(self, choices: list) -> list:
        """The model dropdown's (label, name) choices this server offers."""
        return [c for c in choices if self.policy.allows(c[1] if isinstance(c, tuple) else c)]


@dataclass
class LoadedModel:
    name: str
    model: Whisper
    load_seconds: float


class ModelStore:
    """Thread-safe name -> loaded Whisper model, each loaded at most once."""

    def __init__(self, device: Optional[str] = None, loader: Optional[Callable[..., Whisper]] = None,
                 policy: Optional[SharingPolicy] = None, max_models: Optional[int] = None):
        self.device = device
        self._loader = loader
        self.policy = policy or SharingPolicy()
        self.max_models = max_models
        # least recently used first: get() moves a model to the end
        self._models: "OrderedDict[str, LoadedModel]" = OrderedDict()
        self._pinned: Set[str] = set()  # registered with put(): never unloaded
        self._lock = threading.Lock()  # guards the dicts, never held while loading
        self._name_locks: Dict[str, threading.Lock] = {}

    @staticmethod
    def _key(name: str) -> str:
        from ..models import canonical_name

        return canonical_name(name)

    def _check_allowed(self, name: str) -> None:
        if not (self.policy.allows(name) or self.policy.allows(self._key(name))):
            raise ModelError(self.policy.refusal(name))

    def _load(self, name: str, progress: bool) -> Whisper:
        if self._loader is not None:
            return self._loader(name, device=self.device, progress=progress)
        from ..models import load_model  # models.py pulls in torch weights code; import late

        return load_model(name, device=self.device, progress=progress)

    def get(self, name: str, progress: bool = True) -> Whisper:
        """The model called `name`, loading it the first time. Raises models.ModelError."""
        return self.get_entry(name, progress).model

    def get_entry(self, name: str, progress: bool = True) -> LoadedModel:
        """Raises models.ModelError for a name this server does not offer (sharing.py)."""
        key = self._key(name)
        with self._lock:
            entry = self._models.get(key)
            if entry is not None:
                self._models.move_to_end(key)
                return entry
        self._check_allowed(name)  # before anything is downloaded or loaded
        with self._lock:
            name_lock = self._name_locks.setdefault(key, threading.Lock())
        with name_lock:
            with self._lock:
                entry = self._models.get(key)
            if entry is not None:  # loaded by whoever held name_lock before us
                return entry
            started = time.perf_counter()
            model = self._load(key, progress)
            entry = LoadedModel(key, model, time.perf_counter() - started)
            with self._lock:
                self._models[key] = entry
                unloaded = self._unload_beyond_limit(keep=key)
            for old in unloaded:  # decodes still running keep their own reference
                log.info("model %s unloaded: %d models are the most kept in memory (--max-models)",
                         old, self.max_models)
            return entry

    def _unload_beyond_limit(self, keep: str) -> List[str]:
        """Under the lock: drop least recently used models past max_models."""
        unloaded: List[str] = []
        if self.max_models is None:
            return unloaded
        for key in list(self._models):
            if len(self._models) <= self.max_models:
                break
            if key != keep and key not in self._pinned:
                del self._models[key]
                unloaded.append(key)
        return unloaded

    def put(self, name: str, model: Whisper) -> None:
        """Register an already loaded model (app.py loads the default before serving); it
        stays loaded whatever max_models says."""
        key = self._key(name)
        with self._lock:
            self._models[key] = LoadedModel(key, model, 0.0)
            self._pinned.add(key)

    def is_loaded(self, name: str) -> bool:
        with self._lock:
            return self._key(name) in self._models

    def loaded(self) -> List[str]:
        with self._lock:
            return list(self._models)
