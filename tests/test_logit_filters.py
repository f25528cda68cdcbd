"""logit_filters.WindowFilters against openai-whisper's own SuppressBlank, SuppressTokens and
ApplyTimestampRules: the same logits and token histories through both, the same outputs
(every -inf where theirs is, every other value equal), greedy (1 row) and beam 5."""

import types

import numpy as np
import pytest
import torch
from whisper.decoding import (
    ApplyTimestampRules, DecodingOptions, DecodingTask, SuppressBlank, SuppressTokens,
)
from whisper.tokenizer import get_tokenizer

from whisper_demo.logit_filters import AsTheyAre, WindowFilters

ENGLISH = get_tokenizer(False)
MULTILINGUAL = get_tokenizer(True, num_languages=99, language="en", task="transcribe")


def n_vocab(tokenizer) -> int:
    return tokenizer.timestamp_begin + 1501  # <|0.00|> ... <|30.00|>


def openai_filters(tokenizer, sample_begin, max_initial_timestamp_index=None, timestamps=True,
                   blank=True, suppress="-1"):
    """What DecodingTask.__init__ builds, for these options."""
    task = types.SimpleNamespace(options=DecodingOptions(suppress_tokens=suppress), tokenizer=tokenizer)
    filters = []
    if blank:
        filters.append(SuppressBlank(tokenizer, sample_begin))
    if suppress:
        filters.append(SuppressTokens(DecodingTask._get_suppress_tokens(task)))
    if timestamps:
        filters.append(ApplyTimestampRules(tokenizer, sample_begin, max_initial_timestamp_index))
    return filters


def assert_same(logits, tokens, filters, vocab):
    theirs, ours = logits.clone(), logits.clone()
    for f in filters:
        f.apply(theirs, tokens)
    WindowFilters(filters, vocab, logits.device).apply(ours, tokens)
    assert torch.equal(torch.isneginf(theirs), torch.isneginf(ours))
    assert torch.equal(theirs, ours)
    return theirs


def history(rng, tokenizer, length, kind):
    """A sampled history of `length` tokens: text and timestamps in some pattern."""
    ts = tokenizer.timestamp_begin
    text = lambda: int(rng.integers(0, tokenizer.eot))  # noqa: E731
    stamp = lambda lo=0: int(ts + rng.integers(lo, 1501))  # noqa: E731
    if kind == "text":
        return [text() for _ in range(length)]
    if kind == "random":  # any mix, timestamps may go back (not a reachable state, still equal)
        return [text() if rng.random() < 0.6 else stamp() for _ in range(length)]
    # segments: <|a|> text... <|b|><|b'|> text... in rising time, ending as `kind` says
    out, t = [], int(rng.integers(0, 50))
    while len(out) < length:
        out.append(ts + t)
        out.extend(text() for _ in range(int(rng.integers(1, 5))))
        t = min(1500, t + int(rng.integers(0, 100)))
        out.append(ts + t)
    out = out[:length]
    if kind == "ends_pair" and length >= 2:
        out[-2:] = [ts + t, ts + t]
    elif kind == "ends_single" and length >= 2:
        out[-2:] = [text(), ts + min(1500, t + 3)]
    elif kind == "ends_text":
        out[-1] = text()
    return out


KINDS = ("text", "random", "segments", "ends_pair", "ends_single", "ends_text")


@pytest.mark.parametrize("tokenizer", [ENGLISH, MULTILINGUAL], ids=["en", "multilingual"])
@pytest.mark.parametrize("beams", [1, 5])
@pytest.mark.parametrize("max_initial", [None, 50])
def test_random_logits_and_histories_are_filtered_as_openai_whisper_does(tokenizer, beams, max_initial):
    rng = np.random.default_rng(beams * 7 + (max_initial or 0))
    vocab = n_vocab(tokenizer)
    sample_begin = 4
    filters = openai_filters(tokenizer, sample_begin, max_initial)
    timestamp_won = text_won = 0
    for trial in range(60):
        length = [0, 1, 2, 3, 10, 40][trial % 6]
        rows = []
        for b in range(beams):  # each beam its own kind of history
            kind = KINDS[(trial + b) % len(KINDS)]
            rows.append(list(range(1, sample_begin + 1)) + history(rng, tokenizer, length, kind))
        tokens = torch.tensor(rows)
        logits = torch.randn(beams, vocab) * float(rng.choice([1.0, 3.0, 10.0]))
        # some rows with the timestamps' mass high enough to win over text, some close to it
        boost = torch.tensor(rng.choice([0.0, 4.0, 6.0, 8.0], size=beams), dtype=torch.float32)
        logits[:, tokenizer.timestamp_begin:] += boost[:, None]
        out = assert_same(logits, tokens, filters, vocab)
        text_part = out[:, : tokenizer.timestamp_begin]
        timestamp_won += int(torch.isneginf(text_part).all(dim=1).sum())
        text_won += int((~torch.isneginf(text_part)).any(dim=1).sum())
    assert timestamp_won > 0 and text_won > 0  # both outcomes of the logprob rule were seen


@pytest.mark.parametrize("beams", [1, 5])
def test_each_rule_alone(beams):
    tok, vocab = ENGLISH, n_vocab(ENGLISH)
    ts = tok.timestamp_begin
    rng = np.random.default_rng(3)
    sot = [tok.sot_prev, tok.sot]  # any two tokens before sampling
    cases = {
        "last two timestamps": [ts + 10, 100, 200, ts + 40, ts + 40],
        "penultimate timestamp, last text": [ts + 10, 100, ts + 40, 300],
        "a timestamp after text": [ts + 10, 100, 200, ts + 40],
        "first sampled token a timestamp": [ts + 7],
        "the latest timestamp is not the largest": [ts + 900, 5, ts + 30, 6],
        "a timestamp at the last column": [ts + 1500, 5],
        "only text": [5, 6, 7],
        "first step": [],
    }
    for name, sampled in cases.items():
        tokens = torch.tensor([sot + sampled] * beams)
        for options in (dict(), dict(max_initial_timestamp_index=0), dict(max_initial_timestamp_index=50),
                        dict(blank=False), dict(suppress=""), dict(timestamps=False)):
            filters = openai_filters(tok, len(sot), **options)
            logits = torch.randn(beams, vocab) * 5
            logits[:, ts:] += float(rng.choice([0.0, 9.0]))
            assert_same(logits, tokens, filters, vocab)


@pytest.mark.parametrize("beams", [1, 5])
def test_timestamp_over_text_in_each_of_its_ways_of_deciding(beams, monkeypatch):
    """The rule is decided from two maxima where they leave no doubt, else from the
    timestamps' logsumexp, else (a near tie) by openai-whisper's own log-softmax: rows made
    for each way, the last ones ties to a few float32 steps, all equal to openai-whisper's."""
    from whisper_demo import logit_filters

    tok, vocab = ENGLISH, n_vocab(ENGLISH)
    ts, n_ts = tok.timestamp_begin, vocab - tok.timestamp_begin
    exact_rows = []
    real_exactly = logit_filters.TimestampRules._exactly

    def counted(self, logits):
        decided = real_exactly(self, logits)
        exact_rows.append(len(decided))
        return decided

    monkeypatch.setattr(logit_filters.TimestampRules, "_exactly", counted)
    filters = openai_filters(tok, 2)
    tokens = torch.tensor([[tok.sot_prev, tok.sot, 100, 200]] * beams)
    rng = np.random.default_rng(beams)
    for trial in range(200):
        logits = torch.full((beams, vocab), -30.0) + torch.rand(beams, vocab)
        text_best = float(rng.uniform(-5, 20))
        logits[:, 220] = text_best
        # n equal timestamps: their logsumexp is value + log(n); aim at, near or far from the text
        offset = float(rng.choice([-9.0, -3.0, -0.5, 0.5, 3.0, 9.0, 0.0, 1e-6, -1e-6, 2e-5]))
        value = text_best - float(np.log(n_ts)) + offset
        logits[:, ts:] = value
        assert_same(logits, tokens, filters, vocab)
    assert sum(exact_rows) > 0  # the near ties were decided by openai-whisper's numbers


def test_tasks_filters_are_taken_from_the_task_and_unknown_ones_kept(tiny_model):
    task = DecodingTask(tiny_model, DecodingOptions(language="en", prompt=[100, 200]))
    filters = WindowFilters.of_task(task, tiny_model.dims.n_vocab, "cpu")
    assert isinstance(filters, WindowFilters) and filters.sample_begin == task.sample_begin

    class Penalty:
        def apply(self, logits, tokens):
            logits[:, 0] -= 1

    task.logit_filters.append(Penalty())
    assert isinstance(WindowFilters.of_task(task, tiny_model.dims.n_vocab, "cpu"), AsTheyAre)


@pytest.mark.parametrize("beam_size", [1, 5])
def test_a_real_decode_filters_every_step_as_openai_whisper(tiny_model, clip, monkeypatch, beam_size):
    """Every step of a real decode with timestamps (real logits, real histories, the prompt
    of the window before): our filters' output equals openai-whisper's filter objects'."""
    from whisper_demo import logit_filters
    from whisper_demo.decode import transcribe
    from whisper_demo.events import DecodeOptions

    checked = []
    real_apply = logit_filters.WindowFilters.apply

    def compared(self, logits, tokens):
        theirs = logits.clone()
        for f in self.task_filters:
            f.apply(theirs, tokens)
        real_apply(self, logits, tokens)
        assert torch.equal(theirs, logits)
        checked.append(tokens.shape[0])

    real_of_task = logit_filters.WindowFilters.of_task.__func__

    def of_task(cls, task, n_vocab, device):
        made = real_of_task(cls, task, n_vocab, device)
        made.task_filters = task.logit_filters
        return made

    monkeypatch.setattr(logit_filters.WindowFilters, "apply", compared)
    monkeypatch.setattr(logit_filters.WindowFilters, "of_task", classmethod(of_task))
    audio = np.concatenate([clip("speech_25s.wav"), clip("jfk.wav")])
    result = transcribe(tiny_model, audio, DecodeOptions(beam_size=beam_size))
    assert result.text and len(checked) >= result.n_tokens > 50
    assert set(checked) == {beam_size}


@pytest.mark.parametrize("rows", [1, 5])
def test_the_greedy_pick_is_openai_whispers(rows):
    """window_decode.ArgmaxGreedy (numpy's argmax) against GreedyDecoder at temperature 0:
    the same tokens, log-probability sums and completion, ties and -inf included."""
    from whisper.decoding import GreedyDecoder

    from whisper_demo.window_decode import ArgmaxGreedy

    eot, vocab = ENGLISH.eot, n_vocab(ENGLISH)
    rng = np.random.default_rng(rows)
    for trial in range(40):
        logits = torch.randn(rows, vocab)
        if trial % 4 == 1:  # ties: the first of equal maxima wins
            logits[:, [7, 300, 9000]] = logits.max() + 1
        if trial % 4 == 2:
            logits[:, : eot] = float("-inf")
        if trial % 4 == 3:  # a view, as a step's last-position row is
            logits = torch.randn(rows, 3, vocab)[:, -1]
        tokens = torch.tensor(rng.integers(0, eot, size=(rows, 6)))
        if rows > 1:
            tokens[1, -1] = eot  # a finished row stays finished
        theirs_sum, ours_sum = torch.zeros(rows), torch.zeros(rows)
        theirs = GreedyDecoder(0.0, eot).update(tokens, logits.clone(), theirs_sum)
        ours = ArgmaxGreedy(0.0, eot).update(tokens, logits.clone(), ours_sum)
        assert torch.equal(theirs[0], ours[0]) and bool(theirs[1]) == bool(ours[1])
        assert torch.equal(theirs_sum, ours_sum)
