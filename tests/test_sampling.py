"""sampling.draw picks what openai-whisper's sampler picks (Categorical(logits / T).sample(),
torch.multinomial underneath) from the same generator, and leaves that generator where
torch's draw leaves it: rows like a decoder's (most logits far below the largest at a
low temperature, suppressed ones at -inf), at every fallback temperature."""

import pytest
import torch
from torch.distributions import Categorical

from whisper_demo import kernels, sampling

pytestmark = pytest.mark.quick

VOCABULARY = 51_864


def torch_draw(logits, temperature, generator):
    probs = Categorical(logits=logits / temperature, validate_args=False).probs
    return torch.multinomial(probs, 1, True, generator=generator).T.reshape(probs.shape[:-1])


def decoder_like_rows(rng: torch.Generator, rows: int, spread: float) -> torch.Tensor:
    logits = torch.randn(rows, VOCABULARY, generator=rng) * spread
    suppressed = torch.randint(0, VOCABULARY, (rows, 300), generator=rng)
    logits.scatter_(1, suppressed, -float("inf"))
    return logits


def test_the_fast_route_is_the_one_this_torch_takes():
    # where it is not (another torch's exponential_), draw is torch's and the rest holds trivially
    assert sampling._exponential_is_uniform_log1p()


@pytest.mark.parametrize("rows", [1, 5])
def test_draws_equal_torchs_and_leave_the_generator_where_torch_does(rows):
    rng = torch.Generator().manual_seed(7)
    theirs, ours = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for i in range(300):
        logits = decoder_like_rows(rng, rows, spread=(1.0, 4.0, 12.0)[i % 3])
        temperature = (0.2, 0.4, 0.6, 0.8, 1.0)[i % 5]
        assert torch.equal(sampling.draw(logits, temperature, ours), torch_draw(logits, temperature, theirs))
    assert torch.equal(ours.get_state(), theirs.get_state())


def test_draws_from_torchs_global_generator_without_one():
    logits = decoder_like_rows(torch.Generator().manual_seed(3), 2, spread=8.0)
    torch.manual_seed(11)
    expected = [torch_draw(logits, 0.4, None) for _ in range(20)]
    torch.manual_seed(11)
    assert all(torch.equal(sampling.draw(logits, 0.4, None), e) for e in expected)


def test_the_normalised_logits_are_categoricals():
    # clamping before the logsumexp changes no bit of it: the exps clamped add < 1e-32 to a sum >= 1
    logits = decoder_like_rows(torch.Generator().manual_seed(5), 4, spread=20.0) / 0.2
    assert torch.equal(sampling._normalised(logits), Categorical(logits=logits, validate_args=False).logits)


def test_draws_follow_the_probabilities():
    # not only the same as torch's: a sampler (a bug in both would pass the tests above)
    logits = torch.full((1, VOCABULARY), -float("inf"))
    logits[0, [10, 20]] = torch.tensor([0.0, -1.0986123])  # probabilities 3/4 and 1/4 at T=1
    generator = torch.Generator().manual_seed(0)
    picks = torch.cat([sampling.draw(logits, 1.0, generator) for _ in range(4000)])
    assert set(picks.tolist()) == {10, 20}
    assert 0.72 < (picks == 10).float().mean().item() < 0.78


needs_kernels = pytest.mark.skipif(not kernels.available(), reason="the compiled kernels are not built here")


@needs_kernels
def test_a_decodes_own_generator_is_drawn_by_the_kernel(monkeypatch):
    assert sampling._kernel_draws_as_torch()
    logits = decoder_like_rows(torch.Generator().manual_seed(2), 5, spread=4.0)
    expected = torch_draw(logits, 0.6, torch.Generator().manual_seed(4))
    monkeypatch.setattr(sampling, "_draw_with_torch", lambda *args: pytest.fail("torch drew"))
    assert torch.equal(sampling.draw(logits, 0.6, torch.Generator().manual_seed(4)), expected)


@needs_kernels
@pytest.mark.parametrize("spread", [0.01, 0.5, 30.0])
def test_the_kernel_draws_torchs_tokens_from_flat_to_peaked_rows(spread):
    # flat rows leave thousands of candidates for the log; peaked ones one
    rng = torch.Generator().manual_seed(9)
    theirs, ours = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    declined = 0
    for i in range(200):
        logits = decoder_like_rows(rng, 1, spread)
        temperature = (0.2, 0.4, 0.6, 0.8, 1.0)[i % 5]
        expected = torch_draw(logits, temperature, theirs)
        picks = sampling._kernel_picks(logits, temperature, ours)
        if picks is None:
            declined += 1
            torch_draw(logits, temperature, ours)
        else:
            assert torch.equal(picks, expected)
    assert torch.equal(ours.get_state(), theirs.get_state())
    assert declined <= 2  # about one draw in a thousand is too close to call


@needs_kernels
def test_the_kernel_leaves_two_equal_ratios_to_torch():
    # two tokens whose probability over their exponential draw is the same number: which one
    # wins is torch's rounding, so the kernel must decline and draw() must still be torch's
    temperature = 0.4
    exponentials = sampling._exponential((1, VOCABULARY), torch.Generator().manual_seed(6))
    logits = torch.full((1, VOCABULARY), -float("inf"))
    logits[0, [100, 200]] = temperature * exponentials[0, [100, 200]].log()
    assert sampling._kernel_picks(logits, temperature, torch.Generator().manual_seed(6)) is None
    theirs, ours = torch.Generator().manual_seed(6), torch.Generator().manual_seed(6)
    assert torch.equal(sampling.draw(logits, temperature, ours), torch_draw(logits, temperature, theirs))
    assert torch.equal(ours.get_state(), theirs.get_state())


@needs_kernels
def test_a_row_the_kernel_declines_leaves_the_whole_call_to_torch():
    # the second of two rows is a tie: the first row's draw must not be kept half-done
    temperature = 1.0
    generator = torch.Generator().manual_seed(8)
    torch.empty(1, VOCABULARY, dtype=torch.float64).uniform_(generator=generator)  # row 1's draws
    exponentials = sampling._exponential((1, VOCABULARY), generator)
    logits = decoder_like_rows(torch.Generator().manual_seed(1), 2, spread=3.0)
    logits[1] = -float("inf")
    logits[1, [7, 70]] = exponentials[0, [7, 70]].log()
    assert sampling._kernel_picks(logits, temperature, torch.Generator().manual_seed(8)) is None
    theirs, ours = torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)
    assert torch.equal(sampling.draw(logits, temperature, ours), torch_draw(logits, temperature, theirs))
    assert torch.equal(ours.get_state(), theirs.get_state())
