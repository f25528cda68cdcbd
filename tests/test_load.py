"""Twenty visitors at once against `python app.py` on 127.0.0.1: ten upload a clip to
/transcribe, ten stream the Live tab's microphone chunks, all started together, each
bounded in what it sends. Meanwhile one more visitor asks for a plain transcribe.

What must hold whatever the timing: the plain transcribe is answered within PROBE_BOUND_S;
the server's memory stays under MEMORY_BOUND_MB above what it held before; every visitor
gets its own text (the clip it sent) or a clear refusal (the server's live session limit);
no more live sessions run than the limit; and no committed word a live visitor was shown
is missing from its final text.
"""

from html.parser import HTMLParser
import threading
import time

import psutil
import pytest

from app_server import running_app
from page_client import PageClient
from whisper_demo.audio import SAMPLE_RATE, load_audio
from whisper_demo.examples import clip_path

pytestmark = pytest.mark.model  # a real server with tiny.en (conftest sorts by fixtures; this has none)

UPLOADERS = 10
STREAMERS = 10
LIVE_LIMIT = 3
LIVE_SECONDS = 4.0  # of jfk.wav: "And so, my fellow Americans"
PROBE_BOUND_S = 120.0  # generous: two decode slots, ten uploads queued, three live decoders
MEMORY_BOUND_MB = 1500.0
SHORT = clip_path("short_3s.wav")
JFK = clip_path("jfk.wav")
class _CommittedText(HTMLParser):
    """The text inside the transcript's .wk-committed span (final and streamed words, in
    spans of their own)."""

    def __init__(self):
        super().__init__()
        self.depth, self.parts = 0, []  # depth: open elements inside .wk-committed

    def handle_starttag(self, tag, attrs):
        if self.depth or "wk-committed" in (dict(attrs).get("class") or "").split():
            self.depth += 1

    def handle_endtag(self, tag):
        self.depth = max(0, self.depth - 1)

    def handle_data(self, data):
        if self.depth:
            self.parts.append(data)


def committed_text(transcript_html) -> str:
    if not isinstance(transcript_html, str):
        return ""
    parser = _CommittedText()
    parser.feed(transcript_html)
    return " ".join("".join(parser.parts).split())


def upload_visitor(url: str, results: dict, index: int) -> None:
    from gradio_client import Client, handle_file

    try:
        text, *_ = Client(url, verbose=False).predict(
            handle_file(str(SHORT)), True, "static", 1, "auto", True, "tiny.en", api_name="/transcribe")
        results[f"upload{index}"] = ("text", text)
    except Exception as exc:  # a refusal is an answer too; the test reads what it says
        results[f"upload{index}"] = ("refused", str(exc))


def live_visitor(url: str, speech, results: dict, index: int) -> None:
    page = PageClient(url)
    seen_committed = []
    try:
        started = page.record(timeout=90)
        if started.error:
            results[f"live{index}"] = ("refused", started.error)
            return
        accepted = time.monotonic()  # the server runs this session from before now...
        step = SAMPLE_RATE // 10
        for i, start in enumerate(range(0, len(speech), step), start=1):
            page.send_audio(speech[start:start + step])  # the page's 0.1 s chunks
            time.sleep(0.02)
            if i % 10 == 0:  # what the page's timer would show: committed words so far
                tick = page.call(None, "tick", timeout=60)
                if tick.outputs:
                    seen_committed.append(committed_text(tick.outputs[0]))
        stopping = time.monotonic()  # ...until after now
        stop = page.stop(timeout=120)
        final = committed_text(stop.outputs[3]) if stop.outputs else ""  # timer, Record, Stop, transcript
        results[f"live{index}"] = ("text", final, seen_committed, (accepted, stopping))
    except Exception as exc:
        results[f"live{index}"] = ("failed", repr(exc))
    finally:
        page.close()


def test_twenty_visitors_at_once_each_get_their_text_or_a_clear_refusal(tmp_path):
    from gradio_client import Client, handle_file

    speech = load_audio(JFK)[: int(LIVE_SECONDS * SAMPLE_RATE)]
    with running_app("--max-live-sessions", str(LIVE_LIMIT)) as server:
        process = psutil.Process(server.pid)
        probe = Client(server.url, verbose=False)
        probe.predict(handle_file(str(SHORT)), True, "static", 1, "auto", True, "tiny.en",
                      api_name="/transcribe")  # warm: the first decode compiles and allocates
        baseline_mb = process.memory_info().rss / 2**20
        peak = {"mb": baseline_mb}
        sampling = threading.Event()

        def sample_memory():
            while not sampling.wait(0.2):
                peak["mb"] = max(peak["mb"], process.memory_info().rss / 2**20)

        sampler = threading.Thread(target=sample_memory, daemon=True)
        sampler.start()
        results: dict = {}
        visitors = [threading.Thread(target=upload_visitor, args=(server.url, results, i)) for i in range(UPLOADERS)]
        visitors += [threading.Thread(target=live_visitor, args=(server.url, speech, results, i))
                     for i in range(STREAMERS)]
        began = time.monotonic()
        for visitor in visitors:
            visitor.start()
        time.sleep(2.0)  # all twenty are in: the probe comes behind them
        asked = time.monotonic()
        text, *_ = probe.predict(handle_file(str(JFK)), True, "static", 1, "auto", True, "tiny.en",
                                 api_name="/transcribe")
        probe_s = time.monotonic() - asked
        for visitor in visitors:
            visitor.join(timeout=max(1.0, 240 - (time.monotonic() - began)))
        sampling.set()
        took = time.monotonic() - began

    print(f"load: {took:.0f} s in all, a plain transcribe {probe_s:.1f} s, server memory "
          f"{baseline_mb:.0f} -> peak {peak['mb']:.0f} MB")
    assert "ask not what your country can do for you" in text.lower()
    assert probe_s < PROBE_BOUND_S, f"a plain transcribe took {probe_s:.1f} s under load"
    assert not any(v.is_alive() for v in visitors), f"visitors still busy after {took:.0f} s"
    assert peak["mb"] - baseline_mb < MEMORY_BOUND_MB, (baseline_mb, peak["mb"])

    uploads = [results[f"upload{i}"] for i in range(UPLOADERS)]
    assert all(kind == "text" and "door" in text.lower() for kind, text in uploads), uploads
    lives = [results[f"live{i}"] for i in range(STREAMERS)]
    assert not [r for r in lives if r[0] == "failed"], lives
    served = [r for r in lives if r[0] == "text"]
    refused = [r for r in lives if r[0] == "refused"]
    assert served and len(served) + len(refused) == STREAMERS, lives
    assert all("busy" in message and "--max-live-sessions" in message for _, message in refused), refused
    # sessions at once: each client's span lies within its session's life on the server, so
    # spans that overlap are sessions that ran together, whatever the timing
    spans = [r[3] for r in served]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) <= LIVE_LIMIT, spans
    for _, final, seen, _ in served:
        assert "americans" in final.lower(), final  # its own clip, not an upload's
        for shown in seen:  # nothing a visitor was shown as committed went missing
            assert final.startswith(shown), (shown, final)
