"""The prompt of a live re-decode: the committed text said before its buffer, each
sentence once.

openai-whisper's transcribe conditions each window on the text before it, and a live
session does the same with what it committed (whisper_streaming keeps the last 200
characters). But a prompt that says one sentence over and over primes the decoder to
say it again: on the live benchmark's stream, where the speakers of the Montreal Forced
Aligner's recordings say "Montreal forced aligner" forty times, prompts such as
"Montreal, forced a liner. I hardly know her. Montreal, forced a liner. Montreal, forced
a liner." were followed by decodes that repeated that sentence until their token limit.
So a sentence that the prompt says again later is left out (the later copy stays, as
the nearer context), and the prompt is filled up to its length from earlier text.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from .policy import TimedWord


def sentences(words: Sequence[TimedWord]) -> List[List[TimedWord]]:
    """Words grouped into sentences (the last one may be unfinished)."""
    groups: List[List[TimedWord]] = [[]]
    for word in words:
        groups[-1].append(word)
        if word.ends_sentence:
            groups.append([])
    return [group for group in groups if group]


def prompt_from(words: Sequence[TimedWord], max_chars: int) -> Optional[str]:
    """The last `max_chars` characters of the text of `words`, with each sentence (compared
    as normalised words) only where it was said last; None if there is no text."""
    kept, seen, length = [], set(), 0
    for sentence in reversed(sentences(words)):
        key = tuple(word.norm for word in sentence)
        if key in seen:
            continue
        seen.add(key)
        kept.append(sentence)
        length += sum(len(word.text) + 1 for word in sentence)
        if length >= max_chars:
            break
    text = " ".join(word.text for sentence in reversed(kept) for word in sentence)
    return text[-max_chars:].lstrip() or None
