"""What the browser microphone's route refuses, and when (ui/microphone/route.py and
mic_stream.py): a second request of a ticket while one is in flight, audio ahead of the
wall clock since Record, a request with an unknown ticket (before a byte of its body is
read), a handler call without a Gradio session, and a session past --max-live-minutes
(closed, its text kept). The route is driven as Starlette drives it, in one event loop,
with a clock the test moves: nothing sleeps, nothing is timed."""

import asyncio
import threading

import gradio as gr
import numpy as np
import pytest
from starlette.applications import Starlette

from whisper_demo.limits import Limits
from whisper_demo.ui.microphone.mic_stream import BUSY, MAX_AHEAD_SECONDS, MicStreams
from whisper_demo.ui.microphone.route import audio_route
from whisper_demo.ui.store import Defaults, ModelStore

RATE = 1000


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Body:
    """A request body the test hands over when it chooses, saying whether it was read."""

    def __init__(self, data: bytes, held: bool = False):
        self.data, self.read = data, False
        self.go = asyncio.Event()
        if not held:
            self.go.set()

    async def receive(self):
        self.read = True
        await self.go.wait()
        return {"type": "http.request", "body": self.data, "more_body": False}


async def post(app, ticket: str, body: Body, at: int = 0, rate: int = RATE, length=None):
    """One POST to the route as Starlette serves it: (status, the JSON reply's text)."""
    sent = []

    async def send(message):
        sent.append(message)

    length = len(body.data) if length is None else length
    scope = {"type": "http", "method": "POST", "path": f"/live-audio/{ticket}", "raw_path": b"",
             "query_string": f"at={at}&rate={rate}".encode(), "root_path": "", "scheme": "http",
             "server": ("test", 80), "client": ("test", 1), "http_version": "1.1",
             "headers": [(b"content-length", str(length).encode())]}
    await app(scope, body.receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()


class Sink:
    def __init__(self):
        self.fed, self.why_not = 0, None

    def feed(self, rate, samples, arrived):
        self.fed += samples.size

    def accepting(self):
        return self.why_not


def route_app(limits=Limits(), clock=None):
    clock = clock or Clock()
    streams = MicStreams(limits, clock=clock)
    return Starlette(routes=[audio_route(streams)]), streams, clock


def seconds(n: float) -> bytes:
    return np.zeros(int(n * RATE), "<i2").tobytes()


def test_a_second_request_of_a_ticket_while_one_is_in_flight_is_refused_at_once():
    app, streams, clock = route_app()
    sink = Sink()
    ticket = streams.open("tab", sink.feed, sink.accepting).ticket

    async def both():
        first = Body(seconds(0.5), held=True)  # its body still on its way
        pending = asyncio.ensure_future(post(app, ticket, first))
        while not first.read:  # the first request holds the ticket's place
            await asyncio.sleep(0)
        second = Body(seconds(0.5))
        refused = await post(app, ticket, second, at=500)  # answered while the first waits
        assert not second.read
        first.go.set()
        return refused, await pending

    clock.now = 10.0
    (status, reply), (first_status, _) = asyncio.run(both())
    assert status == 409 and BUSY.split(":")[0] in reply
    assert first_status == 200 and sink.fed == 500
    # the place is free again once the first request is answered
    assert asyncio.run(post(app, ticket, Body(seconds(0.5)), at=500))[0] == 200 and sink.fed == 1000


def test_audio_ahead_of_the_clock_since_record_is_refused():
    app, streams, clock = route_app(Limits(max_chunk_seconds=5))
    sink = Sink()
    ticket = streams.open("tab", sink.feed, sink.accepting).ticket  # Record at 0 s
    assert asyncio.run(post(app, ticket, Body(seconds(MAX_AHEAD_SECONDS))))[0] == 200  # what a page had before
    status, reply = asyncio.run(post(app, ticket, Body(seconds(1)), at=3000))
    assert status == 429 and "ahead of the time since Record" in reply and sink.fed == 3000
    clock.now = 1.0  # a second later that second fits
    assert asyncio.run(post(app, ticket, Body(seconds(1)), at=3000))[0] == 200 and sink.fed == 4000
    # a gap's silence counts too: 2 s that never came + 0.5 s sent would make 6.5 s at 1 s
    status, reply = asyncio.run(post(app, ticket, Body(seconds(0.5)), at=6000))
    assert status == 429 and sink.fed == 4000
    assert [m.split(" of the time")[0] for m in streams.refusals("tab")] == [
        "the live audio is 4.0 s ahead", "the live audio is 5.5 s ahead"]


def test_an_unknown_ticket_is_refused_before_its_body_is_read():
    app, streams, clock = route_app(Limits(max_chunk_bytes=1000))
    for length in (2000, 20_000_000):  # within the size limit, and far over it: both unread
        body = Body(seconds(1))
        status, reply = asyncio.run(post(app, "made-up", body, length=length))
        assert status == 410 and "press Record" in reply and not body.read
    # a known ticket over the size limit is refused by its declared size, also unread
    ticket = streams.open("tab", Sink().feed, lambda: None).ticket
    body = Body(seconds(1))
    assert asyncio.run(post(app, ticket, body))[0] == 413 and not body.read


def test_a_ticket_is_forgotten_as_soon_as_its_session_takes_no_more_audio():
    app, streams, clock = route_app()
    sink = Sink()
    stream = streams.open("tab", sink.feed, sink.accepting)
    sink.why_not = "Live transcription stopped: the decoder broke."
    status, reply = asyncio.run(post(app, stream.ticket, Body(seconds(0.1))))
    assert status == 410 and "the decoder broke" in reply and streams.of("tab") is None
    again = streams.open("tab", sink.feed, lambda: None)
    again.discard()  # what TabSession.close does (Stop, the tab closed, closed for quiet)
    assert streams.of("tab") is None and asyncio.run(post(app, again.ticket, Body(b"")))[0] == 410


class NoSession:
    session_hash = None


def test_a_handler_call_without_a_gradio_session_is_refused():
    from whisper_demo.ui.live.sessions import NO_SESSION
    from whisper_demo.ui.live.tab import LiveTab

    tab = LiveTab(ModelStore(device="cpu"), Defaults(model="tiny.en"))
    calls = [lambda r: tab.browser.start("", True, "static", request=r), lambda r: tab.browser.stop(request=r),
             lambda r: tab.live.tick(r), lambda r: tab.desktop.start(True, "static", request=r),
             lambda r: tab.browser.set_options(True, "static", request=r)]
    for request in (None, NoSession()):
        for call in calls:
            with pytest.raises(gr.Error, match="without a Gradio session"):
                call(request)
        tab.live.page_closed(request)  # nothing to close
    assert "reload the page" in NO_SESSION and len(tab.sessions) == 0


class FinalSession:
    """A LiveSession that decodes nothing and, asked to finish, makes "hello world" final."""

    audio_seconds = 0.0

    def __init__(self, decoder, config=None):
        self.fed = threading.Event()

    def add_audio(self, rate, chunk, arrived=None):
        self.fed.set()

    def ready(self):
        return False

    def updates(self):
        return iter(())

    def finish(self):
        from whisper_demo.live import LiveUpdate

        yield LiveUpdate(committed="hello world", tentative="", new_committed="hello world", decoded=True,
                         first_token_ms=None, commit_latencies_s=(), stats=None, final=True,
                         final_words=("hello world",), streamed="")

    def idle_seconds(self):
        return 0.0

    def silent_seconds(self):
        return 0.0

    def set_decoder(self, decoder):
        pass


def test_a_session_past_the_length_limit_is_closed_and_keeps_its_text(tiny_model, monkeypatch):
    from whisper_demo.ui.live import sessions, tab_session
    from whisper_demo.ui.live.tab import LiveTab

    monkeypatch.setattr(tab_session, "LiveSession", FinalSession)
    warnings = []
    monkeypatch.setattr(sessions.gr, "Warning", lambda message, *a, **k: warnings.append(message))
    store = ModelStore(device="cpu")
    store.put("tiny.en", tiny_model)
    clock = Clock()
    tab = LiveTab(store, Defaults(model="tiny.en", max_live_seconds=60), clock=clock)
    app = Starlette(routes=[audio_route(tab.mic_streams)])

    class Request:
        session_hash = "tab1"

    tab.browser.start("", True, "static", request=Request())
    session = tab.live.session(Request())
    ticket = session.mic_stream.ticket
    clock.now = 30.0
    assert asyncio.run(post(app, ticket, Body(seconds(1))))[0] == 200 and session.active
    clock.now = 61.0  # past the limit: its audio is refused, saying why, and its ticket forgotten
    status, reply = asyncio.run(post(app, ticket, Body(seconds(1)), at=1000))
    assert status == 410 and "--max-live-minutes" in reply and tab.mic_streams.of("tab1") is None
    # the page's next redraw ends it: the rest made final, its text kept and offered, Record again
    transcript, _, _, _, record, stop, download = tab.live.tick(Request())
    assert not session.active and session.final.final_text == "hello world"
    assert "hello world" in transcript and record.interactive and not stop.interactive and download.visible
    assert [w for w in warnings if "--max-live-minutes" in w] and "1 minute after Record" in warnings[-1]
    assert tab.live.session(Request()) is session  # kept for its page until Record
    assert "--max-live-minutes" in session.refusal()
