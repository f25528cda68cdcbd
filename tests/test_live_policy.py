"""The streamed pass's agreement policy, as tables: timestamped hypotheses in, commits out.

A hypothesis is written "word@start-end word@start-end ...", times in stream seconds.
Each row of a table is one re-decode: (hypothesis, what it commits).
No model, no audio, no clock: every failure the live path has shown is a row here.
"""

from dataclasses import replace

from live_script import Judged

from whisper_demo.live.agreement import AgreementPolicy
from whisper_demo.live.words import Hypothesis, TimedWord


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
    policy = policy or Judged(AgreementPolicy(min_vote_seconds=0.0))
    out = []
    for spec, _ in table:
        decision = policy.update(hyp(spec) if isinstance(spec, str) else spec)
        out.append(" ".join(w.text for w in decision.committed))
    return policy, out


def check(table, policy=None):
    policy, out = run(table, policy)
    assert out == [expected for *_, expected in table]
    return policy


def test_two_decodes_agreeing_commit_their_common_prefix():
    check([
        ("and@0-0.3 so@0.3-0.6 my@0.6-0.9", ""),
        ("and@0-0.3 so@0.3-0.6 my@0.6-0.9 fellow@0.9-1.3", "and so my"),
        ("and@0-0.3 so@0.3-0.6 my@0.6-0.9 fellow@0.9-1.3 Americans,@1.3-2.0", "fellow"),
    ])


def test_agreement_ignores_case_and_punctuation_and_commits_the_latest_spelling():
    check([
        ("Hello@0-0.4 world@0.4-0.8", ""),
        ("hello,@0-0.4 World.@0.4-0.8 again@1.0-1.3", "hello, World."),
    ])


def test_a_word_heard_before_the_committed_end_is_not_committed_again():
    policy = check([
        ("ask@0-0.4 not@0.4-0.8", ""),
        ("ask@0-0.4 not@0.4-0.8 what@0.9-1.2", "ask not"),
        # the decoder re-places "not" a little earlier: still dropped by time
        ("ask@0-0.4 not@0.35-0.75 what@0.9-1.2 your@1.2-1.5", "what"),
    ])
    assert [w.text for w in policy.committed] == ["ask", "not", "what"]


def test_words_after_the_given_committed_words_are_new_wherever_they_are_placed():
    # "you" was committed stretched over the pause and the onset of "ask" (7.24-8.26 s).
    # The next decodes were given "... for you" as their start and wrote "ask what" after
    # it, with "ask" placed at 8.08 s, before the committed end: new all the same.
    def given(spec):
        return replace(hyp(spec), after_committed=True)

    for after_committed, expected in ((True, "ask what you"), (False, "what you")):
        policy = Judged(AgreementPolicy(min_vote_seconds=0.0),
                        [TimedWord("for", 7.0, 7.24), TimedWord("you", 7.24, 8.26)])
        make = given if after_committed else hyp
        check([
            (make("ask@8.08-8.66 what@8.66-8.94 you@8.94-9.28"), ""),
            (make("ask@8.08-8.66 what@8.66-8.94 you@8.94-9.28 can@9.28-9.5 do@9.5-9.7"), expected),
        ], policy)


def test_a_repeat_after_a_cut_is_skipped():
    # The buffer was cut at 10.5 s after "for your country."; the next decode hears the
    # tail of "country" again, squeezed into the first instants of the new buffer.
    policy = Judged(AgreementPolicy(min_vote_seconds=0.0), [
        TimedWord("for", 9.7, 9.9), TimedWord("your", 9.9, 10.2), TimedWord("country.", 10.2, 10.5)])
    check([
        ("country.@10.42-10.55 My@10.9-11.1 fellow@11.1-11.4", ""),
        ("country.@10.42-10.55 My@10.9-11.1 fellow@11.1-11.4 citizens@11.4-12.0", "My fellow"),
    ], policy)
    assert [w.text for w in policy.committed].count("country.") == 1


def test_a_phrase_the_speaker_really_says_twice_is_kept():
    policy = check([
        ("montreal@0-0.5 forced@0.5-0.9 aligner@0.9-1.5", ""),
        ("montreal@0-0.5 forced@0.5-0.9 aligner@0.9-1.5", "montreal forced aligner"),
        # said again right after, taking its own 1.5 s
        ("montreal@1.6-2.1 forced@2.1-2.5 aligner@2.5-3.1", ""),
        ("montreal@1.6-2.1 forced@2.1-2.5 aligner@2.5-3.1 again@3.2-3.6", "montreal forced aligner"),
    ])
    assert " ".join(w.text for w in policy.committed) == "montreal forced aligner montreal forced aligner"


def test_a_decoder_that_skips_a_phrase_never_commits_the_gap():
    check([
        ("a@0-0.3 b@0.3-0.6 c@0.6-0.9 d@0.9-1.2", ""),
        ("a@0-0.3 d@0.9-1.2 e@1.2-1.5", "a"),  # skipped b c: agrees only on "a"
        ("a@0-0.3 b@0.3-0.6 c@0.6-0.9 d@0.9-1.2 e@1.2-1.5", ""),
        ("a@0-0.3 b@0.3-0.6 c@0.6-0.9 d@0.9-1.2 e@1.2-1.5 f@1.5-1.8", "b c d e"),
    ])


def test_a_decoder_that_jumps_ahead_and_comes_back():
    check([
        ("one@0-0.3 two@0.3-0.6 three@0.6-0.9", ""),
        ("three@0.6-0.9 four@0.9-1.2", ""),  # lost its start
        ("one@0-0.3 two@0.3-0.6 three@0.6-0.9 four@0.9-1.2", ""),
        ("one@0-0.3 two@0.3-0.6 three@0.6-0.9 four@0.9-1.2 five@1.2-1.5", "one two three four"),
    ])


def test_a_decode_of_the_first_instants_of_a_buffer_gets_no_vote():
    # From 1 s and 1.5 s of audio tiny.en heard "But when the" twice; from 2.5 s on,
    # "The weather today".
    policy = Judged(AgreementPolicy(min_vote_seconds=2.0))
    out = [policy.update(hyp(spec, 0.0, end)).committed for spec, end in [
        ("But@0.1-0.4 when@0.4-0.6 the@0.6-0.7", 1.0),
        ("But@0.1-0.4 when@0.4-0.6 the@0.6-0.7 day@0.8-1.1", 1.5),
        ("The@0.1-0.3 weather@0.3-0.7 today@0.7-1.2 is@1.3-1.5", 2.5),
        ("The@0.1-0.3 weather@0.3-0.7 today@0.7-1.2 is@1.3-1.5 cool@1.5-1.9", 3.0),
    ]]
    assert [" ".join(w.text for w in c) for c in out] == ["", "", "", "The weather today is"]


def test_misheard_first_words_are_not_committed_by_one_decode():
    # From 1 s of audio tiny.en heard "But"; with more audio, "The weather today".
    check([
        ("But@0.1-0.6", ""),
        ("The@0.1-0.3 weather@0.3-0.7 today@0.7-1.2", ""),
        ("The@0.1-0.3 weather@0.3-0.7 today@0.7-1.2 is@1.2-1.4", "The weather today"),
    ])


def test_committed_text_only_grows():
    policy = Judged(AgreementPolicy(min_vote_seconds=0.0))
    seen = []
    rows = ["a@0-0.3 b@0.3-0.6", "a@0-0.3 b@0.3-0.6 c@0.6-0.9", "z@0-0.3 q@0.3-0.6 c@0.6-0.9 d@0.9-1.2",
            "a@0-0.3 b@0.3-0.6 c@0.6-0.9 d@0.9-1.2 e@1.2-1.5"]
    for row in rows:
        policy.update(hyp(row))
        now = [w.text for w in policy.committed]
        assert now[: len(seen)] == seen
        seen = now


def test_prompt_words_are_those_before_the_buffer():
    policy = Judged(AgreementPolicy(min_vote_seconds=0.0),
                    [TimedWord("a", 0, 1), TimedWord("b", 1, 2), TimedWord("c", 2, 3)])
    assert [w.text for w in policy.transcript.committed_before(2.0)] == ["a", "b"]


def test_words_at_the_edge_of_the_earlier_audio_wait_for_more():
    # The first decode heard 1.0 s and ended on "am I" (0.76-1.0): guessed without what
    # follows. The second agrees on it, but only "And" had audio after it the first time.
    policy = Judged(AgreementPolicy(right_context_seconds=0.3, min_vote_seconds=0.0))
    first = policy.update(hyp("And@0-0.5 so@0.5-0.76 am@0.76-0.9 I@0.9-1.0", 0.0, 1.0))
    second = policy.update(hyp("And@0-0.5 so@0.5-0.76 am@0.76-0.9 I@0.9-1.0 fellow@1.4-1.8", 0.0, 2.0))
    assert first.committed == () and [w.text for w in second.committed] == ["And"]
    third = policy.update(hyp("so@0.5-0.76 my@0.76-1.0 fellow@1.4-1.8 Americans@1.8-2.3", 0.0, 3.0))
    assert [w.text for w in third.committed] == ["so"]  # "am I" never agreed with "my"


def test_a_word_heard_again_a_little_later_is_not_committed_twice():
    # "In the" committed; the next decode places "the" 0.2 s later (timing jitter)
    policy = Judged(AgreementPolicy(min_vote_seconds=0.0), [TimedWord("In", 8.0, 8.2), TimedWord("the", 8.2, 8.4)])
    check([
        ("the@8.35-8.6 evening@8.6-9.1", ""),
        ("the@8.35-8.6 evening@8.6-9.1 the@9.2-9.3 sky@9.3-9.6", "evening"),
    ], policy)


def test_a_run_of_a_repeated_word_heard_again_is_skipped_whole():
    # tiny.en wrote a speaker's six "uh" as a run whose length and times change from decode
    # to decode; the run after the committed ones is the same "uh"s heard again, not new
    # speech. Skipping one repeat at a time committed the rest of each run: 157 "uh" where
    # six were said (the live benchmark's paced feed, mfa_uhuh between other clips).
    policy = Judged(AgreementPolicy(min_vote_seconds=0.0), [TimedWord("Montreal,", 30.0, 30.5)] + [
        TimedWord("uh,", 30.5 + 0.1 * i, 30.6 + 0.1 * i) for i in range(6)])  # ends at 31.1
    run_again = " ".join(f"uh,@{31.05 + 0.05 * i:.2f}-{31.1 + 0.05 * i:.2f}" for i in range(10))
    check([
        (run_again + " forced@31.7-32.0 aligner.@32.0-32.5", ""),
        (run_again + " forced@31.7-32.0 aligner.@32.0-32.5 And@33.0-33.2", "forced aligner."),
    ], policy)
    assert [w.norm for w in policy.committed].count("uh") == 6


def test_a_phrase_the_decoder_writes_again_with_no_audio_is_dropped():
    # tiny.en on "Montreal forced, uh, um, uh, hm, hm, um, forced aligner" (mfa_uhum, the
    # live benchmark's third stream): "Montreal forced." three times, the copies aligned
    # to the instant the first one ends. They were committed four times over.
    spoken = "Montreal@232.2-233.12 forced.@233.12-233.56"
    copies = "Montreal@233.56-233.56 forced.@233.56-233.56 Montreal@233.6-233.6 forced.@233.6-233.6"
    policy = check([
        (f"{spoken} {copies} the@234.12-234.5", ""),
        (f"{spoken} {copies} the@234.12-234.5 aligner.@234.5-235.0", "Montreal forced. the"),
    ])
    assert [w.norm for w in policy.committed].count("montreal") == 1


def test_a_copy_of_a_committed_phrase_aligned_to_an_instant_is_skipped():
    # The committed copy itself took no audio: a copy placed 0.04 s after it is not speech.
    policy = Judged(AgreementPolicy(min_vote_seconds=0.0), [
        TimedWord("forced.", 233.12, 233.56), TimedWord("Montreal", 233.56, 233.56),
        TimedWord("forced.", 233.56, 233.56)])
    check([
        ("Montreal@233.6-233.6 forced.@233.6-233.6 the@234.1-234.5", ""),
        ("Montreal@233.6-233.6 forced.@233.6-233.6 the@234.1-234.5 aligner@234.5-235.0", "the"),
    ], policy)


def test_a_silent_word_before_a_silent_copy_of_the_committed_tail_does_not_hide_it():
    # The live benchmark's third order, fast feed: "Montreal forced." committed, then an
    # end-of-speech decode wrote "Mm. Montreal forced." aligned to one instant before the
    # speech that followed; the silent "Mm." in front kept rule 2 from seeing the repeat,
    # and "Montreal forced." was committed twice.
    policy = Judged(AgreementPolicy(min_vote_seconds=0.0),
                    [TimedWord("Montreal", 232.2, 233.12), TimedWord("forced.", 233.12, 233.56)])
    spec = ("Mm.@233.6-233.6 Montreal@233.6-233.6 forced.@233.6-233.6 Mm.@235.54-236.94 "
            "Montreal@237.02-237.88")
    check([(spec, ""), (spec, "Mm. Montreal")], policy)
    assert [w.norm for w in policy.committed].count("forced") == 1


def test_a_silent_word_that_opens_no_repeat_is_kept():
    policy = Judged(AgreementPolicy(min_vote_seconds=0.0),
                    [TimedWord("Montreal", 232.2, 233.12), TimedWord("forced.", 233.12, 233.56)])
    spec = "the@233.6-233.6 aligner.@233.7-234.2"
    check([(spec, ""), (spec, "the aligner.")], policy)


def test_a_silent_copy_behind_a_silent_word_inside_one_hypothesis_is_dropped():
    spec = ("Montreal@232.2-233.12 forced.@233.12-233.56 Mm.@233.6-233.6 Montreal@233.6-233.6 "
            "forced.@233.6-233.6 the@234.1-234.5")
    check([(spec, ""), (spec, "Montreal forced. Mm. the")])


def test_a_word_the_speaker_says_again_and_again_is_kept():
    # "No, no, no": each takes its own audio, so none is a silent copy
    check([("No,@1.0-1.2 no,@1.2-1.4 no.@1.4-1.6", ""), ("No,@1.0-1.2 no,@1.2-1.4 no.@1.4-1.6", "No, no, no.")])


def test_a_word_whisper_split_at_its_punctuation_is_one_word():
    from types import SimpleNamespace as NS

    from whisper_demo.live.words import timed_words

    def word(text, start, end):
        return NS(text=text, start=start, end=end)

    segments = [NS(words=[word(" at", 0.0, 0.2), word(" least", 0.2, 0.5), word(" 28", 0.5, 0.9),
                          word(".8", 0.9, 1.3), word(" kilobit.", 1.3, 1.8)]),
                NS(words=[word(" Dial", 2.0, 2.3), word(" 850", 2.3, 2.8), word("-2", 2.8, 3.0),
                          word(" now,", 3.0, 3.3), word(" Bob's", 3.3, 3.6), word(" ...", 3.6, 3.7),
                          word(" ", 3.7, 3.7)])]
    words = timed_words(segments, offset_s=10.0)
    assert [w.text for w in words] == ["at", "least", "28.8", "kilobit.", "Dial", "850-2", "now,", "Bob's", "..."]
    assert (words[2].start, words[2].end) == (10.5, 11.3)  # from the first part's start to the last's end
    # a word with its own space stays a word, and so does punctuation standing alone
    first = timed_words([NS(words=[word(".8", 0.0, 0.1), word(" a", 0.1, 0.2)])], 0.0)
    assert [w.text for w in first] == [".8", "a"]  # nothing before it to belong to
