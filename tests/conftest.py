"""Shared fixtures: the real tiny.en model (loaded once) and the example speech clips
(whisper_demo/examples/, shipped with the package)."""


import os

# Before torch loads, as app.py does (README, "Threads"): tests share 2 cores with servers
# and browsers they start, where OpenMP's active wait costs 6-10x per decoder step.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest
import torch

from whisper_demo.examples import EXAMPLES_DIR as EXAMPLES  # the clips and transcripts.json
from whisper_demo.examples import reference_transcripts

# The CUDA tests run only where scripts/gpu-check asks for them (CI has no GPU, and a skip
# there is a failure).
collect_ignore = [] if os.environ.get("WHISPER_KV_GPU") == "1" else ["test_cuda.py"]

# At most two threads, as on the 2-core machines the project is measured on.
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(scope="session")
def tiny_model():
    from whisper_demo.models import load_model

    return load_model("tiny.en", device="cpu", progress=False)


@pytest.fixture(scope="session")
def transcripts():
    return reference_transcripts()


@pytest.fixture(scope="session")
def clip():
    """clip("jfk.wav") -> float32 mono 16 kHz samples."""
    from whisper_demo.audio import load_audio

    cache = {}

    def load(name):
        if name not in cache:
            cache[name] = load_audio(EXAMPLES / name)
        return cache[name]

    return load


@pytest.fixture(scope="session")
def jfk_features(tiny_model, clip):
    """tiny.en's encoder output for jfk.wav, one 30 s window as transcribe pads it."""
    from whisper.audio import N_SAMPLES, log_mel_spectrogram, pad_or_trim

    mel = log_mel_spectrogram(torch.from_numpy(clip("jfk.wav")), padding=N_SAMPLES)
    mel = pad_or_trim(mel[:, : mel.shape[-1] - N_SAMPLES // 160], 3000)
    with torch.inference_mode():
        return tiny_model.encoder(mel.unsqueeze(0))


# --- the page in Chromium (test_browser.py, test_page_browser.py: each starts its `server`)


@pytest.fixture(scope="module")
def browser():
    """Chromium with jfk.wav as its microphone, one per module (browser_page.py)."""
    from browser_page import chromium

    with chromium(fake_microphone=EXAMPLES / "jfk.wav") as b:
        yield b


@pytest.fixture
def page(browser, server):
    """A fresh page of the module's `server` (an app_server.running_app), loaded."""
    from browser_page import open_page

    with open_page(browser, server.url) as page:
        yield page


# --- tiers: quick / model / browser / realtime (pytest.ini) ---------------------------------
# A test's tier follows from what it uses, so a new test is sorted without a decorator:
# the fixtures it asks for (directly or through other fixtures) and the browser modules.
# A test that feeds audio in real time marks itself `realtime`.

MODEL_FIXTURES = {"tiny_model", "tiny", "base", "base_model", "tiny_ct2", "fresh_cache", "server",
                  "live_server", "served"}
BROWSER_FIXTURES = {"browser", "page", "live_server"}
BROWSER_MODULES = {"test_browser.py", "test_live_browser.py", "test_page_browser.py"}
MODEL_MODULES = {"test_bench.py", "test_load.py"}  # these load their model themselves
TIERS = ("model", "browser", "realtime", "process")


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & MODEL_FIXTURES or item.path.name in MODEL_MODULES:
            item.add_marker(pytest.mark.model)
        if used & BROWSER_FIXTURES or item.path.name in BROWSER_MODULES:
            item.add_marker(pytest.mark.browser)
        if not any(item.get_closest_marker(tier) for tier in TIERS):
            item.add_marker(pytest.mark.quick)


@pytest.fixture(autouse=True)
def _quick_stays_quick(request, monkeypatch):
    """A test sorted into the quick tier may not load a Whisper model or start a Python
    process: it fails at once, saying which marker it needs, instead of making
    `pytest -m quick` slow without a word. CI runs every tier, so a new test sorted wrong
    fails there too."""
    if request.node.get_closest_marker("quick") is None:
        return
    import subprocess
    import sys

    from whisper.model import Whisper

    def refuse(what: str, marker: str):
        pytest.fail(f"{request.node.nodeid} is in the quick tier but {what}: ask for a model "
                    f"fixture or mark it @pytest.mark.{marker} (tests/conftest.py)", pytrace=False)

    def no_model(*args, **kwargs):  # a model is built: weights are loaded
        refuse("builds a Whisper model", "model")

    class NoPythonProcess(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            if isinstance(args, (list, tuple)) and args and str(args[0]) == sys.executable:
                refuse("starts a Python process", "process")
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(Whisper, "__init__", no_model)
    monkeypatch.setattr(subprocess, "Popen", NoPythonProcess)


# --------------------------------------------------------------------------------------
# In CI (CI=true, set by .ci/run) every test runs or fails: CI installs ffmpeg, chromium,
# espeak-ng, PortAudio and playwright, so a skip there means a missing tool or a test that
# quietly did not run. Outside CI a developer without a tool still gets a skip, with the
# reason.

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
