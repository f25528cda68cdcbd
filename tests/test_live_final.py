"""The final pass (whisper_demo/live/final_pass.py, its pure pieces in final_words.py): its decode is openai-whisper's
transcribe of the utterance's audio with the prompt before it, token for token; which of
its words are new; where a long buffer is cut; and the revision the page marks."""

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from whisper_demo.decode import transcribe
from whisper_demo.events import DecodeOptions, DecodeResult
from whisper_demo.live import LiveConfig, model_session
from whisper_demo.live import decoders as decoders_module
from whisper_demo.live.decoders import final_options
from whisper_demo.live.final_words import cut_point, new_final_words

from live_script import scripted_result, timed_words as timed
from whisper_demo.live.revision import compare

SR = 16000


# ------------------------------------------------------------------ the real model


def _span_in(stream: np.ndarray, audio: np.ndarray) -> tuple:
    """Where `audio`, less the silence a final pass may put before it (LiveConfig.pad_lead_in),
    lies in `stream`: (start, end) samples. Fails when it is not one contiguous slice of it."""
    voiced = np.flatnonzero(audio)
    assert voiced.size, "a final decode of nothing but silence"
    first = voiced[0]
    pattern = audio[first:first + 64]
    candidates = np.flatnonzero(stream == pattern[0])
    starts = [i for i in candidates if np.array_equal(stream[i:i + pattern.size], pattern)]
    assert len(starts) == 1, f"{len(starts)} places in the stream match the decoded audio"
    lead = first  # samples before the first nonzero one: the stream's own silence, or padding
    start = starts[0] - lead
    body = audio[first:]
    assert np.array_equal(stream[starts[0]:starts[0] + body.size], body), "not one slice of the stream"
    # what is before the first nonzero sample is silence in the stream too, or padding
    return max(0, start), starts[0] + body.size


@pytest.mark.parametrize("rewrite", [True, False])  # rewrite_final_seconds 30 (the default) or 0
def test_a_final_pass_is_the_plain_offline_decode_of_its_audio_with_its_prompt_and_given_words(
        tiny_model, clip, monkeypatch, rewrite):
    """Two recordings with a pause between them, the buffer cut after the first (a short
    cut_after_seconds): the first recording's final pass is given nothing, the ones after
    the cut are prompted with the final text before them. A pass over a buffer that already
    holds final words hears it afresh with the pass before's tokens as its draft
    (LiveConfig.rewrite_final_seconds), or, told not to, goes on from the tokens the pass
    before wrote for them (its prefix, timestamps included). Every decode writes exactly
    the tokens of a plain decode (transcribe, the default options: openai-whisper's,
    test_longform.py) of the same audio with the same prompt and prefix, no draft; and that
    audio is the utterance's own: one slice of the stream, inside the recording it belongs to."""
    calls = []  # (audio heard, options, its DecodeResult) of every final-pass decode
    real = decoders_module.stream_transcribe

    def recording(model, audio, options):
        if options.single_window:  # a streamed decode (it reads one window)
            return real(model, audio, options)

        def kept():
            for item in real(model, audio, options):
                if isinstance(item, DecodeResult):
                    calls.append((audio.copy(), options, item))
                yield item
        return kept()

    monkeypatch.setattr(decoders_module, "stream_transcribe", recording)
    silence = np.zeros(int(2.5 * SR), np.float32)
    first, second = clip("short_3s.wav"), clip("jfk.wav")
    stream = np.concatenate([silence[:SR // 2], first, silence, second, silence])
    second_starts = SR // 2 + first.size + silence.size
    session = model_session(tiny_model, DecodeOptions(), LiveConfig(cut_after_seconds=6.0, cut_keep_seconds=1.0,
                                                                     rewrite_final_seconds=30.0 if rewrite else 0.0))
    for start in range(0, stream.size, SR // 10):
        session.add_samples(stream[start:start + SR // 10])
        list(session.updates())
    list(session.finish())

    unprompted = [c for c in calls if c[1].prompt is None and c[1].prefix_tokens is None]
    prompted = [c for c in calls if c[1].prompt is not None]
    given = [c for c in calls if c[1].prefix_tokens]
    drafted = [c for c in calls if c[1].draft_tokens]
    assert prompted and "door" in prompted[0][1].prompt.lower()
    if rewrite:  # a later pass of a buffer hears it from its start, drafted by the pass before
        assert not given and drafted
        earlier_tokens = [tuple(c[2].tokens) for c in calls]
        assert all(tuple(c[1].draft_tokens) in earlier_tokens for c in drafted)  # a decode before it wrote it
    else:
        assert len(unprompted) == 1 and given and not drafted  # every kind of final decode was made
        assert any(t >= 50257 for t in given[0][1].prefix_tokens)  # the timestamps the pass before wrote
    for heard_audio, options, mine in calls:
        start, end = _span_in(stream, heard_audio)
        inside_first = end <= second_starts
        inside_second = start >= second_starts - SR  # from the pause's last second: a lead-in
        assert inside_first or inside_second, (start / SR, end / SR)
        plain = transcribe(tiny_model, heard_audio, DecodeOptions(prompt=options.prompt,
                                                                  prefix_tokens=options.prefix_tokens,
                                                                  word_timestamps=True))
        assert mine.tokens == plain.tokens, (mine.text, plain.text)


def test_the_final_pass_decodes_as_transcribe_does():
    streamed = DecodeOptions(timestamps=False, temperature_fallback=False, attention=True, word_probabilities=True,
                             beam_size=3, cache="static", precision="int8", single_window=True,
                             encode_audio_only=True)
    options = final_options(streamed)
    assert options.timestamps and options.temperature_fallback and options.word_timestamps
    assert not options.attention and not options.single_window and options.beam_size == 1
    assert not options.encode_audio_only  # a whole window, as the streamed pass does not
    assert options.cache == "static" and options.precision == "int8"  # the streamed pass's, unless told
    assert final_options(streamed, "exact").precision == "exact"  # LiveConfig(final_precision="exact")
    assert options.seed == DecodeOptions().seed  # a window that falls back draws the same every run
    assert options.fallback_keeps_best  # faster-whisper's rule when every temperature fails


def test_a_session_s_final_pass_decodes_in_its_streamed_precision_unless_told(tiny_model):
    # the fast mode's final pass is as accurate and cheaper (docs/live.md); "exact" still
    # gives openai-whisper's arithmetic, and a decoder switched mid-session is followed
    fast = DecodeOptions(cache="static", precision="int8")
    assert model_session(tiny_model, fast).final.decoder.options.precision == "int8"
    exact = model_session(tiny_model, fast, LiveConfig(final_precision="exact"))
    assert exact.final.decoder.options.precision == "exact"
    session = model_session(tiny_model, DecodeOptions(cache="static"))
    assert session.final.decoder.options.precision == "exact"
    session.set_decoder(decoders_module.model_decoder(tiny_model, replace(fast, cache="off"), alignatt=True))
    assert (session.final.decoder.options.precision, session.final.decoder.options.cache) == ("int8", "off")


# ------------------------------------------------------------------ pure pieces


def test_the_given_words_are_left_out_of_the_final_words():
    result = scripted_result([("It's", 0.1, 0.5), ("late.", 0.5, 1.0), ("We", 2.0, 2.3), ("go.", 2.3, 2.8)])
    new = new_final_words(result, 10.0, ("It's", "late."))
    assert [(w.text, w.start) for w in new] == [("We", 12.0), ("go.", 12.3)]
    # given words spelt otherwise (a retry's word timing): what starts after them is new
    assert [w.text for w in new_final_words(result, 10.0, ("Its", "late"))] == ["We", "go."]


def test_a_given_word_written_otherwise_is_not_written_twice():
    # the pass before wrote "Montreal. Forest." (ending at 15.94); this one hears the same
    # "forced" as "First." over 14.96-16.36: that is the given word again, not a new one.
    # Only the given words left unmatched are taken back, and only inside their time.
    words = [("Montreal.", 1.08, 3.46), ("First.", 4.96, 6.36), ("A", 7.8, 9.06), ("liner.", 9.06, 9.38)]
    result = scripted_result(words)
    new = new_final_words(result, 10.0, ("Montreal.", "Forest."), given_end=15.94)
    assert [w.text for w in new] == ["A", "liner."]
    # a word that starts after the given words' time is new, however it is spelt
    assert [w.text for w in new_final_words(result, 10.0, ("Montreal.", "Forest."), given_end=14.5)] == [
        "First.", "A", "liner."]
    # every given word matched: nothing is taken back, whatever the times say
    assert [w.text for w in new_final_words(result, 10.0, ("Montreal.",), given_end=19.0)] == [
        "First.", "A", "liner."]
    # one given word unmatched takes back at most one
    assert [w.text for w in new_final_words(result, 10.0, ("Montreal.", "Forest."), given_end=30.0)] == [
        "A", "liner."]


def test_a_long_buffer_is_cut_at_the_last_but_one_boundary_before_its_last_seconds():
    words = timed("It@1-1.3 is@1.3-1.5 late.@1.5-2.0 We@3-3.3 go.@3.3-3.6 Now@4-4.3 home@4.3-16")
    # sentence ends 2.0 and 3.6 and segment ends a few ms after them name two boundaries:
    # the last but one, so "We go." stays in the buffer as context for what follows
    assert cut_point(words, [2.02, 3.62], None, 15.0) == pytest.approx(2.02)
    # one boundary: there; none: after the last word that ends in time
    assert cut_point(timed("a@1-2 b.@2-3 c@3-16"), [], None, 15.0) == pytest.approx(3.0)
    assert cut_point(timed("a@1-2 b@2-3 c@3-16"), [], None, 15.0) == pytest.approx(3.0)
    assert cut_point(timed("a@1-16"), [], None, 15.0) is None
    # the words already final stay before the cut: boundaries inside them are not cut points
    assert cut_point(words, [2.02, 3.62], 3.6, 15.0) == pytest.approx(3.62)
    # an interim pass (the buffer kept) with no boundary after the final words: after the
    # last word that ends in time, not at the final words' end again (no progress)
    sentence = timed("I@7-7.3 have@7.3-7.6 the@7.6-7.8 cold@7.8-8.2 so@8.3-8.5 this@8.5-9 sounds@9-13")
    assert cut_point(sentence, [6.6, 14.0], 6.6, 12.0, keep_last_sentence=False) == pytest.approx(9.0)
    assert cut_point(sentence, [6.6, 14.0], 6.6, 12.0) == pytest.approx(6.6)  # a cut waits for a boundary


def test_a_revision_marks_only_the_words_that_differ_from_what_was_shown():
    committed, tentative = timed("a@0-1 small@1-2 dark@2-3"), timed("walk@3-4")
    final = timed("A@0-1 small@1-2 dog@2-3 walked@3-4")
    changes, revised, kept = compare(committed, tentative, final)
    assert changes == ((2, 4, "dark walk"),)  # one run, with what the page showed there
    assert revised == 1  # "dark" was committed; "walk" was tentative
    assert kept == {0: 0, 1: 1}
    # a tentative word the final pass confirms is no change
    assert compare(committed[:2], timed("dog@2-3"), timed("a@0-1 small@1-2 dog.@2-3"))[:2] == ((), 0)
    # words after the end of what was shown are new, not changed; a word inserted among them is a change
    assert compare(committed, (), timed("a@0-1 small@1-2 dark@2-3 dog@3-4"))[0] == ()
    assert compare(committed, (), timed("a@0-1 very@1-1.5 small@1.5-2 dark@2-3"))[0] == ((1, 2, ""),)


def test_the_page_marks_each_changed_run_once_with_what_it_replaced():
    from whisper_demo.ui.render.live_view import transcript_html

    shown = transcript_html(("A", "small", "dog", "walked", "along."), "then", "we", changes=[(2, 4, "dark walk")])
    marks = re.findall(r'<mark class="wk-revised" title="([^"]*)"[^>]*>([^<]*)</mark>', shown)
    assert marks == [("the final pass changed this; the page showed: dark walk", "dog walked")]
    # final and streamed words are both committed (what Copy text and the page's readers take)
    committed = re.sub(r"<[^>]+>", "", re.search(r'<span class="wk-committed".*?</span></span>', shown).group(0))
    assert committed == "A small dog walked along. then"
    assert "wk-tentative" in shown and ">we<" in shown


# ---------------------------------------------------------------------- coverage (pure, scripted)


from whisper_demo.live.final_words import final_words, heard, result_words  # noqa: E402


class Decodes:
    """The final decoder as final_words calls it, scripted: each call answers the next list
    of (word, start, end), times relative to its audio's start; records (start s, prompt)."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), []

    def __call__(self, start, prompt, given):
        self.calls.append((round(start / 16000, 3), prompt, given))
        words = self.answers.pop(0) if self.answers else []
        return self._result(words)

    def _result(self, words):
        yield from ()
        return scripted_result(words)


def run_final_words(decodes, voice, prompt="Before.", timed=False, **kw):
    """final_words over a buffer from 0 whose voice detector heard `voice` ((start, end) s)."""
    def voiced(a, b):
        return sum(max(0.0, min(b, e) - max(a, s)) for s, e in voice)

    def next_voice(after):
        return next((s for s, _ in voice if s > after), None)

    gen = final_words(decodes, 0, prompt, [], None, voiced=voiced, voice_end=max(e for _, e in voice),
                      next_voice=next_voice, prompt_chars=200, **kw)
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        result, words, continued = stop.value
    return (words if timed else [w.text for w in words]), continued


@pytest.mark.parametrize("answers, voice, words, calls", [
    # covers the voice: one decode
    ([[("Pity", 0.3, 0.7), ("the", 0.7, 0.9), ("world.", 0.9, 5.8)]], [(0.3, 6.0)],
     ["Pity", "the", "world."], [(0.0, "Before.")]),
    # ends seconds before the voice does: continued from its last word's end, the text before as the prompt
    ([[("Pity", 0.3, 0.7), ("the", 0.7, 0.9), ("world,", 0.9, 1.2), ("or", 1.2, 1.5)],
      [("else", 0.1, 0.5), ("this", 0.5, 0.8), ("glutton", 0.8, 1.4), ("be.", 1.4, 4.4)]], [(0.3, 6.0)],
     ["Pity", "the", "world,", "or", "else", "this", "glutton", "be."],
     [(0.0, "Before."), (1.5, "Before. Pity the world, or")]),
    # the continuation writes nothing, nor does the decode from the next voice: the words stay as they are
    ([[("Pity", 0.3, 0.7)], [], []], [(0.3, 1.0), (3.0, 5.0)], ["Pity"],
     [(0.0, "Before."), (0.7, "Before. Pity"), (2.7, "Before. Pity")]),
    # the decode from the next voice's lead-in writes the rest
    ([[("Pity", 0.3, 0.7)], [], [("the", 0.3, 0.6), ("world.", 0.6, 2.2)]], [(0.3, 1.0), (3.0, 5.0)],
     ["Pity", "the", "world."], [(0.0, "Before."), (0.7, "Before. Pity"), (2.7, "Before. Pity")]),
    # its last word's timing runs on across a pause into more voice (the decode skipped that
    # speech, its segment ends with it): the word ends where the pause starts, and the pass
    # is continued from there
    ([[("Pity", 0.3, 0.7), ("the", 0.7, 0.9), ("world.", 0.9, 6.0)], [("Or", 0.7, 1.0), ("else.", 1.0, 4.5)]],
     [(0.3, 1.4), (2.0, 6.0)], ["Pity", "the", "world.", "Or", "else."],
     [(0.0, "Before."), (1.412, "Before. Pity the world.")]),
    # the continuation opens with the last words before it again (it starts inside their
    # audio): those are not written twice
    ([[("Of", 0.3, 0.6), ("course.", 0.6, 4.0)], [("Of", 0.2, 0.4), ("course.", 0.4, 0.9), ("Aligner.", 1.5, 2.5)]],
     [(0.3, 1.2), (1.6, 4.0)], ["Of", "course.", "Aligner."], [(0.0, "Before."), (1.208, "Before. Of course.")]),
    # a word written where the detector heard no voice is not written ("You" in a pause)
    ([[("Hello.", 0.3, 1.8), ("You", 3.0, 3.4)]], [(0.3, 2.0)], ["Hello."], [(0.0, "Before.")]),
    # a decode that looped is believed up to the phrase's third copy, and continued from there
    ([[(w, 0.3 + i * 0.3, 0.5 + i * 0.3) for i, w in enumerate(["Montreal", "for", "Styliner."] * 8)],
      [("I", 0.1, 0.3), ("hardly", 0.3, 0.6), ("know", 0.6, 0.8), ("her.", 0.8, 1.5)]], [(0.3, 4.0)],
     ["Montreal", "for", "Styliner."] * 2 + ["I", "hardly", "know", "her."],
     [(0.0, "Before."), (2.0, "Before. Montreal for Styliner. Montreal for Styliner.")]),
])
def test_a_final_pass_covers_the_voice_it_was_given(answers, voice, words, calls):
    decodes = Decodes(*answers)
    written, _ = run_final_words(decodes, voice)
    assert written == words
    assert [(start, prompt) for start, prompt, _ in decodes.calls] == calls


def test_a_continuation_that_only_writes_the_last_word_again_lengthens_that_word():
    # word timing ended "Stalina?" at 0.8 s of a word said to 2.4 s; the continuation from
    # 0.8 s heard the rest of it and wrote it again: one word, ending where its copy ends (so
    # the streamed copy over that audio counts as written over), and the pass goes on from there
    decodes = Decodes([("Of", 0.3, 0.6), ("Stalina?", 0.6, 0.8)], [("Stalina!", 0.0, 1.6)],
                      [("Aligner.", 0.6, 2.0)])
    voice = [(0.3, 2.4), (2.9, 5.0)]
    words, _ = run_final_words(decodes, voice, timed=True)
    assert [(w.text, w.start, round(w.end, 2)) for w in words] == [
        ("Of", 0.3, 0.6), ("Stalina?", 0.6, 2.4), ("Aligner.", 3.0, 4.4)]
    assert [start for start, _, _ in decodes.calls] == [0.0, 0.8, 2.4]


def test_a_word_ends_where_a_pause_in_its_voice_starts_only_when_more_voice_follows_in_its_time():
    from whisper_demo.live.final_words import ending_at_its_pause
    from whisper_demo.live.words import TimedWord

    def voiced_by(voice):
        return lambda a, b: sum(max(0.0, min(b, e) - max(a, s)) for s, e in voice)

    key = TimedWord("key.", 23.46, 39.34, 0.9)
    # 16 s of timing over "key." and, after a 0.8 s pause, speech it did not write
    ended = ending_at_its_pause(key, voiced_by([(20.0, 24.07), (24.86, 39.5)]))
    assert (ended.text, ended.start) == ("key.", 23.46) and 24.07 <= ended.end < 24.07 + 0.04
    # into silence only (the recording's end, a long pause): as it was
    assert ending_at_its_pause(key, voiced_by([(20.0, 24.07)])) == key
    # voice all along (a long word, a slow speaker), or a pause shorter than 0.3 s: as it was
    assert ending_at_its_pause(key, voiced_by([(20.0, 40.0)])) == key
    assert ending_at_its_pause(key, voiced_by([(20.0, 24.07), (24.3, 39.5)])) == key


def test_no_decode_is_made_alone_without_context_after_the_first():
    # the session's first words (no prompt, nothing given) are the only decode without context
    decodes = Decodes([("Pity", 0.3, 0.7)], [], [])
    run_final_words(decodes, [(0.3, 1.0), (3.0, 5.0)], prompt=None)
    assert [prompt for _, prompt, _ in decodes.calls] == [None, "Pity", "Pity"]


def test_a_segment_whisper_doubts_with_a_word_in_silence_is_not_written():
    # "Now and forevermore." over a recording's tail: no_speech_prob 0.65 (under transcribe's
    # log-probability test, so transcribe keeps it), "forevermore." where no voice was heard
    from whisper_demo.events import Segment
    from whisper_demo.timing import Word

    def result(no_speech_prob):
        said = scripted_result([("voicemail.", 0.3, 1.0)])
        tail = Segment(1.0, 2.0, " Now and forevermore.", [], [Word(" Now", 1.0, 1.1), Word(" and", 1.1, 1.2),
                                                               Word(" forevermore.", 1.6, 2.0)],
                       avg_logprob=-0.77, no_speech_prob=no_speech_prob)
        said.segments.append(tail)
        return said

    def voiced(a, b):
        return max(0.0, min(b, 1.1) - max(a, 0.3))

    assert [w.text for w in result_words(result(0.65), 0.0, voiced)] == ["voicemail."]
    # one Whisper does not doubt keeps its words the detector heard
    assert [w.text for w in heard(result_words(result(0.1), 0.0, voiced), voiced)] == ["voicemail.", "Now", "and"]


# ---------------------------------------------------------------------- an invented tail

from whisper_demo.events import Segment  # noqa: E402
from whisper_demo.hallucination import invented_tail  # noqa: E402
from whisper_demo.timing import Word  # noqa: E402


def _segment(*words):
    """A segment of (text, start, end, probability) words."""
    return Segment(words[0][1], words[-1][2], "".join(w for w, *_ in words), [],
                   [Word(text, start, end, p) for text, start, end, p in words])


SAID = _segment((" the", 7.46, 7.64, 0.9), (" next", 7.64, 7.96, 0.9), (" representative.", 8.44, 9.2, 0.8))
# tiny.en's closing inventions: words squeezed into no time, improbable
THANKS = _segment((" Thank", 9.2, 9.2, 0.3), (" you.", 9.2, 9.3, 0.6))
ONE = _segment((" one.", 9.3, 9.66, 0.05))


@pytest.mark.parametrize("segments, audio_end, dropped", [
    ([SAID, THANKS, ONE], 10.04, 2),  # each invented one at the end goes
    ([SAID, THANKS], 10.04, 1),
    ([SAID], 10.04, 0),  # speech that ends the audio stays
    ([SAID, THANKS], 12.0, 0),  # 2.7 s of audio after it: not the tail
    ([SAID, THANKS, SAID], 10.04, 0),
    # hesitation heard over seconds of audio scores as invented ("uh"s last no time) but is not squeezed
    ([SAID, _segment((" Montreal,", 9.3, 9.9, 0.98), (" uh,", 11.0, 11.0, 0.12), (" uh,", 12.2, 12.2, 0.9),
                     (" uh.", 13.5, 13.5, 0.9))], 14.0, 0),  # an invented-looking segment before speech is transcribe's rule's to judge
    # a segment of words the decode was given (probability unknown) is never judged
    ([SAID, _segment((" Thank", 9.2, 9.2, float("nan")), (" you.", 9.2, 9.3, float("nan")))], 10.04, 0),
    ([], 1.0, 0),
])
def test_segments_invented_at_the_end_of_the_audio_are_counted(segments, audio_end, dropped):
    assert invented_tail(segments, audio_end) == dropped


def test_the_invented_tail_leaves_the_decode_with_its_tokens():
    from whisper_demo.live.final_words import without_invented_tail

    said = replace(SAID, tokens=[50364, 264, 958, 50824])
    thanks = replace(THANKS, tokens=[50824, 1044, 291, 50829])
    result = replace(scripted_result([]), segments=[said, thanks], tokens=said.tokens + thanks.tokens,
                     text=said.text + thanks.text)
    kept = without_invented_tail(result, 10.04)
    assert kept.segments == [said] and kept.tokens == said.tokens and kept.text == said.text
    assert without_invented_tail(result, 12.0) is result  # nothing invented: the decode as it was


EVAL_DEV = Path(__file__).resolve().parents[2] / "shared" / "eval-dev"
# the text before it in a chained read session, as the final pass was prompted there
BEFORE = ("ng up or press the pound key. After the tone say your busy message and then press the pound key. To lock "
          "or unlock the conference, when a conference is locked, only conference administrators can join.")


@pytest.mark.parametrize("tail_s", [0.3, 0.5, 0.8])
def test_a_final_decode_that_invents_a_closing_phrase_after_the_speech_does_not_write_it(tiny_model, tail_s):
    # a real recording, then the pause that made its final pass due: prompted with the text
    # before, tiny.en closes the audio with a phrase nobody said ("Thank you.", "And we'll
    # see you again."); unprompted it does not
    from whisper_demo.audio import load_audio
    from whisper_demo.live.decoders import model_final_decoder
    from whisper_demo.live.final_words import without_invented_tail

    speech = load_audio(EVAL_DEV / "audio" / "asterisk_queue-periodic-announce.wav")
    audio = np.concatenate([np.zeros(int(0.3 * 16000), np.float32), speech, np.zeros(int(tail_s * 16000), np.float32)])
    decode = model_final_decoder(tiny_model, DecodeOptions(cache="static"))

    def decoded(prompt):
        return [item for item in decode(audio, prompt, None) if isinstance(item, DecodeResult)][0]

    prompted = decoded(BEFORE)
    assert not prompted.text.rstrip().endswith("representative."), prompted.text  # it invents
    kept = without_invented_tail(prompted, audio.size / 16000)
    assert kept.text.rstrip().endswith("next available representative."), kept.text
    plain = decoded(None)
    assert without_invented_tail(plain, audio.size / 16000) is plain


def test_read_speech_that_does_not_pause_has_its_corrections_within_seconds_not_at_the_cut(tiny_model):
    # 30 s of a read recording whose speaker never pauses for 0.5 s: the streamed pass
    # commits "dial two now", "dial 500", "and enter asterisk"; the final pass writes "dial 2
    # now", "502", "an inter asterisk". Without interim passes the first final pass came at
    # the buffer's 25 s cut, 18-23 s after those words; with them, every few seconds.
    from whisper_demo.audio import load_audio
    from whisper_demo.bench.feeds import feed_fast

    speech = load_audio(EVAL_DEV / "audio" / "asterisk_demo-instruct.wav")[: 30 * 16000]
    audio = np.concatenate([np.zeros(8000, np.float32), speech])
    options = DecodeOptions(cache="static")

    def corrections(config):
        fed = feed_fast(tiny_model, options, audio, 0.1, config)
        late = [at - end for (_, _, end), at, how in zip(fed.words, fed.commit_times, fed.commit_rules)
                if how == "final pass"]
        return fed, late

    with_interim, late = corrections(LiveConfig(interim_final_seconds=8.0))
    without, late_without = corrections(LiveConfig(interim_final_seconds=0.0))
    print(f"\ncorrections, s after the word: with interim passes {sorted(late)}, without {sorted(late_without)}")
    assert late and late_without
    # measured: corrections 4.1 s (median) / 11.0 s (most) after their word with interim
    # passes, 16.9 / 20.8 s without (the cut's pass: what a reader saw until then was wrong)
    assert np.median(late_without) > 12.0
    assert np.median(late) < 8.0 and max(late) < 14.0  # the interim passes' spacing, not the buffer's
    assert with_interim.final_passes > without.final_passes
    assert with_interim.lost_words == 0
    # the same final text up to a few words (measured: 3 edits of ~75 words)
    from whisper_demo.text import word_edits
    assert word_edits(with_interim.committed, without.committed) <= 6, (with_interim.committed, without.committed)


def test_speech_a_final_decode_skipped_is_written_by_a_continuation_not_covered_by_a_long_word(tiny_model):
    # Five read recordings chained with pauses, fed as recorded. A final decode of the buffer
    # wrote "... and then press the pound key." and stopped; word timing ran "key." on over
    # the next 15 s of speech ("Asterisk is an open source, full featured PBX ... platform").
    # Taken at its word, that speech was written (covered): no continuation was made and its
    # 23 streamed words were removed with nothing in their place (none counted lost, as a
    # word was over their time); a later pass, surer of "key." than of the 12 words after
    # it, removed those too: 39 errors where offline makes 7.
    from whisper_demo.bench.feeds import feed_fast
    from whisper_demo.bench.layouts import load_sessions
    from whisper_demo.text import word_edits, words

    session = next(s for s in load_sessions(EVAL_DEV, subset="dev_ordinary", layout="chained")
                   if "asterisk_vm-opts-full" in s["id"])
    fed = feed_fast(tiny_model, DecodeOptions(cache="static", precision="int8"), session["audio"], 0.1, LiveConfig())
    said = words(fed.committed)
    for phrase in ("open source full featured", "operating system", "erase your temporary greeting"):
        assert phrase in " ".join(said), fed.committed
    assert fed.lost_words == 0
    assert word_edits(fed.committed, session["reference"]) <= 0.1 * len(words(session["reference"])), fed.committed


def test_a_word_said_past_its_timing_is_written_once(tiny_model):
    # mfa_affectation as recorded ("montreal forced aligner", drawn out): the final decode
    # timed "Stalina?" at 3.10-3.35 s of a word said to ~4.6 s; its continuation from 3.35 s
    # wrote "Stalina!" again over the rest of it, which the seam rule leaves out, and the
    # streamed copy there, with no final word over its time, was kept: "Stalina? Stalina?"
    from whisper_demo.bench.feeds import feed_fast
    from whisper_demo.bench.layouts import load_sessions
    from whisper_demo.text import words

    session = next(s for s in load_sessions(EVAL_DEV, subset="dev", layout="recorded")
                   if s["id"] == "recorded:mfa_affectation")
    fed = feed_fast(tiny_model, DecodeOptions(cache="static", precision="int8"), session["audio"], 0.1, LiveConfig())
    said = words(fed.committed)
    assert said and all(a != b for a, b in zip(said, said[1:])), fed.committed
    assert fed.lost_words == 0
