"""A transcript as SRT, VTT, TXT and JSON (whisper_demo/transcript_files.py), from real
decodes of the example clips, written by openai-whisper's own writers."""

import json
import re

import pytest

from whisper_demo.decode import transcribe
from whisper_demo.events import DecodeOptions
from whisper_demo.transcript_files import (FORMATS, api_segments, figures, transcribe_result,
                                           utterances_from_words, utterances_result, write_transcript)

SRT_TIME = r"(\d\d):(\d\d):(\d\d),(\d\d\d)"
VTT_TIME = r"(?:(\d\d):)?(\d\d):(\d\d)\.(\d\d\d)"


def seconds(h, m, s, ms) -> float:
    return int(h or 0) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def cues(text: str, pattern: str):
    """(start, end, text) of each cue of an SRT or VTT file."""
    found = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.strip().splitlines()
        for i, line in enumerate(lines):
            m = re.fullmatch(rf"{pattern} --> {pattern}", line.strip())
            if m:
                g = m.groups()
                half = len(g) // 2
                found.append((seconds(*g[:half]), seconds(*g[half:]), " ".join(lines[i + 1:])))
    return found


def words_of(text: str):
    return re.findall(r"[a-z']+", re.sub(r"</?u>", "", text.lower()))


@pytest.fixture(scope="module")
def decoded(tiny_model, clip):
    return transcribe(tiny_model, clip("speech_25s.wav"), DecodeOptions())


@pytest.fixture(scope="module")
def decoded_words(tiny_model, clip):
    return transcribe(tiny_model, clip("jfk.wav"), DecodeOptions(word_timestamps=True))


def test_all_four_formats_from_a_decode_carry_its_segments_times_and_text(decoded, tmp_path):
    result = transcribe_result(decoded)
    assert "words" not in result["segments"][0]
    paths = write_transcript(result, tmp_path, "speech_25s")
    assert set(paths) == set(FORMATS) and all(p.is_file() for p in paths.values())
    assert paths["srt"].name == "speech_25s.srt"

    for fmt, pattern in (("srt", SRT_TIME), ("vtt", VTT_TIME)):
        found = cues(paths[fmt].read_text(encoding="utf-8"), pattern)
        assert len(found) == len(decoded.segments), (fmt, found)
        for (start, end, text), segment in zip(found, decoded.segments):
            assert start == pytest.approx(segment.start, abs=0.002)
            assert end == pytest.approx(segment.end, abs=0.002)
            assert start < end <= 25.5
            assert text.strip() == segment.text.strip()
        starts = [c[0] for c in found]
        assert starts == sorted(starts)
    assert paths["vtt"].read_text(encoding="utf-8").startswith("WEBVTT")
    assert words_of(paths["txt"].read_text(encoding="utf-8")) == words_of(decoded.text)
    assert "weather" in words_of(decoded.text)
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert data["text"] == decoded.text and data["language"] == "en"
    assert [s["start"] for s in data["segments"]] == [round(s.start, 3) for s in decoded.segments]


def test_word_timestamps_give_word_level_cues(decoded_words, tmp_path):
    result = transcribe_result(decoded_words)
    words = [w for s in result["segments"] for w in s["words"]]
    assert words and all(w["start"] <= w["end"] for w in words)
    paths = write_transcript(result, tmp_path, "jfk")
    found = cues(paths["srt"].read_text(encoding="utf-8"), SRT_TIME)
    # openai-whisper's highlighted subtitles: a cue per word, that word underlined
    assert len(found) >= len(words) - 1
    underlined = [re.search(r"<u>(.*?)</u>", text).group(1) for _, _, text in found if "<u>" in text]
    assert [w.lower().strip(",.") for w in underlined] == [w["word"].strip().lower().strip(",.")
                                                         for w in words][:len(underlined)]
    assert "country" in words_of(" ".join(underlined))
    vtt = cues(paths["vtt"].read_text(encoding="utf-8"), VTT_TIME)
    assert [c[:2] for c in vtt] == pytest.approx([c[:2] for c in found], abs=0.002)
    assert json.loads(paths["json"].read_text())["segments"][0]["words"][0]["word"] == words[0]["word"]
    # the API's view: times and words, no tokens
    segments = api_segments(result)
    assert set(segments[0]) == {"start", "end", "text", "words"}


def test_figures_are_the_runs_numbers(decoded):
    numbers = figures(decoded)
    assert numbers["decoder_steps"] == decoded.n_tokens == len(numbers["step_ms"])
    assert numbers["cache_mode"] == "static" and numbers["peak_cross_cache_bytes"] > 0
    json.dumps(numbers)  # plain JSON


class W:
    def __init__(self, text, start, end):
        self.text, self.start, self.end = text, start, end


def test_live_utterances_as_subtitles(tmp_path):
    utterances = [(0.5, 2.25, "Hello there."), (3.0, 3.0, ""), (4.0, 6.5, "How are you today?")]
    paths = write_transcript(utterances_result(utterances), tmp_path, "live-20240101-120000")
    assert paths["srt"].name == "live-20240101-120000.srt"
    found = cues(paths["srt"].read_text(encoding="utf-8"), SRT_TIME)
    assert found == [(0.5, 2.25, "Hello there."), (4.0, 6.5, "How are you today?")]
    assert cues(paths["vtt"].read_text(encoding="utf-8"), VTT_TIME) == found
    assert paths["txt"].read_text(encoding="utf-8").split() == "Hello there. How are you today?".split()
    # timed words (the Live tab's final words) into cues: a sentence end or a pause cuts
    words = [W("Hello", 0.5, 0.9), W("there.", 1.0, 1.4), W("How", 1.5, 1.7), W("are", 1.8, 1.9),
             W("you", 4.0, 4.2)]
    assert utterances_from_words(words) == [(0.5, 1.4, "Hello there."), (1.5, 1.9, "How are"),
                                            (4.0, 4.2, "you")]


def test_a_word_timed_before_the_recording_starts_with_it(tmp_path):
    # a final pass pads silence before the stream's first sample: its first word may be timed
    # a little before 0, which openai-whisper's subtitle writers refuse
    words = [W("Hello.", -0.12, 0.4), W("Again", 1.0, 1.3)]
    assert utterances_from_words(words)[0] == (0.0, 0.4, "Hello.")
    paths = write_transcript(utterances_result(utterances_from_words(words)), tmp_path, "live", formats=("srt",))
    assert cues(paths["srt"].read_text(encoding="utf-8"), SRT_TIME)[0] == (0.0, 0.4, "Hello.")
