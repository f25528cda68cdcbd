"""What the attempts at one window share (cache.WindowMemo), and a prompt's first forward
against openai-whisper's own decoder: real tiny.en, real speech."""

import pytest
import torch
import whisper
from whisper.audio import N_FRAMES

from whisper_demo import cache, decode, kernels
from whisper_demo.decode import stream_transcribe
from whisper_demo.events import DecodeOptions, TokenEvent
from whisper_demo.runner import decoder_runner

# a log-probability threshold no attempt reaches: every window is decoded at all six
# temperatures (seeded draws), after a prompt, so each attempt's first forward has many rows
EVERY_ATTEMPT = dict(logprob_threshold=0.0, no_speech_threshold=None,
                     prompt="The speaker talks about the weather, the markets and the news of the day.")


def _run(model, audio, options):
    events, result = [], None
    for item in stream_transcribe(model, audio, options):
        if isinstance(item, TokenEvent):
            events.append(item)
        else:
            result = item
    return events, result


def _counting(monkeypatch, runner):
    """Count the runner's audio projections and its forwards of more than one token."""
    counts = {"cross_kv": 0, "first_forwards": 0}
    project, forward = runner.cross_keys_values, runner.forward

    def counted_project(features):
        counts["cross_kv"] += 1
        return project(features)

    def counted_forward(tokens, offset, *args, **kwargs):
        counts["first_forwards"] += offset == 0
        return forward(tokens, offset, *args, **kwargs)

    monkeypatch.setattr(runner, "cross_keys_values", counted_project)
    monkeypatch.setattr(runner, "forward", counted_forward)
    return counts


@pytest.mark.parametrize("precision", ["exact", "int8"])
def test_the_attempts_at_a_window_share_its_keys_values_and_first_forward(tiny_model, clip, monkeypatch,
                                                                         precision):
    if precision == "int8" and not kernels.available():
        pytest.skip("the fast mode needs the kernels")
    audio = clip("short_3s.wav")
    options = DecodeOptions(precision=precision, **EVERY_ATTEMPT)
    counts = _counting(monkeypatch, decoder_runner(tiny_model, precision))

    events, shared = _run(tiny_model, audio, options)
    assert sum(e.restart for e in events) == 5  # all six attempts ran (the fast mode keeps the best)
    assert counts == {"cross_kv": 1, "first_forwards": 1}  # once for the six

    monkeypatch.setattr(decode, "WindowMemo", lambda: None)  # each attempt on its own
    counts.update(cross_kv=0, first_forwards=0)
    alone_events, alone = _run(tiny_model, audio, options)
    assert counts == {"cross_kv": 6, "first_forwards": 6}
    # the same numbers either way: every step's token, the window's tokens and scores
    assert [e.token_id for e in events] == [e.token_id for e in alone_events]
    assert len(events) > 30
    assert shared.tokens == alone.tokens
    assert [(s.avg_logprob, s.compression_ratio, s.no_speech_prob) for s in shared.segments] == [
        (s.avg_logprob, s.compression_ratio, s.no_speech_prob) for s in alone.segments]


def test_a_memo_is_not_used_for_other_audio(tiny_model, clip):
    """The memo keys its K/V by the audio they came from: other features, another projection."""
    runner = decoder_runner(tiny_model, "exact")
    memo = cache.WindowMemo()
    mel = whisper.log_mel_spectrogram(whisper.pad_or_trim(clip("jfk.wav")))[None]
    with torch.inference_mode():
        first = tiny_model.encoder(mel)
        second = tiny_model.encoder(mel[..., :N_FRAMES] * 0.5)
        kv_first = memo.cross_kv_for(runner, first, runner.cross_keys_values)
        assert memo.cross_kv_for(runner, first, runner.cross_keys_values) is kv_first
        kv_second = memo.cross_kv_for(runner, second, runner.cross_keys_values)
    assert kv_second is not kv_first and not torch.equal(kv_second[0][0], kv_first[0][0])


def test_a_prompts_first_forward_is_openai_whispers_own(tiny_model, clip):
    """The exact mode's forward over many tokens (a prompt) gives openai-whisper's decoder's
    states bit for bit: its cross-attention hands torch's attention a K with a unit stride
    on head_dim, as openai-whisper does (the kernels' transposed K took another path and
    differed by up to 1e-4). The vocabulary projection after them is the packed kernel's
    (each row's 384 products summed in order): MKL's `x @ W.T` gave the same bits on a Xeon
    and differs in the last bits on an AMD EPYC (its own order of the same sum), so the
    logits are held to float32 rounding of that sum, and to the same choice of token."""
    mel = whisper.log_mel_spectrogram(whisper.pad_or_trim(clip("jfk.wav")))[None]
    tokens = torch.randint(0, 50000, (1, 180), generator=torch.Generator().manual_seed(0))
    runner = decoder_runner(tiny_model, "exact")
    decoder = tiny_model.decoder
    with torch.inference_mode():
        features = tiny_model.encoder(mel)
        x = decoder.token_embedding(tokens) + decoder.positional_embedding[: tokens.shape[1]]
        for block in decoder.blocks:  # openai-whisper's TextDecoder.forward up to its logits
            x = block(x, features, mask=decoder.mask)
        reference_states = decoder.ln(x)
        reference = tiny_model.decoder(tokens, features)
        shape = (1, runner.n_head, runner.n_ctx, runner.d_model // runner.n_head)
        self_kv = [(torch.empty(shape), torch.empty(shape)) for _ in runner.blocks]
        with kernels.step_threads() if kernels.available() else torch.inference_mode():
            states = runner.forward(tokens, 0, self_kv, runner.cross_keys_values(features), project=False)
            ours = runner.logits(states)
    assert torch.equal(states, reference_states)
    assert torch.allclose(ours, reference, rtol=0, atol=1e-4)
    assert torch.equal(ours.argmax(-1), reference.argmax(-1))
