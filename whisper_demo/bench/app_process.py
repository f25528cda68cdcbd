"""`python app.py` as a child process on 127.0.0.1 at a free port: the one launcher of the
benchmarks that drive the page (live_page, live_load) and of the tests that do
(tests/app_server.py).

    with running_app("tiny.en", "--max-live-sessions", "4", until_warm=True) as app:
        app.url   # http://127.0.0.1:43123/
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

APP = Path(__file__).resolve().parents[2] / "app.py"
SERVING = re.compile(r"serving on (http://\S+)")  # app.py's line once the page answers
WARMED_LINE = "warm-up done"  # logged by warm_up.py once the first decode's lazy parts are built


class AppDidNotStart(RuntimeError):
    """app.py exited or never said it serves; the message holds its last lines."""


@dataclass
class ServedApp:
    url: str  # as printed by app.py, e.g. http://127.0.0.1:43123/
    port: int
    pid: int
    lines: List[str] = field(default_factory=list)  # what the app printed so far


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(model: str = "tiny.en", *app_args: str, env: Optional[Dict[str, str]] = None,
                start_timeout: float = 240, until_warm: bool = False) -> Iterator[ServedApp]:
    """Start app.py with `model` on the CPU and `app_args`; yield once it serves (and, with
    `until_warm`, once its warm-up is done, so that what is timed then is not the app's
    first decode). Ended (terminated, then killed) on exit. AppDidNotStart otherwise."""
    port = free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.Popen([sys.executable, str(APP), "--model", model, "--device", "cpu",
                             "--port", str(port), *app_args], cwd=APP.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: List[str] = []
    url: List[str] = []
    ready = threading.Event()

    def read_output():  # read to the end: a full pipe would block the app
        warmed = False
        for line in proc.stdout:
            lines.append(line)
            found = SERVING.search(line)
            if found:
                url.append(found.group(1))
            warmed = warmed or WARMED_LINE in line
            if url and (warmed or not until_warm):
                ready.set()

    threading.Thread(target=read_output, daemon=True).start()
    deadline = time.monotonic() + start_timeout
    try:
        while not ready.wait(0.2) and proc.poll() is None and time.monotonic() < deadline:
            pass
        if not ready.is_set():
            raise AppDidNotStart("app.py did not start:\n" + "".join(lines[-40:]))
        yield ServedApp(url=url[0], port=port, pid=proc.pid, lines=lines)
    finally:
        end_process(proc)


def end_process(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """Ask the app to exit; kill it if it has not within `grace_s`."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
