"""`python app.py` as a real server for the tests that drive it over HTTP or in a browser."""

import os
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Dict, Optional

import pytest

# shared with the live_page benchmark, which drives the page the same way
from whisper_demo.bench import app_process
from whisper_demo.bench.app_process import free_port  # noqa: F401
from whisper_demo.bench.page_mic import CHROMIUM, chromium_args  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@contextmanager
def running_app(*args: str, env: Optional[Dict[str, str]] = None, start_timeout: float = 240):
    """Start app.py with tiny.en on a free port (bench/app_process.py); yield its ServedApp
    once it says it is serving; a start that fails fails the test with the app's output."""
    with ExitStack() as stack:
        try:
            app = stack.enter_context(app_process.running_app("tiny.en", *args, env=env,
                                                              start_timeout=start_timeout))
        except app_process.AppDidNotStart as error:
            pytest.fail(str(error))
        yield app


def require_chromium():
    """Skip without Debian's chromium on a developer machine; in CI its absence fails."""
    if not Path(CHROMIUM).exists():
        if IN_CI:
            pytest.fail(f"{CHROMIUM} is missing; CI must install chromium", pytrace=False)
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)", allow_module_level=True)
