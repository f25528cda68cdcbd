"""Where a live stream's utterances end and where the one in progress starts, read from
the voice detector's frames alone: so the same audio gives the same answers however it
was chunked and whenever the session asks.

    utterances = Utterances(vad, config)
    due = utterances.next_end(buffer_start, buffer_end)   # a FinalDue, or None
    ... the final pass decodes the buffer up to due.until ...
    utterances.judged(due.until)
    start = utterances.in_progress(buffer_start, buffer_end)  # the streamed decodes' audio

An utterance ends where the speaker paused (`pause_seconds` without voice after speech),
or, inside long speech, where the buffer reaches `cut_after_seconds` (the session then
cuts it). With `interim_final_seconds` set (8 s by default), speech that runs that long
without a pause gets an interim final pass (its words final up to a boundary, the buffer
kept). Positions are stream samples at 16 kHz.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..audio import SAMPLE_RATE
from .config import LiveConfig
from .words import TimedWord
from .vad import VoiceDetector


@dataclass(frozen=True)
class FinalDue:
    """A final pass that is due: decode the buffer up to `until` (a stream sample)."""

    until: int
    speech_end: Optional[int]  # a pause: where the speech ended (stream sample)
    cut: bool  # the buffer is full: cut it after the pass
    interim: bool = False  # long speech with no pause: final up to a boundary, the buffer kept


class Utterances:
    def __init__(self, vad: VoiceDetector, config: LiveConfig):
        self.vad = vad
        self.config = config
        self.judged_to = 0  # stream sample up to which final passes have judged the speech
        self.next_interim = 0  # no interim final pass is due before this stream sample

    def judged(self, until: int) -> None:
        """A final pass (or audio dropped unheard) settled the speech up to `until`."""
        self.judged_to = max(self.judged_to, until)

    def unjudged_speech(self, until: Optional[int] = None) -> bool:
        """Enough voice after what the final passes judged to be worth decoding."""
        return self.vad.voiced_seconds(self.judged_to, until) >= self.config.min_speech_seconds

    def next_end(self, buffer_start: int, buffer_end: int) -> Optional[FinalDue]:
        """The first end of an utterance not judged yet, in stream order: a pause the voice
        detector has heard whole, the buffer's `cut_after_seconds` mark, or, in speech that
        has not paused, the mark of its next interim pass (_interim_mark)."""
        pause = int(self.config.pause_seconds * SAMPLE_RATE)
        speech_end = self.vad.utterance_end(self.judged_to, pause)
        cut = buffer_start + int(self.config.cut_after_seconds * SAMPLE_RATE)
        if speech_end is not None and speech_end + pause <= min(cut, buffer_end):
            return FinalDue(speech_end + pause, speech_end, False)
        if buffer_end >= cut:
            return FinalDue(cut, None, True)
        interim = self._interim_mark()
        if interim is not None and interim <= buffer_end and interim < cut:
            return FinalDue(interim, None, False, interim=True)
        return None

    def _interim_mark(self) -> Optional[int]:
        """Where long speech with no pause gets its interim final pass (a stream sample):
        `interim_final_seconds` after the first voice the final passes have not judged, and
        no sooner than (interim_final_seconds - cut_keep_seconds) after the previous interim
        pass's end, so that each makes progress. From the voice detector's frames alone."""
        if self.config.interim_final_seconds <= 0:
            return None
        onset = self.vad.first_voice(self.judged_to)
        if onset is None:
            return None
        return max(onset + int(self.config.interim_final_seconds * SAMPLE_RATE), self.next_interim)

    def interim_done(self, until: int) -> None:
        """An interim final pass decoded up to `until`: the next one comes no sooner than
        its words can have moved on."""
        step = self.config.interim_final_seconds - self.config.cut_keep_seconds
        self.next_interim = until + int(max(1.0, step) * SAMPLE_RATE)

    def in_progress(self, buffer_start: int, buffer_end: int) -> int:
        """Where a streamed decode's audio starts: the buffer's start, or, once a final pass
        has judged an utterance in it, `lead_in_seconds` before the voice that followed.
        The words before are final: the decode gets them as its prompt and encodes the
        utterance in progress, not the whole buffer (up to 25 s, pauses included, which
        the final pass needs and a streamed decode does not), as whisper_streaming trims
        its buffer once a sentence is done."""
        if self.judged_to <= buffer_start:
            return buffer_start
        start = self.lead_in_before_voice(self.judged_to, otherwise=self.judged_to)
        return min(max(start, buffer_start), buffer_end)

    def lead_in_before_voice(self, after: int, otherwise: int) -> int:
        """`lead_in_seconds` before the first voiced frame at or after `after` (before
        `otherwise` while no voice has been heard there): where audio that is to hear that
        voice starts."""
        onset = self.vad.first_voice(after)
        return (onset if onset is not None else otherwise) - int(self.config.lead_in_seconds * SAMPLE_RATE)

    def cut_sample(self, cut_at: float) -> int:
        """A cut point (stream seconds) moved into the pause that follows it, if one comes
        soon."""
        sample = int(round(cut_at * SAMPLE_RATE))
        pause = self.vad.pause_after(sample, within=int(0.5 * SAMPLE_RATE))
        return pause if pause is not None else sample


def trimmed_start(start: int, end: int, committed: Sequence[TimedWord], longest: int, keep: int) -> int:
    """Where a streamed decode of stream samples start..end starts once that outgrew
    `longest` samples (an utterance with no pause in it, up to the buffer's 25 s cut):
    at the end of a committed word, so that the committed words before are the decode's
    prompt, as whisper_streaming trims its buffer at a committed segment. The latest
    sentence end that brings the audio within `longest` and leaves at least `keep` after
    it; without one, the latest clause end (a comma, a colon); without one, the latest
    committed word's end that leaves `keep`. `start` while the
    audio is short enough, or no committed word allows a later start.

    Only the streamed pass's audio: the final pass still hears the whole buffer. Why: the
    encoder's cost grows with the audio, and a decode of 25 s took longer than the 0.5 s
    of audio that made the next one due (tiny.en on 2 cores), so the streamed words fell
    seconds behind the speech in the second half of every long utterance."""
    if end - start <= longest:
        return start
    ends = [int(round(w.end * SAMPLE_RATE)) for w in committed]
    usable = [(e, w) for e, w in zip(ends, committed) if start < e <= end - keep]
    for boundary in (_ends_sentence, _ends_clause):
        within = [e for e, w in usable if boundary(w) and end - e <= longest]
        if within:
            return within[-1]
    return usable[-1][0] if usable else start


def _ends_sentence(word: TimedWord) -> bool:
    return word.ends_sentence


def _ends_clause(word: TimedWord) -> bool:
    return word.text.rstrip("\"')]").endswith((",", ";", ":"))
