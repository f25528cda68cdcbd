"""Shared fixtures: the real tiny.en model (loaded once) and the bundled speech clips."""

import json
from pathlib import Path

import pytest

import whisper_demo  # noqa: F401  (first: it sets OpenMP's wait policy before torch loads)
import torch

DATA = Path(__file__).parent / "data"

# At most two threads, as on the 2-core machines the project is measured on.
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(scope="session")
def tiny_model():
    from whisper_demo.models import load_model

    return load_model("tiny.en", device="cpu", progress=False)


@pytest.fixture(scope="session")
def transcripts():
    return json.loads((DATA / "transcripts.json").read_text())


@pytest.fixture(scope="session")
def clip():
    """clip("jfk.wav") -> float32 mono 16 kHz samples."""
    from whisper_demo.audio import load_audio

    cache = {}

    def load(name):
        if name not in cache:
            cache[name] = load_audio(DATA / name)
        return cache[name]

    return load
