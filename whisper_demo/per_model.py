"""What is made once per model and shared by every decode: an encoder's cast or quantized
weights (bf16_encoder.py, int8_encoder.py).

Kept while the model lives (a weak reference: a model the app unloads takes its copies with
it), made under a lock so that two first decodes at once make one copy."""

import threading
import weakref
from typing import Callable, Generic, TypeVar

Made = TypeVar("Made")


class PerModel(Generic[Made]):
    """made = per_model(model): `make(model)` on first use, the same object after."""

    def __init__(self, make: Callable[[object], Made]):
        self._make = make
        self._made: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, model) -> Made:
        with self._lock:
            if model not in self._made:
                self._made[model] = self._make(model)
            return self._made[model]

    def __contains__(self, model) -> bool:
        return model in self._made
