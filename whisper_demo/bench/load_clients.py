"""The clients of the live load benchmark (live_load.py): one visitor who records a
session through the page's route in real time as the page's recorder does, the probe tab
that times a trivial page event meanwhile, and the hostile tab that floods its own ticket."""

from __future__ import annotations

import html
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import httpx
import numpy as np

from ..audio import SAMPLE_RATE
from ..ui.microphone.mic_stream import ROUTE
from .live_page import commit_delays
from .page_mic import PageSession
from .page_visitor import EventFailed, PageVisitor, committed_text, pcm16

CHUNK_SECONDS = 0.1  # the page's recorder: one request every 0.1 s while the server keeps up
REDRAW_S = 0.25  # the Live tab's timer (ui/live/layout.REFRESH_S): how often the page asks for its view
PROBE_EVERY_S = 1.0
HOSTILE_THREADS, HOSTILE_EVERY_S, HOSTILE_CHUNK_S = 4, 0.05, 0.5
RECORD_AGAIN_S = 1.0  # a hostile tab with no place presses Record again this often
RECORD_REFUSED = "Record refused"  # the hostile tab's count of Records the server turned down (full)


@dataclass
class RecordingSet:
    """One visitor's session: its clips chained, and each word's end in the chain."""

    name: str
    audio: np.ndarray  # 16 kHz mono float, each clip with its silence before and after
    word_ends: List[Tuple[str, float]]


# --- one visitor

@dataclass
class ClientRun:
    """What one visitor's page showed and what the route said to it."""

    set_name: str
    final: str = ""
    delays: List[float] = field(default_factory=list)  # speech -> commit per timed word
    untimed: int = 0  # words of the final text with no offline word to time them from
    refused: Dict[int, int] = field(default_factory=dict)  # HTTP status -> requests refused
    lost_s: float = 0.0  # audio the route filled with silence or the session dropped
    error: Optional[str] = None  # Record refused, or the session failed


def recorded(elapsed_s: float, total: int, block: int) -> int:
    """Samples a microphone has recorded `elapsed_s` after it opened, in whole blocks (the
    recorder hands on its audio a block at a time), at most `total`."""
    return min(total, int(elapsed_s * SAMPLE_RATE) // block * block)


def next_request(sent: int, recorded_now: int, max_samples: int) -> Tuple[int, int]:
    """The page's next request, [start, end): all recorded and not yet sent, up to the
    most one request may carry (so a late reply makes the next request longer)."""
    return sent, min(recorded_now, sent + max_samples)


def post_paced(visitor: PageVisitor, pcm: np.ndarray, started: float) -> Dict[int, int]:
    """Post `pcm` in real time from `started` on, as the page does; the refusals by status."""
    block = int(CHUNK_SECONDS * SAMPLE_RATE)
    most = max(block, int(visitor.ticket["max_chunk_seconds"] * SAMPLE_RATE))
    refused: Dict[int, int] = {}
    sent = 0
    while sent < pcm.size:
        start, end = next_request(sent, recorded(time.monotonic() - started, pcm.size, block), most)
        if end == start:  # nothing new recorded yet: wait for the next block
            time.sleep(max(0.0, started + (sent // block + 1) * block / SAMPLE_RATE - time.monotonic()))
            continue
        status = visitor.post(pcm[start:end], start).status_code
        if status != 200:  # the page goes on with the next chunk (a 409 it would retry: an honest page gets none)
            refused[status] = refused.get(status, 0) + 1
        sent = end
    return refused


class Redraws(threading.Thread):
    """The page's timer: every REDRAW_S, the redraw event; each committed text shown, with
    seconds since `started`."""

    def __init__(self, visitor: PageVisitor, started: float):
        super().__init__(daemon=True)
        self.visitor, self.started = visitor, started
        self.versions: List[Tuple[float, str]] = []
        self.failures: List[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            asked = time.monotonic()
            try:
                outputs = self.visitor.tick()
            except (EventFailed, httpx.HTTPError) as error:  # said in the run's notes; the page would tick on
                self.failures.append(str(error))
                outputs = None
            if outputs and outputs[0] is not None:
                self.versions.append((time.monotonic() - self.started, committed_text(outputs[0])))
            self.done.wait(max(0.0, asked + REDRAW_S - time.monotonic()))

    def finish(self) -> None:
        self.done.set()
        self.join()


def lost_seconds(stats_html: Optional[str]) -> float:
    """Audio the page's stats say was lost: filled with silence by the route (never came) or
    dropped by a session too slow for it (ui/render/live_view.stats_html's words)."""
    text = html.unescape(stats_html or "")
    found = re.findall(r"([\d.]+) s of the microphone's audio never reached", text)
    found += re.findall(r"([\d.]+) s dropped", text)
    return sum(float(x) for x in found)


def visit(url: str, recording: RecordingSet, delay_s: float) -> ClientRun:
    """One visitor's session: Record, its audio in real time with the page's redraws, Stop."""
    time.sleep(delay_s)
    run = ClientRun(recording.name)
    visitor = PageVisitor(url)
    redraws = None
    try:
        visitor.record()
        started = time.monotonic()  # the microphone's audio starts now
        redraws = Redraws(visitor, started)
        redraws.start()
        pcm = pcm16(recording.audio)
        run.refused = post_paced(visitor, pcm, started)
        stopped = time.monotonic() - started
        redraws.finish()  # the page's timer stops at Stop; one event of a tab at a time
        outputs = visitor.stop(pcm.size)  # (timer, Record, Stop, transcript, stats, ...)
        run.final, run.lost_s = committed_text(outputs[3]), lost_seconds(outputs[4])
        versions = redraws.versions + [(time.monotonic() - started, run.final)]  # drawn from Stop's reply
        page = PageSession(final=run.final, versions=versions, mic_opened_s=0.0, stopped_s=stopped,
                           tentative_seen=False, stats_text="", stats_details=[])
        run.delays, _, run.untimed = commit_delays(page, recording.word_ends)
        if redraws.failures:  # a page event that failed under load: the visitor was not served
            run.error = f"{len(redraws.failures)} redraws failed: {redraws.failures[0]}"
    except (EventFailed, httpx.HTTPError, KeyError, ValueError, TypeError) as error:
        run.error = f"{type(error).__name__}: {error}"
    finally:
        if redraws is not None:
            redraws.finish()
        visitor.close()
    return run


# --- the others: a probe tab, and the hostile one

class Probe(threading.Thread):
    """Another tab of the page, timing a trivial event of it (the Live tab's KV cache
    switch, with no session of its own: nothing to do) every PROBE_EVERY_S: what a visitor
    who is not speaking waits for any click while the others speak."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.latencies: List[float] = []  # seconds per event answered
        self.failures = 0
        self.done = threading.Event()

    def run(self) -> None:
        visitor = PageVisitor(self.url)
        switch = visitor.event("live_kv_toggle", "change")
        try:
            while not self.done.wait(PROBE_EVERY_S):
                asked = time.monotonic()
                try:
                    visitor.call(switch)
                    self.latencies.append(time.monotonic() - asked)
                except (EventFailed, httpx.HTTPError):
                    self.failures += 1
        finally:
            visitor.close()


def hostile(url: str, audio: np.ndarray, ready, go, stop, replies, record_after_s: float = 0.0) -> None:
    """The hostile tab (run in a process of its own, so that its threads do not take the
    honest visitors' interpreter lock). Sets `ready` once imported, waits for `go`, then
    `record_after_s`, then presses Record. With a place, HOSTILE_THREADS threads post to its
    ticket together, HOSTILE_CHUNK_S of speech each every HOSTILE_EVERY_S, at the next sample
    the server has not taken (so the server judges its pace, not a gap), round the audio
    endlessly. Refused a place (the server is full), the same threads post to a ticket it
    made up, and it presses Record again every RECORD_AGAIN_S (taking a place if one frees).
    Until `stop` is set; then Stop. Puts its replies in `replies`: HTTP status -> count, and
    RECORD_REFUSED -> the Records the server turned down."""
    visitor = PageVisitor(url)
    counts: Dict[object, int] = {}
    state = {"at": 0}
    lock, together = threading.Lock(), threading.Barrier(HOSTILE_THREADS)
    pcm, size = pcm16(np.tile(audio, 2)), int(HOSTILE_CHUNK_S * SAMPLE_RATE)

    def count(reply) -> None:
        with lock:
            counts[reply] = counts.get(reply, 0) + 1

    def poster():
        while not stop.is_set():
            try:
                together.wait(timeout=5)  # all at once: parallel requests of one ticket
            except threading.BrokenBarrierError:
                return
            at = state["at"]
            start = at % (pcm.size - size)
            status = visitor.post(pcm[start:start + size], at).status_code
            count(status)
            if status == 200:
                with lock:
                    state["at"] = max(state["at"], at + size)
            time.sleep(HOSTILE_EVERY_S)

    try:
        ready.set()  # imported: the run may start
        go.wait()
        time.sleep(record_after_s)
        placed = _try_record(visitor, count)
        threads = [threading.Thread(target=poster, daemon=True) for _ in range(HOSTILE_THREADS)]
        for thread in threads:
            thread.start()
        while not placed and not stop.wait(RECORD_AGAIN_S):
            placed = _try_record(visitor, count)
        stop.wait()
        together.abort()
        for thread in threads:
            thread.join()
        if placed:
            visitor.stop(state["at"])
    except (EventFailed, httpx.HTTPError) as error:
        counts[-1] = 1
        print(f"hostile tab: {type(error).__name__}: {error}", flush=True)
    finally:
        ready.set()  # also when it failed: nobody waits for it in vain
        visitor.close()
        replies.put(counts)


def _try_record(visitor: PageVisitor, count) -> bool:
    """Record: True with a place (the visitor's ticket is then the session's). Refused (the
    server is full): False, and the visitor's ticket is one it made up, which it posts to."""
    try:
        visitor.record()
        return True
    except EventFailed:
        count(RECORD_REFUSED)
        visitor.ticket = {"path": ROUTE.format(ticket=secrets.token_urlsafe(24)).lstrip("/")}
        return False
