"""AlignAtt, the live policy that commits a word once the model's attention has passed it,
as tables: one decode's words with their tokens' attention peaks in, commits out.

A hypothesis is written "word@start-end:peak,peak ...", times in stream seconds; a word
with no ":" has no attention. Each
row of a table is one decode: (hypothesis, buffer end, what it commits). No model, no
audio, no clock.
"""

import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest

from whisper_demo import decode as decode_module
from whisper_demo.audio import load_audio
from whisper_demo.events import DecodeOptions
from live_script import Judged

from whisper_demo.live import LiveConfig, LiveSession, LiveUpdate, model_decoder
from whisper_demo.live import decoders as decoders_module
from whisper_demo.live.agreement import AgreementPolicy
from whisper_demo.live.alignatt import AlignAttPolicy
from whisper_demo.live.context import ContextKeeper
from whisper_demo.live.hypotheses import word_peaks
from whisper_demo.live.transcript import shown_texts
from whisper_demo.live.words import Hypothesis, TimedWord
from whisper_demo.text import words


def hyp(spec: str, end: float, start: float = 0.0, after_committed: bool = True) -> Hypothesis:
    words, peaks = [], []
    for item in spec.split():
        item, _, read = item.partition(":")
        text, times = item.rsplit("@", 1)
        a, b = times.split("-")
        words.append(TimedWord(text, float(a), float(b)))
        peaks.append(tuple(float(p) for p in read.split(",")) if read else ())
    return Hypothesis(tuple(words), (), start, end, after_committed, tuple(peaks))


def check(table, policy=None):
    policy = Judged(policy or AlignAttPolicy(frame_seconds=0.4))
    out = []
    for spec, end, _ in table:
        decision = policy.update(hyp(spec, end) if isinstance(spec, str) else spec)
        out.append(" ".join(w.text for w in decision.committed))
    assert out == [expected for *_, expected in table]
    return policy


def test_a_word_read_within_the_last_frames_stops_the_commit():
    check([
        # edge at 2.6 s: "fellow" was read at 2.7 s, the audio after it not heard yet
        ("and@0-0.3:0.3 so@0.3-0.6:0.6 my@0.6-0.9:1.0 fellow@0.9-2.5:2.7", 3.0, "and so my"),
        # the next decode hears more: "fellow" is now well behind the edge
        ("fellow@0.9-1.3:1.3 Americans@1.3-2.0:1.9,2.1 ask@2.2-2.6:3.3", 3.5, "fellow Americans"),
    ])


def test_a_word_whose_last_token_reads_the_edge_waits_whole():
    # "Ameri" was read in time, "cans" at the edge: the word is not committed in half
    check([("fellow@0.9-1.3:1.3 Americans@1.3-2.0:1.9,2.7", 3.0, "fellow")])


def test_a_final_pass_replaces_the_streamed_words_and_the_next_decode_goes_on_after_them():
    policy = check([("we@0.2-0.5:0.4 go@0.5-0.9:0.8 now@0.9-1.2:1.1", 2.0, "we go now")])
    final = [TimedWord("We", 0.2, 0.5), TimedWord("go.", 0.5, 0.9), TimedWord("Now", 0.9, 1.2)]
    tentative = [TimedWord("then", 2.0, 2.3)]
    policy.transcript.tentative = tuple(tentative)
    revision, shown_new = policy.transcript.revise(final, None, at=1.0)
    assert policy.committed == final and policy.transcript.final_count == 3 and policy.transcript.tentative == ()
    assert revision.changes == () and revision.tentative == ("then",) and shown_new == []  # case aside
    assert [w.text for w in policy.update(hyp("then@2.0-2.3:2.2", 4.0)).committed] == ["then"]
    assert policy.transcript.shown_committed() == "We go. Now then" and policy.transcript.final_text == "We go. Now"


def test_a_word_after_a_sentence_end_is_shown_with_a_capital_and_kept_as_written():
    policy = check([("Americans.@1.7-2.1:2.0 ask@3.3-3.7:3.5 not.@3.7-4.2:4.0 so...@4.5-4.8:4.7 "
                     "what@4.9-5.2:5.1", 6.0, "Americans. ask not. so... what")])
    # the decoder's own text is what the next decode is given; only the page capitalises
    assert shown_texts(policy.committed) == ["Americans.", "Ask", "not.", "So...", "what"]
    assert shown_texts(policy.committed[1:2], before=policy.committed[0]) == ["Ask"]
    # what a session shows: all of it, the newest words (the update's), the tentative after
    transcript = policy.transcript
    assert transcript.shown_committed() == "Americans. Ask not. So... what"
    assert transcript.shown_committed(4) == "Ask not. So... what" and transcript.shown_committed(0) == ""
    assert transcript.shown_after([TimedWord("you", 5.3, 5.5)]) == "you"


def test_a_word_aligned_into_the_last_frames_waits_though_read_before_them():
    # "Thank" was read at "buddy" (1.92 s, before the edge at 2.1 s), but the alignment
    # puts it up to 2.18 s: it has not been heard with audio after it
    check([("like@1.52-1.74:1.52 buddy.@1.74-1.92:1.86 Thank@1.92-2.18:1.92", 2.5, "like buddy.")])


def test_a_word_said_six_times_is_committed_six_times():
    spec = " ".join(f"word@{t:.1f}-{t + 0.4:.1f}:{t + 0.3:.1f}" for t in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0))
    check([(spec, 5.0, "word word word word word word")])


def test_a_repeat_split_over_decodes_is_kept_when_given_as_the_prefix():
    policy = check([
        ("word@0.5-0.9:0.8 word@1.0-1.4:1.3 word@1.5-1.9:1.8", 2.5, "word word word"),
        # the next decode was given the three as its start: what it wrote after them is new
        ("word@2.0-2.4:2.3 word@2.5-2.9:2.8 word@3.0-3.4:3.3", 4.5, "word word word"),
    ])
    assert len(policy.committed) == 6


def test_a_loop_read_at_the_same_audio_is_not_committed():
    # "the cat" written again and again with the attention stuck where the first one was
    check([("the@1.0-1.2:1.1 cat@1.2-1.6:1.5 the@1.6-1.6:1.5 cat@1.6-1.6:1.5 the@1.6-1.6:1.5", 6.0,
            "the cat")])


def test_a_short_buffer_needs_more_audio_after_a_word():
    policy = AlignAttPolicy(frame_seconds=0.4, start_seconds=3.0)
    check([
        # 1.5 s of buffer: a word needs 1.5 s after it (3.0 - 1.5), not 0.4 s
        ("the@0.2-0.5:0.4 weather@0.5-0.9:0.8", 1.5, ""),
        # 2.5 s: 0.5 s after it (a word read at 2.2 s waits; at 0.4 s, it would not)
        ("the@0.2-0.5:0.4 weather@0.5-0.9:0.8 today@1.0-2.1:2.2", 2.5, "the weather"),
    ], policy)


def test_without_attention_nothing_commits_before_the_final_pass():
    check([("ask@0-0.4 not@0.4-0.8", 3.0, ""), ("ask@0-0.4 not@0.4-0.8", 3.5, "")])


def test_without_its_prefix_a_decode_commits_only_what_starts_after_the_committed_end():
    policy = check([("ask@0-0.4:0.4 not@0.4-0.8:0.8", 3.0, "ask not")])
    unprefixed = hyp("ask@0-0.4:0.4 not@0.4-0.8:0.8 what@1.0-1.3:1.3", 4.0, after_committed=False)
    assert [w.text for w in policy.update(unprefixed).committed] == ["what"]


def test_the_next_decode_is_not_told_that_the_sentence_ended_at_the_last_committed_word():
    # "Montreal." committed as soon as it was heard: its period is Whisper's guess that the
    # speaker stopped; given back, it opened a new sentence ("Montreal. All four...")
    for policy, last in ((AlignAttPolicy(), "Montreal"), (AgreementPolicy(), "Montreal.")):
        judged = Judged(policy, [TimedWord("So", 0.5, 0.7), TimedWord("Montreal.", 0.8, 1.4)])
        prefix = ContextKeeper(judged.transcript, policy.reopens_last_word, 200, 5).for_decode(0, 0.0).prefix
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
    session = LiveSession(decoder, LiveConfig(policy="alignatt"), vad=object(), final_decoder=decoder)
    assert session.streamed.policy.reads_loops


# ------------------------------------------------------------------ the real model


def alignatt_session(model, audio, monkeypatch=None, calls=None):
    """Feed `audio` in 0.1 s chunks to an AlignAtt session of the real model (no clock:
    the same text every run); the LiveUpdates of its streamed decodes, in order. With `calls`, each call
    the decoder makes to stream_transcribe is recorded there: (audio, options)."""
    if calls is not None:
        real = decoders_module.stream_transcribe

        def recording(model, audio, options):
            if options.attention:  # the streamed decodes (the final pass reads none)
                calls.append((audio.copy(), options))
            return real(model, audio, options)

        monkeypatch.setattr(decoders_module, "stream_transcribe", recording)
    config = LiveConfig(policy="alignatt")
    session = LiveSession(model_decoder(model, DecodeOptions(), alignatt=True), config)
    updates = []
    step = 1600
    for start in range(0, audio.size, step):
        session.add_samples(audio[start:start + step])
        updates += [u for u in session.updates() if streamed_decode(u)]
    updates += [u for u in session.finish() if streamed_decode(u)]
    return session, updates


def streamed_decode(item) -> bool:
    return isinstance(item, LiveUpdate) and item.decoded and item.revision is None


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
    # Six times "go": the text fails the test of a looping decode (loops.looped), which
    # would have taken the vote from every decode of it; the attention tells the repeat
    # from a loop (each "go" is read at its own audio). Offline, tiny.en writes seven.
    path = tmp_path / "go.wav"
    subprocess.run(["espeak-ng", "-s", "110", "-w", str(path), "go, go, go, go, go, go"], check=True)
    session, _ = alignatt_session(tiny_model, padded(load_audio(path)))
    assert words(session.committed_text) == ["go"] * 6


def test_without_its_prefix_a_decode_does_not_commit_the_last_committed_word_again():
    # after a loop the decode is given no prefix; it aligns the committed "go," a little
    # later (2.86-3.02 for 2.86-2.94): the same word heard again, not the speaker's next "go"
    policy = check([("go,@2.86-2.94:2.5", 3.5, "go,")])
    unprefixed = hyp("go,@2.86-3.02:2.14 go,@3.66-3.70:3.30 go.@3.70-3.88:4.3", 4.5, after_committed=False)
    assert [w.text for w in policy.update(unprefixed).committed] == ["go,"]
