"""What every browser session shares: the loaded models, and the app's defaults.

One ModelStore per process. A model is loaded once, on first request, and kept: the next
user who picks it gets the same object at once. Loading is serialised per name (two
sessions asking for "base" at the same moment load it once, the second waits for the
first), while a request for an already loaded model never waits behind a load of another.

Nothing per-session lives on the model: a decode's cache belongs to that decode (cache.py;
the hooks mode hooks its own copy of the decoder's modules), so sharing the object between
sessions is safe.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from whisper.model import Whisper

from ..audio import DEFAULT_MAX_SECONDS
from ..events import DecodeOptions


@dataclass(frozen=True)
class Defaults:
    """What the command line decided, handed to every tab."""

    model: str = "tiny.en"
    device: Optional[str] = None
    max_audio_seconds: Optional[float] = DEFAULT_MAX_SECONDS
    options: DecodeOptions = field(default_factory=DecodeOptions)
    # How many decodes may run at once (per event; see ui/__init__.py for why 2 on CPU)
    concurrency: int = 2
    max_queue: int = 16


@dataclass
class LoadedModel:
    name: str
    model: Whisper
    load_seconds: float


class ModelStore:
    """Thread-safe name -> loaded Whisper model, each loaded at most once."""

    def __init__(self, device: Optional[str] = None, loader: Optional[Callable[..., Whisper]] = None):
        self.device = device
        self._loader = loader
        self._models: Dict[str, LoadedModel] = {}
        self._lock = threading.Lock()  # guards the two dicts, never held while loading
        self._name_locks: Dict[str, threading.Lock] = {}

    def _load(self, name: str, progress: bool) -> Whisper:
        if self._loader is not None:
            return self._loader(name, device=self.device, progress=progress)
        from ..models import load_model  # models.py pulls in torch weights code; import late

        return load_model(name, device=self.device, progress=progress)

    def get(self, name: str, progress: bool = True) -> Whisper:
        """The model called `name`, loading it the first time. Raises models.ModelError."""
        return self.get_entry(name, progress).model

    def get_entry(self, name: str, progress: bool = True) -> LoadedModel:
        with self._lock:
            entry = self._models.get(name)
            if entry is not None:
                return entry
            name_lock = self._name_locks.setdefault(name, threading.Lock())
        with name_lock:
            with self._lock:
                entry = self._models.get(name)
            if entry is not None:  # loaded by whoever held name_lock before us
                return entry
            started = time.perf_counter()
            model = self._load(name, progress)
            entry = LoadedModel(name, model, time.perf_counter() - started)
            with self._lock:
                self._models[name] = entry
            return entry

    def put(self, name: str, model: Whisper) -> None:
        """Register an already loaded model (app.py loads the default before serving)."""
        with self._lock:
            self._models[name] = LoadedModel(name, model, 0.0)

    def is_loaded(self, name: str) -> bool:
        with self._lock:
            return name in self._models

    def loaded(self) -> List[str]:
        with self._lock:
            return list(self._models)
