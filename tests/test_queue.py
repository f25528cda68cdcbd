"""The queue, driven by concurrent clients: 2 decodes at once, 16 waiting, each
waiting client told its place, the next one told the queue is full, and every queued
decode served once the first ones finish.

The page is served in this process so that a gate can hold the decodes that reach the
decoder: while it is closed, what the queue does with the rest is observable without any
race against decode times.
"""

import threading
import time

import pytest

from whisper_demo.examples import clip_path
from whisper_demo.ui import Defaults, ModelStore, build_app, launch

SHORT = clip_path("short_3s.wav")


@pytest.fixture
def gated_page(tiny_model, monkeypatch):
    import whisper_demo.ui.transcribe.handlers as tab

    state = {"running": 0, "peak": 0, "started": 0}
    lock = threading.Lock()
    gate = threading.Event()
    real = tab.stream_transcribe

    def gated(model, samples, options):
        with lock:
            state["running"] += 1
            state["started"] += 1
            state["peak"] = max(state["peak"], state["running"])
        try:
            assert gate.wait(300), "gate never opened"
            yield from real(model, samples, options)
        finally:
            with lock:
                state["running"] -= 1

    monkeypatch.setattr(tab, "stream_transcribe", gated)
    store = ModelStore(device="cpu")
    store.put("tiny.en", tiny_model)
    defaults = Defaults(model="tiny.en")
    assert (defaults.concurrency, defaults.max_queue) == (2, 16)  # what the README states
    app = build_app(store, defaults)
    from app_server import free_port

    url = launch(app, port=free_port(), block=False)
    try:
        yield url, state, gate
    finally:
        gate.set()
        app.close()


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def test_two_run_sixteen_wait_with_their_place_and_the_next_is_refused(gated_page):
    from gradio_client import Client, handle_file

    url, state, gate = gated_page
    args = (handle_file(str(SHORT)), True, "static", 1, "auto", True, "tiny.en")
    clients = [Client(url, verbose=False) for _ in range(19)]

    running = [c.submit(*args, api_name="/transcribe") for c in clients[:2]]
    _wait(lambda: state["running"] == 2, 120, "two decodes to start")
    def place(job):
        status = job.status()
        return status.rank if status.code.name == "IN_QUEUE" else None

    def places():
        return [place(j) for j in waiting]

    waiting = []
    for c in clients[2:18]:  # one after another, so that each one's place is known
        job = c.submit(*args, api_name="/transcribe")
        waiting.append(job)
        _wait(lambda job=job: place(job) is not None, 60, f"client {len(waiting)} to be told its place")

    _wait(lambda: None not in places(), 60, "16 clients to be told their place")
    assert places() == list(range(16)), places()  # each told its own place, in arrival order
    assert waiting[-1].status().queue_size == 16  # the 16th is told it is last of 16
    time.sleep(1.0)
    assert state["running"] == 2 and state["started"] == 2  # nobody jumped the queue

    refused = clients[18].submit(*args, api_name="/transcribe")
    with pytest.raises(Exception, match="[Qq]ueue is full"):
        refused.result(timeout=60)

    gate.set()
    for job in running + waiting:
        text, *_ = job.result(timeout=300)
        assert "close the door" in text.lower()
    assert state["peak"] == 2 and state["started"] == 18


def test_the_queue_does_not_summarise_its_events_after_each_one(tiny_model, monkeypatch):
    # Gradio's queue summarises every recorded event with pandas after each event, for a
    # monitoring page the app does not enable; a live page sends ~14 events a second
    from whisper_demo.ui import ANALYTICS_EVERY_ENV

    monkeypatch.delenv(ANALYTICS_EVERY_ENV, raising=False)
    store = ModelStore(device="cpu")
    store.put("tiny.en", tiny_model)
    queue = build_app(store, Defaults(model="tiny.en"))._queue
    records = [{"function": "chunk", "status": "success", "process_time": 0.01}] * 100
    queue.events_recorded = 100  # a hundred events since the queue started
    assert queue.compute_analytics_summary(records)["functions"] == {}  # not summarised
    queue.events_recorded = 10_000
    assert "chunk" in queue.compute_analytics_summary(records)["functions"]  # once per 10,000
