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
"""

from dataclasses import fields, replace
from typing import Optional

from .events import CACHE_MODES, DecodeOptions
from .precision import precision_with_cache

AUTO_LANGUAGE = "auto"
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
    choices["precision"] = precision_with_cache(choices.get("precision", base.precision),
                                                choices.get("cache", base.cache))
    return replace(base, **choices)
