"""Live against offline, one session per recording: what a new user tries first.

    python -m whisper_demo.live.sessions_bench [--model tiny.en] [--eval-dir ../shared/eval-dev]

The live benchmark (bench.py) feeds one long stream through one session. A user instead
opens a session per recording: its first seconds are decoded with no prompt and little
audio, and a long recording is cut several times. Here each of a few longer recordings,
built by joining the dev clips and the example clips 0.4 s apart (25-57 s of speech, the
length of recordings people try), is its own session, fed in the fast feed and in the
paced feed (fixed decode costs, so the text repeats itself), and its committed text is
scored beside openai-whisper-style offline decoding of the same audio (greedy, and with
the temperature fallback, seeded). Printed: word errors per recording and the totals.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..audio import SAMPLE_RATE
from ..decode import transcribe
from ..events import DecodeOptions
from ..models import DEFAULT_MODEL, load_model
from ..text import word_edits, words as normalized_words
from .bench import DEFAULT_EVAL_DIR, load_recordings
from .feeds import DecodeCosts, feed_fast, feed_paced
from .session import LiveConfig

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whisper_demo.live.sessions_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--eval-dir", default=str(DEFAULT_EVAL_DIR))
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    eval_dir = Path(args.eval_dir)
    if not (eval_dir / "manifest.jsonl").exists():
        parser.error(f"no manifest.jsonl in {eval_dir}")
    recordings = {name: (audio, reference) for name, audio, reference in load_recordings(eval_dir)}
    model = load_model(args.model, progress=False)
    options = DecodeOptions(cache="static", language="en" if model.is_multilingual else None)
    costs = PACED_COSTS.get(args.model, PACED_COSTS["base"])
    gap = np.zeros(int(GAP_SECONDS * SAMPLE_RATE), np.float32)
    totals = dict.fromkeys(("offline", "fallback", "fast", "paced", "words"), 0)
    for names in RECORDINGS:
        clips = [recordings[name] for name in names]
        audio = np.concatenate([part for samples, _ in clips for part in (samples, gap)][:-1])
        reference = " ".join(text for _, text in clips)
        torch.manual_seed(0)  # the fallback samples at temperatures above 0
        texts = {
            "offline": transcribe(model, audio, options).text,
            "fallback": transcribe(model, audio, replace(options, temperature_fallback=True)).text,
            "fast": feed_fast(model, options, audio, 0.1, LiveConfig()).committed,
            "paced": feed_paced(model, options, audio, 0.1, LiveConfig(), costs).committed,
        }
        errors = {kind: word_edits(text, reference) for kind, text in texts.items()}
        for kind, n in errors.items():
            totals[kind] += n
        totals["words"] += len(normalized_words(reference))
        print(f"{'+'.join(names)} ({audio.size / SAMPLE_RATE:.0f} s, {len(normalized_words(reference))} words): "
              + ", ".join(f"{kind} {n}" for kind, n in errors.items()), flush=True)
    print(f"total over {totals['words']} words: " + ", ".join(
        f"{kind} {totals[kind]} ({100 * totals[kind] / totals['words']:.1f} %)"
        for kind in ("offline", "fallback", "fast", "paced")))
    print(f"paced feed at {costs.encoder_s * 1000:.0f} ms an encoder pass, {costs.step_s * 1000:.0f} ms a step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
