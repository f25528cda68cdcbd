"""When a word heard live becomes final: a pure policy over timestamped hypotheses.

No audio, no clock, no threads, no model: each re-decode of the audio buffer comes in as
words with times in stream seconds; out come the words to commit (never taken back), the
words still tentative, and where the session may cut its audio buffer.

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
4. End of speech: when the voice detector says the speaker stopped, this one decode heard
   the whole utterance and the silence after it, as an offline decode does: its words up
   to the end of speech are committed without waiting for a second decode. Words placed
   after the end of speech were heard in silence: they are dropped, never committed.
   Unless the previous decode heard a word in full and said something else ("my fellow"
   before the pause, "am I fellow" after it): then the words before it are committed and
   one more decode settles the rest (the next decode after that commits what it hears).
5. The buffer may be cut after committed text (the session keeps the audio before a cut
   as context otherwise): past `cut_after_seconds`, at the last but one committed sentence
   end or Whisper segment end (the last committed sentence stays as context); past
   `max_buffer_seconds`, at the last committed word, or (if nothing agreed for that long)
   after the words that end `keep_seconds` before the buffer's end, which are committed.
6. At the end of the session the last decode's words are committed, unless they are the
   previous hypothesis with words left out (Whisper sometimes skips a repeated phrase):
   then the fuller one is.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

START_SLACK_S = 0.1  # a word starting this close before the committed end is still new
REPEAT_WINDOW_S = 1.0  # a repeat is looked for only right after the committed end
MAX_REPEAT_WORDS = 5
SAME_BOUNDARY_S = 0.5  # cut points closer than this are one boundary
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
    # how sure the model was of it (its tokens' mean probability, where the decode computed
    # it: DecodeOptions.word_probabilities); 1.0 where it did not. Not part of equality.
    probability: float = field(default=1.0, compare=False)

    @property
    def norm(self) -> str:
        return normalize_word(self.text)

    @property
    def ends_sentence(self) -> bool:
        return self.text.rstrip("\"')]").endswith((".", "?", "!", "…"))


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
    cut_at: Optional[float] = None  # the buffer may be cut here (stream seconds)
    reason: str = ""  # which rule committed or cut, for the log and the panel
    edge: Optional[float] = None  # AlignAtt: a token read past this (stream seconds) stops the commit


@dataclass
class CommittedWords:
    """What every live policy keeps: the committed words, the tentative rest of the last
    hypothesis, and where the buffer may be cut (rule 5). A policy decides which words of
    a hypothesis to commit and calls _commit."""

    cut_after_seconds: float = 20.0  # the session passes its own (LiveConfig says why)
    max_buffer_seconds: float = 25.0
    keep_seconds: float = 5.0  # a forced cut keeps this much of the buffer's end uncommitted
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

    def shown_committed(self, last: Optional[int] = None) -> str:
        """The committed words (the `last` of them) as the page shows them."""
        first = 0 if last is None else len(self.committed) - last
        return self._shown(self.committed[first:], self.committed[first - 1] if first > 0 else None)

    def shown_after(self, words: Sequence[TimedWord]) -> str:
        """Words that follow the committed ones (the tentative), as the page shows them."""
        return self._shown(words, self.committed[-1] if self.committed else None)

    def _shown(self, words: Sequence[TimedWord], before: Optional[TimedWord]) -> str:
        # a policy whose decoder sees every committed period shows Whisper's text as it is
        return " ".join(shown_texts(words, before) if self.reopens_last_word else (w.text for w in words))

    def update(self, hyp: Hypothesis, speech_end: Optional[float] = None) -> Decision:
        raise NotImplementedError

    def finish(self, hyp: Optional[Hypothesis] = None, speech_end: Optional[float] = None) -> Decision:
        raise NotImplementedError

    def _commit(self, words, tentative, hyp: Optional[Hypothesis], reason: str) -> Decision:
        words, tentative = list(words), list(tentative)
        cut_at = None
        if hyp is not None:
            cut_at, forced = self._cut_point(words, tentative, hyp)
            if forced:
                words, tentative = words + forced, tentative[len(forced):]
                reason = "buffer full: committed what is older than the last seconds"
        self.committed.extend(words)
        self.previous = tentative
        return Decision(tuple(words), tuple(tentative), cut_at, reason)

    def _cut_point(self, words, tentative, hyp: Hypothesis):
        """(cut_at, words forced into the commit) by rule 5."""
        length = hyp.buffer_end - hyp.buffer_start
        if length <= self.cut_after_seconds:
            return None, []
        done = [w for w in self.committed + words if w.end > hyp.buffer_start]
        last_end = done[-1].end if done else None
        # Sentence and segment ends inside the committed text of this buffer. The cut goes
        # at the last but one, as whisper_streaming cuts at its last but one segment: the
        # last committed sentence stays in the buffer as what the next words are heard
        # after (cut right before them, tiny.en misheard "a small dog walked" as "a small
        # dark walk"); its words are not committed again (rule 1).
        ends = sorted({w.end for w in done if w.ends_sentence}
                      | {e for e in hyp.segment_ends
                         if last_end is not None and hyp.buffer_start < e <= last_end + START_SLACK_S})
        # a sentence's last word and the segment end after it name one boundary, twice
        ends = [e for e, later in zip(ends, ends[1:] + [float("inf")]) if later - e > SAME_BOUNDARY_S]
        if len(ends) >= 2:
            return ends[-2], []
        if length <= self.max_buffer_seconds:
            return None, []
        if last_end is not None:
            return last_end, []
        # Nothing agreed for the whole buffer: take the older words as they are.
        limit = hyp.buffer_end - self.keep_seconds
        forced = list(itertools.takewhile(lambda w: w.end <= limit, tentative))
        return (forced[-1].end if forced else limit), forced

@dataclass
class AgreementPolicy(CommittedWords):
    right_context_seconds: float = 0.6  # audio the earlier decode must have heard after a word
    min_vote_seconds: float = 2.0  # an earlier decode of less audio than this gets no vote
    _previous_end: float = 0.0  # where the audio of the last hypothesis ended
    _waited_at_pause: bool = False  # the last end-of-speech decode left a disagreement open

    def update(self, hyp: Hypothesis, speech_end: Optional[float] = None) -> Decision:
        """Take one hypothesis. `speech_end`: where the speaker stopped, if the voice
        detector saw the speech end inside this buffer (and the pause after it)."""
        new = self._new_words(hyp)
        previous_end, self._previous_end = self._previous_end, hyp.buffer_end
        if speech_end is not None:
            heard = [w for w in new if w.start < speech_end]
            contradiction = self._contradiction(heard, previous_end)
            if contradiction is None or self._waited_at_pause:
                self._waited_at_pause = False
                return self._commit(heard, (), hyp, reason="end of speech")
            # This decode and the previous one both heard a word in full and disagree
            # on it: commit what they agree on and let one more decode settle the rest.
            self._waited_at_pause = True
            return self._commit(heard[:contradiction], heard[contradiction:], hyp,
                                reason="end of speech; two decodes disagree, one more decides")
        self._waited_at_pause = False
        agreed = _common_prefix(self.previous, new)
        # A word at the very end of the audio the previous decode heard may have been cut
        # short or guessed without what follows: its agreement does not count yet. Nor
        # does a previous decode of the first instants of a buffer.
        heard_until = previous_end - self.right_context_seconds
        if previous_end - hyp.buffer_start < self.min_vote_seconds:
            heard_until = float("-inf")
        while agreed and new[agreed - 1].end > heard_until:
            agreed -= 1
        reason = "two decodes agreed" if agreed else ""
        return self._commit(new[:agreed], new[agreed:], hyp, reason)

    def _contradiction(self, words: List[TimedWord], previous_end: float) -> Optional[int]:
        """Index of the first of `words` where the previous hypothesis says otherwise about
        audio it heard in full (right context included); None if they agree there."""
        agreed = _common_prefix(self.previous, words)
        if agreed >= min(len(self.previous), len(words)):
            return None
        if self.previous[agreed].end > previous_end - self.right_context_seconds:
            return None  # the previous decode guessed at the edge of its audio
        return agreed

    def finish(self, hyp: Optional[Hypothesis] = None, speech_end: Optional[float] = None) -> Decision:
        """The session ended: commit what the last decode heard, or without one the last
        tentative words. If the last decode is the previous hypothesis with words left out
        (Whisper sometimes skips a repeated phrase), the fuller one is kept (rule 6)."""
        if hyp is None:
            return self._commit(self.previous, (), None, reason="finish")
        words = self._new_words(hyp)
        if speech_end is not None:
            words = [w for w in words if w.start < speech_end]
        reason = "finish"
        if _leaves_out_words_of(words, self.previous):
            words, reason = list(self.previous), "finish (kept the fuller previous hypothesis)"
        return self._commit(words, (), None, reason=reason)

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


def _leaves_out_words_of(words: Sequence[TimedWord], fuller: Sequence[TimedWord]) -> bool:
    """True when `words` are `fuller` with some left out: shorter, in order, same last word."""
    short, full = [w.norm for w in words], [w.norm for w in fuller]
    if not short or len(short) >= len(full) or short[-1] != full[-1]:
        return False
    remaining = iter(full)
    return all(word in remaining for word in short)


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
