"""What a final pass changed: the words the page showed for an utterance against its final
words. A pure function over words, like the policies; the session records the result and
the page marks the final words it lists as changed.

Words are compared as the policies compare them (TimedWord.norm: case and punctuation
aside), in order, by the longest matching runs (difflib), so one misheard word marks one
word, not the rest of the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Dict, List, Sequence, Tuple

from .words import TimedWord

# (first final word, one past the last, what the page showed there instead)
Change = Tuple[int, int, str]


@dataclass(frozen=True)
class Revision:
    """One final pass over one utterance (or the part of the buffer before a cut)."""

    first: int  # index, among the session's committed words, of the first word it made final
    words: Tuple[str, ...]  # the final words it made, as the page shows them
    changes: Tuple[Change, ...]  # runs of `words` written otherwise than the page showed them
    streamed: Tuple[str, ...]  # the streamed (committed, not yet final) words it replaced
    tentative: Tuple[str, ...]  # the tentative words shown when it ran (expected to change)
    revised: int  # how many of `streamed` it changed or removed
    at: float  # when it was made (the session's clock)
    # the final words before `streamed` it heard again and judged as well
    # (LiveConfig.rewrite_final_seconds), and how many of them it changed or removed
    reopened: Tuple[str, ...] = ()
    rewritten: int = 0

    @property
    def changed(self) -> Tuple[int, ...]:
        """Indices into `words` of the words it changed."""
        return tuple(i for start, end, _ in self.changes for i in range(start, end))

    @property
    def was(self) -> str:
        """What the streamed pass showed for this stretch before (committed, then
        tentative; not the final words it heard again)."""
        return " ".join(self.streamed + self.tentative)


def surer_words(heard_again: Sequence[TimedWord], final: Sequence[TimedWord]) -> List[TimedWord]:
    """A pass's `final` words, where it heard final words again (`heard_again`, from an
    earlier pass) and wrote a stretch of them otherwise: that stretch as the earlier pass
    wrote it when that pass was surer of it (a higher mean word probability; where either
    is not known, the new words). Two decodes of the same audio are chosen between by
    their scores, never by which ran last: a later pass hears more after a word, but in
    other company (another utterance, a longer prompt) it may write an early word otherwise
    and the pass after it back again."""
    if not heard_again:
        return list(final)
    reach = heard_again[-1].end
    over = [w for w in final if w.midpoint < reach]  # the final words over the words heard again
    matcher = SequenceMatcher(a=[w.norm for w in heard_again], b=[w.norm for w in over], autojunk=False)
    chosen: List[TimedWord] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        earlier, now = heard_again[i1:i2], over[j1:j2]
        chosen += earlier if tag == "replace" and _surer(earlier, now) else now
    return chosen + list(final[len(over):])


def _surer(earlier: Sequence[TimedWord], now: Sequence[TimedWord]) -> bool:
    scores = [[w.probability for w in words] for words in (earlier, now)]
    if any(p is None for words in scores for p in words):
        return False
    return sum(scores[0]) / len(scores[0]) > sum(scores[1]) / len(scores[1])


def compare(committed: Sequence[TimedWord], tentative: Sequence[TimedWord],
            final: Sequence[TimedWord]) -> Tuple[Tuple[Change, ...], int, Dict[int, int]]:
    """The final words against what the page showed for the same stretch: the streamed
    committed words, then the tentative ones. Returns (the runs of final words that differ
    from what was shown, with what was shown there; how many committed words were changed
    or removed; final index -> committed index for the committed words kept). A tentative
    word the final pass confirms is no change, one it writes otherwise is; only committed
    words count as revised (tentative ones are expected to change). Final words after the
    end of what was shown are new, not changed: the page had not shown that far."""
    shown = list(committed) + list(tentative)
    matcher = SequenceMatcher(a=[w.norm for w in shown], b=[w.norm for w in final], autojunk=False)
    changes: List[Change] = []
    kept: Dict[int, int] = {}
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            kept.update({j1 + k: i1 + k for k in range(i2 - i1) if i1 + k < len(committed)})
        elif j2 > j1 and i1 < len(shown):  # written otherwise than shown, or inserted among it
            changes.append((j1, j2, " ".join(w.text for w in shown[i1:i2])))
    return tuple(changes), len(committed) - len(kept), kept
