"""A visitor of the page without a browser: Gradio's queue protocol over plain HTTP, with
its own session hash (one browser tab), and the Live tab's microphone posted to its ticket
as the page's recorder (ui/microphone/browser_mic.js) posts it. For the live_load
benchmark, which needs many visitors at once (a Chromium each would measure the browsers).

    with running_app("tiny.en", "--max-live-sessions", "4", until_warm=True) as app:
        visitor = PageVisitor(url)
        ticket = visitor.record()                       # Record: the session's ticket
        visitor.post(pcm, at=0)                          # int16 samples from sample 0: the HTTP status
        outputs = visitor.tick()                         # the timer's redraw (None: nothing changed)
        outputs = visitor.stop()                         # Stop: the last (empty) chunk, then its handler

The page's events have no API name (api_name=False), so gradio_client will not call them:
they are called as the page calls them, by their place in the page's config (fn_index).
tests/page_client.py speaks the same protocol for the tests (tests may not be imported
from here); this one calls one event at a time, as each benchmark visitor does.
"""

from __future__ import annotations

import json
import secrets
import time
from html.parser import HTMLParser
from typing import List, Optional

import httpx
import numpy as np

from ..audio import SAMPLE_RATE




class EventFailed(RuntimeError):
    """The server refused or failed a page event (gr.Error, queue full): its message."""


class PageVisitor:
    def __init__(self, url: str, timeout: float = 120.0):
        self.url = url.rstrip("/")
        self.session_hash = secrets.token_hex(8)  # this tab, as Gradio's page makes one
        self.http = httpx.Client(timeout=timeout)
        self.timeout = timeout
        config = self.http.get(self.url + "/config").json()
        self.components = {c["id"]: c for c in config["components"]}
        self.dependencies = config["dependencies"]
        self.ticket: Optional[dict] = None

    # --- the page's events

    def event(self, elem_id: Optional[str], trigger: str) -> dict:
        """The event `trigger` of the component `elem_id` (None: of one without, the timer)."""
        for dependency in self.dependencies:
            for target, name in dependency["targets"]:
                owner = self.components.get(target, {}).get("props", {}).get("elem_id")
                if name == trigger and (elem_id is None or owner == elem_id):
                    return dependency
        raise KeyError(f"the page has no {trigger} event on {elem_id}")

    def then(self, dependency: dict) -> dict:
        """The event that runs after `dependency` (Stop's handler runs after its page step)."""
        return next(d for d in self.dependencies if d.get("trigger_after") == dependency["id"])

    def call(self, dependency: dict, first=None) -> Optional[list]:
        """Run one event with the page's default inputs (the first replaced by `first`, if
        given) and wait for it: its outputs (None for an output the server skipped: the page
        keeps what it shows), or EventFailed."""
        inputs = [self.components[i].get("props", {}).get("value") for i in dependency["inputs"]]
        if first is not None:
            inputs[0] = first
        body = {"data": inputs, "event_data": None, "fn_index": dependency["id"],
                "trigger_id": dependency["targets"][0][0], "session_hash": self.session_hash}
        joined = self.http.post(self.url + "/gradio_api/queue/join", json=body)
        if joined.status_code != 200:
            raise EventFailed(joined.text)
        done = self._completion(joined.json()["event_id"])
        output = done.get("output") or {}
        if not done.get("success"):
            raise EventFailed(str(output.get("error") or output))
        return [None if isinstance(v, dict) and v.get("__type__") == "update" and "value" not in v else v
                for v in output.get("data", [])]

    def _completion(self, event_id: str) -> dict:
        """The event's process_completed message, read from this tab's message stream. Gradio
        keeps a tab's messages until its stream connects, and ends the stream once nothing of
        the tab is pending: opened per event, as nothing else of this tab is pending then."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with self.http.stream("GET", self.url + "/gradio_api/queue/data",
                                  params={"session_hash": self.session_hash}) as stream:
                for line in stream.iter_lines():
                    message = json.loads(line[5:]) if line.startswith("data:") else {}
                    if message.get("event_id") == event_id and message.get("msg") == "process_completed":
                        return message
        raise EventFailed(f"event {event_id} did not complete in {self.timeout:.0f} s")

    # --- the Live tab

    def record(self) -> dict:
        """Record pressed with the page holding a microphone (its first step's problem is
        ""): the session's ticket ({"path", "max_chunk_seconds"})."""
        outputs = self.call(self.event("live-record", "click"), first="")
        self.ticket = json.loads(outputs[1])
        return self.ticket

    def post(self, pcm: np.ndarray, at: int, end: bool = False, rate: int = SAMPLE_RATE) -> httpx.Response:
        """One request of the page's recorder: int16 samples from sample `at` of the recording."""
        params = {"at": at, "rate": rate, **({"end": "1"} if end else {})}
        return self.http.post(f"{self.url}/{self.ticket['path']}", params=params,
                              content=np.asarray(pcm, "<i2").tobytes(),
                              headers={"Content-Type": "application/octet-stream"})

    def tick(self) -> Optional[list]:
        """The Live tab's timer: (transcript, stats, panel, chart, Record, Stop, download),
        None for each the page already shows."""
        return self.call(self.event(None, "tick"))

    def stop(self, sent: int) -> list:
        """Stop pressed after `sent` samples: the page's last chunk (empty, end=1), then
        Stop's handler: (timer, Record, Stop, transcript, stats, panel, chart, download)."""
        self.post(np.zeros(0, "<i2"), sent, end=True)
        return self.call(self.then(self.event("live-stop", "click")))

    def close(self) -> None:
        self.http.close()


def pcm16(samples: np.ndarray) -> np.ndarray:
    """float samples in [-1, 1] as the page's recorder sends them."""
    return np.round(np.clip(samples, -1, 1) * 32767).astype("<i2")


class _Committed(HTMLParser):
    """The words inside the transcript's .wk-committed element (the final and streamed
    words, in spans and marks of their own), as the page's text shows them."""

    def __init__(self):
        super().__init__()
        self.open: List[bool] = []  # per open element: whether it is inside .wk-committed
        self.words: List[str] = []

    def handle_starttag(self, tag, attrs):
        inside = bool(self.open and self.open[-1])
        self.open.append(inside or "wk-committed" in (dict(attrs).get("class") or "").split())

    def handle_endtag(self, tag):
        if self.open:
            self.open.pop()

    def handle_data(self, data):
        if self.open and self.open[-1]:
            self.words += data.split()


def committed_text(transcript_html: Optional[str]) -> str:
    """The committed words the transcript's HTML shows, space-separated."""
    parser = _Committed()
    parser.feed(transcript_html or "")
    return " ".join(parser.words)
