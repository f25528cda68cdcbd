"""What the benchmarks' command lines share: the parser, and `--set NAME=VALUE` (a LiveConfig
field changed for one run, to measure a setting against the default)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Optional, Sequence

from ..live.config import LiveConfig


def bench_parser(name: str, doc: Optional[str]) -> argparse.ArgumentParser:
    """The parser of `python -m whisper_demo.bench NAME`, its module's docstring as help."""
    return argparse.ArgumentParser(prog=f"python -m whisper_demo.bench {name}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_set_argument(parser: argparse.ArgumentParser, help: str = "a LiveConfig field") -> None:
    parser.add_argument("--set", metavar="NAME=VALUE", action="append", default=[], help=help)


def live_config(parser: argparse.ArgumentParser, settings: Sequence[str],
                config: Optional[LiveConfig] = None) -> LiveConfig:
    """`config` (the default LiveConfig) with each NAME=VALUE of --set applied, the value
    read as the field's type; a bad name or value is the parser's error (it exits)."""
    config = config or LiveConfig()
    try:
        return replace(config, **{name: _value(getattr(config, name), value)
                                  for name, value in (item.split("=", 1) for item in settings)})
    except (ValueError, TypeError, AttributeError) as error:
        parser.error(f"--set: {error}")


def _value(default, text: str):
    """`text` as the type of a field whose default is `default`: a field that defaults to
    None takes a string ("none": None); a flag true/false (bool("false") would be True)."""
    if default is None:
        return None if text.lower() == "none" else text
    if isinstance(default, bool):
        flags = {"true": True, "1": True, "false": False, "0": False}
        if text.lower() not in flags:
            raise ValueError(f"{text!r} is not true or false")
        return flags[text.lower()]
    return type(default)(text)
