"""The Live tab in a real browser: Chromium plays jfk.wav (11 s) as its fake microphone into
`gr.Audio(streaming=True)`; committed text must appear while the "speaker" is still talking,
tentative text is styled differently, and after Stop the committed text matches the file.

Skips only on a machine without /usr/bin/chromium outside CI; with CI=true it fails instead.
"""

import re
import time

import pytest

from app_server import CHROMIUM, IN_CI, REPO, chromium_args, require_chromium, running_app
from test_live import word_distance

DATA = REPO / "tests" / "data"
FAKE_MIC = DATA / "jfk.wav"
SPEECH_SECONDS = 11.0

require_chromium()
if IN_CI:
    from playwright import sync_api
else:
    sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def live_server():
    with running_app() as app:
        yield app.url
        print("app.py log (tail):\n" + "".join(app.lines[-60:]))  # shown when the test fails


# Real time through a real browser: Chromium's own audio processing of the fake microphone
# and the scheduling of chunks, decodes and page updates on 2 cores vary between runs
# (passes on a quiet machine; see the session note for what fails under heavy load).
@pytest.mark.flaky(reruns=2)
def test_live_tab_commits_while_speaking(live_server, tmp_path, transcripts):
    assert FAKE_MIC.exists()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=chromium_args(FAKE_MIC))
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(live_server)
            page.wait_for_selector("#audio_in, #live-mic", state="attached", timeout=60_000)
            page.get_by_role("tab", name="Live").click()
            page.locator("#live-mic").get_by_role("button", name="Record").click()
            started = time.monotonic()

            committed_at, tentative_seen, samples = None, False, []
            while time.monotonic() - started < SPEECH_SECONDS + 3:
                committed = page.locator("#live-transcript .wk-committed").all_inner_texts()
                committed = " ".join(committed).strip()
                if page.locator("#live-transcript .wk-tentative").count():
                    tentative_seen = True
                samples.append((round(time.monotonic() - started, 1), committed))
                if committed and committed_at is None:
                    committed_at = time.monotonic() - started
                    page.screenshot(path=str(tmp_path / "live_while_speaking.png"))
                time.sleep(0.25)
            # committed text only grows
            texts = [t for _, t in samples if t]
            assert all(b.startswith(a) for a, b in zip(texts, texts[1:])), samples
            page.screenshot(path=str(tmp_path / "live_after_speech.png"))
            # Worst case on a busy 2-core CI machine: a decode takes 1-2 s and committing
            # needs two agreeing decodes, so allow the speaker's end + 3 s (still before Stop).
            assert committed_at is not None and committed_at < SPEECH_SECONDS + 3, (
                f"no committed text while the speaker talked: {samples}; page: "
                f"{page.locator('#live-transcript').inner_text()!r} {page.locator('#live-stats').inner_text()!r}")
            assert tentative_seen

            page.locator("#live-mic").get_by_role("button", name="Stop").click()
            page.wait_for_selector('#live-transcript-body[data-state="final"]', timeout=180_000)
            final = page.locator("#live-transcript .wk-committed").inner_text().strip()
            page.screenshot(path=str(tmp_path / "live_final.png"))
            stats = page.locator("#live-stats").inner_text()
            panel = page.locator("#live-cache-panel").inner_text()
        finally:
            browser.close()
    print(f"\nfirst committed text {committed_at:.1f} s after Record; final: {final!r}\n{stats}")
    # Chromium runs its own audio processing (noise suppression, AGC) on the fake
    # microphone, and under CPU load its capture and Gradio's chunk uploads (which can
    # arrive out of order) garble a word here and there: tiny.en, even offline on the audio
    # the server received, has heard "And so my fellow American ass is not enough. What's
    # your country can do for you? ..." and "Ask what the you should can do your country".
    # The live engine's exactness is tested on unprocessed audio in test_live.py; here: the
    # sentence is there (its words, in order, give or take ASR slips), and all of it arrived.
    reference = transcripts["jfk.wav"]
    spoken = re.findall(r"[a-z']+", final.lower())
    n_ref = len(re.findall(r"[a-z']+", reference.lower()))
    # after the speaker stopped, the (noise-suppressed) silence may add a tentative word
    # or two before Stop commits everything: the sentence is judged on its leading words
    assert word_distance(" ".join(spoken[:n_ref + 2]), reference) <= 10, final
    assert spoken.count("country") >= 2, final
    heard = float(re.search(r"of ([\d.]+) s heard", stats).group(1))
    assert heard >= SPEECH_SECONDS - 0.5, stats  # no chunk dropped on the way
    lost = re.search(r"audio lost ([\d.]+) s", stats)
    assert lost is None or float(lost.group(1)) <= 0.5, stats  # the same 0.5 s tolerance
    assert "first token" in stats.lower() and "commit" in stats.lower()
    assert "cache" in panel.lower()
