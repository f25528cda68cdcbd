"""A session's transcript: one record per committed word, and the tentative words after them.

    transcript = Transcript()
    transcript.apply(decision, at=now)              # the streamed pass committed words
    revision, new = transcript.revise(final_words, cut_s, at=now, tokens=...)  # a final pass
    transcript.committed_text, transcript.final_text, transcript.tentative_text

Each record says what the word is (text and times), when the page first showed it
committed and by which pass, whether it is final, and, on the last word a final pass made
final, the tokens that pass wrote for the buffer's final words (the next final pass of the
same buffer is given them). The final words come first, the streamed committed ones after
them; a final pass replaces streamed words by its own, so the records always say which is
which, and nothing outside this class keeps a count or a list beside them.

Pure: no audio, no clock (times are passed in), no model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Sequence, Tuple

from .revision import Revision, compare, surer_words
from .words import START_SLACK_S, Decision, TimedWord

STREAMED, FINAL_PASS = "streamed", "final pass"
# a final word this close to a streamed word's time is over it (word timings jitter)
LOST_SLACK_S = 0.3  # which pass first showed a word committed


@dataclass(frozen=True)
class FinalTokens:
    """The tokens a final pass wrote for the final words of a buffer (segment timestamps
    included)."""

    buffer_start: int  # stream sample where that buffer started
    tokens: Tuple[int, ...]


@dataclass(frozen=True)
class WordRecord:
    word: TimedWord
    shown_at: float  # when the page first showed it committed (the session's clock)
    by: str  # STREAMED or FINAL_PASS: the pass that first showed it committed
    final: bool = False
    # on the last final word only: the tokens its final pass wrote for the buffer's final
    # words up to it (None when that pass cut the buffer, or other words came since)
    tokens: Optional[FinalTokens] = None


class Transcript:
    def __init__(self, capitalises: bool = False):
        # A policy whose decoder is not given the period after the last committed word
        # (alignatt.py) may go on in lower case after it: the page capitalises the next word.
        self.capitalises = capitalises
        self._records: List[WordRecord] = []  # the final words first, then the streamed ones
        self.tentative: Tuple[TimedWord, ...] = ()  # the rest of the last hypothesis, shown as it may change
        # streamed words a final pass removed with no final word over their time (should be none)
        self.lost: List[TimedWord] = []
        # streamed words no final word covered, made final as they are / dropped as heard in silence
        self.kept_streamed = 0
        self.silent: List[TimedWord] = []
        self.rescued = 0

    # ------------------------------------------------------------------ what it holds

    @property
    def records(self) -> Tuple[WordRecord, ...]:
        return tuple(self._records)

    @property
    def words(self) -> List[TimedWord]:
        """Every committed word, final ones first."""
        return [record.word for record in self._records]

    @property
    def final_count(self) -> int:
        """How many of the committed words are final (they come first)."""
        n = len(self._records)
        while n and not self._records[n - 1].final:  # the streamed words are the few at the end
            n -= 1
        return n

    @property
    def last(self) -> Optional[TimedWord]:
        return self._records[-1].word if self._records else None

    @property
    def committed_end(self) -> float:
        return self._records[-1].word.end if self._records else 0.0

    def streamed_words(self) -> List[TimedWord]:
        """The committed words no final pass has judged yet."""
        return self.words[self.final_count:]

    def committed_before(self, stream_seconds: float) -> List[TimedWord]:
        """Committed words said before a time: the prompt of a buffer starting there."""
        return [w for w in self.words if w.end <= stream_seconds + START_SLACK_S]

    def committed_after(self, stream_seconds: float) -> List[TimedWord]:
        """Committed words said after a time: those of a buffer starting there."""
        return [w for w in self.words if w.end > stream_seconds + START_SLACK_S]

    def final_after(self, stream_seconds: float) -> List[TimedWord]:
        """The final words said after a time: those of a buffer starting there, which its
        final pass is given as the start of its transcript."""
        return [w for w in self.words[:self.final_count] if w.end > stream_seconds + START_SLACK_S]

    def given_tokens(self, buffer_start: int) -> Optional[Tuple[int, ...]]:
        """The tokens the last final pass of this buffer wrote for its final words, if no
        word became final since."""
        final = self.final_count
        tokens = self._records[final - 1].tokens if final else None
        return tokens.tokens if tokens is not None and tokens.buffer_start == buffer_start else None

    # ------------------------------------------------------------------ changes

    def apply(self, decision: Decision, at: float) -> None:
        """The streamed pass committed `decision.committed` at `at`; the rest is tentative."""
        self._records += [WordRecord(word, at, STREAMED) for word in decision.committed]
        self.tentative = decision.tentative

    def revise(self, final: Sequence[TimedWord], cut_s: Optional[float], at: float,
               tokens: Optional[FinalTokens] = None,
               covered_to: Optional[float] = None,
               rescue: Optional[Callable[[TimedWord], bool]] = None,
               reopen_from: Optional[int] = None) -> Tuple[Revision, List[TimedWord]]:
        """A final pass wrote `final` for the streamed words (all of them, or those before
        `cut_s`, stream seconds): they replace them, final. A word it kept keeps when and
        how it was first shown. `covered_to`: where the final decodes' words end (stream
        seconds): the streamed words said after it were not written over, and stay
        streamed (a later final pass judges them). Returns (what it changed of what the
        page showed, the words the page shows committed for the first time).

        A streamed word the final words leave out with no final word over its time (within
        LOST_SLACK_S) was not written over: with `rescue`, it stays, final as it is, if
        rescue(word) (the voice detector heard voice there; otherwise it is counted
        `silent`), counted `rescued`; without, it is removed and counted `lost`.

        Why a `silent` word may go: the final decode heard its audio (every final decode
        covers the buffer up to the pass's end) and wrote nothing there, and the voice
        detector hears no voice there either: two judges that heard the audio say it was
        not speech (tiny.en's "You" in a pause). A word either judge heard stays.

        `reopen_from`: the final words from this index on are judged too, as streamed ones
        are (a pass that heard their audio afresh may write them otherwise)."""
        first = self.final_count if reopen_from is None else min(reopen_from, self.final_count)
        streamed, tentative = self.words[first:], list(self.tentative)
        limit = min(x for x in (cut_s, None if covered_to is None else covered_to + START_SLACK_S, float("inf"))
                    if x is not None)
        if limit < float("inf"):  # only what lies before the cut, and what the final words cover, is judged
            streamed = [w for w in streamed if w.midpoint < limit]
            tentative = [w for w in tentative if w.midpoint < limit]
        reopened = max(0, min(self.final_count - first, len(streamed)))  # final words judged again
        final = surer_words(streamed[:reopened], final)  # where it wrote them otherwise, the surer pass's
        changes, revised, kept = compare(streamed, tentative, final)
        uncovered = [word for i, word in enumerate(streamed) if i not in set(kept.values()) and not any(
            f.start < word.end + LOST_SLACK_S and f.end > word.start - LOST_SLACK_S for f in final)]
        if uncovered and rescue is not None:
            # no final word over them: they stay, final as they are (those heard in silence go)
            self.silent += [w for w in uncovered if not rescue(w)]
            saved = [w for w in uncovered if rescue(w)]
            self.rescued += len(saved)
            final = sorted(list(final) + saved, key=lambda w: w.start)
            changes, revised, kept = compare(streamed, tentative, final)
        else:
            self.lost += uncovered
        judged = self._records[first:first + len(streamed)]
        self._forget_tokens()  # they were written for the final words before these
        self._records[first:first + len(streamed)] = [
            WordRecord(word, judged[kept[i]].shown_at, judged[kept[i]].by, final=True) if i in kept
            else WordRecord(word, at, FINAL_PASS, final=True) for i, word in enumerate(final)]
        if tokens is not None and self.final_count:
            self._records[self.final_count - 1] = replace(self._records[self.final_count - 1], tokens=tokens)
        self.tentative = tuple(w for w in self.tentative if w.midpoint >= limit)
        rewritten = reopened - len([i for i in kept.values() if i < reopened])
        revision = Revision(first, tuple(self.shown_words(first, self.final_count)), changes,
                            tuple(w.text for w in streamed[reopened:]), tuple(w.text for w in tentative),
                            revised - rewritten, at, tuple(w.text for w in streamed[:reopened]), rewritten)
        return revision, [word for i, word in enumerate(final) if i not in kept]

    def finalize_before(self, stream_seconds: float, keep: Optional[Callable[[TimedWord], bool]] = None) -> None:
        """The streamed words said before a time become final as they are (their audio was
        dropped or cut before a final pass wrote over it, or the session ended). keep: which
        of them stay (the others, heard in silence, are dropped: counted `silent`; given
        only right after a final decode of their audio wrote nothing over them, as in
        revise)."""
        first = self.final_count
        before = self._records[first:first + len(
            [w for w in self.words[first:] if w.end <= stream_seconds + START_SLACK_S])]
        if not before:
            return
        self._forget_tokens()
        stays = [r for r in before if keep is None or keep(r.word)]
        self.silent += [r.word for r in before if keep is not None and not keep(r.word)]
        self.kept_streamed += len(stays)
        self._records[first:first + len(before)] = [replace(record, final=True) for record in stays]

    def _forget_tokens(self) -> None:
        final = self.final_count
        if final and self._records[final - 1].tokens is not None:
            self._records[final - 1] = replace(self._records[final - 1], tokens=None)

    # ------------------------------------------------------------------ as the page shows it

    @property
    def committed_text(self) -> str:
        return " ".join(self.shown_words())

    @property
    def final_text(self) -> str:
        return " ".join(self.shown_words(0, self.final_count))

    @property
    def streamed_text(self) -> str:
        return " ".join(self.shown_words(self.final_count))

    @property
    def tentative_text(self) -> str:
        return self.shown_after(self.tentative)

    def shown_committed(self, last: Optional[int] = None, first: Optional[int] = None) -> str:
        """The committed words (the `last` of them, or those from index `first`) as the page
        shows them."""
        if first is None:
            first = 0 if last is None else len(self._records) - last
        return " ".join(self.shown_words(first))

    def shown_words(self, first: int = 0, last: Optional[int] = None) -> List[str]:
        """Committed words first..last (exclusive) as the page shows them, one string each."""
        words = self.words
        return self._shown(words[first:last], words[first - 1] if first > 0 else None)

    def shown_after(self, words: Sequence[TimedWord]) -> str:
        """Words that follow the committed ones (the tentative), as the page shows them."""
        return " ".join(self._shown(words, self.last))

    def _shown(self, words: Sequence[TimedWord], before: Optional[TimedWord]) -> List[str]:
        # a policy whose decoder sees every committed period shows Whisper's text as it is
        return shown_texts(words, before) if self.capitalises else [w.text for w in words]


def shown_texts(words: Sequence[TimedWord], before: Optional[TimedWord] = None) -> List[str]:
    """The words as the page shows them: one after a sentence end starts with a capital.
    AlignAtt's decoder is not given the period after the last committed word (context.py),
    so it may go on in lower case ("Americans. ask not"); the words keep the text the
    decoder wrote, which is what the next decode is given."""
    texts = []
    for word in words:
        text = word.text
        if before is not None and _opens_a_sentence_after(before) and text[:1].islower():
            text = text[0].upper() + text[1:]
        texts.append(text)
        before = word
    return texts


def _opens_a_sentence_after(word: TimedWord) -> bool:
    """"now." "now?" "now!" end a sentence (TimedWord.ends_sentence); "so..." trails off,
    the sentence goes on."""
    return word.ends_sentence and not word.text.rstrip("\"')]").endswith(("..", "…"))
