"""Comparing transcripts the way Whisper's own evaluations do: openai-whisper's English
normaliser, then word error rate from jiwer (the library openai-whisper's and Hugging
Face's evaluations use). The one normaliser and the one edit distance of the project."""

from typing import List

import jiwer
from whisper.normalizers import EnglishTextNormalizer

_normalize = EnglishTextNormalizer()  # lower case, no punctuation, "twenty" -> "20", ...


def normalize(text: str) -> str:
    return _normalize(text)


def words(text: str) -> List[str]:
    return normalize(text).split()


def word_edits(hypothesis: str, reference: str) -> int:
    """Substitutions + insertions + deletions between the two normalised word sequences."""
    hyp, ref = words(hypothesis), words(reference)
    if not hyp or not ref:  # jiwer wants words on both sides; the answer is plain here
        return max(len(hyp), len(ref))
    counts = jiwer.process_words(" ".join(ref), " ".join(hyp))
    return counts.substitutions + counts.insertions + counts.deletions


def word_error_rate(hypothesis: str, reference: str) -> float:
    return word_edits(hypothesis, reference) / max(1, len(words(reference)))
