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
where a long buffer is cut, what it makes final) and its pure pieces: which decodes one
pass makes (final_words), which of their words are new (new_final_words), and where a
long buffer is cut (cut_point).
"""

from __future__ import annotations

import time
from dataclasses import replace
from difflib import SequenceMatcher
from typing import Callable, Generator, List, Optional, Sequence

import numpy as np

from ..events import DecodeResult, TokenEvent
from ..hallucination import invented_tail
from .attempt import decode_attempt
from .buffer import nearest_sample, to_samples, to_seconds
from .decoders import FinalDecoder, Given, Prefix
from .loops import loop_start, looped
from .parts import PassStep, SessionParts
from .snapshots import buffer_view
from .transcript import FinalTokens
from .utterances import FinalDue
from .words import START_SLACK_S, Decision, TimedWord, normalize_word, timed_words

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
        return self.voiced(word.start - SILENCE_SLACK_S, word.end + SILENCE_SLACK_S) > 0

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


# ---------------------------------------------------------------------- pure pieces


# A final decode must write up to the voice detector's last voiced frame: where its words end
# this long before it, with this much voice after them, it is continued from there.
COVER_GAP_S = 0.8
COVER_VOICE_S = 0.3
MAX_CONTINUATIONS = 6
# a word with no voiced frame within this much of it was not heard: not written
SILENCE_SLACK_S = 0.2
NO_SPEECH_PROB, LOW_LOGPROB = 0.6, -1.0  # transcribe's no-speech test (DecodeOptions' defaults)


def final_words(decode: Callable[[int, Optional[str], Optional[Given]], Generator], buffer_start: int,
                prompt: Optional[str], final_in_buffer: Sequence[TimedWord], given: Optional[Given], *,
                voiced: Callable[[float, float], float], voice_end: Optional[float],
                next_voice: Callable[[float], Optional[float]], prompt_chars: int, lead_in_s: float = 0.3,
                reheard: Sequence[TimedWord] = ()):
    """The decodes of one final pass, over the buffer from `buffer_start` (stream samples)
    to the pass's end. decode(start, prompt, given) runs the final decoder on the audio from
    `start`: a generator of TokenEvents that returns its DecodeResult. Yields their
    TokenEvents; returns (the first decode's result, the words written after the final
    ones, whether they are not just its own: cut at a loop (until_loop), or some from a
    later decode).

    Coverage: the pass writes up to `voice_end` (stream seconds: the voice detector's last
    voiced frame in the audio it hears). A decode whose last word ends well before it (tiny.en
    ends a window early, or writes the end of text right after the given words) is
    continued as transcribe continues at its next window: from that word's end, with the
    text before as the prompt, until the speech is covered or a decode there writes
    nothing (then once more from the next voice's lead-in, with the same prompt). Never a
    decode alone without context: tiny.en, given a short stretch and no prompt, writes
    "You". `voiced(start_s, end_s)`: the voice detector's voiced seconds there; a word with
    none around it is not written (Whisper heard text in silence). Every decode is chosen
    by the audio and the final text alone, never by what the streamed pass had committed.

    `reheard`: the final words after the given ones that the decode hears afresh
    (LiveConfig.rewrite_final_seconds): its words after the given ones are returned in their
    place, and they, not the final words they replace, are the text before a continuation
    (the reheard words are, when it wrote none there)."""
    offset_s = to_seconds(buffer_start)
    given_end = final_in_buffer[-1].end if final_in_buffer else offset_s
    result = yield from decode(buffer_start, prompt, given)
    written = heard(new_final_words(result, offset_s, given.prefix.words if given else (), given_end
                                    if final_in_buffer else float("-inf"), voiced), voiced)
    words = until_loop(written, result)
    continued = len(words) < len(written)  # its tokens no longer say these words
    # where the decode says its text ends: its last word's end, or its last segment's end
    # (a timestamp token: transcribe's next window starts there) where that is later (word
    # timing often ends the last word early); a loop's end says nothing
    final_end = reheard[-1].end if reheard else given_end  # where the final words end
    covered = max([words[-1].end if words else final_end, *([] if continued else segment_end(result, offset_s))])
    for _ in range(MAX_CONTINUATIONS):
        if voice_end is None or not uncovered(covered, voice_end, voiced):
            break
        earlier = list(final_in_buffer) + ([] if words else list(reheard))  # the final words before `words`
        before = " ".join([prompt or ""] + [w.text for w in earlier + words]).strip()
        context = before[-prompt_chars:].lstrip() or None
        more: List[TimedWord] = []
        starts = [nearest_sample(covered)]
        onset = next_voice(covered)
        if onset is not None and onset - lead_in_s > covered + 0.1:
            starts.append(nearest_sample(onset - lead_in_s))
        for start in starts:
            continued = True
            decoded = yield from decode(start, context, None)
            heard_words = [w for w in heard(result_words(decoded, to_seconds(start), voiced), voiced)
                           if w.start > covered - START_SLACK_S]
            more = until_loop(heard_words, decoded)
            if more:
                break
        if not more:
            break
        words += more
        cut_at_loop = len(more) < len(heard_words)  # then its last segment's end says nothing
        covered = max([more[-1].end, *([] if cut_at_loop else segment_end(decoded, to_seconds(start)))])
    return result, words, continued


def until_loop(words: List[TimedWord], result: Optional[DecodeResult]) -> List[TimedWord]:
    """A decode's words, up to the third copy in a row of a phrase (loops.loop_start) when
    it looped (loops.looped: openai-whisper's compression test on its text): given words that
    end a phrase, tiny.en can write it again and again to its token limit ("Montreal for
    Styliner." 20 times over 10 s), and word timing spreads the copies over the speech
    that follows. The streamed pass shows a looped decode's words as far, and the words
    after are left to the next decode (a continuation, or the next pass)."""
    if result is None or not looped(result.text):
        return words
    return words[:loop_start([w.norm for w in words])]


def segment_end(result: Optional[DecodeResult], offset_s: float) -> List[float]:
    """[where the decode's last segment with words ends, stream seconds], or []."""
    ends = [offset_s + seg.end for seg in (result.segments if result is not None else ()) if seg.words
            and not no_speech(seg)]
    return ends[-1:]


def uncovered(covered: float, voice_end: float, voiced: Callable[[float, float], float]) -> bool:
    """Speech the words so far (ending at `covered`) leave out: the voice detector heard
    voice well after them."""
    return voice_end - covered > COVER_GAP_S and voiced(covered + 0.2, voice_end) >= COVER_VOICE_S


def heard(words: List[TimedWord], voiced: Callable[[float, float], float]) -> List[TimedWord]:
    """The words whose audio (or the audio right around it) the voice detector calls voice."""
    return [w for w in words if voiced(w.start - SILENCE_SLACK_S, w.end + SILENCE_SLACK_S) > 0]


def without_invented_tail(result: Optional[DecodeResult], audio_seconds: float) -> Optional[DecodeResult]:
    """The decode without the segments it invented at the end of its audio
    (hallucination.invented_tail), its tokens cut to the segments kept (None when they do
    not run alike: the next pass then spells its given words out)."""
    if result is None:
        return None
    dropped = invented_tail(result.segments, audio_seconds)
    if not dropped:
        return result
    kept = result.segments[:len(result.segments) - dropped]
    tokens = [t for seg in kept for t in seg.tokens]
    if list(result.tokens[:len(tokens)]) != tokens:
        tokens = None
    return replace(result, segments=kept, tokens=tokens, text="".join(seg.text for seg in kept))


def shifted(result: Optional[DecodeResult], seconds: float) -> Optional[DecodeResult]:
    """A decode's result with its times moved `seconds` earlier (the silence put before its
    audio taken out again)."""
    if result is None:
        return None
    segments = [replace(seg, start=seg.start - seconds, end=seg.end - seconds,
                        words=[replace(w, start=w.start - seconds, end=w.end - seconds) for w in seg.words])
                for seg in result.segments]
    return replace(result, segments=segments)


def result_words(result: Optional[DecodeResult], offset_s: float,
                 voiced: Optional[Callable[[float, float], float]] = None) -> List[TimedWord]:
    """A decode's words in stream time (its word timestamps are relative to its audio,
    which starts at `offset_s`), leaving out a segment Whisper itself calls no speech
    (transcribe's test: no_speech_prob above 0.6 and average log probability below -1),
    and, given `voiced`, one it doubts (no_speech_prob above 0.6) that has a word where
    the voice detector heard silence: "Now and forevermore." after the last word of a
    recording, over its tail, where "forevermore." fell in the silence."""
    if result is None:
        return []
    segments = [s for s in result.segments if not no_speech(s)]
    if voiced is not None:
        segments = [s for s in segments if s.no_speech_prob <= NO_SPEECH_PROB
                    or len(heard(timed_words([s], offset_s), voiced)) == len(timed_words([s], offset_s))]
    return timed_words(segments, offset_s)


def no_speech(segment) -> bool:
    return segment.no_speech_prob > NO_SPEECH_PROB and segment.avg_logprob < LOW_LOGPROB


def new_final_words(result: Optional[DecodeResult], offset_s: float, given: Sequence[str],
                    given_end: float = float("-inf"),
                    voiced: Optional[Callable[[float, float], float]] = None) -> List[TimedWord]:
    """The words of a final pass after the `given` ones (which end at `given_end`, stream
    seconds). The given words come back first, but not always word for word: word timing
    splits the text afresh, and a segment of no duration loses its words. So they are
    found by aligning the two texts: what follows the last word matched to a given one
    is new; with nothing matched, what starts after the given words' end.

    Given words left after the last one matched were written otherwise this time (tiny.en
    heard "forced" as "Forest." in one pass and as "First." in the next): the decode's words
    in their place that start inside the given words' time are those words again, not new
    speech, and are left out too, at most as many as were left."""
    words = result_words(result, offset_s, voiced)
    if not given:
        return words
    norms = [normalize_word(text) for text in given]
    matcher = SequenceMatcher(a=norms, b=[w.norm for w in words], autojunk=False)
    blocks = [block for block in matcher.get_matching_blocks() if block.size]
    if not blocks:
        return [w for w in words if w.start > given_end - START_SLACK_S]
    new = words[blocks[-1].b + blocks[-1].size:]
    rewritten = len(norms) - (blocks[-1].a + blocks[-1].size)  # given words not matched at the end
    again = 0
    while again < min(rewritten, len(new)) and new[again].start <= given_end - START_SLACK_S:
        again += 1
    return new[again:]


def cut_point(words: Sequence[TimedWord], segment_ends: Sequence[float], given_end: Optional[float],
              before: float, keep_last_sentence: bool = True) -> Optional[float]:
    """Where a long buffer is cut (stream seconds), from the final pass of its first
    seconds: at the last but one boundary (a segment end, a sentence's last word, or the
    end of the words already final) up to `before` (LiveConfig.cut_keep_seconds before
    the end of the audio the pass heard), as
    whisper_streaming cuts at its last but one segment, so that the last sentence stays in
    the buffer with the words after it (cut right before them, tiny.en misheard "a small
    dog walked" as "a small dark walk"). With one boundary, there; with none, after the
    last word that ends before that point. None: nothing to cut after.
    keep_last_sentence=False: at the last boundary (an interim pass keeps the buffer: the
    passes after it still hear what came before, so nothing is lost by going that far)."""
    boundaries = {e for e in segment_ends if e <= before}
    boundaries |= {w.end for w in words if w.ends_sentence and w.end <= before}
    if given_end is not None:  # the words already final stay before the cut
        boundaries = {b for b in boundaries if b > given_end} | ({given_end} if given_end <= before else set())
    # a sentence's last word and the segment end after it name one boundary, twice
    ordered = sorted(boundaries)
    ordered = [b for b, later in zip(ordered, ordered[1:] + [float("inf")]) if later - b > 0.5]
    if len(ordered) >= 2 and keep_last_sentence:
        return ordered[-2]
    if ordered:
        return ordered[-1]
    ends = [w.end for w in words if w.end <= before]
    return ends[-1] if ends else None
