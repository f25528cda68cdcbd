"""A visitor of the page over plain HTTP, as the browser is: Gradio's queue protocol with
its own session hash, events called by their place in the page (fn_index), and the Live
tab's microphone posted to its ticket as the page's recorder (browser_mic.js) posts it.
For the tests of what a visitor can make the server do, including the events the page
wires without an API name.

    page = PageClient(url)
    started = page.record()                          # Record: a session and its ticket
    page.send_audio(samples)                         # 0.1 s chunks, in order, as the page sends them
    done = page.stop()                               # outputs and messages of one call
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import httpx
import numpy as np

from whisper_demo.audio import SAMPLE_RATE


def pcm16(samples: np.ndarray) -> np.ndarray:
    """float samples in [-1, 1] as the page's recorder sends them: int16."""
    return np.round(np.clip(samples, -1, 1) * 32767).astype("<i2")


@dataclass
class EventLog:
    """What the server said about one event, as it arrives."""

    messages: List[dict] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def warnings(self) -> List[str]:
        return [m.get("log", "") for m in self.messages if m.get("msg") == "log"]

    @property
    def completed(self) -> Optional[dict]:
        return next((m for m in self.messages if m.get("msg") == "process_completed"), None)

    @property
    def error(self) -> Optional[str]:
        """The message of a failed event (gr.Error or queue refusal), else None."""
        done = self.completed
        if done is None or done.get("success", True):
            return None
        output = done.get("output") or {}
        return str(output.get("error") or output)

    @property
    def outputs(self) -> Optional[list]:
        done = self.completed
        if done is None or not done.get("success"):
            return None
        return (done.get("output") or {}).get("data")

    def streaming(self) -> bool:
        """The server took the stream's chunk and waits for the next."""
        return any(m.get("msg") == "process_streaming" for m in self.messages)


class PageClient:
    def __init__(self, url: str, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.api = self.url + "/gradio_api"
        self.session_hash = secrets.token_hex(6)
        self.http = httpx.Client(timeout=timeout)
        config = self.http.get(self.url + "/config").json()
        self.components = {c["id"]: c for c in config["components"]}
        self.dependencies = config["dependencies"]
        self.events: Dict[str, EventLog] = {}
        self.ticket: Optional[dict] = None  # the Live tab's, after record()
        self.sent = 0  # samples of the recording posted so far
        self.rate = SAMPLE_RATE  # ... at this rate
        self._lock = threading.Lock()
        self._closed = False
        self._reader = threading.Thread(target=self._read_messages, daemon=True)
        self._reader.start()

    # --- the page

    def component_id(self, elem_id: str) -> int:
        return next(i for i, c in self.components.items() if c.get("props", {}).get("elem_id") == elem_id)

    def dependency(self, elem_id: str, trigger: str) -> dict:
        """The event `trigger` of the component `elem_id` (None: of a component without
        one, such as the Live tab's timer)."""
        if elem_id is None:
            return next(d for d in self.dependencies if any(t[1] == trigger for t in d["targets"]))
        target = self.component_id(elem_id)
        return next(d for d in self.dependencies if [target, trigger] in [list(t) for t in d["targets"]])

    def choices(self, elem_id: str) -> list:
        return [c[1] if isinstance(c, (list, tuple)) else c
                for c in self.components[self.component_id(elem_id)]["props"].get("choices", [])]

    def _inputs(self, dependency: dict, first=None) -> list:
        """The page's current values of the event's inputs (their defaults), the first one
        replaced by `first` when given (the chunk of a stream)."""
        values = [self.components[i].get("props", {}).get("value") for i in dependency["inputs"]]
        if first is not None:
            values[0] = first
        return values

    def upload(self, path: Path, name: Optional[str] = None) -> dict:
        """An uploaded file as the page sends it: its FileData."""
        with open(path, "rb") as f:
            response = self.http.post(self.api + "/upload", files={"files": (name or Path(path).name, f)})
        response.raise_for_status()
        server_path = response.json()[0]
        return {"path": server_path, "orig_name": name or Path(path).name, "meta": {"_type": "gradio.FileData"}}

    # --- events

    def _body(self, dependency: dict, data: list) -> dict:
        return {"data": data, "event_data": None, "fn_index": dependency["id"],
                "trigger_id": dependency["targets"][0][0], "session_hash": self.session_hash}

    def submit(self, elem_id: str, trigger: str, first=None) -> str:
        """Join the queue for an event; its id (its messages gather in self.events)."""
        dependency = self.dependency(elem_id, trigger)
        response = self.http.post(self.api + "/queue/join", json=self._body(dependency, self._inputs(dependency, first)))
        if response.status_code != 200:  # refused at the door (queue full)
            log = EventLog(messages=[{"msg": "process_completed", "success": False,
                                      "output": {"error": response.text}}])
            log.done.set()
            event_id = f"refused-{secrets.token_hex(4)}"
        else:
            event_id = response.json()["event_id"]
            log = self._log(event_id)
        with self._lock:
            self.events[event_id] = log
        return event_id

    def call(self, elem_id: str, trigger: str, first=None, timeout: float = 120.0) -> EventLog:
        """An event, waited for until it completes."""
        event_id = self.submit(elem_id, trigger, first)
        log = self.events[event_id]
        assert log.done.wait(timeout), f"{elem_id}.{trigger} did not complete in {timeout} s"
        return log

    def dependency_after(self, elem_id: str, trigger: str) -> dict:
        """The event that runs after `trigger` of `elem_id` (its .then): Stop's handler runs
        after the page's own Stop step."""
        first = self.dependency(elem_id, trigger)["id"]
        return next(d for d in self.dependencies if d.get("trigger_after") == first)

    def call_after(self, elem_id: str, trigger: str, timeout: float = 120.0) -> EventLog:
        dependency = self.dependency_after(elem_id, trigger)
        response = self.http.post(self.api + "/queue/join", json=self._body(dependency, self._inputs(dependency)))
        response.raise_for_status()
        event_id = response.json()["event_id"]
        log = self._log(event_id)
        with self._lock:
            self.events[event_id] = log
        assert log.done.wait(timeout), f"{elem_id}.{trigger}'s follow-up did not complete in {timeout} s"
        return log

    # --- the Live tab's browser microphone

    def record(self, problem: str = "", timeout: float = 120.0) -> EventLog:
        """Record pressed, the page holding a microphone (or `problem`: why it does not):
        the call's log; its ticket, if it gave one, in self.ticket."""
        log = self.call("live-record", "click", problem, timeout=timeout)
        outputs = log.outputs
        self.ticket = json.loads(outputs[1]) if outputs and outputs[1] else None
        self.sent = 0
        return log

    def post_audio(self, pcm: np.ndarray, at: int, rate: int = SAMPLE_RATE, end: bool = False,
                   ticket: Optional[dict] = None) -> httpx.Response:
        """One request of the page's recorder: int16 samples from sample `at` of the recording."""
        ticket = ticket or self.ticket
        params = {"at": at, "rate": rate}
        if end:
            params["end"] = "1"
        return self.http.post(f"{self.url}/{ticket['path']}", params=params, content=np.asarray(pcm, "<i2").tobytes(),
                              headers={"Content-Type": "application/octet-stream"})

    def send_audio(self, samples: np.ndarray, rate: int = SAMPLE_RATE, chunk_seconds: float = 0.1,
                   end: bool = False) -> List[httpx.Response]:
        """float samples posted as the page posts them: chunk by chunk, in order, one at a
        time, continuing the recording. The replies."""
        self.rate = rate
        pcm, step, replies = pcm16(samples), max(1, int(chunk_seconds * rate)), []
        for start in range(0, len(pcm), step):
            chunk = pcm[start:start + step]
            replies.append(self.post_audio(chunk, self.sent, rate, end=end and start + step >= len(pcm)))
            self.sent += len(chunk)
        return replies

    def stop(self, timeout: float = 120.0) -> EventLog:
        """Stop pressed: the page's last chunk (end=1), then Stop's handler."""
        if self.ticket is not None:
            self.post_audio(np.zeros(0, "<i2"), self.sent, self.rate, end=True)
        return self.call_after("live-stop", "click", timeout=timeout)

    def wait(self, event_id: str, predicate, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.events[event_id]):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._closed = True
        self.http.close()

    # --- the message stream (Server-Sent Events, one per page)

    def _log(self, event_id: str) -> EventLog:
        with self._lock:
            return self.events.setdefault(event_id, EventLog())

    def _read_messages(self) -> None:
        """Gradio closes a page's message stream once none of its events is pending, and
        refuses it before the first: (re)open it whenever an event waits for messages."""
        while not self._closed:
            with self._lock:
                waiting = any(not log.done.is_set() for log in self.events.values())
            if not waiting:
                time.sleep(0.05)
                continue
            try:
                with httpx.stream("GET", f"{self.api}/queue/data", params={"session_hash": self.session_hash},
                                  timeout=httpx.Timeout(None, connect=10)) as response:
                    for line in response.iter_lines():
                        if line.startswith("data:"):
                            self._take(json.loads(line[5:]))
            except httpx.HTTPError:
                time.sleep(0.1)

    def _take(self, message: dict) -> None:
        event_id = message.get("event_id")
        if not event_id:
            return
        log = self._log(event_id)
        log.messages.append(message)
        if message.get("msg") == "process_completed":
            log.done.set()
