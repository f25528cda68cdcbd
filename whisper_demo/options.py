"""The one place where a user's choices become DecodeOptions.

The page's tabs, the command line and the terminal microphone all call `decode_options`,
so every tab treats a choice the same way and every field they do not choose (prompting,
temperature fallback, thresholds, any field added later) survives from the base options:

    options = decode_options(defaults.options, cache_on=True, mode="hooks", beam_size=5)

Rules decided here (and nowhere else):
- The "KV cache" checkbox wins over the mode radio (`effective_mode`).
- Language "auto" (or empty) means detect; an English-only model ignores a language choice.
- Choosing the hooks mode switches int8 to exact rather than refusing (hooks runs
  openai-whisper's modules as they are; precision.precision_with_cache), so that a
  session started with `--precision int8` can still pick any cache mode in the page.
- A seed of "random" (the command line), RANDOM_SEED (-1, the page's field) or None means
  openai-whisper's unseeded draws (DecodeOptions.seed None); any other number seeds them.
"""

from dataclasses import fields, replace
from typing import Optional

from .events import CACHE_MODES, DecodeOptions
from .precision import precision_with_cache

AUTO_LANGUAGE = "auto"
# The page's seed field is a number, and a number field always holds one (Gradio shows an
# empty one as 0): so random draws are asked for with -1, as image generators' pages do.
RANDOM_SEED = -1
_FIELDS = frozenset(f.name for f in fields(DecodeOptions))


def effective_mode(cache_on: bool, mode: str) -> str:
    """The "KV cache" checkbox wins: off means off; on means the chosen mode, never off
    (ticking the box with the radio on "off" turns the default cache on)."""
    if not cache_on:
        return "off"
    return mode if mode in CACHE_MODES and mode != "off" else CACHE_MODES[0]


def decode_options(base: DecodeOptions, *, cache_on: Optional[bool] = None, mode: Optional[str] = None,
                   multilingual: bool = True, **choices) -> DecodeOptions:
    """`base` with the user's choices applied; every field not chosen keeps base's value.

    cache_on, mode: the page's checkbox and radio (see effective_mode); either may be given
        alone (cache_on alone keeps base's mode when on).
    multilingual: whether the model takes a language (English-only models ignore one).
    choices: any DecodeOptions field by name (cache=, beam_size=, language=, precision=, ...).
    Raises ValueError for an unknown field or a value DecodeOptions refuses.
    """
    unknown = set(choices) - _FIELDS
    if unknown:
        raise ValueError(f"not a decode option: {', '.join(sorted(unknown))}")
    if cache_on is not None or mode is not None:
        choices["cache"] = effective_mode(True if cache_on is None else bool(cache_on),
                                          mode if mode is not None else base.cache)
    if "beam_size" in choices:
        beam = choices["beam_size"]
        choices["beam_size"] = 1 if beam in (None, "") else int(beam)  # an empty field: greedy
    if "language" in choices:
        language = choices["language"]
        choices["language"] = None if not language or language == AUTO_LANGUAGE or not multilingual else language
    if "seed" in choices:
        choices["seed"] = parse_seed(choices["seed"])
    choices["precision"] = precision_with_cache(choices.get("precision", base.precision),
                                                choices.get("cache", base.cache))
    return replace(base, **choices)


def parse_seed(seed) -> Optional[int]:
    """DecodeOptions.seed from a user's seed: a whole number seeds the fallback's draws;
    None, "random" or a negative number (RANDOM_SEED) means unseeded (None)."""
    refused = ValueError(f"a seed is a whole number below 2**64, or 'random', not {seed!r}")
    if seed is None or (isinstance(seed, str) and seed.strip().lower() == "random"):
        return None
    if isinstance(seed, float) and not seed.is_integer():  # a number field sends floats
        raise refused
    try:
        value = int(seed.strip() if isinstance(seed, str) else seed)
    except (TypeError, ValueError, OverflowError):
        raise refused from None
    if value >= 2 ** 64:  # torch.Generator.manual_seed's limit
        raise refused
    return None if value < 0 else value


def seed_field(seed: Optional[int]) -> int:
    """What the page's seed field shows for DecodeOptions.seed (parse_seed's inverse)."""
    return RANDOM_SEED if seed is None else seed
