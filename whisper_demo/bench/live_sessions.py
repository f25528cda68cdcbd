"""Live against offline, one session per recording: what a new user tries first.

    python -m whisper_demo.bench live_sessions [--model tiny.en] [--eval-dir DIR]
    python -m whisper_demo.bench live_sessions --audio talk.wav interview.flac ...

The live benchmark (live_stream.py) feeds one long stream through one session. A user instead
opens a session per recording: its first seconds are decoded with no prompt and little
audio, and a long recording is cut several times. Here each recording is its own session,
fed in the fast feed and in the paced feed (fixed decode costs, so the text repeats
itself), and its committed text is set beside openai-whisper-style offline decoding of the
same audio (greedy, and with the temperature fallback, seeded).

Without --audio the recordings are built by joining the dev clips and the example clips
0.4 s apart (25-57 s of speech, the length of recordings people try), with their
references. With --audio they are your files: a reference is read from a text file of the
same name beside each (talk.txt for talk.wav) when there is one. Printed per recording:
word errors against the reference (where there is one), and how many words the live text
differs from the offline transcript of the same audio (no reference needed: the words
live got otherwise than the same model offline).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..audio import SAMPLE_RATE, AudioError, load_audio
from ..decode import transcribe
from ..events import DecodeOptions
from ..models import DEFAULT_MODEL, load_model
from ..text import word_edits, words as normalized_words
from .data import add_eval_dir_argument
from .live_stream import load_recordings
from .feeds import DecodeCosts, feed_fast, feed_paced
from ..live.config import LiveConfig

GAP_SECONDS = 0.4
RECORDINGS = [  # manifest ids of the dev clips, and the package's example clips
    ["mfa_cold_corpus3"],
    ["jfk.wav", "mfa_cold_corpus3"],
    ["mfa_cold_corpus3", "jfk.wav", "mfa_crossword", "mfa_uhum"],
    ["speech_25s.wav"],
    ["speech_25s.wav", "mfa_cold_corpus3"],
    ["mfa_uhum", "mfa_um", "mfa_crossword", "mfa_uhuh", "jfk.wav", "mfa_theother", "mfa_her"],
]
PACED_COSTS = {"tiny.en": DecodeCosts(0.163, 0.012), "base": DecodeCosts(0.395, 0.022)}
KINDS = ("offline", "fallback", "fast", "paced")


def dev_sessions(eval_dir: Path) -> List[Tuple[str, np.ndarray, Optional[str]]]:
    """(name, audio, reference) of the joined dev recordings (RECORDINGS)."""
    recordings = {name: (audio, reference) for name, audio, reference in load_recordings(eval_dir)}
    gap = np.zeros(int(GAP_SECONDS * SAMPLE_RATE), np.float32)
    sessions = []
    for names in RECORDINGS:
        clips = [recordings[name] for name in names]
        audio = np.concatenate([part for samples, _ in clips for part in (samples, gap)][:-1])
        sessions.append(("+".join(names), audio, " ".join(text for _, text in clips)))
    return sessions


def file_sessions(paths: List[str]) -> List[Tuple[str, np.ndarray, Optional[str]]]:
    """(name, audio, reference or None) of each file; the reference from PATH.txt beside it."""
    sessions = []
    for path in map(Path, paths):
        beside = path.with_suffix(".txt")
        reference = beside.read_text().strip() if beside.exists() and beside != path else None
        sessions.append((path.name, load_audio(path), reference))
    return sessions


def session_texts(model, options: DecodeOptions, audio: np.ndarray, costs: DecodeCosts,
                  config: LiveConfig) -> Dict[str, str]:
    """The offline transcripts and the live committed texts of one recording."""
    import torch

    torch.manual_seed(0)  # the fallback samples at temperatures above 0
    return {
        "offline": transcribe(model, audio, replace(options, temperature_fallback=False)).text,
        "fallback": transcribe(model, audio, replace(options, temperature_fallback=True)).text,
        "fast": feed_fast(model, options, audio, 0.1, config).committed,
        "paced": feed_paced(model, options, audio, 0.1, config, costs).committed,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whisper_demo.bench live_sessions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    add_eval_dir_argument(parser)
    parser.add_argument("--audio", nargs="+", metavar="PATH",
                        help="your own recordings, each its own session (a reference from PATH.txt if there is one)")
    args = parser.parse_args(argv)
    if args.audio:
        try:
            sessions = file_sessions(args.audio)
        except AudioError as error:
            parser.error(str(error))
    else:
        eval_dir = Path(args.eval_dir)
        if not (eval_dir / "manifest.jsonl").exists():
            parser.error(f"no manifest.jsonl in {eval_dir}")
        sessions = dev_sessions(eval_dir)
    import torch

    torch.set_num_threads(2)
    model = load_model(args.model, progress=False)
    options = DecodeOptions(cache="static", language="en" if model.is_multilingual else None)
    costs = PACED_COSTS.get(args.model, PACED_COSTS["base"])
    errors = dict.fromkeys(KINDS, 0)
    differ = dict.fromkeys(("fast", "paced"), 0)
    reference_words = offline_words = 0
    for name, audio, reference in sessions:
        texts = session_texts(model, options, audio, costs, LiveConfig())
        line = f"{name} ({audio.size / SAMPLE_RATE:.0f} s"
        if reference is not None:
            counts = {kind: word_edits(text, reference) for kind, text in texts.items()}
            for kind, n in counts.items():
                errors[kind] += n
            reference_words += len(normalized_words(reference))
            line += f", {len(normalized_words(reference))} words): errors " + ", ".join(
                f"{kind} {n}" for kind, n in counts.items())
        else:
            line += ", no reference)"
        for kind in differ:
            differ[kind] += word_edits(texts[kind], texts["offline"])
        offline_words += len(normalized_words(texts["offline"]))
        line += "; live differs from offline greedy in " + ", ".join(
            f"{word_edits(texts[kind], texts['offline'])} words ({kind})" for kind in differ)
        print(line, flush=True)
    if reference_words:
        print(f"errors over {reference_words} reference words: " + ", ".join(
            f"{kind} {errors[kind]} ({100 * errors[kind] / reference_words:.1f} %)" for kind in KINDS))
    print(f"live differs from offline greedy in {differ['fast']} (fast) and {differ['paced']} (paced) "
          f"of its {offline_words} words")
    print(f"paced feed at {costs.encoder_s * 1000:.0f} ms an encoder pass, {costs.step_s * 1000:.0f} ms a step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
