"""AlignAtt, the live policy that commits a word once the model's attention has passed it,
as tables: one decode's words with their tokens' attention peaks in, commits out.

A hypothesis is written "word@start-end:peak,peak%probability ...", times in stream
seconds; a word with no ":" has no attention, one with no "%" the probability 1. Each
row of a table is one decode: (hypothesis, buffer end, speech_end or None, what it
commits). No model, no audio, no clock.
"""

import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest

from whisper_demo import decode as decode_module
from whisper_demo.audio import load_audio
from whisper_demo.events import DecodeOptions
from whisper_demo.live import LiveConfig, LiveSession, LiveUpdate, model_decoder
from whisper_demo.live import decoder as decoder_module
from whisper_demo.live.alignatt import AlignAttPolicy
from whisper_demo.live.context import ContextKeeper
from whisper_demo.live.hypotheses import word_peaks
from whisper_demo.live.policy import AgreementPolicy, Hypothesis, TimedWord, shown_texts
from whisper_demo.text import words


def hyp(spec: str, end: float, start: float = 0.0, after_committed: bool = True) -> Hypothesis:
    words, peaks = [], []
    for item in spec.split():
        item, _, probability = item.partition("%")
        item, _, read = item.partition(":")
        text, times = item.rsplit("@", 1)
        a, b = times.split("-")
        words.append(TimedWord(text, float(a), float(b), float(probability or 1)))
        peaks.append(tuple(float(p) for p in read.split(",")) if read else ())
    return Hypothesis(tuple(words), (), start, end, after_committed, tuple(peaks))


def check(table, policy=None):
    policy = policy or AlignAttPolicy(frame_seconds=0.4)
    out = []
    for spec, end, speech_end, _ in table:
        decision = policy.update(hyp(spec, end) if isinstance(spec, str) else spec, speech_end)
        out.append(" ".join(w.text for w in decision.committed))
    assert out == [expected for *_, expected in table]
    return policy


def test_a_word_read_within_the_last_frames_stops_the_commit():
    check([
        # edge at 2.6 s: "fellow" was read at 2.7 s, the audio after it not heard yet
        ("and@0-0.3:0.3 so@0.3-0.6:0.6 my@0.6-0.9:1.0 fellow@0.9-2.5:2.7", 3.0, None, "and so my"),
        # the next decode hears more: "fellow" is now well behind the edge
        ("fellow@0.9-1.3:1.3 Americans@1.3-2.0:1.9,2.1 ask@2.2-2.6:3.3", 3.5, None, "fellow Americans"),
    ])


def test_a_word_whose_last_token_reads_the_edge_waits_whole():
    # "Ameri" was read in time, "cans" at the edge: the word is not committed in half
    check([("fellow@0.9-1.3:1.3 Americans@1.3-2.0:1.9,2.7", 3.0, None, "fellow")])


def test_a_pause_commits_the_utterance_and_drops_what_was_heard_in_silence():
    check([
        # speech ended at 2.0 s; the edge shrinks to 0.1 s before the buffer's end, and
        # "Thank you." placed after the end of speech is never committed
        ("ask@0-0.4:0.4 not@0.4-1.9:2.2 Thank@2.2-2.5:2.6 you.@2.5-2.9:2.8", 3.0, 2.0, "ask not"),
    ])


def test_words_read_before_a_judged_pause_are_not_the_next_utterances():
    # jfk.wav as the browser sends it: the pause decode doubted "Yeah." read at the end of
    # "Americans"; once "ask" began, the decode wrote "That's it." read at the same
    # instant, before the end of speech that pause decode saw, and then the new words
    policy = check([
        ("fellow@1.4-1.74:1.74 Americans.@1.74-2.1:2.06 Yeah.@2.1-2.16:2.1%0.01", 2.8, 2.27, "fellow Americans."),
        ("That's@2.1-2.86:2.1,2.1%0.27 it.@2.86-2.86:2.1%0.47 ask@3.3-3.7:3.5 not@3.7-4.2:4.0", 5.5, None,
         "ask not"),
    ], AlignAttPolicy(frame_seconds=0.4, min_probability=0.1))
    # a word read after that end of speech is the next utterance's, however early its
    # timing starts (stretched back into the silence)
    assert policy.update(hyp("what@4.3-5.0:5.2 your@5.0-5.3:5.6", 6.5), None).committed[0].text == "what"
    # with no pause decode (one that ran before the pause was long enough, and the next
    # after "ask" began) nothing was judged, and the words written into the pause pass:
    # the end of speech a pause decode saw is what drops them
    unjudged = AlignAttPolicy(frame_seconds=0.4, min_probability=0.1)
    unjudged.update(hyp("fellow@1.4-1.74:1.74 Americans.@1.74-2.1:2.06", 2.8), None)
    later = unjudged.update(hyp("That's@2.1-2.86:2.1,2.1%0.27 it.@2.86-2.86:2.1%0.47 ask@3.3-3.7:3.5", 5.5), None)
    assert [w.text for w in later.committed] == ["That's", "it.", "ask"]


def test_a_word_after_a_sentence_end_is_shown_with_a_capital_and_kept_as_written():
    policy = check([("Americans.@1.7-2.1:2.0 ask@3.3-3.7:3.5 not.@3.7-4.2:4.0 so...@4.5-4.8:4.7 "
                     "what@4.9-5.2:5.1", 6.0, None, "Americans. ask not. so... what")])
    # the decoder's own text is what the next decode is given; only the page capitalises
    assert shown_texts(policy.committed) == ["Americans.", "Ask", "not.", "So...", "what"]
    assert shown_texts(policy.committed[1:2], before=policy.committed[0]) == ["Ask"]
    # what a session shows: all of it, the newest words (the update's), the tentative after
    assert policy.shown_committed() == "Americans. Ask not. So... what"
    assert policy.shown_committed(4) == "Ask not. So... what" and policy.shown_committed(0) == ""
    assert policy.shown_after([TimedWord("you", 5.3, 5.5)]) == "you"


def test_attention_jumping_back_stops_the_commit():
    # "what" peaks at 3.0 s, then "you" at 0.5 s: the decoder is reading old audio again
    check([("ask@2.0-2.4:2.4 what@2.4-3.0:3.0 you@3.0-3.3:0.5 can@3.3-3.5:3.5", 6.0, None, "ask what")])


def test_attention_jumping_back_behind_the_committed_words_stops_the_commit():
    check([
        ("We're@3.0-3.2:3.1 going@3.2-3.5:3.4", 4.0, None, "We're going"),
        # given those, the decode wrote on while reading the session's first second
        ("to@3.9-4.0:0.84 the@4.0-4.1:0.86 next@4.1-4.2:0.9", 4.5, None, ""),
    ])


def test_words_written_while_the_attention_stays_at_one_instant_are_not_committed():
    # the first word of the run may have been heard there; the ones after it were not
    check([("Montreal@0.7-1.7:1.3 We're@3.1-3.2:3.1 going@3.2-3.4:3.1 to@3.4-3.5:3.11 go@3.5-3.6:3.1 "
            "now@3.6-3.8:3.7", 5.0, None, "Montreal We're")])


def test_a_pair_read_at_one_instant_is_not_a_loop():
    # "I feel" read at one instant (the attention's jitter): real words, the reading goes on.
    # Nor at the end of a decode: tiny.en read the real "know her." at one instant, and a
    # rule that stopped a decode's closing pair so (aimed at "bottle. All right.") lost them.
    check([("And@0.7-1.26:1.18 I@1.26-1.34:1.28 feel@1.34-1.44:1.28 like@1.44-1.70:1.6", 3.0, None,
            "And I feel like")])
    check([("I@3.12-3.24:3.34 hardly@3.24-3.42:3.36 know@3.42-3.70:3.68 her.@3.70-4.14:3.68", 4.5, 4.0,
            "I hardly know her.")])


def test_a_word_aligned_into_the_last_frames_waits_though_read_before_them():
    # "Thank" was read at "buddy" (1.92 s, before the edge at 2.1 s), but the alignment
    # puts it up to 2.18 s: it has not been heard with audio after it
    check([("like@1.52-1.74:1.52 buddy.@1.74-1.92:1.86 Thank@1.92-2.18:1.92", 2.5, None, "like buddy.")])


def test_a_small_step_back_is_the_attention_jitter_not_a_jump():
    check([("ask@2.0-2.4:2.6 not@2.4-2.6:2.2 what@2.6-3.0:3.0", 6.0, None, "ask not what")])


def test_a_word_said_six_times_is_committed_six_times():
    spec = " ".join(f"word@{t:.1f}-{t + 0.4:.1f}:{t + 0.3:.1f}" for t in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0))
    check([(spec, 5.0, None, "word word word word word word")])


def test_a_repeat_split_over_decodes_is_kept_when_given_as_the_prefix():
    policy = check([
        ("word@0.5-0.9:0.8 word@1.0-1.4:1.3 word@1.5-1.9:1.8", 2.5, None, "word word word"),
        # the next decode was given the three as its start: what it wrote after them is new
        ("word@2.0-2.4:2.3 word@2.5-2.9:2.8 word@3.0-3.4:3.3", 4.5, None, "word word word"),
    ])
    assert len(policy.committed) == 6


def test_a_loop_read_at_the_same_audio_is_not_committed():
    # "the cat" written again and again with the attention stuck where the first one was
    check([("the@1.0-1.2:1.1 cat@1.2-1.6:1.5 the@1.6-1.6:1.5 cat@1.6-1.6:1.5 the@1.6-1.6:1.5", 6.0, None,
            "the cat")])


def test_a_pause_does_not_commit_what_was_read_in_the_silence():
    # the speech ended at 1.2 s; "We're going" was placed before it but read at 2.5 s
    check([("Montreal@0.5-1.0:0.9 We're@1.0-1.1:2.5 going@1.1-1.2:2.7", 3.0, 1.2, "Montreal")])


def test_a_loop_is_dropped_at_the_end_of_the_session_too():
    policy = AlignAttPolicy()
    decision = policy.finish(hyp("the@1.0-1.2:1.1 cat@1.2-1.6:1.5 the@1.6-1.6:1.5 cat@1.6-1.6:1.5", 3.0))
    assert [w.text for w in decision.committed] == ["the", "cat"]


def test_a_short_buffer_needs_more_audio_after_a_word():
    policy = AlignAttPolicy(frame_seconds=0.4, start_seconds=3.0)
    check([
        # 1.5 s of buffer: a word needs 1.5 s after it (3.0 - 1.5), not 0.4 s
        ("the@0.2-0.5:0.4 weather@0.5-0.9:0.8", 1.5, None, ""),
        # 2.5 s: 0.5 s after it (a word read at 2.2 s waits; at 0.4 s, it would not)
        ("the@0.2-0.5:0.4 weather@0.5-0.9:0.8 today@1.0-2.1:2.2", 2.5, None, "the weather"),
    ], policy)


def test_a_word_the_model_doubts_waits_for_speech_after_it():
    policy = AlignAttPolicy(frame_seconds=0.4, min_probability=0.1, doubt_seconds=1.0)
    check([
        # "All" (probability 0.01) was written after "bottle." with 0.5 s of audio after it:
        # it may be the decoder going on where the speaker stopped. It waits, and so does
        # what follows it.
        ("like@1.44-1.70:1.48 bottle.@1.70-1.88:1.82 All@1.88-2.02:1.88%0.01", 2.5, None, "like bottle."),
        # speech went on after it: 1.1 s of audio after its end, and later words were heard
        ("All@1.88-2.02:1.88%0.01 right@2.1-2.6:2.5 then@2.6-3.3:3.2", 3.5, None, "All right"),
    ], policy)


def test_a_doubted_word_at_a_pause_or_the_end_is_not_committed():
    # at a pause the decode heard the whole utterance: a doubted last word was the decoder
    # writing on after the speaker stopped ("buddy. Thank", "bottle. All")
    policy = AlignAttPolicy(frame_seconds=0.4, min_probability=0.1)
    check([("like@1.52-1.74:1.52 buddy.@1.74-1.92:1.86 Thank@1.92-1.98:1.92%0.02", 2.6, 2.0, "like buddy.")],
          policy)
    policy = AlignAttPolicy(frame_seconds=0.4, min_probability=0.1)
    decision = policy.finish(hyp("six@0.5-0.9:0.8 six.@0.9-1.1:0.9%0.0", 2.5), speech_end=1.0)
    assert [w.text for w in decision.committed] == ["six"]
    # a sure word is committed as before
    policy = AlignAttPolicy(frame_seconds=0.4, min_probability=0.1)
    decision = policy.finish(hyp("six@0.5-0.9:0.8 seven.@1.0-1.4:1.3%0.6", 2.5), speech_end=1.5)
    assert [w.text for w in decision.committed] == ["six", "seven."]


def test_without_attention_nothing_commits_before_a_pause_or_the_end():
    policy = check([
        ("ask@0-0.4 not@0.4-0.8", 3.0, None, ""),
        ("ask@0-0.4 not@0.4-0.8", 3.5, 1.0, "ask not"),
    ])
    assert policy.finish().committed == ()


def test_without_its_prefix_a_decode_commits_only_what_starts_after_the_committed_end():
    policy = check([("ask@0-0.4:0.4 not@0.4-0.8:0.8", 3.0, None, "ask not")])
    unprefixed = hyp("ask@0-0.4:0.4 not@0.4-0.8:0.8 what@1.0-1.3:1.3", 4.0, after_committed=False)
    assert [w.text for w in policy.update(unprefixed).committed] == ["what"]


def test_without_its_prefix_a_decode_that_writes_the_committed_words_again_goes_on_after_them():
    # the alignment moved the committed "forwarded" from 3.74-3.98 to 4.10-4.10: by time it
    # would be a second "forwarded"; by the words, it is the committed one written again
    policy = check([("to@3.2-3.6:3.48 the@3.6-3.74:3.5 forwarded@3.74-3.98:3.8", 4.5, None, "to the forwarded")])
    unprefixed = hyp("to@3.2-3.6:3.48 the@3.6-4.1:3.9 forwarded@4.1-4.1:3.8 message@4.1-4.8:4.4", 5.5,
                     start=3.0, after_committed=False)
    assert [w.text for w in policy.update(unprefixed).committed] == ["message"]


def test_the_end_commits_the_rest_and_the_tentative_words_without_a_decode():
    policy = check([("and@0-0.3:0.3 so@0.3-0.6:2.9", 3.0, None, "and")])
    assert [w.text for w in policy.finish().committed] == ["so"]


def test_the_next_decode_is_not_told_that_the_sentence_ended_at_the_last_committed_word():
    # "Montreal." committed as soon as it was heard: its period is Whisper's guess that the
    # speaker stopped; given back, it opened a new sentence ("Montreal. All four...")
    for policy, last in ((AlignAttPolicy(), "Montreal"), (AgreementPolicy(), "Montreal.")):
        policy.committed = [TimedWord("So", 0.5, 0.7), TimedWord("Montreal.", 0.8, 1.4)]
        prefix = ContextKeeper(policy, 200, 5).for_decode(0, 0.0).prefix
        assert prefix.words == ("So", last) and prefix.start == 0.5


def test_tokens_are_matched_to_words_by_their_characters():
    # the first step after a given prefix carries the prefix's text (here on a timestamp);
    # punctuation reads no audio of its own
    tokens = [(" to mute or", None), (" unm", 1.7), ("ute", 1.9), (".", 0.3), (" When", 2.4)]
    assert word_peaks(["to", "mute", "or", "unmute.", "When"], tokens) == [(), (), (), (1.7, 1.9), (2.4,)]
    # text the tokens do not spell gets no peaks (it waits for a pause)
    assert word_peaks(["unmute", "Then"], [(" unm", 1.7), ("ute", 1.9)]) == [(1.7, 1.9), ()]


def test_a_session_refuses_an_alignatt_policy_with_a_decoder_that_gives_no_attention():
    def decoder(audio, prompt, draft=None, prefix=None):
        return iter(())

    decoder.options = DecodeOptions(attention=False)
    with pytest.raises(ValueError, match="attention"):
        LiveSession(decoder, LiveConfig(policy="alignatt"), vad=object())
    decoder.options = DecodeOptions(attention=True)
    assert LiveSession(decoder, LiveConfig(policy="alignatt"), vad=object()).policy.reads_loops


# ------------------------------------------------------------------ the real model


def alignatt_session(model, audio, monkeypatch=None, calls=None):
    """Feed `audio` in 0.1 s chunks to an AlignAtt session of the real model (no clock:
    the same text every run); its decoded LiveUpdates, in order. With `calls`, each call
    the decoder makes to stream_transcribe is recorded there: (audio, options)."""
    if calls is not None:
        real = decoder_module.stream_transcribe

        def recording(model, audio, options):
            calls.append((audio.copy(), options))
            return real(model, audio, options)

        monkeypatch.setattr(decoder_module, "stream_transcribe", recording)
    config = LiveConfig(policy="alignatt")
    session = LiveSession(model_decoder(model, DecodeOptions(), alignatt=True), config)
    updates = []
    step = 1600
    for start in range(0, audio.size, step):
        session.add_samples(audio[start:start + step])
        updates += [u for u in session.updates() if isinstance(u, LiveUpdate) and u.decoded]
    updates += [u for u in session.finish() if isinstance(u, LiveUpdate) and u.decoded]
    return session, updates


def padded(audio):
    return np.concatenate([np.zeros(8000, np.float32), audio, np.zeros(16000, np.float32)])


def test_every_commit_is_a_prefix_of_plain_greedy_decoding_of_its_buffer(tiny_model, clip, monkeypatch):
    calls = []
    session, updates = alignatt_session(tiny_model, padded(clip("jfk.wav")), monkeypatch, calls)
    assert len(calls) == len(updates) > 5
    tokenizer = model_decoder(tiny_model).tokenizer
    checked = 0
    for (audio, options), update in zip(calls, updates):
        # the same buffer, prompt and given prefix, decoded greedily without the attention
        plain = decode_module.transcribe(tiny_model, audio, replace(options, attention=False))
        given = tokenizer.decode([t for t in options.prefix_tokens or () if t < tokenizer.eot])
        said = words(given) + words(update.new_committed)
        assert words(plain.text)[:len(said)] == said, (given, update.new_committed, plain.text)
        checked += bool(update.new_committed)
    assert checked >= 3  # commits came from several decodes, not only from the last one
    assert words(session.committed_text)[:4] == ["and", "so", "my", "fellow"]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng makes the speech")
def test_a_word_said_six_times_is_committed_six_times_by_the_real_model(tiny_model, tmp_path):
    # Six times "go": the text fails the test of a looping decode (decoder.looped), which
    # would have taken the vote from every decode of it; the attention tells the repeat
    # from a loop (each "go" is read at its own audio). Offline, tiny.en writes seven.
    path = tmp_path / "go.wav"
    subprocess.run(["espeak-ng", "-s", "110", "-w", str(path), "go, go, go, go, go, go"], check=True)
    session, _ = alignatt_session(tiny_model, padded(load_audio(path)))
    assert words(session.committed_text) == ["go"] * 6


def test_without_its_prefix_a_decode_does_not_commit_the_last_committed_word_again():
    # after a loop the decode is given no prefix; it aligns the committed "go," a little
    # later (2.86-3.02 for 2.86-2.94): the same word heard again, not the speaker's next "go"
    policy = check([("go,@2.86-2.94:2.5", 3.5, None, "go,")])
    unprefixed = hyp("go,@2.86-3.02:2.14 go,@3.66-3.70:3.30 go.@3.70-3.88:4.3", 4.5, after_committed=False)
    assert [w.text for w in policy.update(unprefixed).committed] == ["go,"]
