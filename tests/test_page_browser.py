"""The page as a person uses it, in a real browser (Debian's Chromium through Playwright,
against `python app.py`): the second run drawn while it decodes, a model that needs a
download on a machine that cannot download, the Live tab following the model chosen in
the header, the page answering clicks during a long decode, and the words a newcomer reads.

A screenshot after each step goes to pytest's tmp folder. Nothing here asserts a deadline
that a busy machine could miss: where time matters, the bound is generous and what is
asserted is what must hold whatever the timing.
"""

import re
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from app_server import IN_CI, require_chromium, running_app
from whisper_demo.examples import EXAMPLES_DIR as DATA

DECODE_TIMEOUT_MS = 240_000
NO_CACHE_RGB = "rgb(220, 38, 38)"  # latency_chart.MODE_COLORS["off"], as the browser reports it

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api") if not IN_CI else __import__(
    "playwright.sync_api", fromlist=["sync_playwright"])


@pytest.fixture(scope="module")
def server():
    # WHISPER_KV_OFFLINE: this machine cannot download, whatever its network says, so the
    # download models are the ones a person without internet would see
    with running_app(env={"WHISPER_KV_OFFLINE": "1"}) as app:
        yield app


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("page_screenshots")


def upload(page, path: Path):
    page.locator("#audio_in input[type=file]").set_input_files(str(path))


def panel_status(page) -> str:
    return page.evaluate("() => document.querySelector('#cache_panel .wk-status')?.textContent || ''")


def wait_done(page, badge: str):
    page.wait_for_function(
        """b => { const p = document.querySelector('#cache_panel');
                 return p && p.querySelector('.wk-badge')?.textContent === b
                        && p.querySelector('.wk-status')?.textContent.startsWith('done'); }""",
        arg=badge, timeout=DECODE_TIMEOUT_MS)


def open_advanced(page):
    page.locator("#advanced").get_by_text("Advanced").first.click()
    page.locator("#model_dd").wait_for(state="visible")


def pick_model(page, name: str):
    """Click the open model list's entry for `name` (entries read "name · size · where")."""
    page.locator("[role=option]").filter(has_text=re.compile(rf"^\W*{re.escape(name)} ·")).first.click()


# A line drawn in the run's colour, with at least two points, in the latency chart: read
# from the browser's computed style, so it holds for an SVG path or polyline alike.
COLOURED_LINE_JS = """rgb => [...document.querySelectorAll('#latency_chart path, #latency_chart polyline')]
    .some(e => getComputedStyle(e).stroke === rgb
               && ((e.getAttribute('points') || '').trim().split(/\\s+/).length >= 2
                   || (e.getAttribute('d') || '').split(/[LC]/).length >= 2))"""


def test_second_run_is_drawn_while_it_decodes(page, shots):
    """Transcribe, untick the cache, Transcribe again: while the uncached run decodes, its
    line is drawn in its own colour beside the grey previous one."""
    upload(page, DATA / "speech_25s.wav")
    wait_done(page, "KV cache: static")
    page.locator("#kv_toggle input[type=checkbox]").uncheck()
    page.locator("#run_btn").click()
    page.wait_for_function(
        """() => { const p = document.querySelector('#cache_panel');
                   return p?.querySelector('.wk-badge')?.textContent === 'no KV cache'
                          && !p.querySelector('.wk-status')?.textContent.startsWith('done'); }""",
        timeout=DECODE_TIMEOUT_MS)
    # polled while the run decodes (about 100 uncached steps of 25 s of speech)
    drawn_while_decoding = False
    while not panel_status(page).startswith("done"):
        if page.evaluate(COLOURED_LINE_JS, NO_CACHE_RGB) and not panel_status(page).startswith("done"):
            drawn_while_decoding = True
            page.screenshot(path=str(shots / "1_second_run_decoding.png"), full_page=True)
            break
        time.sleep(0.1)
    wait_done(page, "no KV cache")
    page.screenshot(path=str(shots / "1_second_run_done.png"), full_page=True)
    assert drawn_while_decoding, "the uncached run had no coloured line while it decoded"
    chart = page.locator("#latency_chart").inner_text()
    assert "previous: KV cache: static" in chart and "no KV cache" in chart
    assert page.evaluate(COLOURED_LINE_JS, NO_CACHE_RGB)
    assert not [e for e in page.errors if "Cannot read properties" in e], page.errors


def test_a_model_that_needs_a_download_keeps_the_working_one(page, shots):
    """Offline, the list says which models cannot be used before the click; picking one
    anyway leaves the working model selected, with one readable message that names the
    models available offline, and the next Transcribe works."""
    open_advanced(page)
    page.locator("#model_dd input").click()
    options = [o.strip("✓ \n") for o in page.locator("[role=option]").all_inner_texts()]
    page.screenshot(path=str(shots / "2_model_list.png"), full_page=True)
    small = [o for o in options if o.startswith("small ")]
    assert small and "unavailable offline" in small[0], options
    pick_model(page, "small")
    page.wait_for_selector(".toast-body", timeout=60_000)
    time.sleep(2)  # any second message would have arrived by now
    page.screenshot(path=str(shots / "2_model_refused.png"), full_page=True)
    toasts = page.locator(".toast-body").all_inner_texts()
    assert len(toasts) == 1, toasts
    assert "small" in toasts[0] and "available offline" in toasts[0] and "tiny.en" in toasts[0], toasts
    assert page.locator("#model_dd input").input_value().startswith("tiny.en")
    assert "tiny.en" in page.locator("#model_status").inner_text()
    # no component is left marked as failed
    assert page.locator(".error", has_text="Error").count() == 0
    upload(page, DATA / "short_3s.wav")
    wait_done(page, "KV cache: static")
    assert "close the door" in page.locator("#transcript textarea").input_value().lower()


def test_live_tab_follows_the_model_in_the_header(page, shots):
    """Switch to base: the idle Transcribe panel and the Live tab describe base, and a live
    recording decodes with base (its cross-attention cache is base's: 6 layers x 512)."""
    open_advanced(page)
    page.locator("#model_dd input").click()
    pick_model(page, "base")
    page.wait_for_function("() => document.querySelector('#model_status')?.textContent.includes('multilingual')",
                           timeout=DECODE_TIMEOUT_MS)
    assert "base" in page.locator("#cache_panel").inner_text()
    page.get_by_role("tab", name="Live").click()
    live_panel = page.locator("#live-cache-panel").inner_text()
    page.screenshot(path=str(shots / "3_live_idle_base.png"), full_page=True)
    assert "base" in live_panel and "tiny.en" not in live_panel, live_panel
    page.locator("#live-mic").get_by_role("button", name="Record").click()
    page.wait_for_function(
        "() => (document.querySelector('#live-cache-panel')?.textContent || '').includes('6 layers')",
        timeout=DECODE_TIMEOUT_MS)
    page.screenshot(path=str(shots / "3_live_recording_base.png"), full_page=True)
    panel = page.locator("#live-cache-panel").inner_text()
    page.locator("#live-mic").get_by_role("button", name="Stop").click()
    assert "512 d" in panel and "384 d" not in panel, panel


def long_recording(path: Path, copies: int = 8) -> Path:
    """speech_25s.wav eight times over (3:26): a decode of several hundred steps over eight
    30 s windows."""
    with wave.open(str(DATA / "speech_25s.wav")) as w:
        params, frames = w.getparams(), w.readframes(w.getnframes())
    samples = np.frombuffer(frames, dtype=np.int16)
    with wave.open(str(path), "wb") as out:
        out.setparams(params)
        out.writeframes(np.tile(samples, copies).tobytes())
    return path


def test_page_answers_during_a_long_decode(page, shots, tmp_path):
    """Opening Advanced in the middle of a 3.5-minute decode: measured, and bounded at 3 s
    (a person would call anything longer a stall; one took 8.1 s on a 169 s file). The
    stall was the browser's main thread: while the chart was a Vega LinePlot redrawn up to
    ten times a second it spent 12.5 s of this decode in long tasks (up to 0.76 s each);
    as SVG, five times a second, 1-3.5 s. Asserted whatever the timing: the click was
    answered while the decode still ran, and the chart was redrawn far less often than
    once per token. Printed: the browser's long tasks (over 50 ms) during the decode."""
    page.evaluate("""() => { window.longTasks = [];
        new PerformanceObserver(list => list.getEntries().forEach(e => window.longTasks.push(e.duration)))
            .observe({type: 'longtask'}); }""")
    upload(page, long_recording(tmp_path / "long.wav"))
    page.wait_for_function("() => (document.querySelector('#cache_panel .wk-status')?.textContent || '')"
                           ".startsWith('decoding window 3')", timeout=DECODE_TIMEOUT_MS)
    page.evaluate("""() => { window.chartUpdates = 0;
        new MutationObserver(() => window.chartUpdates++).observe(
            document.querySelector('#latency_chart'),
            {subtree: true, childList: true, attributes: true, characterData: true}); }""")
    started = time.perf_counter()
    open_advanced(page)
    opened_s = time.perf_counter() - started
    still_decoding = panel_status(page).startswith("decoding")
    page.screenshot(path=str(shots / "4_advanced_during_decode.png"), full_page=True)
    wait_done(page, "KV cache: static")
    steps = int(page.locator("#cache_panel").inner_text().split(" decoder step")[0].split()[-1])
    updates = page.evaluate("window.chartUpdates")
    long_tasks = page.evaluate("window.longTasks")
    print(f"\nAdvanced opened in {opened_s:.2f} s during the decode; {updates} chart updates after "
          f"window 3 began, {steps} decoder steps; {len(long_tasks)} long tasks in the browser, "
          f"{sum(long_tasks) / 1000:.1f} s in all, longest {max(long_tasks, default=0):.0f} ms")
    assert still_decoding
    assert opened_s < 3.0, opened_s
    assert 0 < updates < steps / 2, (updates, steps)


def test_the_words_on_the_page(page, shots):
    """Words that were wrong or stale, and boxes with nothing in them: the Live tab's idle
    panel talks about the Live tab, a count of one is singular, the Encoder tile holds the
    encoder's time only, and no box stands empty on a first visit."""
    # no empty boxes on a first visit: the chart says what it will draw, the downloads box
    # waits for its files, and Copy text waits for words
    assert "drawn here" in page.locator("#latency_chart").inner_text()
    page.locator("#attn_toggle input[type=checkbox]").check()
    page.wait_for_selector("#attn_box", state="visible")
    assert not page.locator("#attn_files").is_visible()
    page.screenshot(path=str(shots / "8_first_visit_attention_ticked.png"), full_page=True)
    page.locator("#attn_toggle input[type=checkbox]").uncheck()
    page.get_by_role("tab", name="Live").click()
    live_panel = page.locator("#live-cache-panel").inner_text()
    assert "Drop a file" not in live_panel and "Record" in live_panel, live_panel
    assert not page.locator("#live-copy").is_visible()
    page.get_by_role("tab", name="Transcribe").click()
    upload(page, DATA / "short_3s.wav")
    wait_done(page, "KV cache: static")
    page.screenshot(path=str(shots / "7_words.png"), full_page=True)
    tiles = page.locator("#cache_panel .wk-tile").all_inner_texts()
    encoder = [t for t in tiles if t.lower().startswith("encoder")]
    assert encoder and "wall" not in encoder[0].lower() and "whole run" not in encoder[0].lower(), encoder
    text = page.locator("#cache_panel").inner_text()
    assert " 1 decoder steps" not in text
