"""The session's transcript alone, as tables: streamed commits and final passes in, the
records and the text the page shows out. No model, no audio, no clock."""

from dataclasses import replace

import pytest

from whisper_demo.live.revision import surer_words
from whisper_demo.live.transcript import FINAL_PASS, STREAMED, FinalTokens, Transcript
from whisper_demo.live.words import Decision

from live_script import timed_words as words


def committed(spec: str, tentative: str = "", at: float = 1.0, capitalises: bool = False) -> Transcript:
    transcript = Transcript(capitalises)
    transcript.apply(Decision(tuple(words(spec)), tuple(words(tentative))), at)
    return transcript


def table(transcript: Transcript):
    """(text, shown at, by which pass, final) per record."""
    return [(r.word.text, r.shown_at, r.by, r.final) for r in transcript.records]


def test_streamed_commits_are_recorded_with_when_and_by_which_pass():
    transcript = committed("it@0-0.2 is@0.2-0.5", "late@0.6-1.0", at=1.0)
    transcript.apply(Decision(tuple(words("late@0.6-1.0")), ()), 2.0)
    assert table(transcript) == [("it", 1.0, STREAMED, False), ("is", 1.0, STREAMED, False),
                                 ("late", 2.0, STREAMED, False)]
    assert transcript.final_count == 0 and transcript.committed_end == 1.0 and transcript.tentative == ()
    texts = (transcript.committed_text, transcript.final_text, transcript.streamed_text)
    assert texts == ("it is late", "", "it is late")


@pytest.mark.parametrize("final, cut_s, records, streamed, tentative, revised, changed, new", [
    # every streamed word kept: each keeps when and how it was first shown
    ("it@0-0.2 is@0.2-0.5 late.@0.6-1.0", None,
     [("it", 1.0, STREAMED), ("is", 1.0, STREAMED), ("late.", 1.0, STREAMED)],
     ("it", "is", "late."), (), 0, (), []),
    # a committed word written otherwise: shown now, by the final pass; one revised
    ("It's@0-0.5 late.@0.6-1.0", None,
     [("It's", 5.0, FINAL_PASS), ("late.", 1.0, STREAMED)],
     ("it", "is", "late."), (), 2, (0,), ["It's"]),
    # at a cut only the words before it are judged; the rest stays streamed
    ("it@0-0.2 is@0.2-0.5", 0.55,
     [("it", 1.0, STREAMED), ("is", 1.0, STREAMED)],
     ("it", "is"), (), 0, (), []),
])
def test_a_final_pass_replaces_the_streamed_words_it_judged(final, cut_s, records, streamed, tentative, revised,
                                                             changed, new):
    transcript = committed("it@0-0.2 is@0.2-0.5 late.@0.6-1.0", at=1.0)
    revision, shown_new = transcript.revise(words(final), cut_s, at=5.0)
    judged = len(records)
    assert [(t, at, by) for t, at, by, _ in table(transcript)[:judged]] == records
    assert all(final for *_, final in table(transcript)[:judged]) and transcript.final_count == judged
    assert not any(final for *_, final in table(transcript)[judged:])
    assert (revision.streamed, revision.tentative, revision.revised, revision.changed) == (streamed, tentative,
                                                                                           revised, changed)
    assert [w.text for w in shown_new] == new and revision.first == 0 and revision.at == 5.0


def test_tentative_words_a_final_pass_confirms_are_no_change_and_those_after_a_cut_stay():
    transcript = committed("we@0-0.3", "go@0.3-0.6 now@2.0-2.4")
    revision, shown_new = transcript.revise(words("We@0-0.3 go.@0.3-0.6"), 1.0, at=3.0)
    assert revision.tentative == ("go",) and revision.changes == () and revision.revised == 0
    assert [w.text for w in shown_new] == ["go."]  # first shown committed now
    assert [w.text for w in transcript.tentative] == ["now"]  # after the cut: still tentative
    assert transcript.final_text == "We go." and transcript.tentative_text == "now"


def test_the_next_pass_is_given_the_tokens_of_the_last_one_only_while_they_hold():
    transcript = committed("one.@0-0.5")
    transcript.revise(words("One.@0-0.5"), None, at=2.0, tokens=FinalTokens(0, (1, 2)))
    assert transcript.given_tokens(0) == (1, 2)
    assert transcript.given_tokens(16000) is None  # another buffer (it was cut since)
    # a pass that writes nothing new keeps the final words and gives its own tokens
    transcript.revise([], None, at=3.0, tokens=FinalTokens(0, (1, 2, 3)))
    assert transcript.given_tokens(0) == (1, 2, 3)
    # new final words, written by a pass that cut the buffer: no tokens for them
    transcript.apply(Decision(tuple(words("two.@1-1.5")), ()), 4.0)
    transcript.revise(words("Two.@1-1.5"), 2.0, at=5.0)
    assert transcript.given_tokens(0) is None
    assert [r.tokens for r in transcript.records] == [None, None]


def test_words_dropped_unjudged_become_final_as_they_are():
    transcript = committed("a@0-1 b@1-2 c@2-3", "d@3-3.5")
    transcript.finalize_before(2.0)
    assert [(t, final) for t, _, _, final in table(transcript)] == [("a", True), ("b", True), ("c", False)]
    assert transcript.final_text == "a b" and transcript.streamed_text == "c" and transcript.tentative_text == "d"


@pytest.mark.parametrize("first, last, expected", [
    (0, None, ["Americans.", "Ask", "not.", "So...", "what"]),
    (1, 2, ["Ask"]),  # the word before decides
    (3, None, ["So...", "what"]),  # "so..." trails off: the sentence goes on
])
def test_a_word_after_a_sentence_end_is_shown_with_a_capital(first, last, expected):
    transcript = committed("Americans.@0-1 ask@1-2 not.@2-3 so...@3-4 what@4-5", "is@5-6", capitalises=True)
    assert transcript.shown_words(first, last) == expected
    assert [w.text for w in transcript.words] == ["Americans.", "ask", "not.", "so...", "what"]  # kept as written
    assert committed("Americans.@0-1 ask@1-2").committed_text == "Americans. ask"  # a policy that sees its periods


@pytest.mark.parametrize("seconds, before, after, final_after", [
    (0.0, "", "a b c", "a b"),
    (1.0, "a", "b c", "b"),
    (1.95, "a b", "c", ""),  # "b" ends within the slack of 2.0 s: before
])
def test_words_before_and_after_a_buffer_start(seconds, before, after, final_after):
    transcript = committed("a@0-1 b@1-2 c@2-3")
    transcript.finalize_before(2.0)
    assert " ".join(w.text for w in transcript.committed_before(seconds)) == before
    assert " ".join(w.text for w in transcript.committed_after(seconds)) == after
    assert " ".join(w.text for w in transcript.final_after(seconds)) == final_after


STREAMED_51S = "Pity@1.0-1.3 the@1.3-1.5 world,@1.5-1.9 or@1.9-2.1 else@2.1-2.4 this@2.4-2.7 glutton@2.7-3.2 be.@3.2-3.6"


@pytest.mark.parametrize("final, covered_to, final_text, streamed, lost", [
    # the final words end at "or": the streamed words said after them stay, not revised away
    ("Pity@1.0-1.3 the@1.3-1.5 world,@1.5-1.9 or@1.9-2.1", 2.1, "Pity the world, or",
     "else this glutton be.", 0),
    # a final decode that heard them and wrote something else over them replaces them
    ("Pity@1.0-1.3 the@1.3-1.5 world,@1.5-1.9 or@1.9-2.1 elves@2.1-2.4 this@2.4-2.7 glutton@2.7-3.2 bee.@3.2-3.6",
     3.6, "Pity the world, or elves this glutton bee.", "", 0),
    # a pass that wrote nothing covers nothing
    ("", 0.5, "", "Pity the world, or else this glutton be.", 0),
    # without a coverage limit (as before) the words after "or" went; those with no final word
    # within 0.3 s of them ("else" is that close) are lost
    ("Pity@1.0-1.3 the@1.3-1.5 world,@1.5-1.9 or@1.9-2.1", None, "Pity the world, or", "", 3),
])
def test_a_streamed_word_is_kept_until_a_final_decode_covers_its_time(final, covered_to, final_text, streamed, lost):
    transcript = committed(STREAMED_51S)
    transcript.revise(words(final), None, 2.0, covered_to=covered_to)
    assert transcript.final_text == final_text
    assert transcript.streamed_text == streamed
    assert len(transcript.lost) == lost


def test_streamed_words_no_final_pass_covered_become_final_at_the_end_unless_heard_in_silence():
    transcript = committed("It@0.1-0.3 is@0.3-0.6 you@3.0-3.2")
    transcript.revise([], None, 2.0, covered_to=0.0)
    transcript.finalize_before(float("inf"), keep=lambda w: w.end < 1.0)
    assert transcript.final_text == "It is" and [w.text for w in transcript.silent] == ["you"]
    assert transcript.kept_streamed == 2 and transcript.lost == []


def test_a_streamed_word_a_final_pass_wrote_around_stays_unless_heard_in_silence():
    # the final words skip "glutton" (no final word within 0.3 s of it): it stays, final
    transcript = committed("Pity@1.0-1.3 the@1.3-1.5 glutton@2.7-3.2 be.@3.6-4.0")
    transcript.revise(words("Pity@1.0-1.3 the@1.3-1.5 bee.@3.6-4.0"), None, 2.0, covered_to=4.0,
                      rescue=lambda w: True)
    assert transcript.final_text == "Pity the glutton bee." and transcript.rescued == 1 and transcript.lost == []
    transcript = committed("Pity@1.0-1.3 the@1.3-1.5 you@2.7-3.2 be.@3.6-4.0")
    transcript.revise(words("Pity@1.0-1.3 the@1.3-1.5 bee.@3.6-4.0"), None, 2.0, covered_to=4.0,
                      rescue=lambda w: False)
    assert transcript.final_text == "Pity the bee." and [w.text for w in transcript.silent] == ["you"]
    assert transcript.lost == []


def test_a_pass_that_heard_the_buffer_afresh_may_write_its_final_words_again():
    # an earlier pass made "DOW one." final; the streamed pass committed "Dial two." after it
    transcript = committed("You@0-0.3 have@0.3-0.6", at=1.0)
    transcript.revise(words("You@0-0.3 have@0.3-0.6"), None, at=2.0)  # before the buffer: final for good
    transcript.apply(Decision(tuple(words("DOW@1.0-1.3 one.@1.3-1.6")), ()), 3.0)
    transcript.revise(words("DOW@1.0-1.3 one.@1.3-1.6"), None, at=4.0)
    transcript.apply(Decision(tuple(words("Dial@2.0-2.3 two.@2.3-2.6")), ()), 5.0)
    reopen_from = transcript.final_count - 2  # the buffer's final words: "DOW one."
    revision, shown_new = transcript.revise(words("Dial@1.0-1.3 one.@1.3-1.6 Dial@2.0-2.3 two.@2.3-2.6"),
                                            None, at=6.0, covered_to=2.6, reopen_from=reopen_from)
    assert transcript.final_text == "You have Dial one. Dial two." and transcript.final_count == 6
    # the words it wrote again as they were keep when and how they were first shown
    assert table(transcript) == [("You", 1.0, STREAMED, True), ("have", 1.0, STREAMED, True),
                                 ("Dial", 6.0, FINAL_PASS, True), ("one.", 3.0, STREAMED, True),
                                 ("Dial", 5.0, STREAMED, True), ("two.", 5.0, STREAMED, True)]
    assert revision.first == 2 and revision.changed == (0,) and [w.text for w in shown_new] == ["Dial"]
    # the final words it heard again are told apart from the streamed ones it judged
    assert (revision.reopened, revision.rewritten) == (("DOW", "one."), 1)
    assert (revision.streamed, revision.revised, revision.was) == (("Dial", "two."), 0, "Dial two.")
    assert transcript.lost == []


def test_a_final_word_the_fresh_pass_left_out_stays_where_voice_was_heard():
    transcript = committed("Pity@1.0-1.3 the@1.3-1.5 glutton@2.7-3.2 be.@3.6-4.0", at=1.0)
    transcript.revise(words("Pity@1.0-1.3 the@1.3-1.5 glutton@2.7-3.2 be.@3.6-4.0"), None, at=2.0)
    transcript.revise(words("Pity@1.0-1.3 the@1.3-1.5 bee.@3.6-4.0"), None, 3.0, covered_to=4.0,
                      rescue=lambda w: True, reopen_from=0)
    assert transcript.final_text == "Pity the glutton bee." and transcript.lost == []


def sure(spec: str, *probabilities: float):
    return [replace(w, probability=p) for w, p in zip(words(spec), probabilities)]


@pytest.mark.parametrize("earlier, now, final_text", [
    # the later pass is surer: its words
    (sure("DOW@1.0-1.3 one.@1.3-1.6", 0.4, 0.9), sure("Dial@1.0-1.3 one.@1.3-1.6 two.@2.0-2.4", 0.8, 0.9, 0.9),
     "Dial one. two."),
    # the earlier pass was surer of the stretch it wrote otherwise: it stays (and what follows is new)
    (sure("Dial@1.0-1.3 one.@1.3-1.6", 0.8, 0.9), sure("DOW@1.0-1.3 one.@1.3-1.6 two.@2.0-2.4", 0.4, 0.9, 0.9),
     "Dial one. two."),
    # a probability not known (a word given, not decoded): the new words
    (words("Dial@1.0-1.3 one.@1.3-1.6"), sure("DOW@1.0-1.3 one.@1.3-1.6", 0.4, 0.9), "DOW one."),
])
def test_a_final_word_heard_again_is_written_by_the_surer_pass(earlier, now, final_text):
    assert " ".join(w.text for w in surer_words(earlier, now)) == final_text
    transcript = committed(" ".join(f"{w.text}@{w.start}-{w.end}" for w in earlier), at=1.0)
    transcript._records = [replace(r, word=w) for r, w in zip(transcript._records, earlier)]
    transcript.revise(list(earlier), None, at=2.0)
    transcript.revise(now, None, at=3.0, reopen_from=0)
    assert transcript.final_text == final_text
