"""Safe to share: what a visitor can and cannot make the server do.

Each test plays a visitor over real HTTP (gradio_client for the named API, PageClient for
the events the page wires without a name, as the browser calls them) against a page served
in this process, so the test can see what reached the server's insides (a microphone
started, a model loaded, a chunk decoded, a decode begun). What the policy decides from
where the app listens is tested without listening anywhere but 127.0.0.1.
"""

import argparse
import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from page_client import PageClient, pcm16
from whisper_demo.audio import SAMPLE_RATE, load_audio
from whisper_demo.examples import clip_path
from whisper_demo.limits import Limits
from whisper_demo.sharing import SharingPolicy, is_loopback, sharing_policy
from whisper_demo.ui import Defaults, ModelStore, build_app, launch

JFK = clip_path("jfk.wav")
SHORT = clip_path("short_3s.wav")
SHARED = SharingPolicy(shared=True, server_mic=False, models=("tiny.en",))


class PageServer:
    """build_app + launch on 127.0.0.1, with the policy and limits of a shared server."""

    def __init__(self, model, policy=SHARED, limits=Limits(), loader=None):
        from app_server import free_port

        self.loads = []

        def counting_loader(name, device=None, progress=True):
            self.loads.append(name)
            if loader is None:
                raise RuntimeError(f"this test loads no model ({name})")
            return loader(name)

        self.store = ModelStore(device="cpu", loader=counting_loader, policy=policy,
                                max_models=limits.max_models)
        self.store.put("tiny.en", model)
        self.app = build_app(self.store, Defaults(model="tiny.en", policy=policy, limits=limits))
        self.url = launch(self.app, port=free_port(), block=False)

    def handler_object(self, elem_id: str, trigger: str):
        """The object whose method handles an event (the Live tab's browser microphone, the
        Transcribe tab)."""
        page = PageClient(self.url)
        try:
            index = page.dependency(elem_id, trigger)["id"]
        finally:
            page.close()
        return self.app.fns[index].fn.__self__

    def close(self):
        self.app.close()


@pytest.fixture
def serve(tiny_model):
    servers = []

    def start(**kwargs):
        servers.append(PageServer(tiny_model, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def record(page: PageClient, samples: np.ndarray):
    """Record, then the page's recorder posts `samples` in 0.1 s chunks: Record's log."""
    started = page.record()
    if started.error is None:
        replies = page.send_audio(samples)
        assert all(r.status_code == 200 for r in replies), [r.text for r in replies if r.status_code != 200]
    return started


# --------------------------------------------------------------------------------------
# Where the app listens decides what a visitor may do


def test_beyond_loopback_the_server_mic_is_off_and_only_offline_models_are_offered():
    assert is_loopback("127.0.0.1") and is_loopback("127.0.1.1") and is_loopback("localhost")
    assert is_loopback("::1") and is_loopback("[::1]")
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "", "192.168.1.20", "myhost.example"))

    offline = ("tiny.en", "base")
    at_home = sharing_policy("127.0.0.1", share=False, startup_model="tiny.en", offline=offline)
    assert (at_home.shared, at_home.server_mic, at_home.models) == (False, True, None)
    for host, share in (("0.0.0.0", False), ("127.0.0.1", True), ("::", False)):
        shared = sharing_policy(host, share=share, startup_model="tiny.en", offline=offline)
        assert (shared.shared, shared.server_mic, shared.models) == (True, False, offline)
        assert not shared.allows("large-v3") and shared.allows("base")
        assert "--models" in shared.refusal("large-v3")
    opted_in = sharing_policy("0.0.0.0", share=False, startup_model="small", allow_server_mic=True,
                              models="tiny.en, medium", offline=offline)
    assert opted_in.server_mic and opted_in.models == ("small", "tiny.en", "medium")
    assert sharing_policy("0.0.0.0", False, "tiny.en", models="all", offline=offline).models is None


def test_the_flags_reach_the_policy_and_the_limits():
    import app as app_cli

    args = app_cli.parser().parse_args(
        ["--host", "0.0.0.0", "--models", "tiny.en,base", "--max-live-sessions", "5",
         "--live-quiet-minutes", "0.5", "--max-chunk-size", "64kb", "--max-chunk-seconds", "2",
         "--decode-budget", "300", "--max-models", "3", "--cache-minutes", "10"])
    policy, limits = app_cli._sharing(args, args.host)
    assert policy.shared and not policy.server_mic and policy.models == ("tiny.en", "base")
    assert limits == Limits(max_live_sessions=5, live_quiet_seconds=30, max_chunk_bytes=64 << 10,
                            max_chunk_seconds=2, decode_budget=300, max_models=3, cache_seconds=600)
    args = app_cli.parser().parse_args(["--allow-server-mic", "--share", "--max-audio-seconds", "3600"])
    policy, limits = app_cli._sharing(args, "127.0.0.1")
    assert policy.server_mic and limits.decode_budget == 7200  # an hour-long file still fits
    assert app_cli._sharing(app_cli.parser().parse_args([]), "127.0.0.1")[1] == Limits()
    for flag in ("--allow-server-mic", "--models", "--max-live-sessions", "--live-quiet-minutes",
                 "--max-chunk-size", "--max-chunk-seconds", "--decode-budget", "--max-models"):
        assert flag in app_cli.parser().format_help()
        assert flag in (Path(__file__).parents[1] / "README.md").read_text()
    with pytest.raises(SystemExit):
        app_cli.parser().parse_args(["--max-chunk-size", "lots"])
    assert isinstance(app_cli._bytes("2mb"), int)
    with pytest.raises(argparse.ArgumentTypeError):
        app_cli._bytes("2 parsecs")


# --------------------------------------------------------------------------------------
# 1. The server's microphone


def test_a_visitor_of_a_shared_page_cannot_record_the_servers_microphone(serve, monkeypatch):
    from whisper_demo.live import mic

    started = []

    class Microphone:  # stands in for this computer's microphone: records who started it
        def __init__(self, *args, **kwargs):
            pass

        def start(self):
            started.append(time.monotonic())
            raise mic.MicUnavailable("a test microphone")

        def close(self):
            pass

    monkeypatch.setattr(mic, "DesktopMicSource", Microphone)
    server = serve()
    page = PageClient(server.url)
    result = page.call("desktop-mic-start", "click")
    assert started == []  # nothing on the server was opened
    status = result.outputs[1]
    assert "off on this shared server" in status and "--allow-server-mic" in status
    assert any("--allow-server-mic" in w for w in result.warnings)
    config_status = page.components[page.component_id("desktop-mic-status")]["props"]["value"]
    assert "off on this shared server" in config_status  # said before anyone presses Start
    assert page.components[page.component_id("desktop-mic-start")]["props"]["interactive"] is False
    page.close()


@pytest.mark.parametrize("policy, device_problem, usable", [
    (SHARED, None, False),  # a shared server: off, whatever this computer has
    (SharingPolicy(), "no audio input device found: plug in a microphone", False),
    (SharingPolicy(), None, True),
])
def test_this_computers_microphone_is_offered_only_where_it_can_record(monkeypatch, policy, device_problem, usable):
    """Start and Stop are disabled, with the reason beside them, where pressing Start could
    only be refused: on a shared server, without PortAudio or without an input device."""
    from whisper_demo.live import mic_device
    from whisper_demo.ui.live.desktop_mic import READY_TEXT, SERVER_MIC_OFF

    monkeypatch.setattr(mic_device, "availability", lambda: device_problem)
    app = build_app(ModelStore(device="cpu"), Defaults(model="tiny.en", policy=policy))
    blocks = {b.elem_id: b for b in app.blocks.values() if getattr(b, "elem_id", None)}
    assert blocks["desktop-mic-start"].interactive is usable
    assert blocks["desktop-mic-stop"].interactive is usable
    status = blocks["desktop-mic-status"].value
    reason = SERVER_MIC_OFF if policy.shared else device_problem
    assert (status == READY_TEXT) if usable else (reason in status and status.startswith("⚠️"))
    # as the browser receives it
    config = {c["props"].get("elem_id"): c["props"] for c in app.get_config_file()["components"]}
    assert config["desktop-mic-start"]["interactive"] is usable


# --------------------------------------------------------------------------------------
# 2. Models


def test_a_visitor_of_a_shared_page_can_load_only_the_models_it_offers(serve):
    from gradio_client import Client, handle_file

    server = serve()
    page = PageClient(server.url)
    assert page.choices("model_dd") == ["tiny.en"]  # offered: what the policy allows
    page.close()
    client = Client(server.url, verbose=False)
    for name in ("small", "large-v3", "/etc/passwd"):
        with pytest.raises(Exception, match="not offered|not in the list of choices|not available"):
            client.predict(name, api_name="/load_model")
        with pytest.raises(Exception, match="not offered|not in the list of choices|not available"):
            client.predict(handle_file(str(SHORT)), True, "static", 1, "auto", True, name,
                           api_name="/transcribe")
    assert server.loads == []  # nothing was downloaded or loaded
    text, *_ = client.predict(handle_file(str(SHORT)), True, "static", 1, "auto", True, "tiny.en",
                              api_name="/transcribe")
    assert "door" in text.lower()  # the offered model still serves


def test_models_past_the_limit_are_unloaded_least_recently_used_and_aliases_load_once():
    from whisper_demo.models import ModelError

    loads = []

    def loader(name, device=None, progress=True):
        loads.append(name)
        return f"model {name}"

    store = ModelStore(loader=loader, max_models=2, policy=SharingPolicy(
        shared=True, server_mic=False, models=("tiny.en", "base", "small", "large", "large-v3")))
    store.put("tiny.en", "startup model")
    store.get("base")
    store.get("small")  # three: base, the least recently used loaded one, goes
    assert store.loaded() == ["tiny.en", "small"] and store.get("tiny.en") == "startup model"
    store.get("large")
    store.get("large-v3")  # the same file as "large": one entry, one load
    assert loads == ["base", "small", "large-v3"]
    assert store.loaded() == ["tiny.en", "large-v3"]
    with pytest.raises(ModelError, match="not offered on this server"):
        store.get("medium")
    assert loads == ["base", "small", "large-v3"]


# --------------------------------------------------------------------------------------
# 3. Live sessions: how many, and for how long


SPEECH = load_audio(JFK)[: 3 * SAMPLE_RATE]


def test_live_sessions_past_the_limit_are_refused_with_a_clear_message(serve):
    server = serve(limits=Limits(max_live_sessions=2))
    tab = server.handler_object("live-record", "click").live
    pages = [PageClient(server.url) for _ in range(3)]
    try:
        started = [record(page, SPEECH[: SAMPLE_RATE // 2]) for page in pages]
        refused = started[2]
        assert "busy" in refused.error and "--max-live-sessions" in refused.error
        assert pages[2].ticket is None  # no ticket: its page has nothing to send audio with
        assert all(log.error is None for log in started[:2])
        assert tab.sessions.running() == 2
        # the first visitor leaves: the next one gets a place
        assert pages[0].stop().error is None
        again = record(pages[2], SPEECH[: SAMPLE_RATE // 2])
        assert again.error is None and tab.sessions.running() == 2
    finally:
        for page in pages:
            page.close()


def test_the_registry_counts_running_sessions_and_closes_quiet_ones():
    from whisper_demo.live.registry import SessionLimitReached, SessionRegistry

    class Session:
        def __init__(self, idle=0.0, silent=0.0):
            self.idle, self.silent, self.closed = idle, silent, False

        def idle_seconds(self):
            return self.idle

        def silent_seconds(self):
            return self.silent

        def running(self):
            return not self.closed

        def close(self):
            self.closed = True

    registry = SessionRegistry(idle_timeout_s=60, reap_every_s=3600, max_running=2, full_message="busy")
    talking, silent = registry.get_or_create("a", Session), registry.get_or_create("b", lambda: Session(silent=61))
    with pytest.raises(SessionLimitReached, match="busy"):
        registry.get_or_create("c", Session)
    assert registry.get_or_create("b", Session) is silent  # its own tab still finds it
    assert registry.replace("b", Session) is not silent and silent.closed  # Record again: fine
    quiet = registry.replace("b", lambda: Session(idle=61))
    assert registry.reap_idle() == 1 and quiet.closed and not talking.closed
    assert registry.get("b") is quiet and registry.running() == 1  # kept, for its page to show
    registry.get_or_create("c", Session)  # its place is free
    quiet.idle = 121
    assert registry.reap_idle() == 1 and registry.get("b") is None  # then forgotten


def test_a_session_that_sends_only_silence_is_closed_and_frees_its_place(serve):
    server = serve(limits=Limits(max_live_sessions=1, live_quiet_seconds=1.0))
    tab = server.handler_object("live-record", "click").live
    page, other = PageClient(server.url), PageClient(server.url)
    try:
        assert record(page, np.zeros(3 * SAMPLE_RATE, np.float32)).error is None
        deadline = time.monotonic() + 30  # the reaper looks every quarter of the timeout
        while tab.sessions.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert tab.sessions.running() == 0
        session = tab.sessions.get(page.session_hash)
        assert session is not None and "silence" in session.ended_note()  # kept, to say why
        # its ticket was forgotten as it closed: its page's recorder is told the recording
        # ended, and the page's timer says why
        late = page.post_audio(np.zeros(1600, "<i2"), page.sent)
        assert late.status_code == 410 and "press Record" in late.json()["error"]
        assert tab.mic_streams.of(page.session_hash) is None
        assert any("silence" in w for w in page.call(None, "tick").warnings)
        assert record(other, np.zeros(SAMPLE_RATE // 2, np.float32)).error is None
    finally:
        page.close()
        other.close()


# --------------------------------------------------------------------------------------
# 4. Chunks: too large is refused unread, none is decoded on the event loop, and a
#    recording's audio comes only with its own ticket


def test_a_large_chunk_is_refused_unread_and_no_chunk_is_fed_on_the_event_loop(serve, monkeypatch):
    from whisper_demo.ui.microphone import mic_stream

    on_loop = []
    real_read = mic_stream.read_pcm_chunk

    def read(body, *args, **kwargs):
        try:
            asyncio.get_running_loop()
            on_loop.append(threading.current_thread().name)
        except RuntimeError:
            pass
        return real_read(body, *args, **kwargs)

    monkeypatch.setattr(mic_stream, "read_pcm_chunk", read)  # says which thread read each chunk
    server = serve(limits=Limits(max_chunk_bytes=200_000, max_chunk_seconds=5))
    page = PageClient(server.url)
    try:
        noise = np.random.default_rng(0).uniform(-0.1, 0.1, 20 * SAMPLE_RATE).astype(np.float32)
        assert page.record().error is None
        assert page.ticket["max_chunk_seconds"] <= 1.0  # the page is told to send less than the limits
        page.send_audio(noise[: SAMPLE_RATE // 2])
        big = page.post_audio(pcm16(noise), page.sent)  # 20 s, 640 KB: over the size limit
        assert big.status_code == 413 and "0.6 MB" in big.json()["error"]
        long = page.post_audio(pcm16(noise[: 10 * 8000]), page.sent, rate=8000)  # 10 s, 160 KB: too long
        assert long.status_code == 400 and "10.0 s long" in long.json()["error"]
        assert page.post_audio(pcm16(noise[:1600]), page.sent, rate=123).status_code == 400  # no audio rate
        page.send_audio(noise[SAMPLE_RATE // 2: SAMPLE_RATE])  # the stream goes on
        deadline, warnings = time.monotonic() + 30, []
        while len(warnings) < 2 and time.monotonic() < deadline:  # the page's timer tells it
            warnings += page.call(None, "tick").warnings
            time.sleep(0.2)
        warnings = " ".join(warnings)
        assert "0.6 MB" in warnings and "--max-chunk-size" in warnings
        assert "10.0 s long" in warnings and "--max-chunk-seconds" in warnings
        tab = server.handler_object("live-record", "click").live
        session = tab.sessions.get(page.session_hash)
        deadline = time.monotonic() + 20
        while session.worker.session.audio_seconds < 0.95 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert abs(session.worker.session.audio_seconds - 1.0) < 0.05  # the small ones, all fed
        assert on_loop == []
        # audio only with the recording's own ticket: a made-up one, or the ticket of an
        # ended recording, is refused
        forged = dict(page.ticket, path=page.ticket["path"][:-4] + "abcd")
        assert page.post_audio(pcm16(noise[:1600]), 0, ticket=forged).status_code == 410
        old_ticket = page.ticket
        assert page.stop().error is None
        assert page.post_audio(pcm16(noise[:1600]), page.sent, ticket=old_ticket).status_code == 410
    finally:
        page.close()


# --------------------------------------------------------------------------------------
# 5. Disk


def test_a_recording_leaves_no_upload_files_and_gradios_cache_is_swept(serve):
    from gradio import utils as gr_utils

    server = serve(limits=Limits(cache_seconds=600))
    assert server.app.delete_cache == (300, 600)  # Gradio deletes older uploads and served files
    uploads = Path(gr_utils.get_upload_folder())
    before = set(uploads.rglob("*")) if uploads.exists() else set()
    page = PageClient(server.url)
    try:
        assert record(page, SPEECH[:SAMPLE_RATE]).error is None
        assert page.stop().error is None
        after = set(uploads.rglob("*")) if uploads.exists() else set()
        # the microphone's audio is a request body, never a file: the new files are the
        # final text and its subtitles, offered for download after Stop
        new_files = [p for p in after - before if p.is_file()]
        assert new_files and all(p.name.startswith("live-transcript-") for p in new_files), new_files
        assert {p.suffix for p in new_files} <= {".txt", ".srt", ".vtt"} and ".txt" in {p.suffix for p in new_files}
    finally:
        page.close()


def test_a_tabs_attention_downloads_are_removed_when_the_tab_closes(serve):
    from whisper_demo.ui.session_files import attention_folder, remove_session_files

    server = serve()

    class Request:
        session_hash = "abc123"

    folder = attention_folder(Request.session_hash)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "map.png").write_bytes(b"png")
    remove_session_files(Request())
    assert not folder.exists()
    assert attention_folder("../../etc") is None
    unloads = [f.fn.__name__ for f in server.app.fns.values() if f.targets and f.targets[0][1] == "unload"]
    assert "remove_session_files" in unloads  # the tab closing removes its folder


# --------------------------------------------------------------------------------------
# 6. A decode's size


def test_a_decode_over_the_budget_is_refused_before_it_takes_a_slot(serve, tmp_path, monkeypatch):
    from gradio_client import Client, handle_file

    import whisper_demo.ui.transcribe.handlers as tab

    started = []
    real = tab.stream_transcribe
    monkeypatch.setattr(tab, "stream_transcribe", lambda *a, **k: started.append(1) or real(*a, **k))
    server = serve(limits=Limits(decode_budget=60))
    minute = tmp_path / "minute.wav"
    sf.write(minute, np.tile(load_audio(JFK), 6)[: 61 * SAMPLE_RATE], SAMPLE_RATE)
    client = Client(server.url, verbose=False)
    with pytest.raises(Exception, match="budget is 60") as refused:
        client.predict(handle_file(str(minute)), False, "static", 5, "auto", True, "tiny.en",
                       api_name="/compare")
    assert "--decode-budget" in str(refused.value) and "up to 6 s fits" in str(refused.value)
    with pytest.raises(Exception, match="budget is 60"):
        client.predict(handle_file(str(minute)), True, "static", 1, "auto", True, "tiny.en",
                       api_name="/transcribe")
    assert started == []  # refused before a decode began, not after one ran
    text, *_ = client.predict(handle_file(str(SHORT)), True, "static", 5, "auto", True, "tiny.en",
                              api_name="/transcribe")  # 3 s x beam 5: within it
    assert "door" in text.lower() and started == [1]


# --------------------------------------------------------------------------------------
# 7. A live session that fails keeps its text


def test_a_failed_live_session_keeps_its_text_says_why_and_the_next_record_starts_clean(
        tiny_model, monkeypatch):
    from whisper_demo.live import LiveUpdate
    from whisper_demo.ui.live import sessions as live_sessions, tab as live_tab, tab_session as live_tab_session

    class FailingSession:
        """Commits two words, then its decoder fails."""

        audio_seconds = 0.0

        def __init__(self, decoder, config=None):
            self.received = threading.Event()

        def add_audio(self, rate, chunk, arrived=None):
            self.received.set()

        def ready(self):
            return self.received.is_set()

        def updates(self):
            self.received.clear()
            yield LiveUpdate(committed="hello world", tentative="", new_committed="hello world",
                             decoded=True, first_token_ms=None, commit_latencies_s=(), stats=None,
                             streamed="hello world")
            raise RuntimeError("the decoder broke")

        def idle_seconds(self):
            return 0.0

        def silent_seconds(self):
            return 0.0

        def set_decoder(self, decoder):
            pass

    monkeypatch.setattr(live_tab_session, "LiveSession", FailingSession)  # what a TabSession runs
    warnings = []
    monkeypatch.setattr(live_sessions.gr, "Warning", lambda message, *a, **k: warnings.append(message))
    store = ModelStore(device="cpu")
    store.put("tiny.en", tiny_model)
    tab = live_tab.LiveTab(store, Defaults(model="tiny.en"))

    class Request:
        session_hash = "tab1"

    tab.browser.start("", True, "static", request=Request())
    session = tab.live.session(Request())
    stream = tab.mic_streams.of(Request.session_hash)
    session.worker.feed(16000, np.zeros(1600, np.int16))
    # a bound for a hang: the worker's first start compiles word timing's DTW (seconds on a busy machine)
    assert session.worker.done.wait(60) and session.worker.view().error is not None
    transcript, _, panel_html, _, record_button, stop_button, _ = tab.live.tick(Request())
    assert "hello world" in transcript and "the decoder broke" in panel_html
    assert any("the decoder broke" in w for w in warnings)
    assert record_button.interactive and not stop_button.interactive  # Record is offered again
    # its ticket is forgotten as the session ended: more audio from its page is refused (the
    # page was told why by the warning); the failed session and its text stay
    assert tab.mic_streams.of(Request.session_hash) is None
    status, reply = tab.mic_streams.receive(stream.ticket, 1600, 16000, bytes(3200), False, time.monotonic())
    assert status == 410 and "press Record" in reply["error"]
    assert tab.live.session(Request()) is session
    session.rendered_version, session.sent_html = -1, [None] * 4  # a page that redraws it all
    transcript, *_ = tab.live.tick(Request())
    assert "hello world" in transcript
    assert len([w for w in warnings if "the decoder broke" in w]) == 1  # said once
    timer, ticket, *_, transcript, _, _, _, _ = tab.browser.start("", True, "static", request=Request())  # Record again
    assert tab.live.session(Request()) is not session and "hello world" not in transcript
    assert ticket != ""


# --------------------------------------------------------------------------------------
# 8. Kernels


@pytest.fixture
def kernel_cache(tmp_path, monkeypatch):
    """A fresh kernels cache folder, and a build that copies the library this machine already
    built instead of compiling for 15 s (counted): `library()` starts over in it."""
    from whisper_demo.kernels import build

    built = Path(build.library()._name)  # this process's library, from the usual cache
    monkeypatch.setenv("WHISPER_KV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_lib", None)
    monkeypatch.setattr(build, "_error", None)
    compiled = []

    def compile_by_copy(compiler, library, sources, std):
        compiled.append(library.name)
        copy = library.parent / "fresh.so"
        copy.write_bytes(built.read_bytes())
        copy.chmod(0o755)
        copy.replace(library)

    monkeypatch.setattr(build, "_compile", compile_by_copy)
    folder = tmp_path / "kernels"
    folder.mkdir(mode=0o700)
    return build, folder / built.name, compiled


def test_a_damaged_cached_kernel_library_is_built_again(kernel_cache, caplog):
    build, library, compiled = kernel_cache
    library.write_bytes(b"not a shared library")
    library.chmod(0o755)
    with caplog.at_level("INFO", logger="whisper_demo.kernels.build"):
        assert build.available()
    assert compiled == [library.name] and library.read_bytes()[:4] == b"\x7fELF"
    assert "compiled kernels loaded" in build.describe_path()
    assert "building it again" in caplog.text and "kernels: compiled kernels loaded" in caplog.text


def test_a_new_kernel_build_removes_stale_builds_of_the_same_library(kernel_cache):
    build, library, compiled = kernel_cache
    stale = library.parent / "matmul-0123456789abcdef.so"  # an older source's build
    other = library.parent / "bf16_attention-0123456789abcdef.so"  # another library's: kept
    for path in (stale, other):
        path.write_bytes(b"an old build")
        path.chmod(0o755)
    assert build.available()
    assert compiled == [library.name] and library.exists()
    assert not stale.exists() and other.exists()


def test_a_cached_kernel_library_others_could_write_is_not_loaded(kernel_cache, monkeypatch):
    build, library, compiled = kernel_cache
    library.write_bytes(b"planted by someone else")
    library.chmod(0o666)
    assert build.available()  # built again, not loaded
    assert compiled == [library.name] and library.stat().st_mode & 0o022 == 0

    monkeypatch.setattr(build, "_lib", None)
    monkeypatch.setattr(build, "_error", None)
    library.parent.chmod(0o777)  # our folder, but anyone may write to it: closed first
    library.chmod(0o666)
    assert build.available() and compiled == [library.name] * 2
    assert library.parent.stat().st_mode & 0o022 == 0 and library.stat().st_mode & 0o022 == 0

    monkeypatch.setattr(build, "_lib", None)
    monkeypatch.setattr(build, "_error", None)
    monkeypatch.setattr(build.os, "getuid", lambda: 4242)  # the folder is someone else's
    assert not build.available() and "belongs to another user" in build.describe_path()
    assert "PyTorch's float32 matmul" in build.describe_path()  # what runs instead, said


@pytest.mark.process
def test_the_kernels_path_is_said_and_wrong_shapes_are_refused_not_run():
    """In a child process: before these checks, a wrong width read and wrote past the
    buffers (glibc abort), which would take the test process down with it."""
    import subprocess
    import sys

    script = """
import torch
from whisper_demo import kernels
print(kernels.describe_path())
w = torch.randn(8, 16).half().float()
linear = kernels.PackedLinear(w, None, "f16")
assert torch.allclose(linear(torch.ones(2, 16)), torch.ones(2, 16) @ w.T, atol=1e-4)
for bad in (torch.ones(2, 12), torch.ones(64, 3), torch.tensor(1.0)):
    try:
        linear(bad)
        print("RAN", list(bad.shape))
    except ValueError as error:
        print("refused:", error)
q = torch.ones(2, 6, 1, 64)
try:
    kernels.self_attend(q, torch.zeros(2, 6, 448, 64), torch.zeros(2, 6, 448, 64), 449)
    print("RAN self_attend")
except ValueError as error:
    print("refused:", error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith(("compiled kernels loaded", "not available ("))
    assert "RAN" not in done.stdout and len([ln for ln in lines if ln.startswith("refused:")]) == 4
    assert "[..., 16] inputs, not [2, 12]" in done.stdout
