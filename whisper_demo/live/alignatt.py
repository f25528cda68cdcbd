"""AlignAtt: commit a word once the model has heard it. A pure policy, like agreement.py.

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
   after them is new. Without them (a decode that looped on them is given none), words
   that start before the committed end were judged already and are dropped. No rule on
   the text: a word the speaker says six times takes six stretches of audio.
2. The edge: walking the tokens in order, the first one whose attention peaks within the
   last `frame_seconds` of the buffer stops the commit; the words wholly before it are
   committed, the rest stays tentative. So does a word whose own timing (the word
   timestamps' alignment of the whole decode) ends within those last seconds: a word
   written without audio of its own is read where the speech before it was ("Thank"
   of "buddy. Thank you." read at "buddy"), and only its alignment, pushed to the end
   of the buffer, shows it was not heard with audio after it.
3. A copy: a phrase of 1-5 words equal to the phrase right before it in the decode,
   read at the same audio (its peaks not `copy_advance_seconds` past the original's):
   the decoder writing again what it heard once, a loop: stop. "Go! Go! Go!" said three
   times fails the text test of a loop; the audio each copy reads tells the two apart.
4. Utterance start: until the buffer holds `start_seconds` of audio, a word needs as
   much audio after it as the buffer lacks (and at least `frame_seconds`). A short buffer
   guesses at its first words; the guess settles as audio arrives.

Punctuation carries no audio of its own: its tokens' attention is not read (tiny.en's
"." after a sentence peaked seconds back). A word with no peaks (a decoder asked for no
attention, or text the tokens do not spell) never passes rule 2: it waits for a pause
and the final pass.

Pauses, the end of the session and cuts of the buffer are not the policy's: there the
session's final pass gives the utterance the text of one decode that heard all of it, and
the committed words are replaced by it (Transcript.revise). What the final pass made
unnecessary went, each measured by turning it off with the final pass on (docs/live.md):
words read before the last pause dropped as judged, the attention jumping back, three
words read at one instant, and a word the model doubts; none changed the final text, and
none lowered the share of streamed words the final pass revised by more than one word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, List, Optional, Sequence, Tuple

from .transcript import Transcript
from .words import START_SLACK_S, Decision, Hypothesis, TimedWord

MAX_COPY_WORDS = 5


@dataclass
class AlignAttPolicy:
    """Keeps no memory: each decode is judged on its own, against the committed words."""

    frame_seconds: float = 0.4  # a token read this close to the buffer's end stops the commit
    start_seconds: float = 0.0  # rule 4: below this much buffer, more audio after a word
    copy_advance_seconds: float = 0.1  # a repeated phrase must be read this much further on
    # a true repeat and a loop both fail the text test of a loop: rule 3 tells them apart
    reads_loops: ClassVar[bool] = True
    # A word committed as soon as it was heard is often the last heard so far: the period
    # Whisper put after it is a guess that the speaker stopped, and given back as the start
    # of the transcript it makes the decoder open a new sentence ("Montreal. All four"
    # for "Montreal forced aligner"): the prefix leaves it out (context.py)
    reopens_last_word: ClassVar[bool] = True

    def update(self, transcript: Transcript, hyp: Hypothesis) -> Decision:
        """Take one decode of the growing buffer."""
        words, peaks = _new_words(transcript.last, hyp)
        lacking = max(0.0, self.start_seconds - (hyp.buffer_end - hyp.buffer_start))
        edge = hyp.buffer_end - max(self.frame_seconds, lacking)
        stop, why = self._stop(words, peaks, edge)
        reason = "heard before the edge" if stop else ""
        if stop < len(words) and why:
            reason = f"{reason}; stopped at {words[stop].text!r}: {why}".lstrip("; ")
        return Decision(tuple(words[:stop]), tuple(words[stop:]), reason, edge)

    def _stop(self, words: Sequence[TimedWord], peaks: Sequence[Tuple[float, ...]],
              edge: float) -> Tuple[int, str]:
        """(index of the first word not to commit, why); len(words) when all may."""
        # Only inside the decode: a copy of the committed words, looked for across the
        # committed end, stopped "go, go, go, go, go, go" after four (the next "go" was
        # read within 0.1 s of the committed one's peak)
        copy = _first_copy(words, peaks, self.copy_advance_seconds)
        for i, word_peaks in enumerate(peaks):
            if copy == i:
                return i, "a copy of the phrase before it, read at the same audio"
            if not word_peaks:
                return i, "no attention to read"
            if words[i].end > edge:  # rule 2 by the word's own timing
                return i, f"aligned up to {words[i].end:.2f} s, past the edge at {edge:.2f} s"
            for peak in word_peaks:
                if peak >= edge:
                    return i, f"read at {peak:.2f} s, past the edge at {edge:.2f} s"
        return len(words), ""


def _new_words(last: Optional[TimedWord], hyp: Hypothesis) -> Tuple[List[TimedWord], List[Tuple[float, ...]]]:
    """The decode's new words (rule 1) after the `last` committed word, with their peaks."""
    peaks = list(hyp.peaks) if len(hyp.peaks) == len(hyp.words) else [()] * len(hyp.words)
    pairs = list(zip(hyp.words, peaks))
    if last is not None and not hyp.after_committed:
        # the last committed word heard again: the same word starting inside its time
        # (a real repeat starts after it ends); the slack alone let a "go" aligned 2.86-3.02
        # in after a committed "go" at 2.86-2.94: seven for six
        pairs = [(w, p) for w, p in pairs if w.start > last.end - START_SLACK_S
                 and not (w.norm == last.norm and w.start < last.end)]
    return [w for w, _ in pairs], [p for _, p in pairs]


def _first_copy(words: Sequence[TimedWord], peaks: Sequence[Tuple[float, ...]],
                advance: float) -> Optional[int]:
    """Index of the first word that opens a copy of the 1-5 words right before it, read
    at the same audio (rule 3); None if there is none."""
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
