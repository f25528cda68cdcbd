"""Tests for whisper_demo.audio: every input kind, every error, real speech clips."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
import soundfile as sf

from whisper_demo import audio
from whisper_demo.audio import SAMPLE_RATE, AudioError, ChunkStream, describe, load_audio, load_audio_chunk

from whisper_demo.examples import EXAMPLES_DIR as DATA
JFK = DATA / "jfk.wav"

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed")


def sine(freq: float, sample_rate: int, seconds: float = 1.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(round(sample_rate * seconds))) / sample_rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_frequency(x: np.ndarray, sample_rate: int = SAMPLE_RATE) -> float:
    """Frequency of the strongest FFT bin, windowed to keep edge effects out."""
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * sample_rate / len(x))


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def assert_whisper_ready(x: np.ndarray) -> None:
    assert x.dtype == np.float32
    assert x.ndim == 1
    assert x.flags["C_CONTIGUOUS"]
    assert np.abs(x).max() <= 1.0


# --------------------------------------------------------------------------
# The shipped test clips
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, seconds",
    [("jfk.wav", 11.0), ("speech_25s.wav", 25.66), ("short_3s.wav", 3.27)],
)
def test_data_clips_are_16k_mono_and_small(name, seconds):
    path = DATA / name
    info = sf.info(str(path))
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    assert info.duration == pytest.approx(seconds, abs=0.01)
    assert path.stat().st_size < 1_000_000
    x = load_audio(path)
    assert len(x) == info.frames
    assert rms(x) > 0.01  # there is speech in it, not silence


def test_transcripts_cover_every_clip():
    transcripts = json.loads((DATA / "transcripts.json").read_text())
    assert set(transcripts) == {p.name for p in DATA.glob("*.wav")}
    assert transcripts["jfk.wav"].startswith("And so my fellow Americans, ask not")
    assert all(text.strip() for text in transcripts.values())


# --------------------------------------------------------------------------
# Resampling
# --------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000, 96000])
def test_resampling_keeps_frequency_duration_and_level(rate):
    x = load_audio((rate, sine(1000, rate, seconds=1.0)))
    assert_whisper_ready(x)
    assert abs(len(x) - SAMPLE_RATE) <= 1
    assert peak_frequency(x) == pytest.approx(1000, abs=2)
    # A 0.5-amplitude sine has RMS 0.5/sqrt(2); resampling must not change it.
    assert rms(x[1000:-1000]) == pytest.approx(0.5 / np.sqrt(2), rel=0.01)


def test_resampling_removes_content_above_8k_instead_of_aliasing():
    # 12 kHz cannot exist at 16 kHz; a naive decimator would fold it to 4 kHz.
    x = load_audio((48000, sine(12000, 48000)))
    assert rms(x[1000:-1000]) < 0.005


def test_16k_float32_passes_through_unchanged():
    original = sine(440, SAMPLE_RATE)
    x = load_audio((SAMPLE_RATE, original))
    np.testing.assert_array_equal(x, original)


def test_bare_array_is_taken_as_16k():
    original = sine(440, SAMPLE_RATE, seconds=2.0)
    x = load_audio(original)
    np.testing.assert_array_equal(x, original)
    # float64 arrays are converted, not rejected.
    assert load_audio(original.astype(np.float64)).dtype == np.float32


def test_non_contiguous_input_gives_contiguous_output():
    x = load_audio(sine(440, SAMPLE_RATE, seconds=2.0)[::2])
    assert x.flags["C_CONTIGUOUS"] and len(x) == SAMPLE_RATE


# --------------------------------------------------------------------------
# Sample types
# --------------------------------------------------------------------------


def test_int16_full_scale_maps_to_unit_range():
    x = load_audio((SAMPLE_RATE, np.array([32767, -32768, 0, 16384], dtype=np.int16)))
    np.testing.assert_allclose(x, [32767 / 32768, -1.0, 0.0, 0.5])


def test_int32_full_scale_maps_to_unit_range():
    x = load_audio((SAMPLE_RATE, np.array([2**31 - 1, -(2**31), 2**30], dtype=np.int32)))
    np.testing.assert_allclose(x, [1.0, -1.0, 0.5], atol=1e-6)


def test_uint8_is_offset_binary():
    x = load_audio((SAMPLE_RATE, np.array([0, 128, 255, 192], dtype=np.uint8)))
    np.testing.assert_allclose(x, [-1.0, 0.0, 127 / 128, 0.5])


def test_int8_and_big_endian_int16_are_scaled():
    np.testing.assert_allclose(load_audio((SAMPLE_RATE, np.array([-128, 64], dtype=np.int8))), [-1.0, 0.5])
    big_endian = np.array([16384, -32768], dtype=">i2")
    np.testing.assert_allclose(load_audio((SAMPLE_RATE, big_endian)), [0.5, -1.0])


def test_gradio_int16_tuple_at_48k():
    # What gr.Audio(type="numpy") gives for a browser recording.
    pcm = (sine(1000, 48000, seconds=2.0, amplitude=0.25) * 32767).astype(np.int16)
    x = load_audio((48000, pcm))
    assert len(x) == 2 * SAMPLE_RATE
    assert np.abs(x).max() == pytest.approx(0.25, abs=0.01)
    assert peak_frequency(x) == pytest.approx(1000, abs=2)


@pytest.mark.parametrize("dtype", [np.int64, np.complex64, np.bool_])
def test_unsupported_sample_types_are_refused(dtype):
    with pytest.raises(AudioError, match="samples of type"):
        load_audio((SAMPLE_RATE, np.zeros(100, dtype=dtype)))


# --------------------------------------------------------------------------
# Channels
# --------------------------------------------------------------------------


def test_stereo_is_averaged():
    left = sine(1000, 44100)
    stereo = np.stack([left, np.zeros_like(left)], axis=1)
    x = load_audio((44100, stereo))
    assert np.abs(x[1000:-1000]).max() == pytest.approx(0.25, abs=0.005)
    # Opposite-phase channels cancel: proof we average rather than pick one.
    cancelling = np.stack([left, -left], axis=1)
    assert np.abs(load_audio((44100, cancelling))).max() < 1e-6


def test_5_1_surround_is_averaged():
    levels = np.array([0.6, 0.6, 0.3, 0.0, -0.3, 0.0], dtype=np.float32)  # mean 0.2
    surround = np.tile(levels, (SAMPLE_RATE, 1))
    x = load_audio((SAMPLE_RATE, surround))
    assert x.shape == (SAMPLE_RATE,)
    np.testing.assert_allclose(x, 0.2, atol=1e-6)


def test_int16_stereo_from_gradio():
    pcm = np.full((48000, 2), 16384, dtype=np.int16)
    pcm[:, 1] = 0
    x = load_audio((48000, pcm))
    np.testing.assert_allclose(x[100:-100], 0.25, atol=1e-3)


def test_single_channel_column_is_accepted():
    column = sine(440, SAMPLE_RATE)[:, None]
    np.testing.assert_array_equal(load_audio((SAMPLE_RATE, column)), column[:, 0])


def test_channels_first_layout_gets_a_hint():
    with pytest.raises(AudioError, match=r"\(channels, samples\)\? transpose"):
        load_audio((48000, np.zeros((2, 48000), dtype=np.int16)))


def test_three_dimensional_array_is_refused():
    with pytest.raises(AudioError, match=r"shape \(10, 2, 2\)"):
        load_audio((SAMPLE_RATE, np.zeros((10, 2, 2), dtype=np.float32)))


# --------------------------------------------------------------------------
# Content edge cases
# --------------------------------------------------------------------------


def test_very_short_audio_is_valid():
    x = load_audio((48000, np.zeros(4800, dtype=np.int16)))  # 0.1 s
    assert len(x) == 1600


def test_silence_is_valid():
    x = load_audio((SAMPLE_RATE, np.zeros(SAMPLE_RATE, dtype=np.int16)))
    assert not x.any()


def test_clipped_float_input_is_clipped_to_unit_range():
    x = load_audio(np.array([1.5, -3.0, 0.5, 1.0, -1.0], dtype=np.float32))
    np.testing.assert_array_equal(x, [1.0, -1.0, 0.5, 1.0, -1.0])


def test_clipping_never_changes_the_callers_array():
    # a file's samples are clipped in place (they are ours); an array handed in is not
    given = np.array([1.5, -3.0, 0.5], dtype=np.float32)
    for source in (given, (SAMPLE_RATE, given), (SAMPLE_RATE, given[:, None])):
        assert load_audio(source).tolist() == [1.0, -1.0, 0.5]
        assert given.tolist() == [1.5, -3.0, 0.5]


def test_a_float_file_beyond_full_scale_is_clipped(tmp_path):
    path = tmp_path / "loud.wav"
    sf.write(str(path), np.array([0.25, 2.0, -4.0] * 100, np.float32), SAMPLE_RATE, subtype="FLOAT")
    assert load_audio(path)[:3].tolist() == [0.25, 1.0, -1.0]


def test_the_largest_float32_samples_are_valid_not_infinite():
    # the finiteness check sums the samples in float64: float32's extremes must not overflow it
    huge = np.full(100_000, np.finfo(np.float32).max, np.float32)
    assert (load_audio(huge) == 1.0).all()


def test_full_scale_square_wave_stays_in_range_after_resampling():
    # Band-limiting a square wave overshoots (Gibbs); the output must still be in [-1, 1].
    square = np.where(sine(500, 48000) >= 0, 32767, -32768).astype(np.int16)
    x = load_audio((48000, square))
    assert_whisper_ready(x)
    assert np.abs(x).max() == 1.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(bad):
    samples = np.zeros(1000, dtype=np.float32)
    samples[[10, 20]] = bad
    with pytest.raises(AudioError, match="2 invalid samples \\(NaN or infinity\\)"):
        load_audio((SAMPLE_RATE, samples))


def test_zero_length_audio_is_refused():
    with pytest.raises(AudioError, match="empty \\(0 samples\\)"):
        load_audio((SAMPLE_RATE, np.zeros(0, dtype=np.int16)))
    with pytest.raises(AudioError, match="empty"):
        load_audio((44100, np.zeros((0, 2), dtype=np.int16)))


@pytest.mark.parametrize(
    "rate, message",
    [
        (0, "must be a positive number"),
        (-16000, "must be a positive number"),
        (float("nan"), "must be a positive number"),
        (10, "not a real audio rate"),
        (10**9, "not a real audio rate"),
        (44100.5, "not a real audio rate"),
        ("fast", "not a number"),
        (None, "not a number"),
    ],
)
def test_bad_sample_rates_are_refused(rate, message):
    with pytest.raises(AudioError, match=message):
        load_audio((rate, np.zeros(1000, dtype=np.int16)))


def test_numpy_integer_sample_rate_is_fine():
    assert len(load_audio((np.int64(32000), np.zeros(32000, dtype=np.int16)))) == SAMPLE_RATE


def test_too_long_audio_names_length_limit_and_flag():
    # 612.3 s at 1 kHz keeps the test array small.
    long = np.zeros(612_300, dtype=np.int16)
    with pytest.raises(AudioError) as err:
        load_audio((1000, long), max_seconds=audio.DEFAULT_MAX_SECONDS)
    assert str(err.value) == (
        "The audio is 612.3 s long; the limit is 600 s (raise it with --max-audio-seconds)"
    )


def test_long_audio_loads_when_no_limit_is_asked():
    # The library has no limit of its own: the app passes its --max-audio-seconds.
    long = np.zeros(631_000, dtype=np.int16)  # 631 s at 1 kHz
    assert len(load_audio((1000, long))) == 631 * SAMPLE_RATE


def test_long_file_loads_with_no_limit_and_is_refused_with_one(tmp_path):
    path = tmp_path / "long.wav"
    sf.write(str(path), np.zeros(631 * 1000, dtype=np.int16), 1000, subtype="PCM_16")
    assert len(load_audio(path)) == 631 * SAMPLE_RATE
    with pytest.raises(AudioError, match=r"^Audio file '.*long.wav' is 631.0 s long; the limit is 600 s "
                                         r"\(raise it with --max-audio-seconds\)$"):
        load_audio(path, max_seconds=600)


def test_length_limit_can_be_changed_or_removed():
    ten_seconds = (8000, np.zeros(80_000, dtype=np.int16))
    with pytest.raises(AudioError, match="is 10.0 s long; the limit is 9.5 s"):
        load_audio(ten_seconds, max_seconds=9.5)
    assert len(load_audio(ten_seconds, max_seconds=10)) == 10 * SAMPLE_RATE
    assert len(load_audio((1000, np.zeros(700_000, dtype=np.int16)), max_seconds=None)) == 700 * SAMPLE_RATE


def test_swapped_tuple_order_is_explained():
    with pytest.raises(AudioError, match="swap them"):
        load_audio((np.zeros(100, dtype=np.int16), 16000))


def test_other_inputs_are_refused_clearly():
    with pytest.raises(AudioError, match="no audio was given"):
        load_audio(None)
    with pytest.raises(AudioError, match="tuple of 3 items"):
        load_audio((16000, np.zeros(10), "extra"))
    with pytest.raises(AudioError, match="cannot use list as audio"):
        load_audio([0.0, 0.1])


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def test_jfk_file_loads_from_str_and_path():
    from_path = load_audio(JFK)
    from_str = load_audio(str(JFK))
    assert_whisper_ready(from_path)
    assert len(from_path) == 176_000
    np.testing.assert_array_equal(from_path, from_str)
    pcm, _ = sf.read(str(JFK), dtype="int16")
    np.testing.assert_allclose(from_path, pcm / 32768.0, atol=1e-7)


def test_file_longer_than_limit_is_refused_before_decoding(monkeypatch):
    def must_not_read(*args, **kwargs):
        raise AssertionError("decoded a file that is already known to be too long")

    monkeypatch.setattr(audio.sf, "read", must_not_read)
    with pytest.raises(AudioError, match=r"^Audio file '.*jfk.wav' is 11.0 s long; the limit is 5 s \(raise it with --max-audio-seconds\)$"):
        load_audio(JFK, max_seconds=5)


def test_44k_stereo_wav_file_is_resampled_and_downmixed(tmp_path):
    path = tmp_path / "stereo.wav"
    left = sine(1000, 44100, seconds=2.0)
    sf.write(str(path), np.stack([left, left], axis=1), 44100, subtype="PCM_16")
    x = load_audio(path)
    assert abs(len(x) - 2 * SAMPLE_RATE) <= 1
    assert peak_frequency(x) == pytest.approx(1000, abs=1)
    assert np.abs(x[1000:-1000]).max() == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"])
def test_wav_sample_formats(tmp_path, subtype):
    path = tmp_path / f"{subtype}.wav"
    sf.write(str(path), sine(1000, 22050, amplitude=0.5), 22050, subtype=subtype)
    x = load_audio(path)
    assert abs(len(x) - SAMPLE_RATE) <= 1
    assert rms(x[1000:-1000]) == pytest.approx(0.5 / np.sqrt(2), rel=0.02)


def test_float_wav_with_nan_is_refused(tmp_path):
    path = tmp_path / "nan.wav"
    samples = sine(440, SAMPLE_RATE)
    samples[5] = np.nan
    sf.write(str(path), samples, SAMPLE_RATE, subtype="FLOAT")
    with pytest.raises(AudioError, match="nan.wav' contains 1 invalid samples"):
        load_audio(path)


def test_missing_file(tmp_path):
    with pytest.raises(AudioError, match=r"audio file '.*nope.wav' not found"):
        load_audio(tmp_path / "nope.wav")


def test_folder_instead_of_file(tmp_path):
    with pytest.raises(AudioError, match="is a folder"):
        load_audio(tmp_path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.wav"
    path.touch()
    with pytest.raises(AudioError, match=r"empty.wav' is empty \(0 bytes\)"):
        load_audio(path)


def test_wav_with_header_but_no_samples(tmp_path):
    path = tmp_path / "header_only.wav"
    sf.write(str(path), np.zeros(0, dtype=np.int16), SAMPLE_RATE)
    with pytest.raises(AudioError, match="contains no audio samples"):
        load_audio(path)


@pytest.mark.parametrize("ffmpeg_present", [True, False])
def test_text_file_renamed_wav(tmp_path, monkeypatch, ffmpeg_present):
    if not ffmpeg_present:
        monkeypatch.setattr(audio.shutil, "which", lambda name: None)
    elif shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg not installed")
    path = tmp_path / "notes.wav"
    path.write_text("these are my meeting notes, not a recording\n")
    with pytest.raises(AudioError) as err:
        load_audio(path)
    message = str(err.value)
    assert message.startswith(f"could not read '{path}' as audio")
    assert "ends in .wav but looks like plain text, not audio" in message
    assert "Format not recognised" in message


def test_png_renamed_wav(tmp_path):
    path = tmp_path / "picture.wav"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with pytest.raises(AudioError, match=r"could not read .* as audio: .*looks like a PNG image, not audio"):
        load_audio(path)


def test_truncated_wav_header(tmp_path):
    path = tmp_path / "cut.wav"
    path.write_bytes(JFK.read_bytes()[:20])
    with pytest.raises(AudioError, match=r"could not read .* as audio: it starts like a WAV \(RIFF\) file but is damaged or cut short"):
        load_audio(path)


def test_unknown_binary_garbage(tmp_path):
    path = tmp_path / "noise.wav"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(AudioError, match="not in any audio format we know"):
        load_audio(path)


def test_truncated_wav_data_still_loads_what_is_there(tmp_path):
    # A recording cut off mid-stream (header intact) is usable audio.
    path = tmp_path / "cut_data.wav"
    data = JFK.read_bytes()
    header = len(data) - 2 * sf.info(str(JFK)).frames  # 16-bit mono samples follow the header
    path.write_bytes(data[: header + 2 * 16000])
    assert len(load_audio(path)) == 16000


# --------------------------------------------------------------------------
# Compressed formats (encoded by ffmpeg from the JFK clip)
# --------------------------------------------------------------------------

ENCODINGS = {
    "flac": [],
    "ogg": ["-c:a", "libvorbis", "-q:a", "4"],
    "mp3": ["-c:a", "libmp3lame", "-b:a", "64k"],
    "m4a": ["-c:a", "aac", "-b:a", "64k"],
}


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    """JFK encoded in each format, made once for the module."""
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg not installed")
    folder = tmp_path_factory.mktemp("encoded")
    paths = {}
    for ext, codec in ENCODINGS.items():
        paths[ext] = folder / f"jfk.{ext}"
        subprocess.run(
            ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(JFK), *codec, str(paths[ext])],
            check=True,
        )
    return paths


@pytest.mark.parametrize("ext", list(ENCODINGS))
def test_compressed_formats_decode_with_right_duration(encoded, ext):
    x = load_audio(encoded[ext])
    assert_whisper_ready(x)
    # Lossy codecs add a little padding (encoder delay), never more than ~50 ms.
    assert len(x) / SAMPLE_RATE == pytest.approx(11.0, abs=0.06)
    reference = load_audio(JFK)
    n = min(len(x), len(reference))
    assert rms(x[:n]) == pytest.approx(rms(reference[:n]), rel=0.1)
    if ext == "flac":
        np.testing.assert_array_equal(x, reference)  # lossless


@pytest.mark.parametrize("ext", ["flac", "ogg", "mp3"])
def test_libsndfile_formats_need_no_ffmpeg(encoded, monkeypatch, ext):
    monkeypatch.setattr(audio.shutil, "which", lambda name: None)
    assert len(load_audio(encoded[ext])) / SAMPLE_RATE == pytest.approx(11.0, abs=0.06)


def test_m4a_without_ffmpeg_says_what_to_install(encoded, monkeypatch):
    monkeypatch.setattr(audio.shutil, "which", lambda name: None)
    with pytest.raises(AudioError, match=r"'\.m4a' files need ffmpeg, which is not installed \(apt-get install ffmpeg\)"):
        load_audio(encoded["m4a"])


def test_m4a_longer_than_limit_reports_true_length(encoded):
    with pytest.raises(AudioError, match=r"jfk.m4a' is 11.0 s long; the limit is 5 s"):
        load_audio(encoded["m4a"], max_seconds=5)


@needs_ffmpeg
def test_damaged_m4a(tmp_path, encoded):
    path = tmp_path / "cut.m4a"
    path.write_bytes(encoded["m4a"].read_bytes()[:200])
    with pytest.raises(AudioError, match=r"could not read .* as audio: it starts like an MP4/M4A file but is damaged.*ffmpeg: "):
        load_audio(path)


# --------------------------------------------------------------------------
# Streaming chunks
# --------------------------------------------------------------------------


def test_browser_mic_chunk_48k_int16():
    chunk = (sine(1000, 48000, seconds=0.5, amplitude=0.5) * 32767).astype(np.int16)
    assert chunk.shape == (24000,)
    x = load_audio_chunk(48000, chunk)
    assert_whisper_ready(x)
    assert x.shape == (8000,)
    assert np.abs(x).max() == pytest.approx(0.5, abs=0.01)


def test_a_chunk_stream_gives_the_same_samples_however_the_chunks_are_cut():
    # The browser cuts its chunks where its timer fires: resampled one by one, the same
    # recording became different audio each run (each chunk's edges). One streaming
    # resampler makes the samples the whole signal's, resampled once.
    rng = np.random.default_rng(0)
    whole = (rng.standard_normal(48000 * 3) * 3000).astype(np.int16)
    once = load_audio_chunk(48000, whole)

    def streamed(cuts):
        stream = ChunkStream()
        parts = [stream(48000, c) for c in np.split(whole, cuts)]
        return np.concatenate(parts + [stream.flush()])

    a, b = streamed([4800 * k for k in range(1, 30)]), streamed([1234, 5000, 77777, 100000])
    assert a.shape == b.shape == once.shape
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, once, atol=1e-6)
    # chunks resampled one by one differ at their edges: the artefact the stream removes
    each = np.concatenate([load_audio_chunk(48000, c) for c in np.split(whole, [4800 * k for k in range(1, 30)])])
    assert np.abs(each - once).max() > 1e-3
    # 16 kHz passes through, and an empty chunk gives nothing
    assert ChunkStream()(SAMPLE_RATE, np.ones(10, np.float32)).tolist() == [1.0] * 10
    assert ChunkStream()(48000, np.zeros(0, np.int16)).size == 0


def test_chunks_joined_match_the_whole_signal():
    whole = (sine(1000, 48000, seconds=5.0) * 32767).astype(np.int16)
    joined = np.concatenate([load_audio_chunk(48000, c) for c in np.split(whole, 10)])
    assert len(joined) == 5 * SAMPLE_RATE
    assert peak_frequency(joined) == pytest.approx(1000, abs=1)
    # Per-chunk resampling only disturbs a few samples at each boundary.
    error = np.abs(joined - load_audio((48000, whole)))
    assert np.median(error) < 1e-3


def test_empty_chunk_gives_empty_array():
    for empty in (np.zeros(0, dtype=np.int16), np.zeros((0, 2), dtype=np.int16)):
        x = load_audio_chunk(48000, empty)
        assert x.dtype == np.float32 and x.shape == (0,)


def test_chunk_has_no_length_limit():
    assert len(load_audio_chunk(1000, np.zeros(700_000, dtype=np.int16))) == 700 * SAMPLE_RATE


def test_bad_chunks_are_still_refused():
    with pytest.raises(AudioError, match="microphone chunk contains 1 invalid"):
        load_audio_chunk(48000, np.array([0.0, np.nan], dtype=np.float32))
    with pytest.raises(AudioError, match="positive"):
        load_audio_chunk(0, np.zeros(0, dtype=np.int16))


# --------------------------------------------------------------------------
# describe
# --------------------------------------------------------------------------


def test_describe():
    assert describe(load_audio(JFK)) == "11.0 s, 16 kHz mono"
    assert describe(np.zeros(12_300 * 16, dtype=np.float32)) == "12.3 s, 16 kHz mono"
    assert describe(np.zeros((44100, 2)), 44100) == "1.0 s, 44.1 kHz stereo"
    assert describe(np.zeros((96000, 6)), 48000) == "2.0 s, 48 kHz 6 channels"
