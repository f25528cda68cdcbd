"""openai-whisper transcribe()'s `hallucination_silence_threshold`, over one window's segments.

Whisper tends to invent text in long silences ("Thank you.", a phrase repeated). With word
timestamps, transcribe scores each segment's first words (improbable, very short or very
long words look invented); a segment that looks invented and has silence longer than the
threshold on both sides is dropped, and the next window starts after the silence before it.

Pure functions over decode's Segments and timing's Words: no model, no audio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from .events import Segment
from .windowing import FRAMES_PER_SECOND  # seeks are counted in log-mel frames

PUNCTUATION = "\"'“¿([{-\"'.。,，!！?？:：”)]}、"


def word_anomaly_score(word) -> float:
    """How invented a word looks: improbable, shorter than 0.133 s or longer than 2 s."""
    probability = 0.0 if word.probability != word.probability else word.probability  # nan: unknown
    duration = word.end - word.start
    score = 0.0
    if probability < 0.15:
        score += 1.0
    if duration < 0.133:
        score += (0.133 - duration) * 15
    if duration > 2.0:
        score += duration - 2.0
    return score


def is_segment_anomaly(segment: Optional[Segment]) -> bool:
    if segment is None or not segment.words:
        return False
    words = [w for w in segment.words if w.text not in PUNCTUATION][:8]
    score = sum(word_anomaly_score(w) for w in words)
    return score >= 3 or score + 0.01 >= len(words)


def next_words_segment(segments: List[Segment]) -> Optional[Segment]:
    return next((s for s in segments if s.words), None)


def last_word_end(segments: List[Segment]) -> Optional[float]:
    """openai-whisper's get_end: the end of the last word, else of the last segment."""
    return next((w.end for s in reversed(segments) for w in reversed(s.words)),
                segments[-1].end if segments else None)


@dataclass
class WindowCut:
    """What the rule decided for a window: where the next window starts, and whether this
    window's segments are dropped whole (the window is decoded again from `seek`)."""

    seek: int
    discard_window: bool = False


def skip_silence_around_hallucinations(segments: List[Segment], threshold: float, *,
                                       seek: int, previous_seek: int, segment_size: int,
                                       single_timestamp_ending: bool, time_offset: float,
                                       window_end_time: float, last_speech_end: float,
                                       content_duration: float, content_frames: int) -> WindowCut:
    """transcribe()'s rule, in its order. `segments` may be cut short in place (the
    segments from an invented one on are dropped). `seek` is where the next window would
    start without the rule."""
    if not single_timestamp_ending:
        end = last_word_end(segments)
        if end is not None and end > time_offset:
            remaining = window_end_time - end
            seek = round(end * FRAMES_PER_SECOND) if remaining > threshold else previous_seek + segment_size

    # if the first segment might be invented, skip the silence before it and decode again
    first = next_words_segment(segments)
    if first is not None and is_segment_anomaly(first):
        gap = first.start - time_offset
        if gap > threshold:
            return WindowCut(seek=previous_seek + round(gap * FRAMES_PER_SECOND), discard_window=True)

    # drop an invented segment with silence (or more invented segments) on both sides
    previous_end = last_speech_end
    for i, segment in enumerate(segments):
        if not segment.words:
            continue
        if is_segment_anomaly(segment):
            following = next_words_segment(segments[i + 1 :])
            next_start = following.words[0].start if following is not None else time_offset + (
                segment_size / FRAMES_PER_SECOND)
            silence_before = (segment.start - previous_end > threshold or segment.start < threshold
                              or segment.start - time_offset < 2.0)
            silence_after = (next_start - segment.end > threshold or is_segment_anomaly(following)
                             or window_end_time - segment.end < 2.0)
            if silence_before and silence_after:
                seek = round(max(time_offset + 1, segment.start) * FRAMES_PER_SECOND)
                if content_duration - segment.end < threshold:
                    seek = content_frames
                del segments[i:]
                break
        previous_end = segment.end
    return WindowCut(seek=seek)


# A live final decode ends where its audio ends, right after the speech: offline, the
# window would go on into what follows. With nothing after, tiny.en often closes the
# audio with a segment it invents ("Thank you.", "Press 2 to record your" after "Press
# star to return to the main menu."), its words squeezed into the last frames (no
# duration) and improbable. openai-whisper's rule above keeps such a segment because it
# follows the speech with no silence before it; at the end of the audio, nothing after it
# can vouch for it either.
TAIL_SECONDS = 2.0  # transcribe's own reach for "silence after": the window ends this soon
# An invented phrase has no audio of its own: word timing squeezes it into the frames after
# the speech. A segment spread over this much audio was heard, rightly or not ("Montreal,
# uh, uh, uh," over 6 s of hesitation scores as invented: its "uh"s last no time).
SQUEEZED_SECONDS = 1.0


def invented_tail(segments: List[Segment], audio_end: float) -> int:
    """How many segments at the end of a decode look invented (is_segment_anomaly), last
    less than SQUEEZED_SECONDS and end within TAIL_SECONDS of the end of its audio
    (`audio_end`, the segments' time): the decode's last ones, counted back to the first
    that does not. Only words whose probability is known are judged: a segment with a
    word of unknown probability (words the decode was given, not decoded) stays."""
    count = 0
    for segment in reversed(segments):
        if not segment.words:
            count += 1
            continue
        spread = segment.words[-1].end - segment.words[0].start
        if (audio_end - segment.end >= TAIL_SECONDS or spread >= SQUEEZED_SECONDS
                or any(w.probability != w.probability for w in segment.words) or not is_segment_anomaly(segment)):
            break
        count += 1
    # segments without words after the last kept one only count when one with words went
    while count and not segments[len(segments) - count].words:
        count -= 1
    return count
