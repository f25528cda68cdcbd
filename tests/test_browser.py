"""The page in a real browser: Debian's Chromium, driven by Playwright, against `python app.py`.

(a) upload a speech file: the transcript arrives and the latency chart has a line;
(b) record from the microphone (Chromium plays jfk.wav as a fake microphone) and stop:
    the recording is transcribed;
(c) on the 25 s clip, untick "KV cache" and run again: the panel says the cache is off and the chart shows
    the new run beside the previous one; then Compare shows both curves and the speedup;
(e) tick "Inside the cache": the attention view streams, then shows its maps, player and downloads.

A screenshot of the page after each step goes to pytest's tmp folder; nothing in the
repository is written. To refresh the README's picture on purpose, run this file with
WHISPER_KV_SCREENSHOT=docs/screenshot.png: the cache-off run drawn against the cached one
is copied there, and the Inside-the-cache view's picture to docs/attention.png beside it.

Skips only on a machine without /usr/bin/chromium outside CI; in CI (CI=true) a missing
browser fails, since CI installs it.
"""

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from app_server import IN_CI, REPO, require_chromium, running_app

from whisper_demo.examples import EXAMPLES_DIR as DATA
JFK_WORDS = "ask not what your country"
SPEECH_25S_WORDS = "the weather today is cool"
# Through the fake microphone (re-recorded at 44.1/48 kHz, Opus-free but resampled twice)
# tiny.en hears "asked not"; the rest of the sentence is stable.
MIC_WORDS = "what your country can do for you"
DECODE_TIMEOUT_MS = 180_000  # a loaded 2-core CI box: tiny.en on 11 s takes 1-10 s, rarely more

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api") if not IN_CI else __import__(
    "playwright.sync_api", fromlist=["sync_playwright"])


@pytest.fixture(scope="module")
def server():
    """`python app.py --port N` in a subprocess, once it says it is serving (the page
    fixture, in conftest.py, opens it in Chromium)."""
    with running_app() as app:
        yield app


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("screenshots")


def transcript(page) -> str:
    return page.locator("#transcript textarea").input_value()


def wait_transcript(page, words: str):
    page.wait_for_function(
        "w => (document.querySelector('#transcript textarea')?.value || '').toLowerCase().includes(w)",
        arg=words, timeout=DECODE_TIMEOUT_MS)


def wait_done(page, badge: str):
    """Until the panel shows a finished run of the given cache badge."""
    page.wait_for_function(
        """b => { const p = document.querySelector('#cache_panel');
                 return p && p.querySelector('.wk-badge')?.textContent === b
                        && p.querySelector('.wk-status')?.textContent.startsWith('done'); }""",
        arg=badge, timeout=DECODE_TIMEOUT_MS)


def chart_lines(page) -> int:
    return page.locator("#latency_chart polyline.wk-series").count()


def upload(page, path: Path):
    page.locator("#audio_in input[type=file]").set_input_files(str(path))


def test_upload_streams_transcript_and_chart(page, shots):
    upload(page, DATA / "jfk.wav")
    wait_transcript(page, JFK_WORDS)
    wait_done(page, "KV cache: static")
    page.wait_for_function("document.querySelectorAll('#latency_chart polyline.wk-series').length > 0")
    assert chart_lines(page) == 1
    panel = page.locator("#cache_panel").inner_text()
    assert "/ 448" in panel and "✓ formula" in panel
    page.screenshot(path=str(shots / "a_upload.png"), full_page=True)


def test_microphone_record_then_transcribe(page, shots):
    page.locator("#audio_in button[aria-label='Record audio']").click()
    page.locator("#audio_in").get_by_role("button", name="Record", exact=True).click()
    time.sleep(12.5)  # the fake microphone plays jfk.wav (11 s) once the stream opens
    page.locator("#audio_in button.stop-button").click()
    wait_transcript(page, MIC_WORDS)
    wait_done(page, "KV cache: static")
    page.screenshot(path=str(shots / "b_microphone.png"), full_page=True)


def test_cache_off_then_compare(page, shots):
    # the 25 s clip: ~100 tokens, enough for the uncached line to climb visibly
    upload(page, DATA / "speech_25s.wav")
    wait_done(page, "KV cache: static")

    page.locator("#kv_toggle input[type=checkbox]").uncheck()
    page.locator("#run_btn").click()
    wait_done(page, "no KV cache")
    assert SPEECH_25S_WORDS in transcript(page).lower()
    panel = page.locator("#cache_panel").inner_text()
    assert "nothing kept" in panel
    page.wait_for_function("document.querySelectorAll('#latency_chart polyline.wk-series').length == 2")
    legend = page.locator("#latency_chart .wk-chart-legend").text_content()
    assert "no KV cache" in legend and "previous: KV cache: static" in legend
    page.screenshot(path=str(shots / "c_cache_off.png"), full_page=True)
    refresh = os.environ.get("WHISPER_KV_SCREENSHOT")
    if refresh:  # on purpose only; a test run never rewrites a tracked file. The README's
        # picture: the second run (no cache) drawn against the first
        target = REPO / refresh
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shots / "c_cache_off.png", target)

    page.locator("#kv_toggle input[type=checkbox]").check()
    page.locator("#compare_btn").click()
    page.wait_for_selector("#compare_box .wk-compare", timeout=DECODE_TIMEOUT_MS)
    summary = page.locator("#compare_box").inner_text()
    assert "identical tokens" in summary, summary
    assert re.search(r"\d+\.\d×", summary), summary
    legend = page.locator("#latency_chart .wk-chart-legend").text_content()
    assert "no KV cache" in legend and "KV cache: static" in legend
    page.screenshot(path=str(shots / "c_compare.png"), full_page=True)


def test_stop_in_hooks_mode_then_an_example(page, shots):
    """Stop goes through Gradio's cancel, which closes the handler's generator: the hooks
    decode's cleanup must run, or the model lock stays held and the next hooks decode hangs."""
    page.locator("#advanced").get_by_text("Advanced").first.click()
    page.locator("#cache_mode").get_by_text("hooks", exact=True).click()
    # beam 5: a decode long enough (seconds) that Stop lands in the middle of it
    beam = page.locator("#advanced input[type=number]").first
    beam.fill("5")
    beam.press("Enter")
    upload(page, DATA / "speech_25s.wav")
    page.wait_for_function(
        """() => { const p = document.querySelector('#cache_panel');
                   return p?.querySelector('.wk-badge')?.textContent === 'KV cache: hooks, beam 5'
                          && p.querySelector('.wk-status')?.textContent === 'decoding…'; }""",
        timeout=DECODE_TIMEOUT_MS)
    page.locator("#stop_btn").click()
    page.wait_for_selector("#cache_panel .wk-status:has-text('stopped')", timeout=30_000)
    time.sleep(0.5)
    stopped_at = transcript(page)
    time.sleep(1.5)
    assert transcript(page) == stopped_at  # nothing arrives after Stop
    assert "stopped" in page.locator("#cache_panel .wk-status").inner_text()
    page.screenshot(path=str(shots / "d_stopped.png"), full_page=True)

    page.get_by_text("short_3s.wav", exact=True).click()
    wait_transcript(page, "close the door")
    wait_done(page, "KV cache: hooks, beam 5")
    page.screenshot(path=str(shots / "d_stop_then_example.png"), full_page=True)


def test_inside_the_cache_view(page, shots):
    """Tick "Inside the cache", transcribe: while tokens stream the view shows the chips of
    the cached positions and the audio cursor; at the end the map (hover: a weight), the
    words on a player (a click plays from the word), and the PNG and JSON downloads."""
    page.locator("#attn_toggle input[type=checkbox]").check()
    page.wait_for_selector("#attn_box", state="visible")
    # the live view is transient (the final view replaces it): record the cursor's
    # positions as the page receives them
    page.evaluate("""() => { window.cursorXs = [];
        new MutationObserver(() => {
            const c = document.querySelector('#attn_view line.wk-cursor');
            const x = c && parseFloat(c.getAttribute('x1'));
            if (c && x !== window.cursorXs[window.cursorXs.length - 1]) window.cursorXs.push(x);
        }).observe(document.body, {subtree: true, childList: true, attributes: true}); }""")
    upload(page, DATA / "jfk.wav")
    page.wait_for_selector("#attn_view .wk-chips .wk-tok", timeout=DECODE_TIMEOUT_MS)
    wait_done(page, "KV cache: static")
    xs = page.evaluate("window.cursorXs")
    assert len(xs) >= 2 and xs[-1] > xs[0], xs  # the cursor moved forward over the audio
    page.wait_for_selector("#attn_view .wk-map-svg rect", timeout=60_000)
    cells = page.locator("#attn_view .wk-map-svg rect")
    assert cells.count() > 50
    hover = cells.nth(cells.count() // 2).locator("title").text_content()
    assert re.search(r"^step \d+ .* → position \d+ .*: [01]\.\d{4}$", hover), hover
    assert page.locator("#attn_view img.wk-cross").count() == 1
    words = page.locator("#attn_view .wk-word")
    assert words.count() >= 20  # "And so my fellow Americans, ask not ..."
    downloads = "".join(page.locator("#attn_files").inner_text().split())  # names wrap at the dot
    assert "attention_window1.png" in downloads and "attention.json" in downloads, downloads
    page.screenshot(path=str(shots / "e_attention.png"), full_page=True)
    page.locator("#attn_view").screenshot(path=str(shots / "e_attention_view.png"))

    word = words.nth(9)  # " country"
    start = float(word.get_attribute("data-t0"))
    word.click()
    page.wait_for_function(
        "t => { const a = document.querySelector('#attn_view audio.wk-play'); return a && a.currentTime >= t; }",
        arg=start, timeout=10_000)
    refresh = os.environ.get("WHISPER_KV_SCREENSHOT")
    if refresh:  # on purpose only: the README's picture of this view, beside the main one
        target = (REPO / refresh).with_name("attention.png")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shots / "e_attention_view.png", target)
