"""The final pass (whisper_demo/live/final_pass.py): its decode is openai-whisper's
transcribe of the utterance's audio with the prompt before it, token for token; which of
its words are new; where a long buffer is cut; and the revision the page marks."""

import re

import numpy as np
import pytest

from whisper_demo.decode import transcribe
from whisper_demo.events import DecodeOptions
from whisper_demo.live import LiveConfig, LiveUpdate, model_session
from whisper_demo.live import final_pass as final_pass_module
from whisper_demo.live.final_pass import cut_point, final_options, new_final_words
from whisper_demo.live.policy import TimedWord
from whisper_demo.live.revision import compare

SR = 16000


def timed(spec: str):
    """ "word@start-end ..." in stream seconds."""
    out = []
    for item in spec.split():
        text, times = item.rsplit("@", 1)
        a, b = times.split("-")
        out.append(TimedWord(text, float(a), float(b)))
    return out


# ------------------------------------------------------------------ the real model


def test_a_final_pass_is_the_plain_offline_decode_of_its_audio_with_its_prompt(tiny_model, clip, monkeypatch):
    """Two recordings with a pause between them, the buffer cut after the first (a short
    cut_after_seconds): the first recording's final pass is given nothing, the second's is
    prompted with the first's final text; each writes exactly the tokens openai-whisper's
    transcribe writes for the same audio and prompt (our stream_transcribe with the default
    options equals it, test_longform.py). A pass given earlier final words goes on from the
    tokens the pass before wrote for them, timestamps included."""
    calls = []
    real = final_pass_module.stream_transcribe

    def recording(model, audio, options):
        calls.append((audio.copy(), options))
        return real(model, audio, options)

    monkeypatch.setattr(final_pass_module, "stream_transcribe", recording)
    silence = np.zeros(int(2.5 * SR), np.float32)
    audio = np.concatenate([silence[:SR // 2], clip("short_3s.wav"), silence, clip("jfk.wav"), silence])
    session = model_session(tiny_model, DecodeOptions(), LiveConfig(cut_after_seconds=6.0, cut_keep_seconds=1.0))
    results = []
    for start in range(0, audio.size, SR // 10):
        session.add_samples(audio[start:start + SR // 10])
        results += [u.result for u in session.updates() if isinstance(u, LiveUpdate) and u.result is not None
                    and u.revision is not None]
    assert len(calls) == len(results) >= 3  # short_3s, then jfk's utterances (it pauses between phrases)
    unprompted = [(heard, o) for heard, o in calls if o.prompt is None and o.prefix_tokens is None]
    prompted = [(heard, o) for heard, o in calls if o.prompt is not None and o.prefix_tokens is None]
    assert len(unprompted) == 1 and prompted and "door" in prompted[0][1].prompt.lower()
    for heard, options in unprompted + prompted:
        plain = transcribe(tiny_model, heard, DecodeOptions(prompt=options.prompt, word_timestamps=True))
        mine = next(r for (h, o), r in zip(calls, results) if h is heard)
        assert mine.tokens == plain.tokens, (mine.text, plain.text)
    given = [options for _, options in calls if options.prefix_tokens]
    assert given and any(t >= 50257 for t in given[0].prefix_tokens)  # a timestamp token among them


def test_the_final_pass_decodes_as_transcribe_does():
    streamed = DecodeOptions(timestamps=False, temperature_fallback=False, attention=True, word_probabilities=True,
                             beam_size=3, cache="static", precision="int8", single_window=True,
                             encode_audio_only=True)
    options = final_options(streamed)
    assert options.timestamps and options.temperature_fallback and options.word_timestamps
    assert not options.attention and not options.single_window and options.beam_size == 1
    assert not options.encode_audio_only  # a whole window, as the streamed pass does not
    assert options.cache == "static" and options.precision == "exact"  # openai-whisper's arithmetic
    assert options.seed == DecodeOptions().seed  # a window that falls back draws the same every run
    assert options.fallback_keeps_best  # faster-whisper's rule when every temperature fails


# ------------------------------------------------------------------ pure pieces


def test_the_given_words_are_left_out_of_the_final_words():
    from whisper_demo.events import DecodeResult, Segment
    from whisper_demo.timing import Word

    segment = Segment(0.0, 3.0, " It's late. We go.", [], [Word(" It's", 0.1, 0.5), Word(" late.", 0.5, 1.0),
                                                            Word(" We", 2.0, 2.3), Word(" go.", 2.3, 2.8)])
    result = DecodeResult(text=segment.text, tokens=[], segments=[segment], language="en", cache_mode="static",
                          beam_size=1, n_tokens=2, decode_seconds=0.0, encoder_ms=0.0, tokens_per_second=0.0,
                          mean_latency_ms=0.0, p95_latency_ms=0.0, peak_self_cache_bytes=0,
                          peak_cross_cache_bytes=0, peak_rss_bytes=0)
    new = new_final_words(result, 10.0, ("It's", "late."))
    assert [(w.text, w.start) for w in new] == [("We", 12.0), ("go.", 12.3)]
    # given words spelt otherwise (a retry's word timing): what starts after them is new
    assert [w.text for w in new_final_words(result, 10.0, ("Its", "late"))] == ["We", "go."]


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
    from whisper_demo.ui.live_view import transcript_html

    shown = transcript_html(("A", "small", "dog", "walked", "along."), "then", "we", changes=[(2, 4, "dark walk")])
    marks = re.findall(r'<mark class="wk-revised" title="([^"]*)"[^>]*>([^<]*)</mark>', shown)
    assert marks == [("the final pass changed this; the page showed: dark walk", "dog walked")]
    # final and streamed words are both committed (what Copy text and the page's readers take)
    committed = re.sub(r"<[^>]+>", "", re.search(r'<span class="wk-committed".*?</span></span>', shown).group(0))
    assert committed == "A small dog walked along. then"
    assert "wk-tentative" in shown and ">we<" in shown
