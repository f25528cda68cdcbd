"""Which words one final pass writes, as pure functions over decodes and words (no
session, no buffer, no threads): the decodes a pass makes of one buffer and where it
continues one that ends early (final_words), which of a decode's words are new after the
words it was given (new_final_words), which it leaves out (no speech, silence, a loop, an
invented tail), and where a long buffer is cut (cut_point). The pass that calls them, and
when, is final_pass.py.
"""

from __future__ import annotations

from dataclasses import replace
from difflib import SequenceMatcher
from typing import Callable, Generator, List, Optional, Sequence

from ..events import DecodeResult
from ..hallucination import invented_tail
from .buffer import nearest_sample, to_seconds
from .decoders import Given
from .loops import loop_start, looped
from .words import START_SLACK_S, TimedWord, normalize_word, timed_words


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
    covered = written_to(words[-1].end if words else final_end, [] if continued else segment_end(result, offset_s),
                         voiced)
    for _ in range(MAX_CONTINUATIONS):
        if voice_end is None or not uncovered(covered, voice_end, voiced):
            break
        earlier = list(final_in_buffer) + ([] if words else list(reheard))  # the final words before `words`
        before = " ".join([prompt or ""] + [w.text for w in earlier + words]).strip()
        context = before[-prompt_chars:].lstrip() or None
        more: List[TimedWord] = []
        ran_on = False  # the continuation only heard this pass's last words again
        starts = [nearest_sample(covered)]
        onset = next_voice(covered)
        if onset is not None and onset - lead_in_s > covered + 0.1:
            starts.append(nearest_sample(onset - lead_in_s))
        for start in starts:
            continued = True
            decoded = yield from decode(start, context, None)
            heard_words = [w for w in heard(result_words(decoded, to_seconds(start), voiced), voiced)
                           if w.start > covered - START_SLACK_S]
            believed = until_loop(heard_words, decoded)
            cut_at_loop = len(believed) < len(heard_words)  # then its last segment's end says nothing
            more = without_seam_repeat(earlier + words, believed, covered)
            if more:
                break
            if believed and len(believed) <= len(words) and believed[-1].end > words[-1].end:
                # word timing ended the last word early ("Stalina?" 3.10-3.35 s of a word said to
                # 4.6 s) and the continuation wrote it again over the rest of its audio: one
                # word, which ends where the copy ends, so the audio counts as written
                words[-1] = replace(words[-1], end=believed[-1].end)
                ran_on = True
                break
        if not more and not ran_on:
            break
        words += more
        covered = written_to(words[-1].end, [] if cut_at_loop else segment_end(decoded, to_seconds(start)), voiced)
    return result, words, continued


# A continuation that opens within this long of where the words before it end, with the
# last 1-5 of those words again, heard them again (whisper_streaming's HypothesisBuffer
# drops such n-grams where a new hypothesis meets the committed text, by the same bounds).
SEAM_NEAR_S, SEAM_MAX_WORDS = 1.0, 5


def without_seam_repeat(before: Sequence[TimedWord], new: List[TimedWord], seam_s: float) -> List[TimedWord]:
    """A continuation's words without those at its start that repeat the last words before
    it: it starts at the end of the words so far, often inside the last one's audio (a word
    whose timing ran on across a pause ends at the pause: ending_at_its_pause), and writes
    that word again ("Of course. Of course." over laughter)."""
    if not before or not new or new[0].start - seam_s > SEAM_NEAR_S:
        return new
    for n in range(1, min(SEAM_MAX_WORDS, len(before), len(new)) + 1):
        if [w.norm for w in before[-n:]] == [w.norm for w in new[:n]]:
            return new[n:]
    return new


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


def written_to(last_word_end: float, segment_ends: List[float], voiced: Callable[[float, float], float]) -> float:
    """How far a decode wrote (stream seconds): its last word's end, or its last segment's
    end where that is later across audio with little voice (word timing often ends the
    last word early; a segment that ends seconds of speech after its last word skipped
    that speech: transcribe's next window would start there and lose it)."""
    return max([last_word_end, *(e for e in segment_ends if voiced(last_word_end, e) < COVER_VOICE_S)])


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
    if voiced is None:
        return timed_words(segments, offset_s)
    segments = [s for s in segments if s.no_speech_prob <= NO_SPEECH_PROB
                or len(heard(timed_words([s], offset_s), voiced)) == len(timed_words([s], offset_s))]
    return [ending_at_its_pause(w, voiced) for w in timed_words(segments, offset_s)]


# A word's timing that runs on across a pause this long into more voice took in speech the
# decode did not write (it skipped it: tiny.en wrote "... the pound key." and its last word
# ran 16 s over "Asterisk is an open source ... platform"): the word ends where the pause
# starts. Otherwise that speech looks written (covered) and its streamed words go.
SWALLOWED_PAUSE_S = 0.3
VOICE_STEP_S = 0.032  # one voice detector frame


def ending_at_its_pause(word: TimedWord, voiced: Callable[[float, float], float]) -> TimedWord:
    """The word, ending where a pause in its voice starts when more voice follows that
    pause within the word's time (it took in speech it did not write)."""
    if word.end - word.start <= 2 * SWALLOWED_PAUSE_S:
        return word
    at = word.start + VOICE_STEP_S
    while at + SWALLOWED_PAUSE_S < word.end:
        if (voiced(at, at + SWALLOWED_PAUSE_S) == 0 and voiced(word.start, at) > 0
                and voiced(at + SWALLOWED_PAUSE_S, word.end) > 0):
            return replace(word, end=at)
        at += VOICE_STEP_S
    return word


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
    passes after it still hear what came before, so nothing is lost by going that far),
    and, where no boundary lies after the words already final, after the last word that
    ends in time: an interim pass in a long sentence still makes its words final (the
    passes after it hear them again, LiveConfig.rewrite_final_seconds), instead of none
    until the sentence ends (a 5 s sentence with no segment end in it kept "a" for "the"
    on the page 13 s)."""
    boundaries = {e for e in segment_ends if e <= before}
    boundaries |= {w.end for w in words if w.ends_sentence and w.end <= before}
    if given_end is not None:  # the words already final stay before the cut
        boundaries = {b for b in boundaries if b > given_end}
        if not boundaries and not keep_last_sentence:
            boundaries = {w.end for w in words if given_end < w.end <= before}
            boundaries = {max(boundaries)} if boundaries else set()
        if given_end <= before:
            boundaries.add(given_end)
    # a sentence's last word and the segment end after it name one boundary, twice
    ordered = sorted(boundaries)
    ordered = [b for b, later in zip(ordered, ordered[1:] + [float("inf")]) if later - b > 0.5]
    if len(ordered) >= 2 and keep_last_sentence:
        return ordered[-2]
    if ordered:
        return ordered[-1]
    ends = [w.end for w in words if w.end <= before]
    return ends[-1] if ends else None
