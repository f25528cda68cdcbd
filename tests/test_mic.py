"""mic.py: the terminal mode fed by a stand-in InputStream playing a speech file, the
desktop source for the web UI, and real PortAudio on a machine without a sound card."""

import builtins
import io
import re
import sys
import time

import pytest

from whisper_demo.live import mic, mic_device
from whisper_demo.events import DecodeOptions

from whisper_demo.text import word_edits as word_distance


def _no_ansi(text):
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


# Real time: audio is played by a thread while decodes run in another. Which decodes run
# depends on scheduling; what is asserted holds whatever it is (the final text within 3
# words of the file's, committed in lines, the summary printed).
@pytest.mark.realtime
def test_terminal_mode_prints_committed_text(tiny_model, clip, transcripts):
    out = io.StringIO()
    factory = mic.WavInputStream.factory(clip("jfk.wav"), speed=3.0)
    status = mic.run_terminal(tiny_model, DecodeOptions(), stream_factory=factory, out=out, color=False)
    assert status == 0
    text = out.getvalue()
    assert "\x1b[" not in text  # not a terminal: plain lines only
    committed_lines = text.split("--- transcript ---")[0].splitlines()[1:]
    assert len([line for line in committed_lines if line.strip()]) >= 1
    final = text.split("--- transcript ---\n")[1].splitlines()[0]
    assert word_distance(final, transcripts["jfk.wav"]) <= 3, final
    assert re.search(r"\(\d+ re-decodes, \d+ final passes", text), text


class _CtrlCAfterPlayback(mic.WavInputStream):
    """Like a real microphone, never ends by itself; the user presses Ctrl-C."""

    @property
    def active(self):
        if self._thread is not None and not self._thread.is_alive():
            raise KeyboardInterrupt
        return True

    @active.setter
    def active(self, value):
        pass


@pytest.mark.realtime
def test_terminal_mode_dims_tentative_and_stops_cleanly_on_ctrl_c(tiny_model, clip):
    out = io.StringIO()
    audio = clip("short_3s.wav")
    factory = lambda **kw: _CtrlCAfterPlayback(audio, 16000, 2.0, **kw)  # noqa: E731
    status = mic.run_terminal(tiny_model, DecodeOptions(), stream_factory=factory, out=out, color=True)
    assert status == 0
    text = out.getvalue()
    assert mic.DIM in text and "\r\x1b[2K" in text  # tentative/status line, dimmed, rewritten
    assert "cache " in text and "ms/tok" in text and "RSS" in text  # the status line
    final = text.split("--- transcript ---\n")[1].splitlines()[0]
    assert "door" in final.lower() and "quietly" in final.lower(), final


@pytest.mark.realtime
def test_stand_in_at_device_rate_is_resampled(tiny_model, clip):
    """A device that only offers 48 kHz: the same callback interface, resampled chunks."""
    audio = clip("short_3s.wav")

    def factory(**kw):
        kw["samplerate"] = 48000
        return mic.WavInputStream(audio, 16000, 4.0, **kw)

    out = io.StringIO()
    text = mic.transcribe_microphone(tiny_model, DecodeOptions(), stream_factory=factory, out=out,
                                     color=False)
    assert "door" in text.lower(), text


@pytest.mark.realtime
def test_desktop_source_with_stand_in(tiny_model, clip, transcripts):
    source = mic.DesktopMicSource(tiny_model, DecodeOptions(),
                                  stream_factory=mic.WavInputStream.factory(clip("jfk.wav"), speed=3.0))
    worker = source.start()
    assert source.recording
    time.sleep(11 / 3 + 0.5)  # the stand-in plays jfk.wav at 3x
    final = source.stop(timeout=120)
    assert worker.view().error is None and final is not None and final.final
    assert word_distance(final.committed, transcripts["jfk.wav"]) <= 3, final.committed
    source.close()


# ------------------------------------------------------------------- real PortAudio


def test_real_portaudio_reports_no_devices_gracefully():
    import sounddevice  # noqa: F401  (libportaudio2 is installed in CI: this import must work)

    text = mic_device.list_devices_text()
    assert isinstance(text, str) and text
    devices = mic_device.input_devices()
    if devices:  # a machine with a microphone: listed with its index, and no more to check
        assert str(devices[0]["index"]) in text
        pytest.skip("this machine has an input device: the no-device messages cannot be seen")
    assert "No audio input devices" in text and "plug in a microphone" in text
    assert "plug in a microphone" in mic_device.availability()
    with pytest.raises(mic_device.MicUnavailable, match="plug in a microphone"):
        mic_device.MicStream()
    err = io.StringIO()
    assert mic.run_terminal(None, err=err, out=io.StringIO()) == 2
    assert "plug in a microphone" in err.getvalue()
    source = mic.DesktopMicSource(None)
    with pytest.raises(mic_device.MicUnavailable):
        source.start()
    with pytest.raises(mic_device.MicUnavailable, match="device 7"):
        mic_device.MicStream(device=7)  # a device index that does not exist


def test_missing_portaudio_library_says_what_to_install(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    text = mic_device.list_devices_text()
    assert "libportaudio2" in text and "PortAudio library not found" in text
    with pytest.raises(mic_device.MicUnavailable, match="libportaudio2"):
        mic_device.MicStream()
    assert "libportaudio2" in mic_device.availability()
