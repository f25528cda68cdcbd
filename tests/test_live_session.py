"""A live session's bookkeeping with scripted decoders and a scripted voice detector
(tests/live_script.py), deterministically: when the streamed pass decodes and what it is
given, when the final pass runs, what audio, prompt and given words it gets, what it
replaces and marks, where the buffer restarts and is cut, and what finish() leaves."""

import threading

import numpy as np
import pytest
from live_script import SR, FinalScript, Script, loud, loud_voice, quiet, scripted_result, token_event

from whisper_demo.live import LiveConfig, LiveSession, LiveUpdate, drain
from whisper_demo.live import worker as worker_mod
from whisper_demo.live.loops import loop_start, looped
from whisper_demo.ui.render.live_view import stats_html

# The scripted decoders give no attention: they script the agreement policy's sessions
# (tests/test_live_alignatt.py has AlignAtt's).
AGREEMENT = LiveConfig(policy="agreement", min_new_seconds=1.0, min_vote_seconds=0.0, right_context_seconds=0.3,
                       pad_lead_in=False)  # timings as scripted (test_live_final: the lead-in put in)
LATE = [("It", 0.1, 0.3), ("is", 0.3, 0.6), ("late", 0.6, 1.9)]
# a final pass given the buffer's final words as its transcript's start, writing only what
# follows them (LiveConfig.rewrite_final_seconds=0)
GIVEN = LiveConfig(**{**AGREEMENT.__dict__, "rewrite_final_seconds": 0.0})


def session_of(script, final=None, config=AGREEMENT, **args):
    return LiveSession(script, config, vad=loud_voice(), final_decoder=final or FinalScript(), **args)


class Feed:
    """Feeds a session chunk by chunk and keeps every LiveUpdate with the stream time
    (seconds fed so far) at which it came."""

    def __init__(self, session):
        self.session, self.seconds, self.updates = session, 0.0, []

    def __call__(self, audio, step=0.1):
        n = int(round(step * SR))
        for i in range(0, audio.size, n):
            self.session.add_samples(audio[i:i + n])
            self.seconds = round(self.seconds + audio[i:i + n].size / SR, 3)
            self.updates += [(self.seconds, u) for u in self.session.updates() if isinstance(u, LiveUpdate)]
        return self

    def finish(self):
        self.updates += [(self.seconds, u) for u in self.session.finish() if isinstance(u, LiveUpdate)]
        return self.updates[-1][1]

    def final_passes(self):
        return [(at, u) for at, u in self.updates if u.reason.startswith("final pass")]


def test_a_pause_gives_the_utterance_the_final_pass_text_and_marks_what_changed():
    script = Script(LATE[:2], LATE)
    final = FinalScript([("It's", 0.1, 0.6), ("late.", 0.6, 1.9)])
    feed = Feed(session_of(script, final))
    feed(loud(2.0), step=1.0)
    assert feed.updates[-1][1].committed == "It is" and feed.updates[-1][1].tentative == "late"
    feed(quiet(1.0))
    [(at, update)] = feed.final_passes()
    # the voice's last 32 ms frame ends at 2.016 s; 0.5 s later the pause is heard whole,
    # in the chunk that ends at 2.6 s: the pass decodes the buffer up to the pause's end
    assert at == 2.6 and final.calls == [(2.516, None, (), None)]
    assert update.final_words == ("It's", "late.") and update.streamed == "" and update.tentative == ""
    revision = update.revision
    # "It's" matches nothing shown; "late." confirms the tentative "late"; the committed
    # "It is" were both revised
    assert revision.changed == (0,) and revision.revised == 2
    assert revision.streamed == ("It", "is") and revision.tentative == ("late",)
    assert revision.was == "It is late"
    stats = update.stats
    assert (stats.final_passes, stats.streamed_judged, stats.revised_words) == (1, 2, 2)
    assert feed.session.final_text == "It's late."


IT_IS_LATE = [("It's", 0.1, 0.6), ("late.", 0.6, 1.9)]


def test_the_next_utterance_is_given_the_final_words_with_the_tokens_their_pass_wrote():
    # a short pause and a long one: the buffer keeps both utterances, as an offline window
    # would hold them, and each final pass starts from the final words before its own.
    # The streamed decodes hear the utterance in progress only (from 0.3 s before its
    # voice; their words' times are relative to that), the final words before as prompt.
    script = Script(LATE[:2], LATE, [("We", 0.4, 0.7)], [("We", 0.2, 0.5)])
    final = FinalScript(IT_IS_LATE, [("We", 2.9, 3.2), ("go.", 3.2, 3.7)], [("Now.", 5.9, 6.6)])
    feed = Feed(session_of(script, final, GIVEN))
    feed(loud(2.0), step=1.0)(quiet(0.8))(loud(1.0), step=1.0)(quiet(2.2))(loud(1.0), step=1.0)(quiet(0.8))
    assert len(feed.final_passes()) == 3 and feed.session.buffer.offset == 0
    # given the first utterance's final words and the tokens that pass wrote for them
    assert final.calls[1][1:] == (None, ("It's", "late."), (1, 2))
    assert final.calls[2][1:] == (None, ("It's", "late.", "We", "go."), (1, 2, 3, 4))
    # the third utterance's voice starts at 6.0 s, in the 32 ms frame from 5.984 s: its
    # streamed decode hears 5.684-7.0 s (the second's, likewise, 2.484-3.8 s)
    assert script.calls[2:] == [(1.316, "It's late."), (1.316, "It's late. We go.")]
    assert script.prefixes[2:] == [(), ()]
    _, second = feed.final_passes()[1]
    # "We" was tentative and is confirmed, "go." comes after all that was shown: nothing changed
    assert second.final_words == ("It's", "late.", "We", "go.") and second.revision.changes == ()
    assert second.revision.revised == 0
    assert feed.session.final_text == "It's late. We go. Now."


def test_a_pass_that_rewrites_the_buffer_hears_it_afresh_and_may_write_its_final_words_again():
    # LiveConfig.rewrite_final_seconds: the second pass is given no words, the first pass's
    # tokens as its draft, and what it writes replaces the buffer's final words too
    script = Script(LATE[:2], LATE, [("We", 0.4, 0.7)], [("We", 0.2, 0.5)])
    final = FinalScript(IT_IS_LATE, [("It", 0.1, 0.3), ("is", 0.3, 0.6), ("late.", 0.6, 1.9),
                                     ("We", 2.9, 3.2), ("go.", 3.2, 3.7)])
    config = AGREEMENT  # rewrite_final_seconds: every final word of the buffer
    feed = Feed(session_of(script, final, config))
    feed(loud(2.0), step=1.0)(quiet(0.8))(loud(1.0), step=1.0)(quiet(0.8))
    assert [call[2:] for call in final.calls] == [((), None), ((), None)]  # nothing given
    assert final.drafts == [None, (1, 2)]  # the first pass's tokens
    _, second = feed.final_passes()[1]
    assert second.final_words == ("It", "is", "late.", "We", "go.")
    assert second.revision.first == 0 and second.revision.reopened == ("It's", "late.")
    assert second.revision.rewritten == 1 and second.revision.tentative == ("We",)
    assert feed.session.final_text == "It is late. We go." and second.stats.lost_words == 0


def test_final_words_heard_long_enough_ago_are_settled_and_given_the_later_ones_heard_again():
    # rewrite_final_seconds=4.5: the third pass (its audio ends at 7.5 s) is given "It's
    # late." (said by 1.9 s) and hears "We go." (said by 3.7 s) again: it writes "We went."
    script = Script(LATE[:2], LATE, [("We", 0.4, 0.7)], [("We", 0.2, 0.5)])
    final = FinalScript(IT_IS_LATE, IT_IS_LATE + [("We", 2.9, 3.2), ("go.", 3.2, 3.7)],
                        [("We", 2.9, 3.2), ("went.", 3.2, 3.7), ("Now.", 5.9, 6.6)])
    config = LiveConfig(**{**AGREEMENT.__dict__, "rewrite_final_seconds": 4.5})
    feed = Feed(session_of(script, final, config))
    feed(loud(2.0), step=1.0)(quiet(0.8))(loud(1.0), step=1.0)(quiet(2.2))(loud(1.0), step=1.0)(quiet(0.8))
    assert [call[2] for call in final.calls] == [(), (), ("It's", "late.")]
    assert final.drafts == [None, (1, 2), (1, 2, 3, 4)]  # the decoder finds the given words in it
    _, third = feed.final_passes()[2]
    assert third.revision.first == 2 and third.revision.reopened == ("We", "go.")
    assert feed.session.final_text == "It's late. We went. Now."


def test_a_rewriting_pass_that_writes_nothing_goes_on_after_the_final_words_never_alone():
    # the second pass hears the buffer afresh and writes nothing: continued from the final
    # words' end with them as the prompt, then from 0.3 s before the second voice (as a
    # pass given them is: the test below); nothing is decoded alone, nothing is lost
    script = Script(LATE[:2], LATE, [("We", 0.4, 0.7)], [("We", 0.4, 0.7), ("go", 0.7, 1.0)])
    final = FinalScript(IT_IS_LATE, [], [], [("We", 0.3, 0.6), ("go.", 0.6, 1.2)])
    feed = Feed(session_of(script, final))
    feed(loud(2.0), step=1.0)(quiet(0.8))(loud(1.0), step=1.0)(quiet(0.8))
    assert [call[1] for call in final.calls] == [None, None, "It's late.", "It's late."]
    assert final.calls[2][0] == pytest.approx(final.calls[1][0] - 1.9)
    assert feed.session.final_text == "It's late. We go."


def test_a_final_pass_that_stops_after_the_given_words_is_continued_from_their_end():
    # tiny.en, given the words before, wrote the end of text where the speaker went on:
    # the rest is decoded as transcribe decodes its next window, from the given words' end
    script = Script(LATE[:2], LATE, [("We", 2.9, 3.2)])
    final = FinalScript(IT_IS_LATE, [], [("We", 0.1, 0.4), ("go.", 0.4, 0.9)])
    feed = Feed(session_of(script, final, GIVEN))
    feed(loud(2.0), step=1.0)(quiet(0.8))(loud(1.0), step=1.0)(quiet(0.8))
    assert final.calls[2][1:] == ("It's late.", (), None) and final.calls[2][0] == pytest.approx(4.308 - 1.9)
    assert feed.session.final_text == "It's late. We go."


def test_a_long_buffer_is_cut_where_its_final_pass_says():
    # Speech without a pause: at 6 s of buffer, a final pass of those 6 s, cut at the last
    # but one boundary up to 2 s before their end; the words after it stay streamed
    config = LiveConfig(policy="agreement", min_new_seconds=1.0, min_vote_seconds=0.0, pad_lead_in=False,
                        right_context_seconds=0.3, cut_after_seconds=6.0, cut_keep_seconds=2.0)
    said = [("One.", 0.2, 1.0), ("Two.", 1.2, 2.0), ("Three", 2.2, 3.0), ("four.", 3.0, 3.8), ("Five", 4.2, 5.0)]
    script = Script(*[[w for w in said if w[2] <= t] for t in range(1, 7)])
    final = FinalScript(said[:4] + [("five", 4.2, 5.0)])
    feed = Feed(session_of(script, final, config))
    feed(loud(6.0), step=1.0)
    [(at, update)] = feed.final_passes()
    assert at == 6.0 and final.calls == [(6.0, None, (), None)]
    # boundaries up to 4 s: 1.0, 2.0, 3.8: cut at 2.0 ("Three four." stays in the buffer)
    assert update.final_words == ("One.", "Two.") and feed.session.buffer.offset == 2 * SR
    assert update.trimmed_seconds == pytest.approx(2.0)
    assert "Three" in update.streamed or "Three" in update.tentative
    assert feed.session.committed_text.startswith("One. Two.")


def test_finish_makes_every_word_final_once():
    script = Script(LATE[:2], LATE)
    final = FinalScript([("It", 0.1, 0.3), ("is", 0.3, 0.6), ("late.", 0.6, 1.9)])
    feed = Feed(session_of(script, final))
    feed(loud(2.0), step=1.0)  # Stop while the speaker is still talking
    last = feed.finish()
    assert last.final and last.final_words == ("It", "is", "late.") and last.streamed == "" and last.tentative == ""
    assert final.calls == [(2.0, None, (), None)]
    assert [how for _, _, how, final_ in feed.session.committed_words() if final_] == [
        "streamed", "streamed", "final pass"]  # "It is" kept as first committed; "late." by the final pass


def test_a_final_pass_that_writes_nothing_is_retried_with_context_never_alone_and_keeps_streamed_words():
    # The first utterance is final; the second one's pass, given it, writes nothing, and so
    # does the decode from the given words' end: once more from 0.3 s before the second
    # voice, with the text before as the prompt (never alone: tiny.en writes "You" there)
    script = Script(LATE[:2], LATE, [("We", 0.4, 0.7)], [("We", 0.4, 0.7), ("go", 0.7, 1.0)])
    final = FinalScript(IT_IS_LATE, [], [], [("We", 0.3, 0.6), ("go.", 0.6, 1.2)])
    feed = Feed(session_of(script, final, GIVEN))
    feed(loud(2.0), step=1.0)(quiet(0.8))(loud(1.0), step=1.0)(quiet(0.8))
    # the second voice starts in the frame from 2.784 s: decoded from 2.484 s, prompted
    assert [(c[1], c[2]) for c in final.calls[1:]] == [(None, ("It's", "late.")), ("It's late.", ()),
                                                       ("It's late.", ())]
    assert final.calls[3][0] == pytest.approx(final.calls[2][0] - (2.484 - 1.9))
    assert feed.session.final_text == "It's late. We go."
    # when that writes nothing too, no final word covers the streamed ones: they are not
    # revised away (nothing is lost) and become final as they are at the end
    script = Script(LATE[:2], LATE)
    feed = Feed(session_of(script, FinalScript([], []), GIVEN))
    feed(loud(2.0), step=1.0)(quiet(1.0))
    [(_, update)] = feed.final_passes()
    assert update.final_words == () and update.revision.revised == 0 and update.streamed == "It is"
    feed.finish()
    assert feed.session.final_text == "It is" and feed.session.stats().lost_words == 0


def test_silence_and_short_clicks_get_no_decode():
    script, final = Script(), FinalScript()
    feed = Feed(session_of(script, final))
    feed(quiet(3.0))(np.concatenate([loud(0.05), quiet(2.0)]))
    feed.finish()
    assert script.calls == [] and final.calls == []
    assert feed.session.buffer_seconds == 0.0


class LoopsWhenGivenWords(Script):
    """A scripted decoder that, given committed words to start from, takes up their last
    word and repeats it to its token limit ("Montreal. Uh. Uh." and "Uh." for ever, as
    tiny.en did), and without them answers from its script."""

    def __call__(self, audio, prompt, draft=None, prefix=None):
        if prefix is None:
            yield from super().__call__(audio, prompt, draft, prefix)
            return
        self.calls.append((audio.size / SR, prompt))
        self.prefixes.append(prefix.words)
        words = [(w, 0.1 * i, 0.1 * i + 0.1) for i, w in enumerate(prefix.words)]
        words += [(prefix.words[-1], 1.0 + 0.01 * i, 1.0 + 0.01 * i) for i in range(30)]
        yield token_event(0, " ".join(w for w, _, _ in words))
        yield scripted_result(words)


def test_a_buffer_whose_decode_loops_on_its_given_words_is_decoded_without_them():
    said = [("Montreal.", 0.1, 0.5), ("Uh.", 0.6, 0.8), ("um,", 1.6, 1.8), ("forced", 2.4, 2.7),
            ("aligner.", 2.7, 3.2)]
    decoder = LoopsWhenGivenWords(said[:2], said[:3], said[:4], said, said)
    config = LiveConfig(policy="agreement", min_new_seconds=1.0, min_vote_seconds=0.0, right_context_seconds=0.0)
    session = session_of(decoder, config=config)
    reasons = []
    for _ in range(6):
        session.add_samples(loud(1.0))
        update = drain(session.updates())
        reasons.append(update.reason)
    # the second decode commits "Montreal. Uh."; given them, the third loops and gets no
    # vote; from then on the buffer is decoded without its committed words, and goes on
    assert decoder.prefixes[:3] == [(), (), ("Montreal.", "Uh.")]
    assert "decoded without the words committed from it" in reasons[2]
    assert decoder.prefixes[3:] == [()] * (len(decoder.prefixes) - 3)
    assert session.committed_text == "Montreal. Uh. um, forced aligner."
    assert session.stats().loops == 1


def test_a_looping_decoder_is_not_believed():
    script = Script(*[[("aaaa" * 30, 0.1, 1.0)]] * 3)
    session = session_of(script, config=LiveConfig(policy="agreement"))
    for _ in range(3):
        session.add_samples(loud(0.6))
        update = drain(session.updates())
    assert update.committed == "" and "looped" in update.reason


@pytest.mark.parametrize("text, shown", [
    # what tiny.en wrote for a hard clip's tentative words: the page showed 40 of "-f"
    ("ma entri -a -f -o -f -f -f -f -f -f for a", "ma entri -a -f -o -f -f"),
    ("hello there hello there hello there hello", "hello there hello there"),
    ("no no we are here", "no no we are here"),  # twice is speech
    ("a b c d e a b c d e a b c d e", "a b c d e a b c d e"),
    ("a b c d e f a b c d e f a b c d e f", "a b c d e f a b c d e f a b c d e f"),  # past 5 words: not looked for
    ("", ""),
])
def test_a_looped_decode_shows_its_words_up_to_the_third_copy(text, shown):
    norms = text.split()
    assert norms[:loop_start(norms)] == shown.split()


class LoopsWhenPrompted(Script):
    """A scripted decoder that, given a prompt, repeats it until its token limit (as the
    real decoder's loops end, decoders.py), and without one answers from its script."""

    TOKEN_LIMIT = 30

    def __init__(self, *answers, then_loops_unprompted: bool = False):
        super().__init__(*answers)
        self.then_loops_unprompted = then_loops_unprompted  # once the script is spent

    def __call__(self, audio, prompt, draft=None, prefix=None):
        if prompt is None and (self.answers or not self.then_loops_unprompted):
            yield from super().__call__(audio, prompt, draft, prefix)
            return
        self.calls.append((audio.size / SR, prompt))
        for step in range(self.TOKEN_LIMIT):
            yield token_event(step, " Hello there." * (step + 1))
        yield scripted_result([(word, 0.1 * i, 0.1 * i + 0.1) for i, word in
                               enumerate(["Hello", "there."] * self.TOKEN_LIMIT)])


HELLO = [("Hello", 0.1, 0.5), ("there.", 0.6, 1.1)]
HERE = [("We", 0.4, 0.6), ("are", 0.7, 0.9), ("here.", 1.0, 1.4)]
# a buffer cut soon after each utterance: the next one is prompted with its final text
LOOPS = dict(policy="agreement", min_new_seconds=1.0, pause_seconds=0.5, lead_in_seconds=0.3,
             min_vote_seconds=0.0, cut_after_seconds=3.0, cut_keep_seconds=0.5)


def test_a_decode_that_loops_gets_no_vote():
    decoder = LoopsWhenPrompted(HELLO)
    feed = Feed(session_of(decoder, FinalScript(HELLO, HERE), LiveConfig(**LOOPS)))
    feed(loud(1.2), step=1.2)(quiet(2.5))
    # the second utterance's buffer starts after a cut: it is prompted with the first's
    # final text, and the scripted decoder loops on it
    feed(loud(2.0))
    streamed = [u for _, u in feed.updates if u.decoded and u.revision is None]
    assert [prompt for _, prompt in decoder.calls] == [None, "Hello there.", "Hello there."]
    assert [u.reason for u in streamed[-2:]] == ["decoder looped; hypothesis ignored"] * 2
    assert feed.session.stats().loops == 2 and feed.updates[-1][1].tentative == ""
    # the final pass is no streamed decode: it writes what its own decoder hears
    feed(quiet(0.8))
    assert feed.session.final_text == "Hello there. We are here."


class RunOfFillers(Script):
    """A decoder whose text repeats itself on the way ("Montreal, uh, uh, uh, ...": what
    tiny.en made of a speaker's run of fillers) and then goes on with the speech, so the
    whole text passes the loop test although the text so far failed it."""

    WORDS = [("Montreal,", 0.1, 0.5)] + [("uh,", 0.5 + 0.2 * i, 0.7 + 0.2 * i) for i in range(12)] + [
        (w, 3.0 + 0.3 * i, 3.3 + 0.3 * i) for i, w in enumerate(
            "forced aligner. And so my fellow Americans, ask not what your country can do for you.".split())]

    def __call__(self, audio, prompt, draft=None, prefix=None):
        self.calls.append((audio.size / SR, prompt))
        for step in range(len(self.WORDS)):
            yield token_event(step, " ".join(w for w, _, _ in self.WORDS[:step + 1]))
        yield scripted_result(self.WORDS)


def test_a_decode_judged_by_its_whole_text_not_the_text_so_far():
    # Stopping a decode as soon as its text so far looked like a loop left a buffer of
    # real speech with no vote until its audio was dropped (20 s of a 57 s recording).
    decoder = RunOfFillers()
    partial = " ".join(w for w, _, _ in RunOfFillers.WORDS[:13])  # "Montreal," and twelve "uh,"
    assert looped(partial) and not looped(scripted_result(RunOfFillers.WORDS).text)  # the premise
    config = LiveConfig(policy="agreement", min_new_seconds=1.0, min_vote_seconds=0.0, right_context_seconds=0.0)
    session = session_of(decoder, config=config)
    for _ in range(10):  # the words end by 8.1 s
        session.add_samples(loud(1.0))
        drain(session.updates())
    assert session.stats().loops == 0
    assert session.committed_text.startswith("Montreal, uh, uh,") and "fellow Americans" in session.committed_text


def test_a_buffer_that_keeps_looping_on_its_prompt_is_decoded_without_it():
    # A buffer whose every decode loops on its prompt would never commit a word (base
    # did this to 58 words of running speech, prompted "... This is the Montreal Forest
    # Aligner."). One loop is common and the prompt usually right, so only loops that
    # persist (loop_reset_after in a row) drop it, and only until that buffer is cut.
    decoder = LoopsWhenPrompted(HELLO, HELLO, *[HERE] * 4)
    config = LiveConfig(**dict(LOOPS, min_new_seconds=0.5, loop_reset_after=3))
    feed = Feed(session_of(decoder, FinalScript(HELLO, HERE), config))
    feed(loud(1.2), step=1.2)(quiet(2.5))(loud(2.5), step=0.5)
    updates = [u for _, u in feed.updates]
    unprompted = [u for u in updates if u.stats.unprompted]
    # the panel says so while that buffer lasts, and the update that decided it says why
    assert unprompted and unprompted[0].reason.endswith("3 in a row: this buffer is decoded without the prompt")

    def tiles(update):
        return stats_html(worker_mod.LiveView(1, "", "", update, None, update.stats, None, False))
    assert "decoded without one until it is cut" in tiles(unprompted[0])
    # three loops on "Hello there.", then the same buffer unprompted: its words commit
    prompts = [prompt for _, prompt in decoder.calls]
    assert prompts[:6] == [None, None] + ["Hello there."] * 3 + [None]
    assert "We are" in feed.updates[-1][1].committed
    feed(quiet(2.5))(loud(1.0), step=1.0)
    assert not feed.updates[-1][1].stats.unprompted
    assert feed.session.final_text == "Hello there. We are here."
    # the next utterance (a new buffer after a cut) is prompted again
    assert decoder.calls[-1][1] == "Hello there. We are here."


def test_loops_are_counted_in_a_row_per_buffer():
    # A buffer that loops even without its prompt is cut; the next buffer, prompted again, must get its own count of loops in a row, not inherit one
    # already past loop_reset_after (it would then keep its prompt for ever).
    decoder = LoopsWhenPrompted(HELLO, then_loops_unprompted=True)
    config = LiveConfig(**dict(LOOPS, min_new_seconds=0.5, loop_reset_after=2))
    feed = Feed(session_of(decoder, FinalScript(HELLO, HELLO, HELLO), config))
    feed(loud(1.2))(quiet(2.5))
    for utterance in range(2):
        calls_before = len(decoder.calls)
        feed(loud(1.5), step=0.5)(quiet(2.5))
        prompts = [prompt for _, prompt in decoder.calls[calls_before:]]
        assert prompts[:3] == ["Hello there." if utterance == 0 else "Hello there. Hello there."] * 2 + [None]


def test_add_audio_is_thread_safe_and_the_idle_clock_moves():
    now = [100.0]
    session = session_of(Script(), config=AGREEMENT, clock=lambda: now[0])
    threads = [threading.Thread(target=lambda: [session.add_audio(48000, np.zeros(4800, np.int16))
                                                for _ in range(50)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    drain(session.finish())  # the resampler's last few samples come with the end of the stream
    assert session.audio_seconds == pytest.approx(4 * 50 * 0.1)
    now[0] = 160.0
    assert session.idle_seconds() == pytest.approx(60.0)
    session.add_audio(SR, np.zeros(10, np.float32))
    assert session.idle_seconds() == 0.0


def test_audio_lost_when_received_audio_falls_behind_the_clock():
    """Chunks late but complete: nothing lost; a missing chunk: its length shows as lost."""
    now = [100.0]
    session = session_of(Script(), config=AGREEMENT, clock=lambda: now[0])
    chunk = np.zeros(SR // 2, dtype=np.float32)
    for t in (0.0, 0.5, 1.2, 1.3, 2.0):  # jittery, bunched: all 5 chunks there
        now[0] = 100.0 + t
        session.add_samples(chunk)
    assert session.stats().lost_seconds == 0.0
    now[0] = 100.0 + 4.0  # 2.0 s of wall clock, one 0.5 s chunk: 1.5 s never arrived
    session.add_samples(chunk)
    assert session.stats().lost_seconds == pytest.approx(1.5)
    now[0] = 100.0 + 6.0  # nothing more arrives: the gap grows with the clock...
    assert session.stats().lost_seconds == pytest.approx(3.0)
    drain(session.finish())  # ...until the session is finished
    assert session.stats().lost_seconds == pytest.approx(1.5)


def test_a_stalled_decoder_drops_the_oldest_audio_and_says_so():
    session = session_of(Script(), config=LiveConfig(policy="agreement", max_backlog_seconds=2.0))
    for _ in range(5):
        session.add_samples(quiet(1.0))
    update = drain(session.finish())
    assert update.stats.dropped_seconds == pytest.approx(3.0)




def test_a_pause_heard_while_a_streamed_decode_runs_stops_it_for_the_final_pass():
    # In real time audio keeps coming while a decode runs: when it completes a pause, the
    # streamed decode is no longer needed (the final pass hears the whole utterance), and
    # finishing it would only make the final text wait.
    session = None

    class SlowScript(Script):
        def __call__(self, audio, prompt, draft=None, prefix=None):
            session.add_samples(quiet(0.8))  # what arrived while this decode ran
            yield from super().__call__(audio, prompt, draft, prefix)

    script = SlowScript(LATE)
    session = session_of(script, FinalScript(IT_IS_LATE))
    session.add_samples(loud(2.0))
    updates = [u for u in session.updates() if isinstance(u, LiveUpdate)]
    assert [u.reason for u in updates] == ["a pause was heard while decoding: the final pass takes over",
                                           "final pass at a pause: the utterance heard whole"]
    assert updates[0].committed == "" and updates[1].final_words == ("It's", "late.")


def test_a_long_utterance_is_heard_by_the_streamed_decodes_from_a_committed_sentence_on():
    # 7 s of speech without a pause, a sentence every three words: once the utterance in
    # progress outgrows 4 s, each streamed decode starts at a committed word's end (a
    # sentence's when one fits), with the words before as its prompt; the final pass
    # still hears the whole buffer
    said = [(f"w{i}" + ("." if i % 3 == 2 else ""), 0.1 + 0.5 * i, 0.5 + 0.5 * i) for i in range(14)]
    heard = []

    def decoder(audio, prompt, draft=None, prefix=None):
        end = session.buffer.end / SR
        start = round(end - audio.size / SR, 3)
        heard.append((start, round(end, 3), prompt))
        words = [(w, a - start, b - start) for w, a, b in said if a >= start and b <= end]
        yield token_event(0, " ".join(w for w, _, _ in words))
        yield scripted_result(words)

    config = LiveConfig(policy="agreement", min_new_seconds=1.0, min_vote_seconds=0.0, right_context_seconds=0.3,
                        pad_lead_in=False,
                        streamed_window_seconds=4.0, streamed_keep_seconds=1.5)
    final = FinalScript(said)
    session = session_of(decoder, final, config)
    feed = Feed(session)
    feed(loud(7.0), step=1.0)
    feed.finish()
    starts = [start for start, _, _ in heard]
    assert starts == sorted(starts) and starts[0] == 0.0 and starts[-1] > 0.0
    ends = {round(b, 3): w for w, _, b in said}
    for start, end, prompt in heard:
        if start > 0.0:
            assert start in ends and prompt.endswith(ends[start])  # the words before: the prompt
            assert end - start <= 4.0 + 1.0  # within the window, and one decode's growth
    assert any(ends[start].endswith(".") for start in starts if start > 0.0)
    assert final.calls == [(7.0, None, (), None)]
    assert session.final_text == " ".join(w for w, _, _ in said)
