"""Turn whatever the user gives us into what Whisper wants: float32 mono 16 kHz.

Inputs we accept
----------------
* a path (``str`` / ``pathlib.Path``) to an audio file;
* a ``(sample_rate, array)`` tuple, which is what ``gr.Audio(type="numpy")``
  hands to callbacks (int16 mostly; shape ``(n,)`` or ``(n, channels)``);
* a bare ``np.ndarray``, taken to be 16 kHz already (e.g. ``whisper.load_audio``
  output, or a test signal).

Decoding paths
--------------
1. **soundfile (libsndfile)** first: it reads WAV, FLAC, OGG/Vorbis/Opus and
   MP3 in-process, without spawning a program, tells us the length before
   decoding (so an over-long file is refused cheaply), and gives the file's
   true sample rate and channels so *we* control resampling and downmixing.
2. **ffmpeg** as a fallback, for containers libsndfile cannot open (m4a/AAC,
   webm, video files...). Raw PCM on a pipe carries no header, so we ask
   ffmpeg for mono 16 kHz float32 directly -- the same thing
   ``whisper.load_audio`` does.

Resampling uses soxr at "HQ" quality: band-limited, so a 1 kHz tone stays
1 kHz and nothing above 8 kHz folds back into the speech band.

Every failure a person can cause raises :class:`AudioError` whose message says
what was wrong and, where there is one, what to do about it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Union

import numpy as np
import soundfile as sf
import soxr

SAMPLE_RATE = 16000
"""The only rate Whisper's feature extractor accepts."""

DEFAULT_MAX_SECONDS = 600
"""The app's default length limit (``--max-audio-seconds``), which it passes to
:func:`load_audio` itself. The library has no limit of its own: a script that loads a
long recording gets all of it unless it asks for a limit."""

# Below 1 kHz nothing intelligible survives; above 768 kHz no real device
# records. Outside this range the number is almost surely a bug (e.g. the
# tuple order swapped, so the "rate" is a sample count).
MIN_SAMPLE_RATE = 1000
MAX_SAMPLE_RATE = 768000

# A (samples, channels) array with more channels than this is almost surely
# (channels, samples) the wrong way round.
MAX_CHANNELS = 64

# Files libsndfile should read; for these a failure means a damaged file,
# not a missing decoder.
_SOUNDFILE_EXTENSIONS = {".wav", ".wave", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff", ".au", ".caf", ".w64", ".rf64"}

# Leading bytes -> (what the file is, who decodes it), to tell the user *why*
# we cannot read it. "soundfile": libsndfile should have read it, so it is
# damaged; "ffmpeg": needs ffmpeg; "other": not audio at all.
_MAGIC = [
    (b"RIFF", "a WAV (RIFF) file", "soundfile"),
    (b"fLaC", "a FLAC file", "soundfile"),
    (b"OggS", "an Ogg file", "soundfile"),
    (b"ID3", "an MP3 file", "soundfile"),
    (b"\x1aE\xdf\xa3", "a WebM/Matroska file", "ffmpeg"),
    (b"\x89PNG", "a PNG image", "other"),
    (b"\xff\xd8\xff", "a JPEG image", "other"),
    (b"GIF8", "a GIF image", "other"),
    (b"%PDF", "a PDF document", "other"),
    (b"PK\x03\x04", "a ZIP archive", "other"),
]

AudioSource = Union[str, os.PathLike, tuple, np.ndarray]


class AudioError(ValueError):
    """Audio the app cannot use; the message is meant for the person using it."""


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def load_audio(source: AudioSource, max_seconds: float | None = None) -> np.ndarray:
    """Return ``source`` as contiguous float32 mono audio at 16 kHz in [-1, 1].

    Any length by default; with ``max_seconds`` longer audio is refused (a file before it
    is decoded) with a message naming the limit. The app passes its ``--max-audio-seconds``
    (:data:`DEFAULT_MAX_SECONDS` unless set). Raises :class:`AudioError`.
    """
    if source is None:
        raise AudioError("no audio was given; record or upload a clip first")
    if isinstance(source, (str, os.PathLike)):
        return _load_file(Path(source), max_seconds)
    if isinstance(source, tuple):
        sample_rate, array = _unpack_tuple(source)
        return _convert(sample_rate, array, max_seconds, what="the audio")
    if isinstance(source, np.ndarray):
        return _convert(SAMPLE_RATE, source, max_seconds, what="the audio")
    raise AudioError(
        f"cannot use {type(source).__name__} as audio; "
        "give a file path, a (sample_rate, array) tuple or a numpy array"
    )


def load_audio_chunk(sample_rate: int, array: np.ndarray) -> np.ndarray:
    """Convert one streamed microphone chunk like :func:`load_audio` does.

    No length limit (the stream as a whole is what grows), and an empty chunk
    -- browsers send them at start and stop -- gives an empty array instead of
    an error. Each chunk is resampled on its own; with chunks of 0.5 s the
    edge effects are far below what Whisper notices.
    """
    array = np.asarray(array)
    if array.size == 0:
        _check_sample_rate(sample_rate)
        return np.zeros(0, dtype=np.float32)
    return _convert(sample_rate, array, None, what="the microphone chunk")


class ChunkStream:
    """A microphone's chunks as one signal: like load_audio_chunk, but resampled by one
    streaming resampler (soxr's), so the samples do not depend on where the chunks were
    cut. Resampled one by one, each chunk's edges differed with the chunking (the browser
    cuts its chunks where its timer fires): the same recording was different audio from
    one run to the next. Not thread safe: a live session calls it under its own lock."""

    def __init__(self):
        self._rate = None
        self._resampler = None

    def __call__(self, sample_rate: int, array: np.ndarray) -> np.ndarray:
        array = np.asarray(array)
        sample_rate = _check_sample_rate(sample_rate, "the microphone chunk")
        if array.size == 0:
            return np.zeros(0, dtype=np.float32)
        samples = _convert(sample_rate, array, None, what="the microphone chunk", resample=False)
        if sample_rate == SAMPLE_RATE:
            return samples
        if sample_rate != self._rate:  # a new stream (a browser reopening its microphone)
            self._rate = sample_rate
            self._resampler = soxr.ResampleStream(sample_rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        return _clipped(self._resampler.resample_chunk(samples))

    def flush(self) -> np.ndarray:
        """The few samples the resampler still holds (the end of the stream)."""
        if self._resampler is None:
            return np.zeros(0, dtype=np.float32)
        return _clipped(self._resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True))


def too_large_chunk_message(size: int, max_bytes: int) -> str:
    """Why a microphone chunk of `size` bytes is refused (before any of it is read)."""
    return (f"the live audio chunk is {size / 1e6:.1f} MB; this server takes chunks up to "
            f"{max_bytes / 1e6:.1f} MB (--max-chunk-size). The browser microphone sends "
            f"about 0.01 MB a chunk.")


def read_pcm_chunk(body: bytes, sample_rate, max_bytes: int, max_seconds: float) -> tuple[int, np.ndarray]:
    """One microphone chunk as the page sends it (ui/microphone/browser_mic.js): 16-bit little-endian
    mono PCM at `sample_rate`. Returns (rate, int16 samples). Refused (AudioError) when it
    is over `max_bytes` or `max_seconds`, when the rate is not an audio rate, or when the
    body is not whole samples. An empty body is an empty chunk (the page's last one)."""
    name = "the live audio chunk"
    rate = _check_sample_rate(sample_rate, name)
    if len(body) > max_bytes:
        raise AudioError(too_large_chunk_message(len(body), max_bytes))
    if len(body) % 2:
        raise AudioError(f"{name} is {len(body)} bytes, not whole 16-bit samples")
    _check_length(len(body) / 2 / rate, max_seconds, name, "--max-chunk-seconds")
    return rate, np.frombuffer(body, dtype="<i2")


def describe(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> str:
    """Short human summary for UI messages, e.g. ``"12.3 s, 16 kHz mono"``."""
    audio = np.asarray(audio)
    channels = 1 if audio.ndim < 2 else audio.shape[1]
    layout = {1: "mono", 2: "stereo"}.get(channels, f"{channels} channels")
    return f"{len(audio) / sample_rate:.1f} s, {sample_rate / 1000:g} kHz {layout}"


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def _load_file(path: Path, max_seconds: float | None) -> np.ndarray:
    name = f"audio file '{path}'"
    if not path.exists():
        raise AudioError(f"{name} not found")
    if path.is_dir():
        raise AudioError(f"{name} is a folder, not a file")
    if path.stat().st_size == 0:
        raise AudioError(f"{name} is empty (0 bytes)")

    try:
        return _load_with_soundfile(path, max_seconds, name)
    except sf.SoundFileError as err:
        soundfile_error = _last_line(str(err))

    if shutil.which("ffmpeg") is None:
        kind, decoder = _sniff(path)
        needs_ffmpeg = decoder == "ffmpeg" or (
            decoder is None and path.suffix.lower() not in _SOUNDFILE_EXTENSIONS
        )
        if not needs_ffmpeg:
            raise AudioError(_unreadable(path, f"libsndfile: {soundfile_error}"))
        raise AudioError(
            f"cannot decode {name}: '{path.suffix or 'no extension'}' files need ffmpeg, "
            "which is not installed (apt-get install ffmpeg)"
        )
    return _load_with_ffmpeg(path, max_seconds, name, soundfile_error)


def _load_with_soundfile(path: Path, max_seconds: float | None, name: str) -> np.ndarray:
    # Check the length from the header before decoding, so a 3-hour file is
    # refused without reading it into memory.
    info = sf.info(str(path))
    _check_sample_rate(info.samplerate, name)
    _check_length(info.frames / info.samplerate, max_seconds, name)
    data, sample_rate = sf.read(str(path), dtype="float32", always_2d=True)
    if len(data) == 0:
        raise AudioError(f"{name} contains no audio samples")
    return _convert(sample_rate, data, max_seconds, what=name, owned=True)


def _load_with_ffmpeg(path: Path, max_seconds: float | None, name: str, soundfile_error: str,
                      flag: str = "--max-audio-seconds") -> np.ndarray:
    command = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-i", str(path)]
    if max_seconds is not None:
        # Stop decoding just past the limit; enough to know it is too long.
        command += ["-t", f"{max_seconds + 1:.3f}"]
    command += ["-vn", "-f", "f32le", "-ac", "1", "-ar", str(SAMPLE_RATE), "-"]
    result = subprocess.run(command, capture_output=True, check=False)
    if result.returncode != 0:
        ffmpeg_error = _last_line(result.stderr.decode(errors="replace"))
        raise AudioError(_unreadable(path, f"libsndfile: {soundfile_error}; ffmpeg: {ffmpeg_error}"))

    audio = np.frombuffer(result.stdout, dtype=np.float32)
    if audio.size == 0:
        raise AudioError(f"{name} contains no audio samples")
    if max_seconds is not None and audio.size / SAMPLE_RATE > max_seconds:
        # We stopped early, so ask ffprobe for the real length for the message.
        _check_length(_probe_duration(path) or audio.size / SAMPLE_RATE, max_seconds, name, flag)
    return _convert(SAMPLE_RATE, audio, max_seconds, what=name)


def _probe_duration(path: Path) -> float | None:
    """Container duration in seconds via ffprobe, or None if unknown."""
    if shutil.which("ffprobe") is None:
        return None
    result = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(path)],
        capture_output=True, text=True, check=False,
    )
    try:
        return float(result.stdout.strip())
    except ValueError:
        return None


def _unreadable(path: Path, details: str) -> str:
    """The 'could not read X as audio' message, saying what the file looks like."""
    kind, decoder = _sniff(path)
    ext = path.suffix.lower() or "(no extension)"
    if kind is None:
        looks = f"the file ends in {ext} but is not in any audio format we know"
    elif decoder == "other":
        looks = f"the file ends in {ext} but looks like {kind}, not audio"
    else:
        looks = f"it starts like {kind} but is damaged or cut short"
    return f"could not read '{path}' as audio: {looks} ({details})"


def _sniff(path: Path) -> tuple[str | None, str | None]:
    """Guess (kind, decoder) from a file's first bytes; (None, None) if unknown."""
    with open(path, "rb") as f:
        head = f.read(512)
    for magic, kind, decoder in _MAGIC:
        if head.startswith(magic):
            return kind, decoder
    if head[4:8] == b"ftyp":
        return "an MP4/M4A file", "ffmpeg"
    if head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "an MP3 file", "soundfile"
    if b"\x00" not in head:
        try:
            head.decode("utf-8")
            return "plain text", "other"
        except UnicodeDecodeError:
            pass
    return None, None


def _last_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error"


# --------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------


def _unpack_tuple(source: tuple) -> tuple[int, np.ndarray]:
    if len(source) != 2:
        raise AudioError(f"expected a (sample_rate, array) pair, got a tuple of {len(source)} items")
    sample_rate, array = source
    if isinstance(sample_rate, np.ndarray) and not isinstance(array, np.ndarray):
        # Easy mistake: (array, sample_rate). Say so rather than "bad rate".
        raise AudioError("expected (sample_rate, array) but got (array, sample_rate); swap them")
    return sample_rate, np.asarray(array)


def _convert(sample_rate, array: np.ndarray, max_seconds: float | None, what: str,
             resample: bool = True, owned: bool = False) -> np.ndarray:
    """Validate, scale to float, downmix, resample (unless told not to), clip. The one
    shared path. `owned`: `array` is ours to change (a file just read), so it is clipped
    in place: an hour of audio is 230 MB of float32, and a copy of it doubled the peak."""
    sample_rate = _check_sample_rate(sample_rate, what)
    samples = _to_float(array, what)
    samples = _downmix(samples, what)
    if samples.size == 0:
        raise AudioError(f"{what} is empty (0 samples)")
    # a float64 sum is finite exactly when every sample is (float32's largest value times
    # any length of audio stays far below float64's), and needs no mask the audio's size
    if not np.isfinite(samples.sum(dtype=np.float64)):
        bad = int(np.count_nonzero(~np.isfinite(samples)))
        raise AudioError(f"{what} contains {bad} invalid samples (NaN or infinity)")
    _check_length(samples.size / sample_rate, max_seconds, what)
    if resample and sample_rate != SAMPLE_RATE:
        samples = soxr.resample(samples, sample_rate, SAMPLE_RATE, quality="HQ")
    # a caller's own array is never changed: only a copy made here, or one we were given
    fresh = owned or not np.may_share_memory(samples, array)
    return _clipped(samples, in_place=fresh)


def _clipped(samples: np.ndarray, in_place: bool = False) -> np.ndarray:
    # Clipped input (and the resampler's small overshoot next to it) may
    # leave [-1, 1]; Whisper expects that range.
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    if in_place and samples.flags.writeable:
        return np.clip(samples, -1.0, 1.0, out=samples)
    return np.clip(samples, -1.0, 1.0)


def _to_float(array: np.ndarray, what: str) -> np.ndarray:
    """Integer PCM -> float32 in [-1, 1]; floats are passed through as float32."""
    dtype = array.dtype
    if dtype.kind == "i" and dtype.itemsize <= 4:
        # Signed PCM: divide by 2**(bits-1) so full scale maps to [-1, 1).
        scale = np.float32(2.0 ** (8 * dtype.itemsize - 1))
        return array.astype(np.float32) / scale
    if dtype.kind == "u" and dtype.itemsize == 1:
        # 8-bit WAV is offset binary: 128 is silence.
        return (array.astype(np.float32) - np.float32(128)) / np.float32(128)
    if dtype.kind == "f":
        return array.astype(np.float32, copy=False)
    raise AudioError(
        f"{what} has samples of type {dtype}; use int16, int32, uint8 or float32"
    )


def _downmix(samples: np.ndarray, what: str) -> np.ndarray:
    """(n,) or (n, channels) -> (n,) by averaging channels (works for 5.1 too)."""
    if samples.ndim == 1:
        return samples
    if samples.ndim != 2:
        raise AudioError(f"{what} has shape {samples.shape}; expected (samples,) or (samples, channels)")
    if samples.shape[1] > MAX_CHANNELS:
        raise AudioError(
            f"{what} has shape {samples.shape}, i.e. {samples.shape[1]} channels; "
            "expected (samples, channels) -- is it (channels, samples)? transpose it"
        )
    if samples.shape[1] == 1:
        return samples[:, 0]
    return samples.mean(axis=1, dtype=np.float32)


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------


def _check_sample_rate(sample_rate, what: str = "the audio") -> int:
    """Return the rate as int, or raise if it is not a plausible audio rate."""
    try:
        rate = float(sample_rate)
    except (TypeError, ValueError):
        raise AudioError(f"{what} has sample rate {sample_rate!r}, which is not a number") from None
    if not np.isfinite(rate) or rate <= 0:
        raise AudioError(f"{what} has sample rate {sample_rate}; it must be a positive number of Hz")
    if rate != int(rate) or not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise AudioError(
            f"{what} has sample rate {sample_rate} Hz, which is not a real audio rate "
            f"(expected a whole number between {MIN_SAMPLE_RATE} and {MAX_SAMPLE_RATE})"
        )
    return int(rate)


def _check_length(seconds: float, max_seconds: float | None, what: str,
                  flag: str = "--max-audio-seconds") -> None:
    if max_seconds is not None and seconds > max_seconds:
        what = what[0].upper() + what[1:]
        raise AudioError(
            f"{what} is {seconds:.1f} s long; the limit is {max_seconds:g} s "
            f"(raise it with {flag})"
        )
