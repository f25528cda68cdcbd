"""AlignAtt: commit a word once the model has heard it. A pure policy, like policy.py.

SimulStreaming (UFAL, 2025), the successor of whisper_streaming, replaced LocalAgreement
with AlignAtt (Papi, Gaido, Negri and Turchi, Interspeech 2023): one decode per update,
no second decode to agree with. The decode goes on greedily after the committed words
(given as the start of its transcript); for each token it chose, the alignment heads'
cross-attention says which audio the model was reading. A token that reads the last
stretch of the audio that has arrived is a guess about speech not fully heard: the
commit stops there. What is committed is then exactly greedy decoding of the buffer, cut
where the model's own attention says it is unsure.

The rules, over the words of one decode (each with its tokens' attention peaks,
Hypothesis.peaks, in stream seconds):

1. New words: given every committed word of its buffer, everything the decode wrote
   after them is new. Without them (a decode that looped on them is given none), a
   decode that writes them again first is read the same way; otherwise words that start
   before the committed end were judged already and are dropped. So, given them or not,
   are words read before the end of speech that a pause decode saw (rule 6): that
   decode judged the whole utterance, and a word it did not commit there, written
   again once the speaker goes on, is the decoder reading the end of the last utterance
   for the start of the next ("Americans. That's it. Ask not", all of "That's it." read
   at the end of "Americans", where the pause decode had written "Yeah." and doubted
   it). No rule on the text: a word the speaker says six times takes six stretches of
   audio, and the attention moves with it.
2. The edge: walking the tokens in order, the first one whose attention peaks within the
   last `frame_seconds` of the buffer stops the commit; the words wholly before it are
   committed, the rest stays tentative. So does a word whose own timing (the word
   timestamps' alignment of the whole decode) ends within those last seconds: a word
   written without audio of its own is read where the speech before it was ("Thank"
   of "buddy. Thank you." read at "buddy"), and only its alignment, pushed to the end
   of the buffer, shows it was not heard with audio after it. (Not at a pause: there
   the alignment stretches the last word into the silence that follows it.)
3. Attention jumping back: a token whose peak lies more than `jump_back_seconds` before
   the furthest peak so far (the committed words' included) is the decoder reading again
   what it already wrote: stop. So is a run of three words read at one instant (within
   40 ms): the words after its first are written while the decoder hears nothing.
4. A copy: a phrase of 1-5 words equal to the phrase right before it in the decode,
   read at the same audio (its peaks not `copy_advance_seconds` past the
   original's): the decoder writing again what it heard once, a loop: stop.
5. Utterance start: until the buffer holds `start_seconds` of audio, a word needs as
   much audio after it as the buffer lacks (and at least `frame_seconds`). A short buffer
   guesses at its first words; the guess settles as audio arrives.
6. A pause (the voice detector saw the speech end inside the buffer, and silence after
   it): the decode heard the whole utterance, as an offline decode does. The edge shrinks
   to `pause_frame_seconds`, the start rule no longer holds, and what is read in the
   silence is not committed: words placed after the end of speech, and tokens read more
   than `silence_read_seconds` after it ("We're going to go to the next one." after a
   "Montreal" said alone).
7. The end of the session commits every new word up to a copy (rule 4), a token read in
   the silence after the end of speech (rule 6) or a doubted word (rule 8).
8. A word the model doubts: its probability (the mean of its tokens', from the alignment
   pass, which reads the transcript without the prompt) below `min_probability`. Words
   written where the speaker stopped ("bottle. All", "buddy. Thank", "No. So.") or
   copied on ("Forest. Forest. Forest.") came out at 0.00-0.07 where the words heard
   came out at 0.2-0.95: the decoder wrote them from the prompt and the text before
   them, not from the audio. Such a word waits until `doubt_seconds` of audio came after
   it (the speaker went on: it was part of the speech), and at a pause or the end of the
   session it is not committed, nor anything after it.

Punctuation carries no audio of its own: its tokens' attention is not read (tiny.en's
"." after a sentence peaked seconds back). A word with no peaks (a decoder asked for no
attention, or text the tokens do not spell) never passes rule 2: it waits for a pause
(rule 6 commits it) or the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import List, Optional, Sequence, Tuple

from .policy import START_SLACK_S, CommittedWords, Decision, Hypothesis, TimedWord

MAX_COPY_WORDS = 5
STUCK_WORDS = 3  # this many words read within STUCK_SECONDS of each other: nothing was heard
STUCK_SECONDS = 0.04


@dataclass
class AlignAttPolicy(CommittedWords):
    frame_seconds: float = 0.4  # a token read this close to the buffer's end stops the commit
    pause_frame_seconds: float = 0.1  # the same at a pause, when the utterance was heard whole
    start_seconds: float = 0.0  # rule 5: below this much buffer, more audio after a word
    jump_back_seconds: float = 1.0  # a token read this far before the furthest peak: stop
    copy_advance_seconds: float = 0.1  # a repeated phrase must be read this much further on
    # "Go! Go! Go! Go! Go! Go!" said six times fails the text test of a loop; rules 3 and 4
    # tell the two apart by the audio each copy reads
    reads_loops = True
    # A word committed as soon as it was heard is often the last heard so far: the period
    # Whisper put after it is a guess that the speaker stopped, and given back as the start
    # of the transcript it makes the decoder open a new sentence ("Montreal. All four"
    # for "Montreal forced aligner"): the prefix leaves it out (context.py)
    reopens_last_word = True
    min_probability: float = 0.0  # rule 8: a word the model gives less than this is doubted
    doubt_seconds: float = 1.0  # rule 8: ... and needs this much audio after it
    silence_read_seconds: float = 0.3  # rule 6: a token read this long after the speech ended reads silence
    # rule 1: the end of speech the last pause decode saw; a word read before it was judged
    judged_until: float = float("-inf")
    # the attention peaks of the committed words (the last few): rule 3 starts from them
    committed_peaks: List[Tuple[float, ...]] = field(default_factory=list)

    def update(self, hyp: Hypothesis, speech_end: Optional[float] = None) -> Decision:
        """Take one decode. `speech_end`: where the speaker stopped, if the voice detector
        saw the speech end inside this buffer (and the pause after it)."""
        words, peaks = self._new_words(hyp)
        if speech_end is not None:
            heard = [i for i, w in enumerate(words) if w.start < speech_end]
            words, peaks = [words[i] for i in heard], [peaks[i] for i in heard]
            edge = min(hyp.buffer_end - self.pause_frame_seconds, speech_end + self.silence_read_seconds)
        else:
            lacking = max(0.0, self.start_seconds - (hyp.buffer_end - hyp.buffer_start))
            edge = hyp.buffer_end - max(self.frame_seconds, lacking)
        # rule 8: a doubted word needs speech after it; at a pause it was the utterance's end
        doubt_edge = hyp.buffer_end - self.doubt_seconds if speech_end is None else float("-inf")
        stop, why = self._stop(words, peaks, edge, unread_pass=speech_end is not None, doubt_edge=doubt_edge)
        reason = ("end of speech" if speech_end is not None else "heard before the edge") if stop else ""
        if stop < len(words) and why:
            reason = f"{reason}; stopped at {words[stop].text!r}: {why}".lstrip("; ")
        decision = replace(self._commit_read(words, peaks, stop, hyp, reason), edge=edge)
        if speech_end is not None:
            self.judged_until = max(self.judged_until, speech_end)
        return decision

    def finish(self, hyp: Optional[Hypothesis] = None, speech_end: Optional[float] = None) -> Decision:
        """The session ended: commit the last decode's new words (heard before the end of
        speech), or without a decode the last tentative words."""
        if hyp is None:
            return self._commit(self.previous, (), None, reason="finish")
        words, peaks = self._new_words(hyp)
        if speech_end is not None:
            heard = [i for i, w in enumerate(words) if w.start < speech_end]
            words, peaks = [words[i] for i in heard], [peaks[i] for i in heard]
        keep, why = self._stop(words, peaks, speech_end + self.silence_read_seconds if speech_end is not None
                               else float("inf"), unread_pass=True, jump_back=False, doubt_edge=float("-inf"))
        decision = self._commit_read(words, peaks, keep, None, "finish" + (f" (stopped: {why})" if why else ""))
        return replace(decision, tentative=())

    def _commit_read(self, words, peaks, stop: int, hyp: Optional[Hypothesis], reason: str) -> Decision:
        """Commit words[:stop], keeping their attention peaks for rule 3."""
        decision = self._commit(words[:stop], words[stop:], hyp, reason)
        self.committed_peaks = (self.committed_peaks + list(peaks[:stop]))[-MAX_COPY_WORDS:]
        return decision

    def _new_words(self, hyp: Hypothesis) -> Tuple[List[TimedWord], List[Tuple[float, ...]]]:
        peaks = list(hyp.peaks) if len(hyp.peaks) == len(hyp.words) else [()] * len(hyp.words)
        pairs = list(zip(hyp.words, peaks))
        in_buffer = [w.norm for w in self.committed if w.end > hyp.buffer_start]
        if in_buffer and not hyp.after_committed and [w.norm for w in hyp.words[:len(in_buffer)]] == in_buffer:
            # not given them (a decode of this buffer looped on them), it wrote them again
            # first: what follows is new, wherever the alignment now puts it (it moved the
            # committed "forwarded" 0.12 s on, and the time rule below took it for a new one)
            pairs = pairs[len(in_buffer):]
        elif self.committed and not hyp.after_committed:
            end, last = self.committed_end, self.committed[-1]
            # the last committed word heard again: the same word starting inside its time
            # (a real repeat starts after it ends); the slack alone let a "go" aligned 2.86-3.02
            # in after a committed "go" at 2.86-2.94: seven for six
            pairs = [(w, p) for w, p in pairs if w.start > end - START_SLACK_S
                     and not (w.norm == last.norm and w.start < last.end)]
        # read before the end of the utterance a pause decode judged (by its attention, or
        # with none to read by its timing): judged then. Only the words at the decode's
        # start: a word read there after one heard later is rule 3's to stop
        while pairs and max(pairs[0][1], default=pairs[0][0].start) < self.judged_until:
            pairs.pop(0)
        return [w for w, _ in pairs], [p for _, p in pairs]

    def _stop(self, words: Sequence[TimedWord], peaks: Sequence[Tuple[float, ...]],
              edge: float, unread_pass: bool, jump_back: bool = True,
              doubt_edge: float = float("-inf")) -> Tuple[int, str]:
        """(index of the first word not to commit, why); len(words) when all may.
        unread_pass: a word with no attention to read passes (at a pause). doubt_edge: a
        word the model doubts must end before it (rule 8)."""
        # the attention may not jump back from the committed words either (rule 3)
        furthest = max((p for word_peaks in self.committed_peaks for p in word_peaks), default=float("-inf"))
        stuck = _first_stuck_run(peaks)
        # Only inside the decode: a copy of the committed words, looked for across the
        # committed end, stopped "go, go, go, go, go, go" after four (the next "go" was
        # read within 0.1 s of the committed one's peak)
        copy = _first_copy(words, peaks, self.copy_advance_seconds)
        for i, word_peaks in enumerate(peaks):
            if copy == i:
                return i, "a copy of the phrase before it, read at the same audio"
            if stuck is not None and i == stuck + 1:  # the first of them may have been heard there
                return i, f"{STUCK_WORDS} words or more read at one instant"
            if words[i].probability < self.min_probability and words[i].end > doubt_edge:
                return i, f"the model gives it {words[i].probability:.2f} with no speech after it"
            if not word_peaks and not unread_pass:
                return i, "no attention to read"
            if not unread_pass and words[i].end > edge:  # rule 2 by the word's own timing
                return i, f"aligned up to {words[i].end:.2f} s, past the edge at {edge:.2f} s"
            for peak in word_peaks:
                if peak >= edge:
                    return i, f"read at {peak:.2f} s, past the edge at {edge:.2f} s"
                if jump_back and peak < furthest - self.jump_back_seconds:
                    return i, f"attention jumped back to {peak:.2f} s from {furthest:.2f} s"
                furthest = max(furthest, peak)
        return len(words), ""


def _first_stuck_run(peaks: Sequence[Tuple[float, ...]]) -> Optional[int]:
    """Index of the first of STUCK_WORDS words or more in a row whose tokens were all read
    within STUCK_SECONDS (no one says three words in 40 ms: the decoder wrote them while
    reading one instant, "We're going to go over it." at the end of a lone "Montreal")."""
    for i in range(len(peaks) - STUCK_WORDS + 1):
        run = [p for word_peaks in peaks[i:i + STUCK_WORDS] for p in word_peaks]
        if len(run) >= STUCK_WORDS and max(run) - min(run) <= STUCK_SECONDS:
            return i
    return None


def _first_copy(words: Sequence[TimedWord], peaks: Sequence[Tuple[float, ...]],
                advance: float) -> Optional[int]:
    """Index of the first word that opens a copy of the 1-5 words right before it, read
    at the same audio (rule 4); None if there is none."""
    norms = [w.norm for w in words]
    for i in range(1, len(words)):
        for n in range(min(MAX_COPY_WORDS, i, len(words) - i), 0, -1):
            if norms[i:i + n] != norms[i - n:i]:
                continue
            original = [p for word_peaks in peaks[i - n:i] for p in word_peaks]
            copied = [p for word_peaks in peaks[i:i + n] for p in word_peaks]
            if original and copied and max(copied) < max(original) + advance:
                return i
    return None
