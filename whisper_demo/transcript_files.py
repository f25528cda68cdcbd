"""A transcript as files a person keeps: SRT and VTT subtitles, plain text, JSON.

openai-whisper's own writers (whisper.utils.get_writer) write them, from the result dict
its transcribe() returns; this module builds that dict from a DecodeResult (or from the
Live tab's utterances) and names what a program reads of a run. No gradio here.

    result = transcribe_result(decode_result)       # {"text", "segments", "language"}
    paths = write_transcript(result, folder, "talk")  # {"srt": .../talk.srt, "vtt": ..., ...}
    write_transcript(utterances_result([(0.0, 2.5, "Hello there.")]), folder, "live")

With word timestamps (DecodeOptions.word_timestamps) each segment carries its words, and
the subtitles are word-level as openai-whisper's CLI writes them with --word_timestamps
and --highlight_words: a cue per word, the word underlined in its line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence, Tuple

from .events import DecodeResult

FORMATS = ("srt", "vtt", "txt", "json")
# Live words closer than this (seconds) run into one cue, unless a sentence ends between them
CUE_PAUSE_S = 1.0
CUE_MAX_S = 7.0  # a cue no longer than a subtitle reader keeps up with


def _word(word) -> dict:
    """openai-whisper's word dict ({"word", "start", "end", "probability"}) from a
    timing.Word; the probability only when it was computed (JSON has no NaN)."""
    entry = {"word": word.text, "start": round(float(word.start), 3), "end": round(float(word.end), 3)}
    probability = getattr(word, "probability", float("nan"))
    if probability is not None and math.isfinite(probability):
        entry["probability"] = round(float(probability), 4)
    return entry


def transcribe_result(result: DecodeResult) -> dict:
    """The dict openai-whisper's transcribe() returns (what its writers read): text,
    segments (id, start, end, text, tokens, and words when any segment has them) and
    language. Times are seconds from the start of the audio."""
    with_words = any(segment.words for segment in result.segments)
    segments = []
    for i, segment in enumerate(result.segments):
        entry = {"id": i, "start": round(float(segment.start), 3), "end": round(float(segment.end), 3),
                 "text": segment.text, "tokens": list(segment.tokens),
                 "temperature": segment.temperature, "avg_logprob": segment.avg_logprob,
                 "compression_ratio": segment.compression_ratio, "no_speech_prob": segment.no_speech_prob}
        if with_words:
            entry["words"] = [_word(w) for w in segment.words]
        segments.append(entry)
    return {"text": result.text, "segments": segments, "language": result.language}


def utterances_result(utterances: Iterable[Tuple[float, float, str]], language: str = "en") -> dict:
    """The same dict for a list of (start, end, text) utterances, as the Live tab finalises
    them: one segment each, in the order given (empty texts left out)."""
    segments = []
    for start, end, text in utterances:
        text = text.strip()
        if text:
            segments.append({"id": len(segments), "start": round(float(start), 3),
                             "end": round(float(max(end, start)), 3), "text": " " + text})
    return {"text": " ".join(s["text"].strip() for s in segments), "segments": segments,
            "language": language}


def utterances_from_words(words: Sequence, pause_s: float = CUE_PAUSE_S,
                          max_s: float = CUE_MAX_S) -> list:
    """(start, end, text) cues from timed words (anything with .text, .start, .end: the Live
    tab's final words, live.words.TimedWord): a new cue after a sentence ends, after a pause
    of `pause_s` or when the cue would pass `max_s`."""
    cues, current = [], []
    for word in words:
        if current and (word.start - current[-1].end > pause_s or word.end - current[0].start > max_s
                        or current[-1].text.rstrip("\"')]").endswith((".", "?", "!", "…"))):
            cues.append(current)
            current = []
        current.append(word)
    if current:
        cues.append(current)
    # a word timed into the silence a final pass put before the stream's first sample starts
    # a little before 0: the cue starts with the recording (subtitle writers refuse < 0)
    return [(max(0.0, c[0].start), max(0.0, c[-1].end), " ".join(w.text.strip() for w in c)) for c in cues]


def write_transcript(result: dict, folder: Path, name: str = "transcript",
                     formats: Sequence[str] = FORMATS, highlight_words: Optional[bool] = None) -> Dict[str, Path]:
    """Write `result` (transcribe_result / utterances_result) into `folder` as
    `name`.srt, .vtt, .txt and .json with openai-whisper's writers; returns format -> path.
    highlight_words: word-level cues (default: when the segments carry words)."""
    from whisper.utils import get_writer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    segments = result.get("segments") or []
    if highlight_words is None:
        highlight_words = any(s.get("words") for s in segments)
    options = {"highlight_words": bool(highlight_words), "max_line_width": None,
               "max_line_count": None, "max_words_per_line": None}
    paths = {}
    for fmt in formats:
        # the writers name the file after an audio path: its stem is `name`, dots and all
        get_writer(fmt, str(folder))(result, f"{name}.audio", options)
        paths[fmt] = folder / f"{name}.{fmt}"
    return paths


def figures(result: DecodeResult) -> dict:
    """A run's numbers as a program reads them (the page's panel shows the same)."""
    return {
        "cache_mode": result.cache_mode,
        "beam_size": result.beam_size,
        "decoder_steps": result.n_tokens,
        "decode_seconds": round(result.decode_seconds, 4),
        "encoder_ms": round(result.encoder_ms, 2),
        "encoder_dtype": result.encoder_dtype,
        "tokens_per_second": round(result.tokens_per_second, 2),
        "mean_step_ms": round(result.mean_latency_ms, 3),
        "p95_step_ms": round(result.p95_latency_ms, 3),
        "step_ms": [round(ms, 3) for ms in result.latencies_ms],
        "peak_self_cache_bytes": result.peak_self_cache_bytes,
        "peak_cross_cache_bytes": result.peak_cross_cache_bytes,
        "peak_rss_bytes": result.peak_rss_bytes,
        "skipped_windows": result.skipped_windows,
    }


def api_segments(result: dict) -> list:
    """The segments a program reads: start, end, text, and words (word, start, end) when
    the run timed them; tokens and decode statistics left out."""
    keep = ("start", "end", "text", "words")
    return [{k: s[k] for k in keep if k in s} for s in result.get("segments", [])]
