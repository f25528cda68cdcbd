"""Where utterances end and where the one in progress starts (live/utterances.py), from a
scripted voice detector's frames: 32 ms frames, speech where the audio is loud."""

import numpy as np
from live_script import SR, loud, loud_voice, quiet

from whisper_demo.live import LiveConfig
from whisper_demo.live.words import TimedWord
from whisper_demo.live.utterances import FinalDue, Utterances, trimmed_start

FRAME_S = 0.032


def heard(*parts, config=None):
    vad = loud_voice()
    vad.add(np.concatenate(parts))
    return Utterances(vad, config or LiveConfig())


def test_a_pause_heard_whole_ends_the_utterance_and_a_full_buffer_is_cut():
    utterances = heard(loud(2.0), quiet(0.4))
    assert utterances.next_end(0, int(2.4 * SR)) is None  # 0.4 s of silence: not a pause yet
    utterances = heard(loud(2.0), quiet(0.6))
    speech_end = int(round(63 * FRAME_S * SR))  # the last loud frame is the 63rd (2.016 s)
    assert utterances.next_end(0, int(2.6 * SR)) == FinalDue(speech_end + SR // 2, speech_end, False)
    utterances = heard(loud(26.0))
    assert utterances.next_end(0, 26 * SR) == FinalDue(25 * SR, None, True)


def test_long_speech_with_no_pause_gets_an_interim_final_pass_that_moves_on():
    # voice from the first frame, never pausing: an interim pass at 8 s after the voice
    interim = LiveConfig(interim_final_seconds=8.0)
    utterances = heard(quiet(1.0), loud(20.0), config=interim)
    onset = int(round(31 * FRAME_S * SR))  # the first loud frame starts at 0.992 s
    assert utterances.next_end(0, onset + 8 * SR - 1) is None
    assert utterances.next_end(0, 12 * SR) == FinalDue(onset + 8 * SR, None, False, interim=True)
    # the pass made its words final up to ~6 s: the next one 8 s after the voice there, and
    # no sooner than 5 s (8 - cut_keep_seconds) after the last one's end
    judged = 188 * 512  # a frame's start (6.016 s)
    utterances.judged(judged)
    utterances.interim_done(onset + 8 * SR)
    assert utterances.next_end(0, judged + 8 * SR - 1) is None
    assert utterances.next_end(0, 15 * SR) == FinalDue(judged + 8 * SR, None, False, interim=True)
    # a pass that could make nothing final still moves the next one on: 5 s after its end
    utterances.interim_done(judged + 8 * SR)
    assert utterances.next_end(0, judged + 13 * SR - 1) is None
    assert utterances.next_end(0, 20 * SR) == FinalDue(judged + 13 * SR, None, False, interim=True)
    # a pause heard whole comes first; interim_final_seconds=0: no interim passes
    paused = heard(loud(8.5), quiet(0.6), config=interim)
    assert paused.next_end(0, int(9.1 * SR)).speech_end is not None
    never = heard(loud(20.0), config=LiveConfig(interim_final_seconds=0.0))
    assert never.next_end(0, 20 * SR) is None


def test_the_streamed_decodes_start_just_before_the_voice_after_the_judged_speech():
    utterances = heard(loud(2.0), quiet(1.0), loud(1.0))
    assert utterances.in_progress(0, 4 * SR) == 0  # nothing judged: the whole buffer
    utterances.judged(int(2.6 * SR))
    # the next voice starts in the frame from 2.976 s; 0.3 s of lead-in before it
    assert utterances.in_progress(0, 4 * SR) == int(round(93 * FRAME_S * SR)) - int(0.3 * SR)
    assert utterances.in_progress(int(2.9 * SR), 4 * SR) == int(2.9 * SR)  # never before the buffer
    silent = heard(loud(2.0), quiet(1.0))
    silent.judged(int(2.6 * SR))
    assert silent.in_progress(0, 3 * SR) == int(2.3 * SR)  # no voice since: from the judged end


def words(*spec):
    """'text@start-end' each, in stream seconds."""
    out = []
    for item in spec:
        text, times = item.split("@")
        start, end = times.split("-")
        out.append(TimedWord(text, float(start), float(end)))
    return out


SAID = words("One@0.1-0.5", "two.@0.5-1.0", "Three@1.2-2.0", "four@2.0-3.0", "five.@3.0-4.0", "Six@4.5-5.5",
             "seven@5.5-6.5", "eight.@6.5-7.5", "nine@7.6-8.0")


def trim(end_s, committed=SAID, start_s=0.0, longest=6.0, keep=2.0):
    return trimmed_start(int(start_s * SR), int(end_s * SR), committed, int(longest * SR), int(keep * SR)) / SR


def test_a_long_streamed_window_starts_after_a_committed_sentence():
    assert trim(5.9) == 0.0  # within 6 s: the whole utterance in progress
    # 9 s: "eight." ends at 7.5 s but leaves less than 2 s after it; "five." at 4.0
    # leaves 5.0 s (within 6 s); at 10 s, "eight." leaves 2.5 s
    assert trim(9.0) == 4.0 and trim(10.0) == 7.5
    # 14 s: no sentence end in the last 6 s: the latest committed word that leaves 2 s,
    assert trim(14.0, SAID + words("ten@8.0-9.0", "eleven@9.0-9.5")) == 9.5
    # ... a clause's end before any word's
    assert trim(14.0, SAID + words("ten,@8.0-9.0", "eleven@9.0-9.5")) == 9.0
    # never before the start it had, never into the audio nothing committed yet
    assert trim(10.0, start_s=4.0) == 4.0
    assert trim(10.0, committed=words("One@0.1-0.4")) == 0.4
    assert trim(10.0, committed=[]) == 0.0
