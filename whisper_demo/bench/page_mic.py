"""Driving the Live tab in Chromium with a WAV file as the microphone: one recording is one
session (Record, the file plays, Stop). Shared by the live_page benchmark and the browser
test (tests/test_live_browser.py), so both measure the same path.

    with live_browser(wav) as browser:
        run = record_session(browser, url, seconds=12.5)
    run.final, run.versions, run.stats_text, ...

Chromium plays the file once (%noloop) from the moment the page opens the microphone, and
plays silence after it. The page itself notes, on its own clock, when getUserMedia
returned the stream and each time the committed text changed (a MutationObserver: cheaper
than polling from here, and exact to the frame the page drew), so a word's commit can be
timed from its end in the file as the page saw it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1400, "height": 1100}
MIC_OPEN_TIMEOUT_S = 30.0  # from Record to the page holding the microphone (a busy machine takes seconds)
POLICY_LABELS = {"agreement": "two decodes agree (LocalAgreement)",
                 "alignatt": "the model has heard it (AlignAtt)"}  # ui/live/layout.POLICY_CHOICES


def chromium_args(fake_microphone: Optional[Path] = None) -> List[str]:
    """Headless Chromium flags that work on a bare Linux machine or container: no sandbox
    (it needs privileges a container lacks), no GPU, no background network. With a fake
    microphone, Chromium plays the wav when the page opens the recording stream; %noloop
    plays it once, and a missing file would play silence without an error."""
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    if fake_microphone is not None:
        assert Path(fake_microphone).is_file()  # a missing file plays silence, without error
        args += ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={fake_microphone}%noloop"]
    return args


# Runs before the page's own scripts: marks when the microphone stream opened (the fake
# device starts the file then), on the page's clock.
MIC_HOOK_JS = """
window.__wkMicOpened = [];
const media = navigator.mediaDevices;
if (media && media.getUserMedia) {
  const open = media.getUserMedia.bind(media);
  media.getUserMedia = async (constraints) => {
    const stream = await open(constraints);
    if (constraints && constraints.audio) window.__wkMicOpened.push(performance.now());
    return stream;
  };
}
"""

# Started once the Live tab shows: every change of the committed (and tentative) text with
# the page's time, and of its final part.
WATCH_TRANSCRIPT_JS = """
() => {
  window.__wkVersions = [];
  window.__wkFinals = [];
  window.__wkTentative = false;
  let last = null, lastFinal = null;
  const look = () => {
    // found afresh each time: a redraw may replace the transcript's element itself
    const box = document.querySelector('#live-transcript');
    if (!box) return;
    const c = box.querySelector('.wk-committed');
    const text = c ? c.textContent.trim() : '';
    const f = box.querySelector('.wk-final');
    const finalText = f ? f.textContent.trim() : '';
    if (box.querySelector('.wk-tentative')) window.__wkTentative = true;
    if (text !== last) { last = text; window.__wkVersions.push([performance.now(), text]); }
    if (finalText !== lastFinal) { lastFinal = finalText; window.__wkFinals.push([performance.now(), finalText]); }
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true});
  look();
}
"""


@dataclass
class PageSession:
    """What the page showed of one recording. Times are seconds after Record was clicked
    (mic_opened_s: when the page got the microphone, i.e. when the file started playing)."""

    final: str  # the committed text once the page says the session is final
    versions: List[Tuple[float, str]]  # each committed text the page showed, and when
    mic_opened_s: Optional[float]
    stopped_s: float  # when Stop was clicked: text shown after it came from the final decode
    tentative_seen: bool
    stats_text: str  # the stats tiles as shown
    stats_details: List[str]  # the tiles' tooltips (median and p95 are there)
    panel_text: str = ""
    chart_lines: int = 0  # latency chart series drawn
    canvases_while_recording: int = 0  # waveform canvases drawn while recording
    copied: Optional[str] = None  # what "Copy text" put on the clipboard (copy=True)
    errors: List[str] = field(default_factory=list)  # the page's uncaught errors
    policy: str = ""  # the 'A word is final when' choice the page had at Record
    # each final text (the final passes' words, .wk-final) the page showed, and when
    final_versions: List[Tuple[float, str]] = field(default_factory=list)

    @property
    def first_commit_s(self) -> Optional[float]:
        """When committed text first showed, after Record."""
        return next((t for t, text in self.versions if text), None)


@contextmanager
def live_browser(fake_microphone: Path) -> Iterator[object]:
    """Debian's Chromium, headless, with `fake_microphone` (a WAV file) as its microphone."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=chromium_args(fake_microphone))
        try:
            yield browser
        finally:
            browser.close()


def record_session(browser, url: str, seconds: float, policy: Optional[str] = None,
                   wait_for_commit_s: float = 0.0, copy: bool = False,
                   on_first_commit: Optional[Callable[[object], None]] = None,
                   screenshots: Optional[Path] = None, poll_s: float = 0.5) -> PageSession:
    """Open the Live tab, choose `policy` (None: the page's default), press Record, let the
    microphone play for `seconds` after it opened (longer, up to `wait_for_commit_s` more,
    while nothing is committed yet), press Stop and wait for the final text.
    on_first_commit(page) runs once when committed text first shows."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        errors: List[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.add_init_script(MIC_HOOK_JS)
        page.goto(url)
        # the Transcribe tab shows first; the Live tab's parts may be drawn only once it is open
        page.wait_for_selector("#audio_in, #live-mic", state="attached", timeout=120_000)
        page.get_by_role("tab", name="Live").click()
        page.wait_for_selector("#live-transcript", state="attached", timeout=60_000)
        if policy is not None:
            page.locator("#live_policy").get_by_label(POLICY_LABELS[policy]).check()
        chosen = page.locator("#live_policy input:checked").evaluate("e => e.value")
        page.evaluate(WATCH_TRANSCRIPT_JS)
        clicked = page.evaluate("() => performance.now()")
        page.locator("#live-mic").get_by_role("button", name="Record").click()
        started = time.monotonic()

        canvases, seen_commit = 0, False
        mic_opened = None
        while True:
            elapsed = time.monotonic() - started
            if mic_opened is None:
                opened = page.evaluate("() => window.__wkMicOpened")
                mic_opened = (opened[-1] - clicked) / 1000 if opened else None
            heard = elapsed - (mic_opened if mic_opened is not None else elapsed)
            if not seen_commit and page.evaluate("() => window.__wkVersions.some(v => v[1])"):
                seen_commit = True
                canvases = page.locator("#live-mic canvas").count()
                if on_first_commit is not None:
                    on_first_commit(page)
            if heard >= seconds and (seen_commit or heard >= seconds + wait_for_commit_s):
                break
            if mic_opened is None and elapsed > MIC_OPEN_TIMEOUT_S:
                recording = page.locator("#live-mic").get_by_role("button", name="Stop").count()
                raise RuntimeError(f"the page did not open the microphone within {MIC_OPEN_TIMEOUT_S:.0f} s "
                                   f"of Record (Stop button shown: {bool(recording)}; page errors: {errors})")
            time.sleep(poll_s)
        if screenshots is not None:
            page.screenshot(path=str(screenshots / "live_after_speech.png"))

        stopped = page.evaluate("() => performance.now()")
        page.locator("#live-mic").get_by_role("button", name="Stop").click()
        page.wait_for_selector('#live-transcript-body[data-state="final"]', timeout=300_000)
        final = page.locator("#live-transcript .wk-committed").inner_text().strip()
        if screenshots is not None:
            page.screenshot(path=str(screenshots / "live_final.png"))
        copied = _copy_text(page, url) if copy else None
        versions = [((t - clicked) / 1000, text) for t, text in page.evaluate("() => window.__wkVersions")]
        finals = [((t - clicked) / 1000, text) for t, text in page.evaluate("() => window.__wkFinals")]
        return PageSession(
            final=final, versions=versions, final_versions=finals, mic_opened_s=mic_opened, stopped_s=(stopped - clicked) / 1000,
            tentative_seen=page.evaluate("() => window.__wkTentative"),
            stats_text=page.locator("#live-stats").inner_text(),
            stats_details=page.locator("#live-stats .wk-tile").evaluate_all("els => els.map(e => e.title)"),
            panel_text=page.locator("#live-cache-panel").inner_text(),
            chart_lines=page.locator("#live-latency-chart polyline.wk-series").count(),
            canvases_while_recording=canvases, copied=copied, errors=errors, policy=chosen)
    finally:
        context.close()


def _copy_text(page, url: str, wait_s: float = 10.0) -> str:
    """Click "Copy text" and read the clipboard back."""
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url.rstrip("/"))
    page.locator("#live-copy").click()
    copied, asked = "", time.monotonic()
    while not copied and time.monotonic() - asked < wait_s:
        copied = page.evaluate("() => navigator.clipboard.readText()")
        time.sleep(0.1)
    return copied
