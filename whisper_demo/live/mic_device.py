"""The desktop microphone's device, through sounddevice (PortAudio). The only module that imports it.

Which input devices there are (input_devices, list_devices_text for `python app.py
--list-devices`, availability for the page), and MicStream: an open input stream whose
blocks land on a queue. mic.py builds the terminal view and the web UI's source on it.

`import sounddevice` happens lazily, inside the functions: without PortAudio (OSError
"PortAudio library not found") or without any input device, the rest of the app still
works and these functions raise MicUnavailable with a message that says what to install
or plug in.
"""

from __future__ import annotations

import queue
from typing import Callable, List, Optional, Union

import numpy as np

from ..audio import SAMPLE_RATE

BLOCK_SECONDS = 0.1

INSTALL_HINT = (
    "install PortAudio (Debian/Ubuntu: sudo apt-get install libportaudio2; "
    "macOS: brew install portaudio) and restart the app"
)
NO_DEVICE_HINT = (
    "no audio input device found: plug in a microphone (or enable one in the system's "
    "sound settings), then check `python app.py --list-devices`"
)


class MicUnavailable(RuntimeError):
    """The desktop microphone cannot be used; str() says why and what to do."""


def _sounddevice():
    try:
        import sounddevice as sd
    except OSError as err:  # the Python package is there, the PortAudio library is not
        raise MicUnavailable(f"the desktop microphone needs the PortAudio library ({err}): {INSTALL_HINT}") from err
    except ImportError as err:
        raise MicUnavailable(
            f"the desktop microphone needs the sounddevice package ({err}): pip install sounddevice, "
            f"and {INSTALL_HINT}") from err
    return sd


def input_devices() -> List[dict]:
    """Input-capable devices: dicts with index, name, channels, default_samplerate, default."""
    sd = _sounddevice()
    try:
        devices = sd.query_devices()
        default_in = sd.default.device[0] if sd.default.device is not None else -1
    except Exception as err:  # PortAudioError and friends
        raise MicUnavailable(f"cannot list audio devices ({err}); {NO_DEVICE_HINT}") from err
    found = []
    for index, dev in enumerate(devices):
        if dev.get("max_input_channels", 0) > 0:
            found.append({
                "index": index, "name": dev.get("name", f"device {index}"),
                "channels": dev["max_input_channels"],
                "default_samplerate": dev.get("default_samplerate"),
                "default": index == default_in,
            })
    return found


def list_devices_text() -> str:
    """Human-readable list of input devices, or why there are none (never raises)."""
    try:
        devices = input_devices()
    except MicUnavailable as err:
        return f"Desktop microphone unavailable: {err}"
    if not devices:
        return f"No audio input devices. {NO_DEVICE_HINT[0].upper()}{NO_DEVICE_HINT[1:]}."
    lines = ["Audio input devices (use --input-device INDEX or a part of the name):"]
    for d in devices:
        mark = "*" if d["default"] else " "
        rate = f"{d['default_samplerate']:g} Hz" if d["default_samplerate"] else "? Hz"
        lines.append(f" {mark} {d['index']:>3}  {d['name']}  ({d['channels']} ch, {rate})")
    return "\n".join(lines)


def availability() -> Optional[str]:
    """None if an input device can be opened in principle, else the message to show."""
    try:
        devices = input_devices()
    except MicUnavailable as err:
        return str(err)
    if not devices:
        return NO_DEVICE_HINT
    return None


def _resolve_device(device: Union[int, str, None]):
    if device is None or isinstance(device, int):
        return device
    text = str(device).strip()
    return int(text) if text.isdigit() else text  # sounddevice matches a name substring


class MicStream:
    """An open input stream whose callback pushes float32 mono 16 kHz-or-device-rate blocks
    onto a queue. `stream_factory` stands in for sounddevice.InputStream in tests."""

    def __init__(self, device=None, stream_factory: Optional[Callable] = None,
                 block_seconds: float = BLOCK_SECONDS):
        self.queue: "queue.Queue[np.ndarray]" = queue.Queue()
        self.status_messages: List[str] = []
        self.overflows = 0
        device = _resolve_device(device)
        if stream_factory is None:
            sd = _sounddevice()
            if device is None and not input_devices():
                raise MicUnavailable(NO_DEVICE_HINT)
            stream_factory = sd.InputStream
            self.sample_rate = self._pick_rate(sd, device)
        else:
            self.sample_rate = SAMPLE_RATE
        try:
            self._stream = self._open(stream_factory, device, self.sample_rate, block_seconds)
        except MicUnavailable:
            raise
        except Exception as err:  # PortAudioError: no such device, busy, unsupported...
            raise MicUnavailable(f"cannot open the microphone {device!r} ({err}); {NO_DEVICE_HINT}") from err
        self.sample_rate = int(getattr(self._stream, "samplerate", self.sample_rate) or self.sample_rate)

    @staticmethod
    def _pick_rate(sd, device) -> int:
        """16 kHz if the device takes it (no resampling), else its own default rate."""
        try:
            sd.check_input_settings(device=device, channels=1, dtype="float32", samplerate=SAMPLE_RATE)
            return SAMPLE_RATE
        except Exception:
            pass
        try:
            info = sd.query_devices(device, "input")
        except Exception as err:
            raise MicUnavailable(f"cannot use audio input device {device!r} ({err}); {NO_DEVICE_HINT}") from err
        return int(info["default_samplerate"])

    def _open(self, factory, device, rate, block_seconds):
        def callback(indata, frames, time_info, status):
            if status:
                self.status_messages.append(str(status))
                if "overflow" in str(status):
                    self.overflows += 1
            data = np.asarray(indata, dtype=np.float32)
            self.queue.put(data.mean(axis=1) if data.ndim == 2 else data.copy())

        return factory(device=device, channels=1, samplerate=rate, dtype="float32",
                       blocksize=int(rate * block_seconds), callback=callback)

    def start(self):
        self._stream.start()
        return self

    def stop(self):
        for method in ("stop", "close"):
            try:
                getattr(self._stream, method)()
            except Exception:
                pass

    def drain(self) -> List[np.ndarray]:
        chunks = []
        while True:
            try:
                chunks.append(self.queue.get_nowait())
            except queue.Empty:
                return chunks

    @property
    def active(self) -> bool:
        return bool(getattr(self._stream, "active", True))
