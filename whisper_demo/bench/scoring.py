"""Word error rates a benchmark reports: word edits charged to each recording of a joined
transcript, and seeded 95 % bootstrap intervals over recordings (of a WER, and of the paired
difference of two systems' WERs on the same recordings). Used by bench e2e and bench accuracy."""

from typing import Sequence, Tuple

import jiwer
import numpy as np

DRAWS = 2000


def piece_edits(hypothesis: str, references: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    """Word edits and reference words per reference piece: the hypothesis aligned (jiwer)
    against the joined references, each edit charged to the piece its reference word came
    from (an insertion to the piece of the word before it, the first piece at the start)."""
    from ..text import words

    piece_words = [words(r) for r in references]
    counts = np.array([len(w) for w in piece_words])
    owner = [i for i, w in enumerate(piece_words) for _ in w]
    hypothesis_words = words(hypothesis)
    edits = np.zeros(len(references), dtype=int)
    if not hypothesis_words:  # every reference word deleted
        return counts.copy(), counts
    if not owner:  # no reference words: every hypothesis word inserted
        edits[0] = len(hypothesis_words)
        return edits, counts
    aligned = jiwer.process_words(" ".join(w for ws in piece_words for w in ws), " ".join(hypothesis_words))
    for chunk in aligned.alignments[0]:
        if chunk.type in ("substitute", "delete"):
            for k in range(chunk.ref_start_idx, chunk.ref_end_idx):
                edits[owner[k]] += 1
        elif chunk.type == "insert":
            edits[owner[max(0, chunk.ref_start_idx - 1)]] += chunk.hyp_end_idx - chunk.hyp_start_idx
    return edits, counts


def _draws(n: int, draws: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(draws, n))


def wer_interval(edits: np.ndarray, counts: np.ndarray, draws: int = DRAWS, seed: int = 0) -> Tuple[float, float]:
    """95 % bootstrap interval of the WER: pieces drawn with replacement, seeded."""
    picks = _draws(len(edits), draws, seed)
    drawn = edits[picks].sum(1) / np.maximum(1, counts[picks].sum(1))
    low, high = np.percentile(drawn, [2.5, 97.5])
    return float(low), float(high)


def difference_interval(edits_a: np.ndarray, edits_b: np.ndarray, counts: np.ndarray,
                        draws: int = DRAWS, seed: int = 0) -> Tuple[float, float]:
    """95 % paired bootstrap interval of WER(a) - WER(b) over the same pieces."""
    picks = _draws(len(counts), draws, seed)
    drawn = (edits_a[picks].sum(1) - edits_b[picks].sum(1)) / np.maximum(1, counts[picks].sum(1))
    low, high = np.percentile(drawn, [2.5, 97.5])
    return float(low), float(high)
