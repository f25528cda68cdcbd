"""LocalAgreement: a streamed word is committed once two decodes agree on it. A pure policy.

No audio, no clock, no threads, no model: each re-decode of the audio buffer comes in as
words with times in stream seconds; out come the words to commit (shown in normal type,
never taken back by the streamed pass) and the words still tentative. What is *final* is
not a policy's call: at each end of an utterance the session gives the utterance the text
of one decode that heard all of it (final_pass.py), and the policy's committed words are
replaced by it (Transcript.revise). A policy only has to be quick and rarely wrong.

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

The policy keeps only its own memory (where the last hypothesis's audio ended); the
committed words and the tentative ones it compares with are the session's Transcript.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import ClassVar, List, Sequence

from .transcript import Transcript
from .words import START_SLACK_S, Decision, Hypothesis, TimedWord

REPEAT_WINDOW_S = 1.0  # a repeat is looked for only right after the committed end
MAX_REPEAT_WORDS = 5
NO_AUDIO_S = 0.02  # a word aligned to less than one alignment step took no audio


@dataclass
class AgreementPolicy:
    # A decode whose text repeats itself (loops.looped) gets no vote.
    reads_loops: ClassVar[bool] = False
    # The next decode is given the committed words with Whisper's punctuation.
    reopens_last_word: ClassVar[bool] = False
    right_context_seconds: float = 0.6  # audio the earlier decode must have heard after a word
    min_vote_seconds: float = 2.0  # an earlier decode of less audio than this gets no vote
    _previous_end: float = 0.0  # where the audio of the last hypothesis ended

    def update(self, transcript: Transcript, hyp: Hypothesis) -> Decision:
        """Take one hypothesis: commit what it and the previous one agree on (rule 3). The
        previous one's words after those committed are the tentative words shown now."""
        new = self._new_words(transcript.words, hyp)
        previous_end, self._previous_end = self._previous_end, hyp.buffer_end
        agreed = _common_prefix(transcript.tentative, new)
        # A word at the very end of the audio the previous decode heard may have been cut
        # short or guessed without what follows: its agreement does not count yet. Nor
        # does a previous decode of the first instants of a buffer.
        heard_until = previous_end - self.right_context_seconds
        if previous_end - hyp.buffer_start < self.min_vote_seconds:
            heard_until = float("-inf")
        while agreed and new[agreed - 1].end > heard_until:
            agreed -= 1
        return Decision(tuple(new[:agreed]), tuple(new[agreed:]), "two decodes agreed" if agreed else "")

    # ------------------------------------------------------------------ rules

    @staticmethod
    def _new_words(committed: List[TimedWord], hyp: Hypothesis) -> List[TimedWord]:
        new = list(hyp.words)
        if committed and not hyp.after_committed:
            new = [w for w in new if w.start > committed[-1].end - START_SLACK_S]
        while repeat := _repeat_length(committed, new):  # a run of them ("uh, uh, uh, ..."), all
            new = new[repeat:]
        return _without_silent_copies(new)


def _repeat_length(committed: List[TimedWord], new: List[TimedWord]) -> int:
    """How many words at the start of `new` repeat the committed tail without taking
    audio of their own (rule 2); 0 when there is no such repeat. Words that took no
    audio may open the repeat and go with it ("Mm. Montreal forced." written after a
    committed "Montreal forced.", all three aligned to one instant)."""
    for lead in range(_silent_run(new) + 1):
        repeat = _repeat_at(committed, new[lead:])
        if repeat:
            return lead + repeat
    return 0


def _repeat_at(committed: List[TimedWord], new: List[TimedWord]) -> int:
    if not new or not committed:
        return 0
    committed_end = committed[-1].end
    if abs(new[0].start - committed_end) > REPEAT_WINDOW_S:
        return 0
    for n in range(min(MAX_REPEAT_WORDS, len(new), len(committed)), 0, -1):
        tail = committed[-n:]
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
        if new[n - 1].end < committed_end + own_time + START_SLACK_S:
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

