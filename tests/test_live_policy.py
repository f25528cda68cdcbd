"""The live commit policy, as tables: timestamped hypotheses in, commits and cuts out.

A hypothesis is written "word@start-end word@start-end ...", times in stream seconds.
Each row of a table is one re-decode: (hypothesis, speech_end or None, what it commits).
No model, no audio, no clock: every failure the live path has shown is a row here.
"""

from dataclasses import replace

import pytest

from whisper_demo.live.policy import AgreementPolicy, Hypothesis, TimedWord


def hyp(spec: str, start: float = 0.0, end: float = None, segment_ends=()) -> Hypothesis:
    words = []
    for item in spec.split():
        text, times = item.rsplit("@", 1)
        a, b = times.split("-")
        words.append(TimedWord(text.replace("_", " "), float(a), float(b)))
    if end is None:
        end = (words[-1].end + 1.0) if words else start
    return Hypothesis(tuple(words), tuple(segment_ends), start, end)


def run(table, policy=None):
    """Feed each row; return the policy and, per row, the committed text it produced."""
    policy = policy or AgreementPolicy(min_vote_seconds=0.0)
    out = []
    for spec, speech_end, _ in table:
        decision = policy.update(hyp(spec) if isinstance(spec, str) else spec, speech_end)
        out.append(" ".join(w.text for w in decision.committed))
    return policy, out


def check(table, policy=None):
    policy, out = run(table, policy)
    assert out == [expected for *_, expected in table]
    return policy


def test_two_decodes_agreeing_commit_their_common_prefix():
    check([
        ("and@0-0.3 so@0.3-0.6 my@0.6-0.9", None, ""),
        ("and@0-0.3 so@0.3-0.6 my@0.6-0.9 fellow@0.9-1.3", None, "and so my"),
        ("and@0-0.3 so@0.3-0.6 my@0.6-0.9 fellow@0.9-1.3 Americans,@1.3-2.0", None, "fellow"),
    ])


def test_agreement_ignores_case_and_punctuation_and_commits_the_latest_spelling():
    check([
        ("Hello@0-0.4 world@0.4-0.8", None, ""),
        ("hello,@0-0.4 World.@0.4-0.8 again@1.0-1.3", None, "hello, World."),
    ])


def test_a_word_heard_before_the_committed_end_is_not_committed_again():
    policy = check([
        ("ask@0-0.4 not@0.4-0.8", None, ""),
        ("ask@0-0.4 not@0.4-0.8 what@0.9-1.2", None, "ask not"),
        # the decoder re-places "not" a little earlier: still dropped by time
        ("ask@0-0.4 not@0.35-0.75 what@0.9-1.2 your@1.2-1.5", None, "what"),
    ])
    assert [w.text for w in policy.committed] == ["ask", "not", "what"]


def test_words_after_the_given_committed_words_are_new_wherever_they_are_placed():
    # "you" was committed stretched over the pause and the onset of "ask" (7.24-8.26 s).
    # The next decodes were given "... for you" as their start and wrote "ask what" after
    # it, with "ask" placed at 8.08 s, before the committed end: new all the same.
    def given(spec):
        return replace(hyp(spec), after_committed=True)

    for after_committed, expected in ((True, "ask what you"), (False, "what you")):
        policy = AgreementPolicy(min_vote_seconds=0.0)
        policy.committed = [TimedWord("for", 7.0, 7.24), TimedWord("you", 7.24, 8.26)]
        make = given if after_committed else hyp
        check([
            (make("ask@8.08-8.66 what@8.66-8.94 you@8.94-9.28"), None, ""),
            (make("ask@8.08-8.66 what@8.66-8.94 you@8.94-9.28 can@9.28-9.5 do@9.5-9.7"), None, expected),
        ], policy)


def test_a_repeat_after_a_cut_is_skipped():
    # The buffer was cut at 10.5 s after "for your country."; the next decode hears the
    # tail of "country" again, squeezed into the first instants of the new buffer.
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.committed = [TimedWord("for", 9.7, 9.9), TimedWord("your", 9.9, 10.2),
                        TimedWord("country.", 10.2, 10.5)]
    check([
        ("country.@10.42-10.55 My@10.9-11.1 fellow@11.1-11.4", None, ""),
        ("country.@10.42-10.55 My@10.9-11.1 fellow@11.1-11.4 citizens@11.4-12.0", None, "My fellow"),
    ], policy)
    assert [w.text for w in policy.committed].count("country.") == 1


def test_a_phrase_the_speaker_really_says_twice_is_kept():
    policy = check([
        ("montreal@0-0.5 forced@0.5-0.9 aligner@0.9-1.5", 1.5, "montreal forced aligner"),
        # said again right after, taking its own 1.5 s
        ("montreal@1.6-2.1 forced@2.1-2.5 aligner@2.5-3.1", None, ""),
        ("montreal@1.6-2.1 forced@2.1-2.5 aligner@2.5-3.1 again@3.2-3.6", None, "montreal forced aligner"),
    ])
    assert " ".join(w.text for w in policy.committed) == "montreal forced aligner montreal forced aligner"


def test_a_decoder_that_skips_a_phrase_never_commits_the_gap():
    check([
        ("a@0-0.3 b@0.3-0.6 c@0.6-0.9 d@0.9-1.2", None, ""),
        ("a@0-0.3 d@0.9-1.2 e@1.2-1.5", None, "a"),  # skipped b c: agrees only on "a"
        ("a@0-0.3 b@0.3-0.6 c@0.6-0.9 d@0.9-1.2 e@1.2-1.5", None, ""),
        ("a@0-0.3 b@0.3-0.6 c@0.6-0.9 d@0.9-1.2 e@1.2-1.5 f@1.5-1.8", None, "b c d e"),
    ])


def test_a_decoder_that_jumps_ahead_and_comes_back():
    check([
        ("one@0-0.3 two@0.3-0.6 three@0.6-0.9", None, ""),
        ("three@0.6-0.9 four@0.9-1.2", None, ""),  # lost its start
        ("one@0-0.3 two@0.3-0.6 three@0.6-0.9 four@0.9-1.2", None, ""),
        ("one@0-0.3 two@0.3-0.6 three@0.6-0.9 four@0.9-1.2 five@1.2-1.5", None, "one two three four"),
    ])


def test_a_decode_of_the_first_instants_of_a_buffer_gets_no_vote():
    # From 1 s and 1.5 s of audio tiny.en heard "But when the" twice; from 2.5 s on,
    # "The weather today".
    policy = AgreementPolicy(min_vote_seconds=2.0)
    out = [policy.update(hyp(spec, 0.0, end), None).committed for spec, end in [
        ("But@0.1-0.4 when@0.4-0.6 the@0.6-0.7", 1.0),
        ("But@0.1-0.4 when@0.4-0.6 the@0.6-0.7 day@0.8-1.1", 1.5),
        ("The@0.1-0.3 weather@0.3-0.7 today@0.7-1.2 is@1.3-1.5", 2.5),
        ("The@0.1-0.3 weather@0.3-0.7 today@0.7-1.2 is@1.3-1.5 cool@1.5-1.9", 3.0),
    ]]
    assert [" ".join(w.text for w in c) for c in out] == ["", "", "", "The weather today is"]


def test_misheard_first_words_are_not_committed_by_one_decode():
    # From 1 s of audio tiny.en heard "But"; with more audio, "The weather today".
    check([
        ("But@0.1-0.6", None, ""),
        ("The@0.1-0.3 weather@0.3-0.7 today@0.7-1.2", None, ""),
        ("The@0.1-0.3 weather@0.3-0.7 today@0.7-1.2 is@1.2-1.4", None, "The weather today"),
    ])


def test_end_of_speech_commits_after_one_decode_and_drops_text_invented_in_the_silence():
    check([
        ("hello@0.2-0.6 world.@0.6-1.1 Thank_you.@1.8-2.4", 1.15, "hello world."),
    ])


def test_thank_you_on_silence_alone_is_never_committed():
    check([("Thank_you.@0.0-1.0", 0.0, "")])


def test_a_long_buffer_is_cut_keeping_the_last_committed_sentence_as_context():
    policy = AgreementPolicy(cut_after_seconds=15.0)
    first = "It@1-1.3 is@1.3-1.5 late.@1.5-2.0 We@3-3.3 go.@3.3-3.6 Now@4-4.3"
    policy.update(hyp(first, 0.0, 16.0), None)
    decision = policy.update(hyp(first + " home@4.3-4.8", 0.0, 16.5), None)
    assert " ".join(w.text for w in decision.committed) == "It is late. We go. Now"
    # after "late.", not after "go.": "We go." stays as context for what follows
    assert decision.cut_at == pytest.approx(2.0)


def test_one_committed_sentence_is_not_cut_before_the_buffer_is_full():
    policy = AgreementPolicy(cut_after_seconds=15.0, max_buffer_seconds=25.0)
    spec = "It@1-1.3 is@1.3-1.5 late.@1.5-2.0 We@3-3.3"
    policy.update(hyp(spec, 0.0, 16.0), None)
    assert policy.update(hyp(spec + " go@3.3-3.6", 0.0, 16.5), None).cut_at is None
    # full: cut at the last committed word
    assert policy.update(hyp(spec + " go@3.3-3.6 home@3.6-4", 0.0, 26.0), None).cut_at == pytest.approx(3.6)


def test_short_buffers_are_not_cut():
    policy = AgreementPolicy(cut_after_seconds=15.0)
    policy.update(hyp("It@1-1.3 is@1.3-1.5 late.@1.5-2.0 We@3-3.3"), None)
    decision = policy.update(hyp("It@1-1.3 is@1.3-1.5 late.@1.5-2.0 We@3-3.3 go@3.3-3.6"), None)
    assert decision.committed and decision.cut_at is None


def test_a_sentence_end_and_the_segment_end_after_it_are_one_cut_point():
    policy = AgreementPolicy(cut_after_seconds=15.0, min_vote_seconds=0.0)
    spec = "It@1-1.3 is@1.3-1.5 late.@1.5-2.0 We@3-3.3 go.@3.3-3.6 Now@4-4.3"
    ends = (2.02, 3.62)  # Whisper's segment ends, a few ms from the words' ends
    policy.update(hyp(spec, 0.0, 16.0, segment_ends=ends), None)
    decision = policy.update(hyp(spec + " home@4.3-4.8", 0.0, 16.5, segment_ends=ends), None)
    assert decision.cut_at == pytest.approx(2.02)  # "late.", not "go."


def test_committed_segment_ends_are_cut_points():
    policy = AgreementPolicy(cut_after_seconds=15.0)
    spec = "so@1-1.3 we@1.3-1.5 went@1.5-2.0 and@6-6.3 then@6.3-6.6 it@8-8.2 rained@8.2-8.6"
    ends = (2.1, 6.7, 8.8)
    policy.update(hyp(spec, 0.0, 16.0, segment_ends=ends), None)
    decision = policy.update(hyp(spec.replace("rained", "rain") + " more@9-9.4", 0.0, 16.5,
                                 segment_ends=ends), None)
    assert [w.text for w in decision.committed] == ["so", "we", "went", "and", "then", "it"]
    # 8.8 ends a segment whose last word is not committed: not a cut point; of 2.1 and
    # 6.7, the last but one
    assert decision.cut_at == pytest.approx(2.1)


def test_a_full_buffer_with_nothing_agreed_commits_its_older_words():
    policy = AgreementPolicy(cut_after_seconds=15.0, max_buffer_seconds=25.0, keep_seconds=5.0)
    policy.update(hyp("a@1-2 b@10-11 c@22-23", 0.0, 24.0), None)
    decision = policy.update(hyp("x@1-2 b@10-11 c@22-23", 0.0, 26.5), None)
    assert [w.text for w in decision.committed] == ["x", "b"]
    assert [w.text for w in decision.tentative] == ["c"]
    assert decision.cut_at == pytest.approx(11.0)


def test_finish_commits_the_last_decode():
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.update(hyp("one@0-0.3 two@0.3-0.6"), None)
    decision = policy.finish(hyp("one@0-0.3 two@0.3-0.6 three@0.6-0.9"))
    assert [w.text for w in decision.committed] == ["one", "two", "three"]
    assert decision.tentative == ()


def test_finish_keeps_the_fuller_hypothesis_when_the_last_one_skips_words():
    policy = AgreementPolicy(min_vote_seconds=0.0)
    full = "ask@0-0.3 what@0.3-0.6 you@0.6-0.8 can@0.8-1.0 do@1.0-1.2 for@1.2-1.4 your@1.4-1.6 country.@1.6-2.0"
    policy.update(hyp(full), None)
    decision = policy.finish(hyp(full.replace("your@1.4-1.6 ", "")))
    assert " ".join(w.text for w in decision.committed).endswith("for your country.")


def test_finish_without_a_decode_commits_the_tentative_words():
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.update(hyp("one@0-0.3 two@0.3-0.6"), None)
    assert [w.text for w in policy.finish().committed] == ["one", "two"]


def test_committed_text_only_grows():
    policy = AgreementPolicy(min_vote_seconds=0.0)
    seen = []
    rows = ["a@0-0.3 b@0.3-0.6", "a@0-0.3 b@0.3-0.6 c@0.6-0.9", "z@0-0.3 q@0.3-0.6 c@0.6-0.9 d@0.9-1.2",
            "a@0-0.3 b@0.3-0.6 c@0.6-0.9 d@0.9-1.2 e@1.2-1.5"]
    for row in rows:
        policy.update(hyp(row), None)
        now = [w.text for w in policy.committed]
        assert now[: len(seen)] == seen
        seen = now


def test_prompt_words_are_those_before_the_buffer():
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.committed = [TimedWord("a", 0, 1), TimedWord("b", 1, 2), TimedWord("c", 2, 3)]
    assert [w.text for w in policy.committed_before(2.0)] == ["a", "b"]


def test_words_at_the_edge_of_the_earlier_audio_wait_for_more():
    # The first decode heard 1.0 s and ended on "am I" (0.76-1.0): guessed without what
    # follows. The second agrees on it, but only "And" had audio after it the first time.
    policy = AgreementPolicy(right_context_seconds=0.3, min_vote_seconds=0.0)
    first = policy.update(hyp("And@0-0.5 so@0.5-0.76 am@0.76-0.9 I@0.9-1.0", 0.0, 1.0), None)
    second = policy.update(hyp("And@0-0.5 so@0.5-0.76 am@0.76-0.9 I@0.9-1.0 fellow@1.4-1.8", 0.0, 2.0), None)
    assert first.committed == () and [w.text for w in second.committed] == ["And"]
    third = policy.update(hyp("so@0.5-0.76 my@0.76-1.0 fellow@1.4-1.8 Americans@1.8-2.3", 0.0, 3.0), None)
    assert [w.text for w in third.committed] == ["so"]  # "am I" never agreed with "my"


def test_at_a_pause_a_contradiction_on_a_word_both_decodes_heard_waits_for_one_more():
    rows = [
        ("And@0-0.5 so@0.5-0.8 my@0.8-1.1 fellow@1.1-1.5 Americans.@1.5-2.2", None, ""),
        # the pause decode misheard "my": the previous decode heard it in full (2.7 s of
        # audio) and said otherwise; "And so" is agreed, the rest waits
        ("And@0-0.5 so@0.5-0.8 am@0.8-0.95 I@0.95-1.1 fellow@1.1-1.5 Americans.@1.5-2.2", 2.2, "And so"),
        ("And@0-0.5 so@0.5-0.8 my@0.8-1.1 fellow@1.1-1.5 Americans.@1.5-2.2", 2.2, "my fellow Americans."),
    ]
    policy = AgreementPolicy(min_vote_seconds=0.0)
    out = []
    for (spec, speech_end, _), end in zip(rows, (2.7, 3.3, 3.9)):
        out.append(" ".join(w.text for w in policy.update(hyp(spec, 0.0, end), speech_end).committed))
    assert out == [expected for *_, expected in rows]


def test_at_a_pause_a_disagreement_at_the_edge_of_the_earlier_audio_does_not_wait():
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.update(hyp("See@0-0.3 you@0.3-0.5 to@0.6-0.9", 0.0, 1.0), None)  # "to" cut off
    decision = policy.update(hyp("See@0-0.3 you@0.3-0.5 tomorrow.@0.6-1.1", 0.0, 1.8), 1.1)
    assert " ".join(w.text for w in decision.committed) == "See you tomorrow."


def test_a_word_heard_again_a_little_later_is_not_committed_twice():
    # "In the" committed; the next decode places "the" 0.2 s later (timing jitter)
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.committed = [TimedWord("In", 8.0, 8.2), TimedWord("the", 8.2, 8.4)]
    check([
        ("the@8.35-8.6 evening@8.6-9.1", None, ""),
        ("the@8.35-8.6 evening@8.6-9.1 the@9.2-9.3 sky@9.3-9.6", None, "evening"),
    ], policy)


def test_a_run_of_a_repeated_word_heard_again_is_skipped_whole():
    # tiny.en wrote a speaker's six "uh" as a run whose length and times change from decode
    # to decode; the run after the committed ones is the same "uh"s heard again, not new
    # speech. Skipping one repeat at a time committed the rest of each run: 157 "uh" where
    # six were said (the live benchmark's paced feed, mfa_uhuh between other clips).
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.committed = [TimedWord("Montreal,", 30.0, 30.5)] + [
        TimedWord("uh,", 30.5 + 0.1 * i, 30.6 + 0.1 * i) for i in range(6)]  # ends at 31.1
    run_again = " ".join(f"uh,@{31.05 + 0.05 * i:.2f}-{31.1 + 0.05 * i:.2f}" for i in range(10))
    check([
        (run_again + " forced@31.7-32.0 aligner.@32.0-32.5", None, ""),
        (run_again + " forced@31.7-32.0 aligner.@32.0-32.5 And@33.0-33.2", None, "forced aligner."),
    ], policy)
    assert [w.norm for w in policy.committed].count("uh") == 6


def test_a_phrase_the_decoder_writes_again_with_no_audio_is_dropped():
    # tiny.en on "Montreal forced, uh, um, uh, hm, hm, um, forced aligner" (mfa_uhum, the
    # live benchmark's third stream): "Montreal forced." three times, the copies aligned
    # to the instant the first one ends. They were committed four times over.
    spoken = "Montreal@232.2-233.12 forced.@233.12-233.56"
    copies = "Montreal@233.56-233.56 forced.@233.56-233.56 Montreal@233.6-233.6 forced.@233.6-233.6"
    policy = check([
        (f"{spoken} {copies} the@234.12-234.5", None, ""),
        (f"{spoken} {copies} the@234.12-234.5 aligner.@234.5-235.0", None, "Montreal forced. the"),
    ])
    assert [w.norm for w in policy.committed].count("montreal") == 1


def test_a_copy_of_a_committed_phrase_aligned_to_an_instant_is_skipped():
    # The committed copy itself took no audio: a copy placed 0.04 s after it is not speech.
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.committed = [TimedWord("forced.", 233.12, 233.56), TimedWord("Montreal", 233.56, 233.56),
                        TimedWord("forced.", 233.56, 233.56)]
    check([
        ("Montreal@233.6-233.6 forced.@233.6-233.6 the@234.1-234.5", None, ""),
        ("Montreal@233.6-233.6 forced.@233.6-233.6 the@234.1-234.5 aligner@234.5-235.0", None, "the"),
    ], policy)


def test_a_silent_word_before_a_silent_copy_of_the_committed_tail_does_not_hide_it():
    # The live benchmark's third order, fast feed: "Montreal forced." committed, then an
    # end-of-speech decode wrote "Mm. Montreal forced." aligned to one instant before the
    # speech that followed; the silent "Mm." in front kept rule 2 from seeing the repeat,
    # and "Montreal forced." was committed twice.
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.committed = [TimedWord("Montreal", 232.2, 233.12), TimedWord("forced.", 233.12, 233.56)]
    check([
        ("Mm.@233.6-233.6 Montreal@233.6-233.6 forced.@233.6-233.6 Mm.@235.54-236.94 "
         "Montreal@237.02-237.88", 237.9, "Mm. Montreal"),
    ], policy)
    assert [w.norm for w in policy.committed].count("forced") == 1


def test_a_silent_word_that_opens_no_repeat_is_kept():
    policy = AgreementPolicy(min_vote_seconds=0.0)
    policy.committed = [TimedWord("Montreal", 232.2, 233.12), TimedWord("forced.", 233.12, 233.56)]
    check([("the@233.6-233.6 aligner.@233.7-234.2", 234.2, "the aligner.")], policy)


def test_a_silent_copy_behind_a_silent_word_inside_one_hypothesis_is_dropped():
    check([
        ("Montreal@232.2-233.12 forced.@233.12-233.56 Mm.@233.6-233.6 Montreal@233.6-233.6 "
         "forced.@233.6-233.6 the@234.1-234.5", 234.5, "Montreal forced. Mm. the"),
    ])


def test_a_word_the_speaker_says_again_and_again_is_kept():
    # "No, no, no": each takes its own audio, so none is a silent copy
    check([
        ("No,@1.0-1.2 no,@1.2-1.4 no.@1.4-1.6", 1.6, "No, no, no."),
    ])
