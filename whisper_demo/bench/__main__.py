"""python -m whisper_demo.bench NAME [args]: run one benchmark; with no NAME, list them."""

import importlib
import sys

from . import BENCHMARKS


def usage() -> str:
    width = max(map(len, BENCHMARKS))
    lines = [f"  {name:<{width}}  {what}" for name, what in BENCHMARKS.items()]
    return ("usage: python -m whisper_demo.bench NAME [--help | args]\n\nbenchmarks:\n"
            + "\n".join(lines) + "\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}\n\n{usage()}", end="", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{__package__}.{name}")
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
