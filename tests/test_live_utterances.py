"""Where utterances end and where the one in progress starts (live/utterances.py), from a
scripted voice detector's frames: 32 ms frames, speech where the audio is loud."""

import numpy as np
from live_script import SR, loud, loud_voice, quiet

from whisper_demo.live import LiveConfig
from whisper_demo.live.utterances import FinalDue, Utterances

FRAME_S = 0.032


def heard(*parts):
    vad = loud_voice()
    vad.add(np.concatenate(parts))
    return Utterances(vad, LiveConfig())


def test_a_pause_heard_whole_ends_the_utterance_and_a_full_buffer_is_cut():
    utterances = heard(loud(2.0), quiet(0.4))
    assert utterances.next_end(0, int(2.4 * SR)) is None  # 0.4 s of silence: not a pause yet
    utterances = heard(loud(2.0), quiet(0.6))
    speech_end = int(round(63 * FRAME_S * SR))  # the last loud frame is the 63rd (2.016 s)
    assert utterances.next_end(0, int(2.6 * SR)) == FinalDue(speech_end + SR // 2, speech_end, False)
    utterances = heard(loud(26.0))
    assert utterances.next_end(0, 26 * SR) == FinalDue(25 * SR, None, True)


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
