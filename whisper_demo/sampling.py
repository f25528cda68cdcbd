"""One token per row drawn as openai-whisper draws it at a temperature above 0
(`Categorical(logits=logits / temperature).sample()`), the same draw in a seventh of the
time on a CPU.

On a long file about half of the decoder's steps are fallback samples (a window failing
transcribe's tests is decoded again at 0.2, 0.4, ... 1.0), and on a CPU torch's draw took
1.9 ms of such a step (tiny.en's step is 3-5 ms). torch.multinomial(probs, 1) is, in ATen,
argmax(probs / q) with q = exponential_(1) over the row (the Gumbel-max trick), and on a CPU
exponential_ draws one double uniform per element from the generator's mt19937 and returns
-log1p(-u). The draw must take those very uniforms to pick what openai-whisper picks, seed
for seed; everything around them can be cheaper without changing a token:

- kernels/draw.cpp (`_draw_in_kernel`): torch's mt19937 run on a copy of the generator's
  state, the weights from a vectorized exp, the log taken only for the few elements whose
  weight over their uniform could beat the best ratio found: 80 us a row against 540. Where
  its best two ratios are within 1e-3 of each other (torch's own rounding could decide,
  about one draw in a thousand) it declines and the draw below runs instead. It takes a
  decode's own generator (DecodeOptions.seed), not torch's global one, which other threads
  may draw from between the kernel's read of its state and its write back.
- Torch's operators otherwise (`_draw_with_torch`), two of them replaced: Categorical
  normalises the logits by their logsumexp, which takes exp of every logit, and divided by
  a low temperature most of the 51,864 lie more than 87 below the largest, where exp leaves
  float32's normal range and torch's exp takes a scalar path (0.9 ms a row, against 0.05 ms).
  Clamping the logits at 86 below the largest first keeps exp fast and changes the sum, which
  is at least 1 (the largest logit's exp), by at most 51,864 * e^-86 = 2e-33: the same
  float32 sum but where the exact sum lies within 1e-26 of its last bit from a rounding
  boundary (`_normalised`). exponential_ is one `uniform_` over doubles and one vectorised
  log1p, the same numbers and the generator left in the same state, and multinomial's check
  of the probabilities (min, max, sum) is skipped.

Both rest on ATen's implementation, not its contract, so each is compared with torch's own
draw once per process (`_kernel_draws_as_torch`, `_exponential_is_uniform_log1p`) and left out
where they differ (another torch). tests/test_sampling.py draws thousands of rows all ways;
tests/test_longform.py compares whole fallback windows with openai-whisper's transcribe.
"""

from functools import lru_cache
from typing import Optional

import torch
from torch.distributions import Categorical

from . import kernels

# torch's exp is vectorised where exp(x) is a normal float32: x above about -87.3
_EXP_FAST_ABOVE = -86.0


def draw(logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]) -> torch.Tensor:
    """One token index per row of `logits` ([rows, vocabulary]), drawn at `temperature`
    from `generator` (None: torch's global one), as openai-whisper's GreedyDecoder draws."""
    drawn = _draw_in_kernel(logits, temperature, generator)
    if drawn is not None:
        return drawn
    return _draw_with_torch(logits, temperature, generator)


def _draw_with_torch(logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]) -> torch.Tensor:
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


def _draw_in_kernel(logits: torch.Tensor, temperature: float,
                    generator: Optional[torch.Generator]) -> Optional[torch.Tensor]:
    """draw's tokens from kernels/draw.cpp (torch's mt19937 run on a copy of the generator's
    state, the log taken only where it can matter), or None where torch must draw: no
    kernels, not a CPU float32 row, torch's global generator (other threads draw from it
    between a read of its state and the write back), the kernel unsure (two near-equal
    ratios, about one draw in a thousand), or a torch whose generator the kernel does not know."""
    if (generator is None or logits.device.type != "cpu" or logits.dtype != torch.float32
            or generator.device.type != "cpu" or not _kernel_draws_as_torch()):
        return None
    picks = _kernel_picks(logits.reshape(-1, logits.shape[-1]), temperature, generator)
    return None if picks is None else picks.reshape(logits.shape[:-1])


# the head of torch's CPU generator state that draw.cpp reads and writes: four fields, then
# mt19937's 624 words as uint64
_KERNEL_STATE_BYTES = 24 + 8 * 624


def _kernel_picks(rows: torch.Tensor, temperature: float, generator: torch.Generator) -> Optional[torch.Tensor]:
    """One kernel call over `rows` ([n, vocabulary]): the picks, with the generator moved on
    as torch's draw would move it; None, the generator untouched, where the kernel declines."""
    rows = rows.contiguous()
    state = generator.get_state()
    if state.numel() < _KERNEL_STATE_BYTES:  # not the layout draw.cpp knows
        return None
    picks = torch.empty(rows.shape[0], dtype=torch.long)
    if kernels.library().draw_rows(rows.data_ptr(), rows.shape[0], rows.shape[1], temperature,
                                   state.data_ptr(), picks.data_ptr()):
        return None
    generator.set_state(state)
    return picks


@lru_cache(maxsize=1)
def _kernel_draws_as_torch() -> bool:
    """Whether the kernel is here and, on rows like a decoder's, draws torch's tokens and
    leaves the generator where torch leaves it (the state's layout is torch's, not its
    contract): checked once per process."""
    if not kernels.available() or not _exponential_is_uniform_log1p():
        return False
    rows = torch.randn(3, 51_864, generator=torch.Generator().manual_seed(0)) * 6
    theirs, ours = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    for temperature in (0.2, 1.0):
        picks = _kernel_picks(rows, temperature, ours)
        if picks is None or not torch.equal(picks, _draw_with_torch(rows, temperature, theirs)):
            return False
    return torch.equal(ours.get_state(), theirs.get_state())


@lru_cache(maxsize=1)
def _exponential_is_uniform_log1p() -> bool:
    """Whether this torch's CPU exponential_ draws what _exponential draws, number for
    number, and leaves the generator where _exponential leaves it."""
    theirs, ours = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    shape = (2, 51_864)
    expected = torch.empty(shape).exponential_(1, generator=theirs)
    return (torch.equal(expected, _exponential(shape, ours))
            and torch.equal(theirs.get_state(), ours.get_state()))
