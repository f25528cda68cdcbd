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


# --------------------------------------------------------------------------------------
# In CI (CI=true, set by .ci/run) every test runs or fails: CI installs ffmpeg, chromium,
# espeak-ng, PortAudio and playwright, so a skip there means a missing tool or a test that
# quietly did not run. Outside CI a developer without a tool still gets a skip, with the
# reason.

import os  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _skip_to_failure(report, what: str) -> None:
    reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"{what} skipped in CI (CI=true), where every test must run: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        _skip_to_failure(report, item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped:  # a module-level skip or importorskip
        _skip_to_failure(report, collector.nodeid)
