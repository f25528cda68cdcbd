"""The desktop microphone, transcribed live: in the terminal, and as the web UI's source.

    python app.py --mic                 # default input device, transcribed in the terminal
    python app.py --list-devices
    python app.py --mic --input-device 3

The device itself (sounddevice, imported lazily, and the devices it lists) is mic_device.py.
Without PortAudio or an input device the rest of
the app still works, and these functions raise MicUnavailable with a message that says what
to install or plug in. WavInputStream stands in for a sound card in tests and demos.
"""

from __future__ import annotations

import queue
import shutil
import sys
import threading
import time
from typing import Callable, Optional, TextIO

import numpy as np

from ..audio import SAMPLE_RATE
from ..events import DecodeOptions, TokenEvent
from ..timing import warm_up
from . import driver
from .mic_device import BLOCK_SECONDS, MicStream, MicUnavailable
from .config import LiveConfig
from .session import LiveSession, model_session
from .snapshots import LiveUpdate
from .worker import LiveWorker

DIM, RESET, CLEAR_LINE = "\x1b[2m", "\x1b[0m", "\r\x1b[2K"


# ---------------------------------------------------------------------- terminal mode


class _TerminalView:
    """Final text printed once, in normal type, a line per utterance; the streamed words
    not final yet, the tentative tail and a status line rewritten in place, dimmed."""

    def __init__(self, out: TextIO, color: bool):
        self.out = out
        self.color = color
        self.status = ""
        self.tentative = ""
        self.printed_committed = ""

    def _width(self) -> int:
        return max(40, shutil.get_terminal_size((100, 20)).columns - 1)

    def _dim(self, text: str) -> str:
        return f"{DIM}{text}{RESET}" if self.color else text

    def show(self, committed_new: str, tentative: str, status: str) -> None:
        out = self.out
        if self.color:
            out.write(CLEAR_LINE)
        if committed_new:
            out.write(committed_new + "\n")
            self.printed_committed = f"{self.printed_committed} {committed_new}".strip()
        self.tentative, self.status = tentative, status
        if self.color:
            # Fit the visible text to one terminal line before adding escape codes, so the
            # \r rewrite never wraps: the end of the tentative text matters most.
            width = self._width()
            status_text = f"  [{status}]" if status else ""
            status_text = status_text[: max(0, width - 24)]
            room = width - len(status_text) - 2
            tent = tentative if len(tentative) <= room else "…" + tentative[-(room - 1):] if room > 1 else ""
            line = (self._dim("… " + tent) if tent else "") + (self._dim(status_text) if status_text else "")
            out.write(line)
        out.flush()

    def end(self) -> None:
        if self.color:
            self.out.write(CLEAR_LINE)
            self.out.flush()


def _status(event: Optional[TokenEvent], live: LiveSession) -> str:
    """One short line: cache length and size, per-token latency, memory, first-token lag."""
    stats = live.stats()
    parts = []
    if event is not None:
        parts += [f"cache {event.cache_tokens}/{event.cache_capacity} tok "
                  f"{event.self_cache_bytes / 1024:.0f} KiB {event.cache_mode}",
                  f"{event.latency_ms:.0f} ms/tok", f"RSS {event.rss_bytes / 2**20:.0f} MiB"]
    if stats.first_token_ms_median is not None:
        parts.append(f"1st tok {stats.first_token_ms_median:.0f} ms")
    parts.append(f"buf {live.buffer_seconds:.1f}s")
    return " | ".join(parts)


def run_terminal(model, options: Optional[DecodeOptions] = None, device=None,
                 stream_factory: Optional[Callable] = None, out: TextIO = sys.stdout,
                 max_seconds: Optional[float] = None, color: Optional[bool] = None,
                 config: Optional[LiveConfig] = None, err: TextIO = sys.stderr) -> int:
    """`python app.py --mic`: transcribe the microphone in the terminal until Ctrl-C.
    Returns an exit status: 0, or 2 after printing why the microphone is unavailable."""
    try:
        transcribe_microphone(model, options, device, stream_factory, out, max_seconds, color, config)
    except MicUnavailable as exc:
        err.write(f"error: {exc}\n")
        err.flush()
        return 2
    return 0


def transcribe_microphone(model, options: Optional[DecodeOptions] = None, device=None,
                          stream_factory: Optional[Callable] = None, out: TextIO = sys.stdout,
                          max_seconds: Optional[float] = None, color: Optional[bool] = None,
                          config: Optional[LiveConfig] = None) -> str:
    """The terminal view, until Ctrl-C (or `max_seconds`, or the end of a finite stand-in
    stream). Returns, and prints, the full transcript. Raises MicUnavailable."""
    options = options or DecodeOptions()
    color = out.isatty() if color is None and hasattr(out, "isatty") else bool(color)
    mic = MicStream(device, stream_factory)
    live = model_session(model, options, config)
    warm_up()  # word timing's one-time compile, before the first decode needs it
    view = _TerminalView(out, color)
    out.write(f"Listening ({mic.sample_rate} Hz, cache={options.cache}). Speak; Ctrl-C to stop.\n")
    out.flush()
    last_event: Optional[TokenEvent] = None

    def show_item(item) -> None:
        nonlocal last_event
        if isinstance(item, TokenEvent):
            last_event = item
            _, tentative = live.preview(item)
            view.show("", f"{live.streamed_text} {tentative}".strip(), _status(item, live))
        else:  # a final pass prints its utterance's final text
            final = " ".join(item.revision.words) if item.revision is not None else ""
            view.show(final, f"{item.streamed} {item.tentative}".strip(), _status(last_event, live))

    source = _MicSource(mic, max_seconds)
    mic.start()
    try:
        driver.stream(live, source, show_item)
    except KeyboardInterrupt:
        pass
    finally:
        mic.stop()
    try:
        driver.finish(live, source, show_item)
    except KeyboardInterrupt:  # a second Ctrl-C: skip the final decode
        pass
    view.end()
    transcript = live.final_text
    stats = live.stats()
    out.write("\n--- transcript ---\n" + (transcript or "(nothing heard)") + "\n")
    summary = f"{stats.decodes} re-decodes, {stats.final_passes} final passes"
    if stats.first_token_ms_median is not None:
        summary += f", chunk end -> first token median {stats.first_token_ms_median:.0f} ms"
    if stats.commit_s_median is not None:
        summary += f", speech -> commit median {stats.commit_s_median:.1f} s"
    out.write(f"({summary})\n")
    out.flush()
    return transcript


class _MicSource(driver.Source):
    """The terminal's microphone: its queue is drained into the session, between a
    decode's tokens too (audio is buffered meanwhile); it ends after `max_seconds`, or
    when a finite stand-in stream has played out."""

    def __init__(self, mic: MicStream, max_seconds: Optional[float]):
        self.mic = mic
        self.deadline = None if max_seconds is None else time.monotonic() + max_seconds

    def pull(self, session: LiveSession) -> None:
        for chunk in self.mic.drain():
            session.add_audio(self.mic.sample_rate, chunk)

    def while_decoding(self, session: LiveSession) -> None:
        self.pull(session)

    def ended(self, session: LiveSession) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return True
        return not session.ready() and not self.mic.active and self.mic.queue.empty()

    def wait(self) -> None:
        time.sleep(0.02)


# ---------------------------------------------------------------------- web UI source


class DesktopMicSource:
    """"This computer's microphone" for the web UI: records through sounddevice on the
    machine that runs the app and feeds a LiveWorker (same view as the browser
    microphone). start() raises MicUnavailable with the message to show."""

    def __init__(self, model, options: Optional[DecodeOptions] = None, device=None,
                 stream_factory: Optional[Callable] = None, config: Optional[LiveConfig] = None):
        self.model = model
        self.options = options or DecodeOptions()
        self.device = device
        self.stream_factory = stream_factory
        self.config = config or LiveConfig()
        self.worker: Optional[LiveWorker] = None
        self._mic: Optional[MicStream] = None
        self._pump: Optional[threading.Thread] = None
        self._running = threading.Event()

    @property
    def recording(self) -> bool:
        return self._running.is_set()

    def start(self) -> LiveWorker:
        if self.recording:
            return self.worker
        mic = MicStream(self.device, self.stream_factory)  # MicUnavailable goes to the caller
        self.worker = LiveWorker(model_session(self.model, self.options, self.config))
        self._mic = mic
        self._running.set()
        mic.start()
        self._pump = threading.Thread(target=self._pump_loop, name="desktop-mic", daemon=True)
        self._pump.start()
        return self.worker

    def _pump_loop(self) -> None:
        mic, worker = self._mic, self.worker
        while self._running.is_set():
            try:
                chunk = mic.queue.get(timeout=0.1)
            except queue.Empty:
                if not mic.active:
                    break
                continue
            worker.feed(mic.sample_rate, chunk)
        for chunk in mic.drain():
            worker.feed(mic.sample_rate, chunk)

    def stop(self, timeout: Optional[float] = None) -> Optional[LiveUpdate]:
        """Stop recording, commit the rest; returns the final LiveUpdate."""
        if self._mic is None or self.worker is None:
            return None
        self._running.clear()
        self._mic.stop()
        if self._pump is not None:
            self._pump.join(timeout=2)
        for chunk in self._mic.drain():
            self.worker.feed(self._mic.sample_rate, chunk)
        return self.worker.finish(timeout)

    def close(self) -> None:
        self._running.clear()
        if self._mic is not None:
            self._mic.stop()
        if self.worker is not None:
            self.worker.close()


# ---------------------------------------------------------------------- test stand-in


class WavInputStream:
    """Plays samples through sounddevice.InputStream's callback interface, in real time
    (speed=1) or faster. For tests and demos without a sound card."""

    def __init__(self, samples: np.ndarray, sample_rate: int = SAMPLE_RATE, speed: float = 1.0,
                 **kwargs):
        self.samples = np.asarray(samples, dtype=np.float32)
        self.source_rate = sample_rate
        self.samplerate = kwargs.get("samplerate") or sample_rate
        self.blocksize = kwargs.get("blocksize") or int(self.samplerate * BLOCK_SECONDS)
        self.channels = kwargs.get("channels", 1)
        self.callback = kwargs["callback"]
        self.speed = speed
        self.active = False
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        if self.samplerate != sample_rate:
            import soxr
            self.samples = soxr.resample(self.samples, sample_rate, self.samplerate).astype(np.float32)

    @classmethod
    def factory(cls, samples, sample_rate=SAMPLE_RATE, speed=1.0):
        return lambda **kwargs: cls(samples, sample_rate, speed, **kwargs)

    def start(self):
        self.active = True
        self._thread = threading.Thread(target=self._play, daemon=True)
        self._thread.start()

    def _play(self):
        n, t0 = self.blocksize, time.monotonic()
        for i, start in enumerate(range(0, len(self.samples), n)):
            if self._stop.is_set():
                break
            block = self.samples[start:start + n]
            if len(block) < n:
                block = np.pad(block, (0, n - len(block)))
            due = t0 + (i + 1) * n / self.samplerate / self.speed
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.callback(np.repeat(block[:, None], self.channels, axis=1), n, None, None)
        self.active = False

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.active = False

    def close(self):
        self.stop()
