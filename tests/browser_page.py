"""Chromium through Playwright for the page tests: one browser a module, a fresh page a
test. conftest.py's `browser` and `page` fixtures are built on these two:

    with chromium(fake_microphone=EXAMPLES / "jfk.wav") as browser:
        with open_page(browser, server.url) as page:
            ...

A page collects the browser's errors (uncaught exceptions and console errors) in
`page.errors`, for the tests that assert the page logged none.
"""

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from app_server import CHROMIUM, chromium_args

VIEWPORT = {"width": 1400, "height": 1000}


@contextmanager
def chromium(fake_microphone: Path) -> Iterator["object"]:
    """Debian's Chromium, headless, with `fake_microphone` (a WAV file) as its microphone."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=chromium_args(fake_microphone))
        yield browser
        browser.close()


@contextmanager
def open_page(browser, url: str) -> Iterator["object"]:
    """A new browser context at `url`, once the page shows its audio input."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.on("console", lambda msg: page.errors.append(msg.text) if msg.type == "error" else None)
    page.goto(url)
    page.wait_for_selector("#audio_in")
    yield page
    context.close()
