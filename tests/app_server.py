"""`python app.py` as a real server for the tests that drive it over HTTP or in a browser."""

import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import pytest

# shared with the live_page benchmark, which drives the page the same way
from whisper_demo.bench.page_mic import CHROMIUM, chromium_args, free_port  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@dataclass
class AppServer:
    url: str  # as printed by app.py, e.g. http://127.0.0.1:43123/
    port: int
    pid: int
    lines: List[str] = field(default_factory=list)  # what the app printed so far


@contextmanager
def running_app(*args: str, env: Optional[Dict[str, str]] = None, start_timeout: float = 240):
    """Start app.py with tiny.en on a free port; yield once it says it is serving."""
    port = free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "app.py"), "--model", "tiny.en", "--device", "cpu",
         "--port", str(port), *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines, url, found = [], {}, threading.Event()

    def read_output():
        for line in proc.stdout:
            lines.append(line)
            match = re.search(r"serving on (http://\S+)", line)
            if match:
                url["value"] = match.group(1)
                found.set()

    threading.Thread(target=read_output, daemon=True).start()
    deadline = time.time() + start_timeout
    while not found.is_set() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    try:
        if not found.is_set():
            pytest.fail("app.py did not start:\n" + "".join(lines[-40:]))
        yield AppServer(url=url["value"], port=port, pid=proc.pid, lines=lines)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def require_chromium():
    """Skip without Debian's chromium on a developer machine; in CI its absence fails."""
    if not Path(CHROMIUM).exists():
        if IN_CI:
            pytest.fail(f"{CHROMIUM} is missing; CI must install chromium", pytrace=False)
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)", allow_module_level=True)
