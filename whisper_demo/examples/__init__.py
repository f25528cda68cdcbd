"""Example clips shipped with the package: the page's examples, the benchmark's default
clip and its references, and the tests' speech. Sources and licences: README.md here."""

import json
from pathlib import Path
from typing import Dict

EXAMPLES_DIR = Path(__file__).resolve().parent
CLIPS = ("jfk.wav", "speech_25s.wav", "short_3s.wav")  # the page lists them in this order


def clip_path(name: str) -> Path:
    return EXAMPLES_DIR / name


def reference_transcripts() -> Dict[str, str]:
    """File name -> what is said in it (for word error rates)."""
    return json.loads((EXAMPLES_DIR / "transcripts.json").read_text())
