"""Self-speculative decoding (DecodeOptions.draft_tokens) and the core pieces it stands on:
a multi-token forward at any offset, and a static cache that drops rejected positions.
On the real tiny.en model and real speech."""

import numpy as np
import pytest
import torch
from whisper.tokenizer import get_tokenizer

from whisper_demo.cache import StaticCache
from whisper_demo.runner import decoder_runner
from whisper_demo.speculative import realign, usable_draft
from decoding import decode_all

SOT_AND_TEXT = [50257, 50363, 383, 1893, 286, 262, 1578, 1829, 11, 616, 3397]  # tiny.en: SOT, <|0.00|>, text


def _buffers(runner, n_beams=1):
    shape = (n_beams, runner.n_head, runner.n_ctx, runner.d_model // runner.n_head)
    return [(torch.zeros(shape), torch.zeros(shape)) for _ in runner.blocks]


@pytest.mark.parametrize("prefix", [1, 4])
def test_a_multi_token_forward_at_an_offset_equals_one_token_at_a_time(tiny_model, jfk_features, prefix):
    runner = decoder_runner(tiny_model)
    tokens = torch.tensor([SOT_AND_TEXT])
    with torch.inference_mode():
        cross = runner.cross_keys_values(jfk_features)
        one_by_one, self_kv = [], _buffers(runner)
        for p in range(tokens.shape[1]):
            one_by_one.append(runner.forward(tokens[:, p : p + 1], p, self_kv, cross))
        one_by_one = torch.cat(one_by_one, dim=1)

        together = _buffers(runner)
        head = runner.forward(tokens[:, :prefix], 0, together, cross)
        rest = runner.forward(tokens[:, prefix:], prefix, together, cross)
    assert torch.allclose(torch.cat([head, rest], dim=1), one_by_one, atol=1e-4, rtol=1e-4)
    # and the keys/values it wrote are the ones the single steps wrote
    n = tokens.shape[1]
    for (k1, v1), (k2, v2) in zip(self_kv, together):
        assert torch.allclose(k1[:, :, :n], k2[:, :, :n], atol=1e-4)
        assert torch.allclose(v1[:, :, :n], v2[:, :, :n], atol=1e-4)


def test_truncate_lets_the_next_forward_overwrite_rejected_positions(tiny_model, jfk_features):
    tokens = torch.tensor([SOT_AND_TEXT])
    wrong = tokens.clone()
    wrong[0, 6:] = 1000  # a draft that went wrong after position 5
    with torch.inference_mode():
        reference = StaticCache(tiny_model, 1, 1, "exact")
        expected = reference.logits_at(tokens, jfk_features, range(tokens.shape[1]))

        cache = StaticCache(tiny_model, 1, 1, "exact")
        cache.logits_at(wrong, jfk_features, range(wrong.shape[1]))
        assert cache.cache_tokens() == wrong.shape[1]
        cache.truncate(6)
        assert cache.cache_tokens() == 6
        after = cache.logits_at(tokens, jfk_features, range(6, tokens.shape[1]))
    assert torch.allclose(after, expected[:, 6:], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError):
        cache.truncate(tokens.shape[1] + 1)


# --- the draft option of the decoder ----------------------------------------------------

SR = 16000


run = decode_all  # tests/decoding.py


def growing(model, audio, first_s=3, step_s=1, **options):
    """A live session's re-decodes: each buffer decoded without a draft and with the
    previous buffer's tokens as the draft. Yields (seconds, plain, drafted) results."""
    previous = None
    for seconds in range(first_s, int(len(audio) / SR) + 1, step_s):
        buffer = audio[: seconds * SR]
        plain = run(model, buffer, **options)
        if previous is not None:
            yield seconds, plain, run(model, buffer, draft_tokens=tuple(previous), **options)
        previous = plain[1].tokens


@pytest.mark.parametrize("name, precision", [("speech_25s.wav", "exact"), ("jfk.wav", "exact"),
                                             ("jfk.wav", "int8")])
def test_a_growing_buffer_decodes_the_same_tokens_with_the_previous_as_draft(
        tiny_model, clip, name, precision):
    accepted = []
    for seconds, (plain_events, plain), (events, drafted) in growing(
            tiny_model, clip(name), precision=precision):
        assert drafted.tokens == plain.tokens, seconds
        assert [e.token_id for e in events] == [e.token_id for e in plain_events], seconds
        assert drafted.text == plain.text and drafted.n_tokens == plain.n_tokens
        assert 0 <= drafted.draft_accepted <= drafted.draft_offered
        assert drafted.draft_accepted == sum(e.from_draft for e in events)
        # each step's latency counted once: the pass is charged to the first step
        assert drafted.decode_seconds == pytest.approx(sum(e.latency_ms for e in events) / 1000)
        accepted.append(drafted.draft_accepted)
    assert len(accepted) >= 6
    assert sum(a > 0 for a in accepted) > len(accepted) / 2, accepted


def test_its_own_tokens_as_draft_are_all_accepted(tiny_model, clip):
    audio = clip("jfk.wav")
    events, plain = run(tiny_model, audio)
    drafted_events, drafted = run(tiny_model, audio, draft_tokens=tuple(plain.tokens))
    assert drafted.tokens == plain.tokens
    assert drafted.draft_offered == drafted.draft_accepted == len(plain.tokens)
    assert [e.from_draft for e in drafted_events] == [True] * len(plain.tokens) + [False]  # + EOT
    assert drafted.draft_passes == 1  # one forward checked them all and predicted the end
    assert [e.cache_tokens for e in drafted_events][-1] == [e.cache_tokens for e in events][-1]


def test_a_garbage_draft_changes_nothing(tiny_model, clip):
    audio = clip("jfk.wav")
    _, plain = run(tiny_model, audio)
    generator = torch.Generator().manual_seed(0)
    garbage = torch.randint(0, 50256, (60,), generator=generator).tolist()
    _, drafted = run(tiny_model, audio, draft_tokens=tuple(garbage))
    assert drafted.tokens == plain.tokens and drafted.draft_offered == 60
    # a draft that goes right then wrong, and one holding a special and an impossible id
    half = plain.tokens[:10] + garbage[:20]
    _, drafted = run(tiny_model, audio, draft_tokens=tuple(half))
    assert drafted.tokens == plain.tokens and drafted.draft_accepted == 10
    _, drafted = run(tiny_model, audio, draft_tokens=tuple(plain.tokens[:5] + [50256, 7] + [10**6]))
    assert drafted.tokens == plain.tokens and drafted.draft_offered == 5


@pytest.mark.parametrize("options", [dict(cache="hooks"), dict(cache="off"), dict(beam_size=5)],
                         ids=["hooks", "off", "beam5"])
def test_the_draft_is_ignored_where_it_does_not_apply(tiny_model, clip, options):
    audio = clip("jfk.wav")[: 6 * SR]
    events, plain = run(tiny_model, audio, **options)
    draft = tuple(plain.tokens)
    drafted_events, drafted = run(tiny_model, audio, draft_tokens=draft, **options)
    assert drafted.tokens == plain.tokens
    assert [e.token_id for e in drafted_events] == [e.token_id for e in events]
    assert drafted.draft_offered == drafted.draft_accepted == 0
    assert not any(e.from_draft for e in drafted_events)


# --- realigning a draft after a difference (no model) -------------------------------------

@pytest.fixture(scope="module")
def tok():
    return get_tokenizer(False)  # tiny.en's


def test_realign_follows_a_moved_segment_boundary(tok):
    ts = tok.timestamp_begin
    draft = [ts, 10, 11, ts + 128, ts + 128, 12, 13]
    assert realign(draft, 3, ts + 136, tok) == 4  # <|2.56|> said as <|2.72|>
    assert draft[4] == ts + 136  # the next segment starts at the new time too


def test_realign_skips_dropped_tokens_and_waits_for_inserted_ones(tok):
    ts = tok.timestamp_begin
    draft = [ts, 10, 11, 12, 13, 14]
    assert realign(list(draft), 1, 12, tok) == 4  # 10 and 11 dropped: resume after 12
    assert realign(list(draft), 2, 99, tok) == 3  # a substitution for 11
    assert realign(list(draft), 3, 11, tok) == 3  # 99 was inserted before 11: 11 again, then 12
    assert realign(list(draft), 2, tok.eot, tok) == len(draft)  # the model ended: nothing left


def test_realign_handles_boundaries_added_or_removed(tok):
    ts = tok.timestamp_begin
    draft = [ts, 10, 11, 12]
    assert realign(draft, 2, ts + 50, tok) == 2 and draft == [ts, 10, ts + 50, 11, 12]  # added
    draft = [ts, 10, ts + 50, ts + 50, 11, 12]
    assert realign(draft, 2, 11, tok) == 5  # removed: the draft's pair is skipped, 11 said


def test_usable_draft_stops_at_a_special_or_an_impossible_id(tok):
    ts = tok.timestamp_begin
    assert usable_draft([ts, 10, ts + 3], tok, 51864) == [ts, 10, ts + 3]
    assert usable_draft([ts, 10, tok.eot, 11], tok, 51864) == [ts, 10]
    assert usable_draft([10, 51864, 11], tok, 51864) == [10]
    assert usable_draft([-1, 10], tok, 51864) == []
    two_windows = [ts, 10, ts + 700, ts + 700, 11, ts + 1400, ts, 12, ts + 100]
    assert usable_draft(two_windows, tok, 51864) == two_windows[:6]  # the first window's


def test_a_long_audio_checks_the_draft_in_its_first_window_only(tiny_model, clip, tok):
    audio = np.concatenate([clip("speech_25s.wav"), clip("jfk.wav")])  # two windows
    _, plain = run(tiny_model, audio)
    _, drafted = run(tiny_model, audio, draft_tokens=tuple(plain.tokens))
    assert drafted.tokens == plain.tokens
    stamps = [(i, t) for i, t in enumerate(plain.tokens) if t >= tok.timestamp_begin]
    second = next(i for (_, before), (i, t) in zip(stamps, stamps[1:]) if t < before)
    assert drafted.draft_offered == second  # the first window's tokens, not the second's
    assert drafted.draft_accepted > 0.8 * drafted.draft_offered

