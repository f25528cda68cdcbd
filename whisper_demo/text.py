"""Comparing transcripts: word error rate the way Whisper's own evaluations compute it."""

from typing import List

from whisper.normalizers import EnglishTextNormalizer

_normalize = EnglishTextNormalizer()  # lower case, no punctuation, "twenty" -> "20", ...


def words(text: str) -> List[str]:
    return _normalize(text).split()


def word_edits(hypothesis: str, reference: str) -> int:
    """Substitutions + insertions + deletions between the two word sequences (Levenshtein)."""
    hyp, ref = words(hypothesis), words(reference)
    previous = list(range(len(hyp) + 1))
    for i, ref_word in enumerate(ref, start=1):
        current = [i]
        for j, hyp_word in enumerate(hyp, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (ref_word != hyp_word)))
        previous = current
    return previous[-1]


def word_error_rate(hypothesis: str, reference: str) -> float:
    return word_edits(hypothesis, reference) / max(1, len(words(reference)))
