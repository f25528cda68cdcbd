"""Precision: what a decode computes in. The names are checked here, and what a name means
on a given model and device is decided here; the runner, the cache and the encoder ask a
Precision instead of comparing names.

- "exact": the model's own weights and a float32 encoder. Tokens equal openai-whisper's
  (not bit-identical logits: sums run in another order).
- "int8", the fast mode: with the kernels, the decoder's matrices int8 weight-only (the
  vocabulary projection and the blocks' small linears; activations stay float32) and the
  cross-attention K/V float16, and the encoder in bfloat16 where the CPU multiplies it
  natively, else with int8 block linears where PyTorch multiplies int8 fast (AVX2:
  int8_encoder.py). CPU only; transcripts may differ slightly from the exact mode's (the accuracy
  benchmark measures the word error rate of both).

The hooks cache mode runs openai-whisper's modules as they are, so it is exact only.
"""

from dataclasses import dataclass
from typing import Optional

PRECISIONS = ("exact", "int8")


def check_precision(name: str, cache: Optional[str] = None, device: Optional[str] = None) -> None:
    """Raise ValueError unless `name` can run with this cache mode and on this device."""
    if name not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {name!r}")
    if name != "exact" and cache == "hooks":
        raise ValueError("the hooks mode runs openai-whisper's modules as they are: exact precision only")
    if name != "exact" and device not in (None, "cpu"):
        raise ValueError(f"{name} precision runs on the CPU only")


def precision_with_cache(name: str, cache: str) -> str:
    """The precision a choice of cache mode runs in: the hooks mode runs exact whatever was
    asked, so that a session started in the fast mode can still pick any cache mode."""
    return "exact" if cache == "hooks" else name


def keeps_transcribe_tokens(name: str) -> bool:
    """Whether decodes in this precision keep openai-whisper's tokens even where its rules
    cost time or words: exact does. The fast mode's tokens may differ anyway, so its
    fallback stops an attempt stuck in a loop where the loop is plain (repeats.py) instead
    of decoding it to the window's last token only to retry it, and keeps the best attempt
    when all fail (decode.Transcription)."""
    return name == "exact"


def live_precision(model) -> str:
    """What live decodes use unless told otherwise: the fast mode (bfloat16 encoder, int8
    decoder) on the CPU, where its encoder takes about a quarter of exact's and every
    live word waits for it; exact on a GPU, where int8 does not run."""
    return "int8" if model.device.type == "cpu" else "exact"


def bf16_supported() -> bool:
    """Whether this CPU multiplies bfloat16 natively (bf16_encoder.py checks)."""
    from .bf16_encoder import bf16_supported as supported  # here, so importing this stays light

    return supported()


def int8_matmul_supported() -> bool:
    """Whether PyTorch multiplies int8 by int8 fast on this CPU (int8_encoder.py checks)."""
    from .int8_encoder import int8_matmul_supported as supported

    return supported()


def fast_encoder_dtype() -> Optional[str]:
    """What the fast mode's encoder computes in on this CPU, for a float32 model: "bfloat16"
    where the CPU multiplies it natively (features within 1-2 % of float32's), else "int8"
    (block linears int8 x int8, features within 3-6 %, closer than CTranslate2's int8 encoder) where
    that is fast, else None (the model's own float32 encoder)."""
    if bf16_supported():
        return "bfloat16"
    return "int8" if int8_matmul_supported() else None


@dataclass(frozen=True)
class Precision:
    """One precision on one model: what its encoder and decoder compute in."""

    name: str  # one of PRECISIONS
    encoder_dtype: str  # what the encoder computes in: "bfloat16" or "int8" in the fast mode where it can
    model_dtype: str  # the model's own weights: "float32" on a CPU, often "float16" on a GPU
    on_cpu: bool

    @property
    def exact(self) -> bool:
        return self.name == "exact"

    @property
    def exact_cross_kv(self) -> bool:
        """The cross-attention K/V are the exact runner's float32 projections, so word timing
        may reuse them instead of projecting the audio again."""
        return self.exact

    @property
    def packs_steps(self) -> bool:
        """A decoder step may run on the kernels (kernels/): a float32 model on the CPU.
        Elsewhere, and where the kernels do not build, PyTorch's float32 matmuls."""
        return self.on_cpu and self.model_dtype == "float32"

    @property
    def step_weights(self) -> str:
        """What a step's packed matmuls, the vocabulary projection's included, read: "f16"
        (exact: float16 holds Whisper's float16-valued weights exactly, multiplied in
        float32) or "i8" (fast: int8 weights, one scale per output, float32 activations)."""
        return "f16" if self.exact else "i8"


def precision_for(model, name: str = "exact") -> Precision:
    """What precision `name` means on `model` and its device; ValueError where it cannot run."""
    weights = model.encoder.conv1.weight
    check_precision(name, device=weights.device.type)
    model_dtype = str(weights.dtype).removeprefix("torch.")
    on_cpu = weights.device.type == "cpu"
    fast_encoder = fast_encoder_dtype() if name != "exact" and on_cpu and model_dtype == "float32" else None
    return Precision(name, fast_encoder or model_dtype, model_dtype, on_cpu)
