"""One token per row drawn as openai-whisper draws it at a temperature above 0
(`Categorical(logits=logits / temperature).sample()`), the same draw in about a third of
the time on a CPU.

On a long file about 40 % of the decoder's steps are fallback samples (a window failing
transcribe's tests is decoded again at 0.2, 0.4, ... 1.0), and on a CPU torch's draw took
1.9 ms of such a step (tiny.en's step is 4-5 ms). Two parts of it can be cheaper without
changing a draw:

- Categorical normalises the logits by their logsumexp, which takes exp of every logit.
  Divided by a low temperature, most of the 51,864 lie more than 87 below the largest,
  where exp leaves float32's normal range and torch's exp takes a scalar path (0.9 ms a
  row, against 0.05 ms). Clamping the logits at 86 below the largest first keeps exp fast
  and changes the sum, which is at least 1 (the largest logit's exp), by at most
  51,864 * e^-86 = 2e-33: the same float32 sum but where the exact sum lies within 1e-26
  of its last bit from a rounding boundary (`_normalised`; its numbers tested bit for bit,
  its draws against torch's on 1,800 rows).
- torch.multinomial(probs, 1) is, in ATen, argmax(probs / q) with q = exponential_(1) over
  the row (the Gumbel-max trick), and its check of the probabilities (min, max, sum) costs
  as much again. On a CPU exponential_ draws one double uniform per element and returns
  -log1p(-u): one `uniform_` over doubles and one vectorised log1p give the same numbers and
  leave the generator in the same state, about 4x faster. That is ATen's implementation, not
  its contract, so `_exponential_is_uniform_log1p` compares the two once per process and,
  where they differ (another torch), the draw is torch.multinomial's own.

tests/test_sampling.py draws thousands of rows both ways; tests/test_longform.py compares
whole fallback windows with openai-whisper's transcribe.
"""

from functools import lru_cache
from typing import Optional

import torch
from torch.distributions import Categorical

# torch's exp is vectorised where exp(x) is a normal float32: x above about -87.3
_EXP_FAST_ABOVE = -86.0


def draw(logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]) -> torch.Tensor:
    """One token index per row of `logits` ([rows, vocabulary]), drawn at `temperature`
    from `generator` (None: torch's global one), as openai-whisper's GreedyDecoder draws."""
    if logits.device.type != "cpu" or not _exponential_is_uniform_log1p():
        probs = Categorical(logits=logits / temperature, validate_args=False).probs
        return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, True,
                                 generator=generator).T.reshape(probs.shape[:-1])
    probs = _normalised(logits / temperature).softmax(-1)
    return (probs / _exponential(probs.shape, generator)).argmax(-1)


def _normalised(scaled: torch.Tensor) -> torch.Tensor:
    """Categorical's logits, `scaled - scaled.logsumexp(-1)`, without exp's slow path (above)."""
    floor = scaled.amax(-1, keepdim=True) + _EXP_FAST_ABOVE
    return scaled - scaled.clamp(min=floor).logsumexp(-1, keepdim=True)


def _exponential(shape, generator: Optional[torch.Generator]) -> torch.Tensor:
    """What `torch.empty(shape).exponential_(1, generator=generator)` draws on a CPU."""
    uniform = torch.empty(shape, dtype=torch.float64).uniform_(generator=generator)
    return uniform.neg_().log1p_().neg_().float()


@lru_cache(maxsize=1)
def _exponential_is_uniform_log1p() -> bool:
    """Whether this torch's CPU exponential_ draws what _exponential draws, number for
    number, and leaves the generator where _exponential leaves it."""
    theirs, ours = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    shape = (2, 51_864)
    expected = torch.empty(shape).exponential_(1, generator=theirs)
    return (torch.equal(expected, _exponential(shape, ours))
            and torch.equal(theirs.get_state(), ours.get_state()))
