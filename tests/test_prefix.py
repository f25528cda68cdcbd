"""A transcript's given start (DecodeOptions.prefix_tokens): tokens a decode takes as
already said, prefilled in one forward, then goes on from. A live session gives each
re-decode the words it has committed from its buffer this way. On the real tiny.en model
and real speech; the token helpers of live/decoder.py without a model."""

import pytest
from whisper.tokenizer import get_tokenizer

from whisper_demo.live.decoders import Prefix, model_decoder, prefix_token_ids, split_after
from whisper_demo.events import DecodeOptions
from decoding import decode_all, drain

SR = 16000
run = decode_all  # tests/decoding.py


@pytest.fixture(scope="module")
def tok():
    return get_tokenizer(False)  # tiny.en's


@pytest.mark.parametrize("cache", ["static", "hooks", "off"])
def test_a_prefix_the_model_would_say_changes_nothing_but_the_steps(tiny_model, clip, cache):
    audio = clip("jfk.wav")
    events, plain = run(tiny_model, audio, cache=cache)
    for k in (1, 6, len(plain.tokens) // 2):
        given_events, given = run(tiny_model, audio, cache=cache, prefix_tokens=tuple(plain.tokens[:k]))
        assert given.tokens == plain.tokens, k
        assert given.text == plain.text
        # the given tokens are not decoded: the steps are the rest of the plain decode's
        assert [e.token_id for e in given_events] == [e.token_id for e in events][k:]
        assert given.n_tokens == plain.n_tokens - k
        # and they sit in the cache from the first step on, filled by one forward
        assert given_events[0].prefill_tokens == events[0].prefill_tokens + k
        assert given_events[0].cache_tokens == events[k].cache_tokens


def test_a_prefix_is_taken_as_said_and_the_decode_goes_on_from_it(tiny_model, clip, tok):
    audio = clip("jfk.wav")
    _, plain = run(tiny_model, audio, word_timestamps=True)
    assert plain.text.startswith("And so my fellow Americans")
    # words the model would not have said: the decode keeps them and hears the rest
    prefix = [tok.timestamp_begin, *tok.encode(" And so my dear")]
    _, given = run(tiny_model, audio, prefix_tokens=tuple(prefix), word_timestamps=True)
    assert given.tokens[:len(prefix)] == prefix
    assert given.text.startswith("And so my dear")
    assert "ask not what your country can do for you" in given.text
    assert "And so" not in given.text[len("And so my dear"):]  # not heard again from the top
    words = [w for s in given.segments for w in s.words]
    assert [w.text.strip() for w in words[:4]] == ["And", "so", "my", "dear"]
    assert all(a.end <= b.start + 1e-6 for a, b in zip(words, words[1:]))  # in order, timed
    assert words[3].end < 3.0 < words[-1].end  # the prefix's words lie at the start


def test_a_given_prefix_gets_no_word_probabilities_and_the_words_after_it_the_same_as_without(tiny_model, clip):
    import math

    audio = clip("jfk.wav")
    _, plain = run(tiny_model, audio, word_timestamps=True, word_probabilities=True)
    k = 6  # a timestamp and the first words' tokens
    _, given = run(tiny_model, audio, word_timestamps=True, word_probabilities=True,
                   prefix_tokens=tuple(plain.tokens[:k]))
    ours, theirs = ([w.probability for s in r.segments for w in s.words] for r in (given, plain))
    assert len(ours) == len(theirs) > 10
    assert all(math.isnan(p) for p in ours[:3])  # the given words were not chosen
    # after them, the same alignment pass, the same probabilities (the given tokens are in
    # its input either way); a word whose tokens straddle the prefix's end is not scored
    assert ours[5:] == pytest.approx(theirs[5:], abs=1e-4)
    assert 0 < min(theirs) and max(theirs) <= 1


def test_split_after_finds_the_tokens_that_say_a_text(tok):
    ts = tok.timestamp_begin
    said = tok.encode(" Hello there.")
    rest = tok.encode(" How are you")
    tokens = [ts, *said, ts + 50, ts + 50, *rest, ts + 90]
    # the segment's closing timestamps stay with the words before them: the model said
    # the segment ends there, and goes on with the next
    assert split_after(tokens, "Hello there.", tok) == (tuple(tokens[:3 + len(said)]), tuple(rest + [ts + 90]))
    assert split_after(tokens, "Hello  there. How", tok)[1] == tuple(tokens[4 + len(said):])  # spaces
    assert split_after(tokens, "Hello there. How are you", tok) == (tuple(tokens), ())
    assert split_after(tokens, "Hello their", tok) is None  # not what the tokens say
    assert split_after(tokens, "Hello there. How are you today", tok) is None  # more than they say
    assert split_after([], "Hello", tok) is None


def test_prefix_token_ids_open_a_segment_at_the_words_start(tok):
    ids = prefix_token_ids(Prefix(("Hello", "there."), start=1.234), tok)
    assert ids[0] == tok.timestamp_begin + 61  # 1.22 s: timestamps are 20 ms apart
    assert tok.decode(ids[1:]) == " Hello there."
    assert prefix_token_ids(Prefix(("Hi",), start=0.0), tok)[0] == tok.timestamp_begin


def test_the_live_decoder_gives_the_committed_words_and_checks_the_rest_as_draft(tiny_model, clip):
    """A re-decode of a grown buffer: the words committed from it are given (with the
    previous decode's own tokens for them, timestamps included), and what that decode
    said after them is the draft, which changes no token."""
    decode = model_decoder(tiny_model, DecodeOptions())
    audio = clip("jfk.wav")
    _, first = drain(decode(audio[: 7 * SR], None))
    words = [w.text.strip() for s in first.segments for w in s.words]
    committed = Prefix(tuple(words[:4]), start=first.segments[0].words[0].start)
    with_draft_events, with_draft = drain(decode(audio, None, tuple(first.tokens), committed))
    _, without_draft = drain(decode(audio, None, None, committed))
    assert with_draft.tokens == without_draft.tokens
    assert " ".join(w.text.strip() for s in with_draft.segments for w in s.words).startswith(" ".join(words[:4]))
    # the given tokens were the first decode's own (timestamps included), not decoded again
    head, _ = split_after(first.tokens, committed.text, decode.tokenizer)
    assert with_draft.tokens[:len(head)] == list(head) and len(head) > 4
    # the start-of-transcript tokens and the given ones, in the first forward
    assert with_draft_events[0].prefill_tokens == len(decode.tokenizer.sot_sequence) + len(head)
    assert with_draft.draft_accepted > 0 and any(e.from_draft for e in with_draft_events)
