"""The Transcribe tab's files and first-visit edges in a real browser (Chromium through
Playwright, against `python app.py`): an example's transcript downloaded as SRT, a text
file named .wav refused with one short message, Compare leaving the panel and the KV cache
box in agreement, and the "Use via API" link. Screenshots go to pytest's tmp folder."""

import re

import pytest

from app_server import IN_CI, require_chromium, running_app

DECODE_TIMEOUT_MS = 240_000

require_chromium()
if not IN_CI:
    pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server():
    with running_app() as app:
        yield app


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("subtitle_screenshots")


def transcript(page) -> str:
    return page.locator("#transcript textarea").input_value()


def wait_done(page, badge: str):
    page.wait_for_function(
        """b => { const p = document.querySelector('#cache_panel');
                 return p && p.querySelector('.wk-badge')?.textContent === b
                        && p.querySelector('.wk-status')?.textContent.startsWith('done')
                        || p?.querySelector('.wk-status')?.textContent.startsWith('compare done'); }""",
        arg=badge, timeout=DECODE_TIMEOUT_MS)


def srt_cues(text: str):
    """(start, end, text) seconds of each SRT cue."""
    def sec(t):
        h, m, s = t.replace(",", ".").split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)
    return [(sec(a), sec(b), body.strip())
            for a, b, body in re.findall(r"(\S+) --> (\S+)\n(.*?)(?:\n\n|\Z)", text.strip() + "\n\n", re.S)]


def test_an_examples_transcript_downloads_as_srt(page, shots, tmp_path):
    page.get_by_text("short_3s.wav", exact=True).click()
    page.wait_for_function("() => document.querySelector('#transcript textarea')?.value.includes('door')",
                           timeout=DECODE_TIMEOUT_MS)
    wait_done(page, "KV cache: static")
    files = page.locator("#transcript_files")
    files.locator('a[download="short_3s.srt"]').wait_for(timeout=30_000)
    names = files.locator("a[download]").evaluate_all("links => links.map(a => a.download)")
    assert sorted(names) == ["short_3s.json", "short_3s.srt", "short_3s.txt", "short_3s.vtt"], names
    page.screenshot(path=str(shots / "1_subtitle_files.png"), full_page=True)
    with page.expect_download() as download:
        files.locator('a[download="short_3s.srt"]').click()
    path = tmp_path / "short_3s.srt"
    download.value.save_as(str(path))
    cues = srt_cues(path.read_text(encoding="utf-8"))
    assert cues and all(0 <= start < end <= 3.5 for start, end, _ in cues), cues
    words = re.findall(r"[a-z]+", " ".join(text for *_, text in cues).lower())
    assert words == re.findall(r"[a-z]+", transcript(page).lower())
    assert "door" in words


def test_a_text_file_named_wav_is_one_short_message(page, shots, tmp_path):
    page.get_by_text("short_3s.wav", exact=True).click()
    wait_done(page, "KV cache: static")
    before = transcript(page)
    panel_before = page.locator("#cache_panel").inner_text()
    fake = tmp_path / "notes.wav"
    fake.write_text("this is not audio\n" * 50)
    page.locator("#audio_in button[aria-label='Clear']").click()  # the example's audio out
    page.locator("#audio_in input[type=file]").set_input_files(str(fake))
    page.wait_for_selector(".toast-body", timeout=60_000)
    page.wait_for_timeout(2000)  # any second message, or an error state, would show by now
    page.screenshot(path=str(shots / "2_not_audio.png"), full_page=True)
    toasts = page.locator(".toast-body").all_inner_texts()
    assert len(toasts) == 1, toasts
    assert "That file is not audio: notes.wav" in toasts[0], toasts
    assert "/tmp" not in toasts[0] and "libsndfile" not in toasts[0] and "ffmpeg" not in toasts[0]
    # no output marked with an error, and the outputs as they were
    pills = [e for e in page.get_by_text("Error", exact=True).all() if e.is_visible()]
    assert not pills
    assert transcript(page) == before and page.locator("#cache_panel").inner_text() == panel_before


def test_compare_ends_with_the_panel_on_the_ticked_mode_and_the_api_link_shows(page, shots):
    # the first screen: no server log line, and the footer's API link
    assert "compiled kernels" not in page.locator("#cache_panel").inner_text()
    assert page.get_by_text("Use via API").first.is_visible()
    page.screenshot(path=str(shots / "3_first_screen.png"), full_page=True)
    page.get_by_text("short_3s.wav", exact=True).click()
    wait_done(page, "KV cache: static")
    page.locator("#compare_btn").click()
    page.wait_for_function(
        "() => document.querySelector('#cache_panel .wk-status')?.textContent.startsWith('compare done')",
        timeout=DECODE_TIMEOUT_MS)
    page.screenshot(path=str(shots / "3_compare_done.png"), full_page=True)
    assert page.locator("#kv_toggle input[type=checkbox]").is_checked()
    assert page.locator("#cache_panel .wk-badge").inner_text() == "KV cache: static"
    assert "identical tokens" in page.locator("#compare_box").inner_text()
