"""The final pass: one decode that heard a whole utterance gives it its final text.

The streamed pass (streamed_pass.py) commits words within about a second, from a buffer
that ends where the speaker is still talking: the first words of an utterance are
decided from a short buffer, a word before a pause with little audio after it. At each end
of an utterance (the voice detector's pause, a cut of a long buffer, Stop), and every few
seconds in speech that does not pause (an interim pass, LiveConfig.interim_final_seconds:
final up to a boundary `cut_keep_seconds` before the audio's end, the buffer kept), the
session decodes the buffer's whole audio since its last cut once more, as openai-whisper's
transcribe decodes a window (decoders.FINAL_PASS, in the streamed pass's precision unless
LiveConfig.final_precision says otherwise): timestamp tokens, the temperature
fallback (seeded: the same audio gives the same words), the text before the buffer as the
prompt, and the last pass's tokens from the same start as a draft (speculative.py: what it
still says costs a few forwards). It hears the buffer's final words again (those said in
its audio's last LiveConfig.rewrite_final_seconds, by default all; older ones are given as
the transcript's start) and its words replace them where it is surer of them than the pass
that wrote them (Transcript.revise, revision.surer_words): a word an earlier pass heard
with little audio after it, or heard wrong, is written again by a pass that heard more,
instead of being given to every later pass ("DOW 1 ... DOW 2 ... DOW 3" where offline
writes "Dial"), and two passes that disagree do not flip it back and forth. Words before a
cut are final for good. Production recognizers give interim and final results the same way.

Nothing said is lost, nothing invented: a pass writes up to the voice detector's last
voiced frame (a decode that ends early is continued from its end, with the text before as
the prompt, as transcribe continues at its next window); no decode is made alone without
context; words the detector heard as silence, a segment Whisper calls no speech, or one
it invented to close the audio (hallucination.invented_tail) are not written; every
decode's audio opens with the same lead-in before its first voice (silence put in where
the microphone gave less). The streamed words after what the final
words cover stay (Transcript.revise), and a streamed word left out with no final word
over its time is kept unless it was said in silence (none is lost: LiveStats.lost_words).

This module is the pass (FinalPass: when it is due, which decodes it makes of one buffer,
where a long buffer is cut, what it makes final); which words its decodes write, and where
a long buffer is cut, are pure functions in final_words.py.
"""

from __future__ import annotations

import time
from typing import Generator, List, Optional

import numpy as np

from ..events import DecodeResult, TokenEvent
from .attempt import decode_attempt
from .buffer import nearest_sample, to_samples, to_seconds
from .decoders import FinalDecoder, Given, Prefix
from .final_words import cut_point, final_words, heard, shifted, without_invented_tail
from .parts import PassStep, SessionParts
from .snapshots import buffer_view
from .transcript import FinalTokens
from .utterances import FinalDue
from .words import Decision, TimedWord

Steps = Generator[TokenEvent, None, PassStep]


class FinalPass:
    def __init__(self, parts: SessionParts, decoder: FinalDecoder):
        self.parts = parts
        self.decoder = decoder
        self.running = False  # one of its decodes is under way
        # (stream sample, tokens) of the last decode from a buffer's start: the draft of the
        # next one from there (the decoder finds the settled words in it: decoders.split_after)
        self._last_tokens: Optional[tuple] = None

    def due(self) -> Optional[FinalDue]:
        """The first end of an utterance it has not judged yet (Utterances.next_end)."""
        return self.parts.utterances.next_end(self.parts.buffer.offset, self.parts.buffer.end)

    def worth_running(self, until: Optional[int] = None) -> bool:
        """Speech it has not judged, or streamed words it has not made final."""
        parts = self.parts
        return parts.utterances.unjudged_speech(until) or parts.transcript.final_count < len(parts.transcript.words)

    def run(self, due: FinalDue, newest_arrival: Optional[float], last: bool = False) -> Steps:
        """Decode the buffer up to `due.until`; its words after the final ones replace the
        streamed words there (all of them at a pause or the end; before a boundary at a cut,
        where the buffer is cut, or at an interim pass). Its TokenEvents; returns what it did."""
        parts = self.parts
        offset_s = parts.buffer.start_s
        final_in_buffer = parts.transcript.final_after(offset_s)
        given_end = final_in_buffer[-1].end if final_in_buffer else None
        # the final words said in the last rewrite_final_seconds the pass hears again and
        # may write otherwise; those before are settled: given as its transcript's start
        settled = [w for w in final_in_buffer
                   if w.end <= to_seconds(due.until) - parts.config.rewrite_final_seconds]
        reheard = final_in_buffer[len(settled):]
        reopen_from = parts.transcript.final_count - len(reheard) if reheard else None
        decoded = self.worth_running(due.until)
        result, words, continued = None, [], False
        if decoded:
            result, words, continued = yield from self._final_words(due, settled, reheard, newest_arrival)
        boundary = None  # a stream sample: the pass's words are final up to there
        if due.cut or due.interim:  # a boundary before the audio's last seconds
            boundary = self._boundary_sample(result, words, given_end, due.until, due.cut)
            words = [w for w in words if w.midpoint < to_seconds(boundary)]
        # what the final decodes wrote over: the streamed words after it stay (not revised away)
        covered_to = words[-1].end if words else (given_end if given_end is not None else offset_s)
        revision = self._make_final(words, boundary, None if continued else result, covered_to, reopen_from)
        if due.cut:  # streamed words before the cut no final word covered: their audio goes
            parts.transcript.finalize_before(to_seconds(boundary), keep=self._heard)
        if last:  # nothing will hear them again: final as they are, unless the detector heard no voice
            parts.transcript.finalize_before(float("inf"), keep=self._heard)
        view = buffer_view(parts.buffer.slice(parts.buffer.offset, due.until), offset_s, None, Decision((), ()), (),
                           parts.transcript.committed_end, at_pause=True)
        if due.speech_end is not None:
            now = parts.clock()
            parts.meter.final_delay_s.append(now - parts.inbox.arrival_of(to_seconds(due.until), now))
        parts.utterances.judged(due.until if boundary is None else boundary)
        if due.interim:
            parts.utterances.interim_done(due.until)
        if due.cut:
            parts.buffer.cut_to(boundary)
        if last:
            parts.buffer.cut_to(parts.buffer.end)
        reason = ("the end" if last else "a pause: the utterance heard whole" if due.speech_end is not None
                  else "long speech with no pause" if due.interim else "a long buffer, cut")
        return PassStep(decoded=decoded, reason=f"final pass at {reason}", result=result, view=view,
                        revision=revision, final=last)

    def settle_dropped(self) -> None:
        """Audio was dropped unjudged (a decoder slower than the stream): the streamed words
        said before the buffer become final as they are, and its speech counts as judged."""
        self.parts.transcript.finalize_before(self.parts.buffer.start_s)
        self.parts.utterances.judged(self.parts.buffer.offset)

    def _final_words(self, due: FinalDue, settled: List[TimedWord], reheard: List[TimedWord],
                     newest_arrival: Optional[float]):
        """The pass's decodes of the buffer up to `due.until` (final_words), given its
        `settled` final words, hearing the `reheard` ones afresh: its TokenEvents; returns
        (the first decode's result, the words it writes after the settled ones, whether
        some came from a later decode)."""
        parts = self.parts
        offset = parts.buffer.offset

        def decode(start: int, prompt: Optional[str], given_words: Optional[Given]):
            return self._decode(start, due.until, prompt, given_words, newest_arrival)

        vad = parts.utterances.vad
        cover = due.until
        if due.cut or due.interim:  # what stays unfinal after the boundary need not be written now
            cover = due.until - to_samples(parts.config.cut_keep_seconds)
        end = vad.voice_end_within(offset, min(cover, due.until))

        def next_voice(after_s: float) -> Optional[float]:
            onset = vad.next_onset(nearest_sample(after_s))
            return to_seconds(onset) if onset is not None and onset < due.until else None

        return (yield from final_words(
            decode, offset, parts.context.text_before(to_seconds(offset)), settled,
            self._given(settled, with_tokens=not reheard), voiced=self.voiced,
            voice_end=None if end is None else to_seconds(end), next_voice=next_voice,
            prompt_chars=parts.config.prompt_chars, lead_in_s=parts.config.lead_in_seconds, reheard=reheard))

    def voiced(self, start_s: float, end_s: float) -> float:
        """The voice detector's voiced seconds between two stream times."""
        return self.parts.utterances.vad.voiced_seconds(max(0, nearest_sample(start_s)), nearest_sample(end_s))

    def _decode(self, start: int, until: int, prompt: Optional[str], given: Optional[Given],
                newest_arrival: Optional[float]):
        """One call to the decoder over stream samples start..until: its TokenEvents;
        returns its DecodeResult (times relative to `start`). The audio opens with
        `lead_in_seconds` of silence before its first voice whatever the microphone gave
        there (silence is put in where there was less: a recording that starts on its first
        word is heard as one that starts 0.3 s before it, so the text does not depend on how
        it starts)."""
        parts = self.parts
        pad = self.lead_pad(start)
        audio = parts.buffer.slice(start, until)
        draft = None  # what the last decode from this start wrote (the decoder splits off the given words)
        if self._last_tokens is not None and self._last_tokens[0] == start and (given is None or given.tokens is None):
            draft = self._last_tokens[1]
        if pad:
            audio = np.concatenate([np.zeros(pad, np.float32), audio])
            if given is not None:
                given = Given(Prefix(given.prefix.words, given.prefix.start + to_seconds(pad)), given.tokens)
        started, cpu_started = parts.clock(), time.process_time()
        self.running = True
        try:
            attempt = yield from decode_attempt(self.decoder(audio, prompt, given, draft),
                                                newest_arrival, parts.clock, to_seconds(start - pad))
        finally:
            self.running = False
        if start == parts.buffer.offset and attempt.result is not None and attempt.result.tokens:
            self._last_tokens = (start, tuple(attempt.result.tokens))
        parts.meter.final_decoded(parts.clock() - started, time.process_time() - cpu_started, attempt.result)
        result = without_invented_tail(attempt.result, to_seconds(audio.size))
        return shifted(result, to_seconds(pad)) if pad else result

    def lead_pad(self, start: int) -> int:
        """Samples of silence to put before audio from stream sample `start`, so that
        `lead_in_seconds` come before its first voice (0 when the audio has that much)."""
        config = self.parts.config
        if not config.pad_lead_in:
            return 0
        onset = self.parts.utterances.vad.first_voice(start)
        if onset is None:
            return 0
        return max(0, to_samples(config.lead_in_seconds) - max(0, onset - start))

    def _given(self, words: List[TimedWord], with_tokens: bool = True) -> Optional[Given]:
        """The final words of the buffer as the pass is given them: with the tokens the last
        final pass wrote for exactly these words, when it did and they are all the buffer's
        final words (`with_tokens`; otherwise the decoder finds them in its draft)."""
        if not words:
            return None
        offset = self.parts.buffer.offset
        prefix = Prefix(tuple(w.text for w in words), max(0.0, words[0].start - to_seconds(offset)))
        return Given(prefix, self.parts.transcript.given_tokens(offset) if with_tokens else None)

    def _boundary_sample(self, result: Optional[DecodeResult], words: List[TimedWord], given_end: Optional[float],
                         until: int, cut: bool) -> int:
        """Where the words of a pass over the buffer up to `until` are final up to (a
        stream sample; at a cut, where the buffer is cut): a boundary (cut_point)
        `cut_keep_seconds` or more before `until`, moved into a pause that follows soon."""
        parts = self.parts
        offset_s = parts.buffer.start_s
        segment_ends = [offset_s + s.end for s in result.segments] if result is not None else []
        before = to_seconds(until) - parts.config.cut_keep_seconds
        cut_s = cut_point(words, segment_ends, given_end, before, keep_last_sentence=cut)
        if cut_s is None:  # no word there: cut the audio as it is
            cut_s = before
        return parts.utterances.cut_sample(cut_s)

    def _heard(self, word: TimedWord) -> bool:
        return bool(heard([word], self.voiced))

    def _make_final(self, words: List[TimedWord], boundary: Optional[int], result: Optional[DecodeResult],
                    covered_to: Optional[float] = None, reopen_from: Optional[int] = None):
        """Replace the streamed words the pass judged (those up to `covered_to`, and before
        `boundary` if given) by its `words`, and the final words from index `reopen_from`
        with them (a pass that heard the buffer afresh); the revision made."""
        parts = self.parts
        now = parts.clock()
        tokens = None
        if boundary is None and result is not None and result.tokens is not None:  # what the next pass is given
            tokens = FinalTokens(parts.buffer.offset, tuple(result.tokens))
        cut_s = None if boundary is None else to_seconds(boundary)
        revision, shown_new = parts.transcript.revise(words, cut_s, now, tokens, covered_to=covered_to,
                                                      rescue=self._heard, reopen_from=reopen_from)
        parts.commit_latencies(shown_new, now)
        parts.meter.streamed_judged += len(revision.streamed)
        parts.meter.revised += revision.revised
        parts.meter.rewritten += revision.rewritten
        return revision
