"""When a streamed word becomes committed: a pure policy over timestamped hypotheses.

No audio, no clock, no threads, no model: each re-decode of the audio buffer comes in as
words with times in stream seconds; out come the words to commit (shown in normal type,
never taken back by the streamed pass) and the words still tentative. What is *final* is
not a policy's call: at each end of an utterance the session gives the utterance the text
of one decode that heard all of it (final_pass.py), and the policy's committed words are
replaced by it (CommittedWords.finalize). A policy only has to be quick and rarely wrong.

The rules, after whisper_streaming's HypothesisBuffer (Machacek, Dabre and Bojar, 2023),
which compares hypotheses by time, not by word index:

1. Words that start before the end of the committed text (less a little slack for the
   timing's jitter) were already heard and judged: they are dropped from the hypothesis.
   Not when the decode was given every committed word of its buffer as the start of its
   transcript: what it wrote after them is new by construction, wherever the alignment
   puts it (the committed "you" of "for you" had swallowed the pause and the onset of
   "ask" after it, 7.24-8.26 s; the next decode placed "ask" at 8.08 s, and the time rule
   dropped it for good).
2. If the hypothesis then opens by repeating the last 1-5 committed words, and those words
   take no audio of their own (they end about where the committed text ends), it is the
   decoder hearing again what it heard before, placed a little later: they are skipped. A
   phrase the speaker really says twice takes its own time after the committed one, and
   is kept; a single repeated word is always skipped (its timing cannot tell). Applied
   again after each skip, so a run heard again ("uh, uh, uh, ...", written a different
   number of times by each decode) is skipped whole, not one word a decode. Inside one
   hypothesis, a phrase written again with no audio at all (every word of the copy
   aligned to an instant: the alignment found nothing said) is the decoder repeating
   itself, and is dropped too. Words with no audio between the phrase and its copy (a
   silent "Mm.") do not hide the copy.
3. LocalAgreement-2: the longest prefix on which this hypothesis and the previous one agree
   (compared as normalised words) is committed, except words that ended less than
   `right_context_seconds` before the end of the audio the previous decode heard: there
   the earlier decode guessed without hearing what follows ("am I" for "my fellow"). On
   the dev stream of the live benchmark, 0.6 s of right context made 33.0 % WER where
   0.3 s made 34.7 % (offline: 30.7 %), for 0.26 s more delay.
   A previous decode of less than `min_vote_seconds` of buffer gets no vote at all: from
   1-1.5 s of audio tiny.en heard "But when the" for "The weather", twice.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

START_SLACK_S = 0.1  # a word starting this close before the committed end is still new
REPEAT_WINDOW_S = 1.0  # a repeat is looked for only right after the committed end
MAX_REPEAT_WORDS = 5
NO_AUDIO_S = 0.02  # a word aligned to less than one alignment step took no audio


def normalize_word(text: str) -> str:
    """What agreement compares: lower case, no punctuation (Whisper re-punctuates freely)."""
    norm = re.sub(r"[^\w']", "", text.lower()).strip("'")
    return norm or text.strip().lower()


@dataclass(frozen=True)
class TimedWord:
    text: str  # as Whisper wrote it, punctuation included, no surrounding spaces
    start: float  # stream seconds
    end: float

    @property
    def norm(self) -> str:
        return normalize_word(self.text)

    @property
    def ends_sentence(self) -> bool:
        return self.text.rstrip("\"')]").endswith((".", "?", "!", "…"))


def timed_words(segments, offset_s: float) -> List[TimedWord]:
    """A decode's words (its segments' word timestamps, relative to its audio, which starts
    at `offset_s`) in stream time. Whisper's word timing starts a new word at every
    punctuation token, so "28.8" comes as " 28" and ".8", and "850-2" as " 850" and "-2":
    a word that starts with punctuation and no space belongs to the word before it (joined
    by spaces, the text read "28 .8", which the offline transcript writes "28.8")."""
    words: List[TimedWord] = []
    for word in (w for segment in segments for w in segment.words):
        text = word.text.strip()
        if not text:
            continue
        start, end = offset_s + word.start, offset_s + word.end
        attached = words and not word.text[:1].isspace() and not text[0].isalnum() and not _punctuation_only(text)
        if attached:
            words[-1] = TimedWord(words[-1].text + text, words[-1].start, end)
        else:
            words.append(TimedWord(text, start, end))
    return words


def _punctuation_only(text: str) -> bool:
    return not re.search(r"\w", text)


@dataclass(frozen=True)
class Hypothesis:
    """One re-decode of the buffer, in stream time."""

    words: Tuple[TimedWord, ...]
    segment_ends: Tuple[float, ...] = ()  # where Whisper closed a segment (not the last one)
    buffer_start: float = 0.0
    buffer_end: float = 0.0
    # The decode was given every committed word of its buffer and wrote these after them
    # (the session strips the given words): none of them was committed before (rule 1).
    after_committed: bool = False
    # Per word, where the alignment heads' cross-attention peaked for each of its tokens
    # (stream seconds; punctuation left out): what AlignAtt reads. () when the decoder
    # gave no attention (alignatt.py).
    peaks: Tuple[Tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class Decision:
    committed: Tuple[TimedWord, ...]  # newly committed, in order
    tentative: Tuple[TimedWord, ...]  # the rest of this hypothesis (may still change)
    reason: str = ""  # which rule committed, for the log and the panel
    edge: Optional[float] = None  # AlignAtt: a token read past this (stream seconds) stops the commit


@dataclass
class CommittedWords:
    """What every live policy keeps: the committed words of the whole session (those made
    final first, then the streamed ones after them) and the tentative rest of the last
    hypothesis. A policy decides which words of a hypothesis to commit and calls _commit;
    the session's final passes replace streamed words with final ones (finalize)."""

    # A decode whose text repeats itself (decoder.looped) gets no vote, unless the policy
    # tells a loop from a true repeat itself (AlignAtt, by where the attention reads).
    reads_loops = False
    # The prefix leaves out the punctuation Whisper wrote after the last committed word
    # (context.py), so the next decode says whether the sentence ended there.
    reopens_last_word = False
    committed: List[TimedWord] = field(default_factory=list)  # the whole session's
    previous: List[TimedWord] = field(default_factory=list)  # last hypothesis, uncommitted part

    @property
    def committed_end(self) -> float:
        return self.committed[-1].end if self.committed else 0.0

    def committed_before(self, stream_seconds: float) -> List[TimedWord]:
        """Committed words said before a time: the prompt of a buffer starting there."""
        return [w for w in self.committed if w.end <= stream_seconds + START_SLACK_S]

    def committed_after(self, stream_seconds: float) -> List[TimedWord]:
        """Committed words said after a time: those of a buffer starting there."""
        return [w for w in self.committed if w.end > stream_seconds + START_SLACK_S]

    def shown_committed(self, last: Optional[int] = None, first: Optional[int] = None) -> str:
        """The committed words (the `last` of them, or those from index `first`) as the page
        shows them."""
        if first is None:
            first = 0 if last is None else len(self.committed) - last
        return " ".join(self.shown_words(first))

    def shown_words(self, first: int = 0, last: Optional[int] = None) -> List[str]:
        """Committed words first..last (exclusive) as the page shows them, one string each."""
        words = self.committed[first:last]
        return self._shown(words, self.committed[first - 1] if first > 0 else None)

    def shown_after(self, words: Sequence[TimedWord]) -> str:
        """Words that follow the committed ones (the tentative), as the page shows them."""
        return " ".join(self._shown(words, self.committed[-1] if self.committed else None))

    def _shown(self, words: Sequence[TimedWord], before: Optional[TimedWord]) -> List[str]:
        # a policy whose decoder sees every committed period shows Whisper's text as it is
        return shown_texts(words, before) if self.reopens_last_word else [w.text for w in words]

    def update(self, hyp: Hypothesis) -> Decision:
        raise NotImplementedError

    def _commit(self, words, tentative, reason: str) -> Decision:
        self.committed.extend(words)
        self.previous = list(tentative)
        return Decision(tuple(words), tuple(tentative), reason)

    def finalize(self, first: int, replaced: int, final: Sequence[TimedWord],
                 tentative: Sequence[TimedWord]) -> None:
        """A final pass judged committed words first..first+replaced (streamed, in order):
        they become `final`; `tentative` is what is left of the last hypothesis after it."""
        self.committed[first:first + replaced] = list(final)
        self.previous = list(tentative)


@dataclass
class AgreementPolicy(CommittedWords):
    right_context_seconds: float = 0.6  # audio the earlier decode must have heard after a word
    min_vote_seconds: float = 2.0  # an earlier decode of less audio than this gets no vote
    _previous_end: float = 0.0  # where the audio of the last hypothesis ended

    def update(self, hyp: Hypothesis) -> Decision:
        """Take one hypothesis: commit what it and the previous one agree on (rule 3)."""
        new = self._new_words(hyp)
        previous_end, self._previous_end = self._previous_end, hyp.buffer_end
        agreed = _common_prefix(self.previous, new)
        # A word at the very end of the audio the previous decode heard may have been cut
        # short or guessed without what follows: its agreement does not count yet. Nor
        # does a previous decode of the first instants of a buffer.
        heard_until = previous_end - self.right_context_seconds
        if previous_end - hyp.buffer_start < self.min_vote_seconds:
            heard_until = float("-inf")
        while agreed and new[agreed - 1].end > heard_until:
            agreed -= 1
        return self._commit(new[:agreed], new[agreed:], "two decodes agreed" if agreed else "")

    # ------------------------------------------------------------------ rules

    def _new_words(self, hyp: Hypothesis) -> List[TimedWord]:
        end = self.committed_end
        new = list(hyp.words)
        if self.committed and not hyp.after_committed:
            new = [w for w in new if w.start > end - START_SLACK_S]
        while repeat := self._repeat_length(new):  # a run of them ("uh, uh, uh, ..."), all
            new = new[repeat:]
        return _without_silent_copies(new)

    def _repeat_length(self, new: List[TimedWord]) -> int:
        """How many words at the start of `new` repeat the committed tail without taking
        audio of their own (rule 2); 0 when there is no such repeat. Words that took no
        audio may open the repeat and go with it ("Mm. Montreal forced." written after a
        committed "Montreal forced.", all three aligned to one instant)."""
        for lead in range(_silent_run(new) + 1):
            repeat = self._repeat_at(new[lead:])
            if repeat:
                return lead + repeat
        return 0

    def _repeat_at(self, new: List[TimedWord]) -> int:
        if not new or not self.committed or abs(new[0].start - self.committed_end) > REPEAT_WINDOW_S:
            return 0
        for n in range(min(MAX_REPEAT_WORDS, len(new), len(self.committed)), 0, -1):
            tail = self.committed[-n:]
            if [w.norm for w in tail] != [w.norm for w in new[:n]]:
                continue
            if n == 1:
                # One word: word timings jitter by more than a short word lasts, so time
                # cannot tell; a word said twice in a row ("the the") is a slip Whisper
                # itself leaves out, while a word heard twice across decodes is common.
                return 1
            # said again, a phrase would end about its own length after the committed end
            # (give or take the timing's jitter: a committed copy may itself be aligned to
            # an instant, when the decoder wrote it with no audio of its own)
            own_time = (tail[-1].end - tail[0].start) / 2
            if new[n - 1].end < self.committed_end + own_time + START_SLACK_S:
                return n
        return 0


def _without_silent_copies(words: List[TimedWord]) -> List[TimedWord]:
    """`words` without any 1-5-word phrase that repeats the words right before it (or
    before a few words that took no audio) and took no audio itself: every word of the
    copy aligned to an instant. (A speaker's repeat takes time; tiny.en writing "Montreal
    forced. Montreal forced. Montreal forced." over one phrase aligns the copies to the
    instant the first one ends, with at times a silent "Mm." between them.)"""
    kept: List[TimedWord] = []
    i = 0
    while i < len(words):
        copied = _copies_words_before(words[i:i + MAX_REPEAT_WORDS], kept) if _took_no_audio(words[i]) else 0
        if copied:
            i += copied
        else:
            kept.append(words[i])
            i += 1
    return kept


def _copies_words_before(words: List[TimedWord], before: List[TimedWord]) -> int:
    """Length of the silent copy that `words` open with, of the words at the end of
    `before` (less its last words that took no audio); 0 if they open with none."""
    for skip in range(_silent_run(list(reversed(before[-MAX_REPEAT_WORDS:]))) + 1):
        end = len(before) - skip  # the original ends here
        for n in range(min(MAX_REPEAT_WORDS, end, len(words)), 0, -1):
            copy = words[:n]
            if all(map(_took_no_audio, copy)) and [w.norm for w in copy] == [w.norm for w in before[end - n:end]]:
                return n
    return 0


def _silent_run(words: Sequence[TimedWord]) -> int:
    """How many of `words` took no audio before the first that did (at most five)."""
    return len(list(itertools.takewhile(_took_no_audio, words[:MAX_REPEAT_WORDS])))


def _took_no_audio(word: TimedWord) -> bool:
    """Aligned to an instant: the alignment found nothing said for it."""
    return word.end - word.start < NO_AUDIO_S


def _common_prefix(a: Sequence[TimedWord], b: Sequence[TimedWord]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x.norm != y.norm:
            break
        n += 1
    return n


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
