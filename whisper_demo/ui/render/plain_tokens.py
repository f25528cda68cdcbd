"""Whisper's tokens as a newcomer reads them: special tokens in plain words ("start",
"end"), a language token as the language's name, a timestamp as "from 3.16 s" or
"to 3.16 s". Used by every part of the "Inside the cache" view; no gradio.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional

from whisper.tokenizer import LANGUAGES

# Whisper's special tokens in plain words (the token itself is in each chip's tooltip)
SHORT = {"<|startoftranscript|>": "start", "<|startofprev|>": "earlier text", "<|endoftext|>": "end",
         "<|notimestamps|>": "no times", "<|transcribe|>": "transcribe", "<|translate|>": "translate"}
TIMESTAMP = re.compile(r"<\|(\d+\.\d+)\|>")
LANGUAGE = re.compile(r"<\|([a-z]{2,3})\|>")


def plain_token(label: str, previous: Optional[str] = None) -> str:
    """A token as a newcomer reads it. A timestamp token after text ends a segment ("to
    3.16 s"); any other opens one ("from 3.16 s"), so the pair Whisper writes between two
    segments reads "to 3.16 s", "from 3.16 s" rather than the same token twice."""
    stamp = TIMESTAMP.fullmatch(label)
    if stamp:
        ends = previous is not None and not previous.startswith("<|")
        return f"{'to' if ends else 'from'} {float(stamp.group(1)):g} s"
    language = LANGUAGE.fullmatch(label)
    if language and language.group(1) in LANGUAGES:
        return LANGUAGES[language.group(1)]
    return SHORT.get(label, label)


def previous_label(labels: Dict[int, str], tokens: List[int], i: int) -> Optional[str]:
    """The text of the token before tokens[i] (None for the first): plain_token's `previous`."""
    return labels[tokens[i - 1]] if i > 0 else None
