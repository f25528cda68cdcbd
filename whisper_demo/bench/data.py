"""What the benchmarks read: the folder of recorded speech with references, and the clip
the speed benchmarks decode.

The eval folder holds manifest.jsonl (one recording a line: id, audio, reference, subset)
and the audio files it names. It is `../shared/eval-dev` beside the repository unless the
environment variable WHISPER_KV_EVAL_DIR names another; every benchmark takes it as
`--eval-dir DIR` too.
"""

import argparse
import json
import os
from pathlib import Path
from typing import List, Optional

from ..examples import clip_path

EVAL_DIR_VARIABLE = "WHISPER_KV_EVAL_DIR"
REPOSITORY = Path(__file__).resolve().parents[2]
DEFAULT_EVAL_DIR = Path(os.environ.get(EVAL_DIR_VARIABLE) or REPOSITORY.parent / "shared" / "eval-dev")
DEFAULT_AUDIO = clip_path("speech_25s.wav")


def manifest(eval_dir: Optional[Path], required: bool = False) -> List[dict]:
    """The eval folder's recordings: one dict per line of its manifest.jsonl (id, audio
    relative to the folder, reference, subset, language). None where there is no manifest,
    unless `required`: then FileNotFoundError, saying where to point."""
    path = None if eval_dir is None else Path(eval_dir) / "manifest.jsonl"
    if path is None or not path.exists():
        if required:
            raise FileNotFoundError(f"no manifest.jsonl in {eval_dir} (--eval-dir DIR or ${EVAL_DIR_VARIABLE})")
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def add_eval_dir_argument(parser: argparse.ArgumentParser, optional: bool = False) -> None:
    """The one flag that names the eval folder. `optional`: the benchmark runs without it
    and reads the folder only when the flag is given (a bare `--eval-dir` reads the default)."""
    where = f"default {DEFAULT_EVAL_DIR}, or ${EVAL_DIR_VARIABLE}"
    if optional:
        parser.add_argument("--eval-dir", nargs="?", const=str(DEFAULT_EVAL_DIR), default=None, metavar="DIR",
                            help=f"also measure over this folder of recordings ({where})")
    else:
        parser.add_argument("--eval-dir", default=str(DEFAULT_EVAL_DIR), metavar="DIR",
                            help=f"folder of recordings with manifest.jsonl ({where})")
