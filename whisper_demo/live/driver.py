"""One loop drives a session from any source of audio: feed what came, run the updates
that are due, and at the end finish (as whisper_streaming drives every source through
insert_audio_chunk / process_iter / finish).

    class Wav(Source):
        def pull(self, session): session.add_samples(...)   # what has come by now
        def ended(self, session): return ...                 # no more: finish
    drive(session, Wav(), publish)                           # every TokenEvent and LiveUpdate

The sources: the worker (audio from other threads; worker.py), the terminal microphone
(mic.py) and the benchmark's fast, paced and realtime feeds (bench/feeds.py). What each
does between the steps (wait on a condition, sleep, move a simulated clock on) is its
own; the order of the steps is this module's.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from .session import LiveSession
from .snapshots import LiveUpdate

Publish = Callable[[object], None]  # takes each TokenEvent and LiveUpdate


class Source:
    """Where a session's audio comes from, and what the loop does while none is due."""

    def pull(self, session: LiveSession) -> None:
        """Add the audio that has come (none by default: other threads add it)."""

    def while_decoding(self, session: LiveSession) -> None:
        """Called after each item of a decode: a source whose queue must stay short adds
        its audio here too (the session takes it between a streamed decode's tokens)."""

    def ended(self, session: LiveSession) -> bool:
        """No more audio is to come: finish now."""
        return False

    def closed(self) -> bool:
        """Give up without finishing (the session was closed)."""
        return False

    def wait(self) -> None:
        """Nothing was decoded: wait until more may be due."""


def stream(session: LiveSession, source: Source, publish: Optional[Publish] = None) -> bool:
    """Feed -> updates until the source ends (True) or is closed (False)."""
    while True:
        source.pull(session)
        if source.closed():
            return False
        if source.ended(session):
            return True
        decoded = session.ready() and _run(session.updates(), publish, lambda: source.while_decoding(session))
        if not decoded:
            source.wait()


def finish(session: LiveSession, source: Source, publish: Optional[Publish] = None) -> Optional[LiveUpdate]:
    """The last of the source's audio, then the session's finish(); its final LiveUpdate."""
    source.pull(session)
    last = None

    def keep(item) -> None:
        nonlocal last
        if isinstance(item, LiveUpdate):
            last = item
        if publish is not None:
            publish(item)

    _run(session.finish(), keep)
    return last


def drive(session: LiveSession, source: Source, publish: Optional[Publish] = None) -> Optional[LiveUpdate]:
    """Feed -> updates -> finish; the final LiveUpdate (None if the source was closed)."""
    if stream(session, source, publish):
        return finish(session, source, publish)
    return None


def drain(items: Iterable) -> Optional[LiveUpdate]:
    """Run an updates()/finish() generator to its end; its last LiveUpdate (or None)."""
    last = None
    for item in items:
        if isinstance(item, LiveUpdate):
            last = item
    return last


def _run(items: Iterable, publish: Optional[Publish], after_each: Callable[[], None] = lambda: None) -> bool:
    """Publish every item; whether one of them was a LiveUpdate of a decode that ran."""
    decoded = False
    for item in items:
        if publish is not None:
            publish(item)
        decoded = decoded or (isinstance(item, LiveUpdate) and item.decoded)
        after_each()
    return decoded
