"""What the fast mode changes in the words: the fast and the exact precision over real recordings.

    python -m whisper_demo.bench accuracy [--model tiny.en] [--eval-dir DIR] [--beam-size 1]
                                          [--modes exact,fast,fast-float32-encoder,fast-int8-encoder]
                                          [--save PATH]

Every recording of `../shared/eval-dev` (manifest.jsonl, both subsets) and the example clips
is transcribed in each mode as openai-whisper's transcribe would (its language given, the
temperature fallback on and seeded alike for every mode), then scored against its reference.

One WER per mode says little when the modes differ by a few near-tied tokens: a point is
~20 words of the 2,000 here, and a word that flips in one recording can flip back in another.
So the report gives, for each pair of modes, the words the two transcripts differ by (each
other's word edits), in how many recordings, and a 95 % bootstrap interval of the WER
difference: recordings drawn with replacement, the difference recomputed over each draw.

Modes: "exact" (float32 throughout), "fast" (DecodeOptions(precision="int8"): int8 decoder,
bfloat16 encoder where the CPU has it, else int8 block linears where PyTorch multiplies int8
fast), "fast-float32-encoder" (the int8 decoder over the float32 encoder, the fast mode
without its encoder change: isolates what the encoder does) and "fast-int8-encoder" (the
int8 encoder whatever the CPU: what a CPU without bfloat16 gets, measured on one with it).
"""

import contextlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import torch

from .. import precision as precision_module
from ..audio import load_audio
from ..decode import transcribe
from ..events import DecodeOptions
from ..examples import clip_path, reference_transcripts
from ..text import word_edits, words
from .cli import bench_parser
from .data import add_eval_dir_argument, manifest
from .scoring import difference_interval

MODES = ("exact", "fast", "fast-float32-encoder", "fast-int8-encoder")
# the fast mode with its encoder chosen, not as this CPU would choose it
ENCODER_MODES = {"fast-float32-encoder": None, "fast-int8-encoder": "int8"}
BOOTSTRAP_DRAWS = 4000


@dataclass(frozen=True)
class Recording:
    id: str
    group: str  # the manifest's subset ("dev_ordinary", "dev") or "examples"
    path: Path
    reference: str
    language: str = "en"


@dataclass
class Transcript:
    recording: str
    group: str
    mode: str
    text: str
    edits: int  # word edits against the reference
    reference_words: int
    encoder_dtype: str


@dataclass
class Comparison:
    """Mode b against mode a over a set of recordings (b - a: positive when b is worse)."""

    a: str
    b: str
    recordings: int
    reference_words: int
    wer_a: float
    wer_b: float
    difference_points: float
    interval_points: tuple  # 95 % bootstrap over recordings
    words_differ: int  # word edits between the two modes' transcripts
    recordings_differ: int


def recordings(eval_dir: Path, with_examples: bool = True) -> List[Recording]:
    found = [Recording(item["id"], item.get("subset", "dev"), eval_dir / item["audio"], item["reference"],
                       item.get("language") or "en") for item in manifest(eval_dir)]
    if with_examples:
        found += [Recording(name, "examples", clip_path(name), text)
                  for name, text in reference_transcripts().items()]
    return found


@contextlib.contextmanager
def _fast_encoder(dtype):
    """The fast mode with its encoder in `dtype` (None: float32), whatever this CPU would pick."""
    saved = precision_module.fast_encoder_dtype
    precision_module.fast_encoder_dtype = lambda: dtype
    try:
        yield
    finally:
        precision_module.fast_encoder_dtype = saved


def transcribe_in(model, recording: Recording, mode: str, beam_size: int) -> Transcript:
    audio = load_audio(recording.path, max_seconds=None)
    # the fallback's sampling: DecodeOptions' own seed (0), the same draws in every mode
    options = DecodeOptions(beam_size=beam_size, precision="exact" if mode == "exact" else "int8",
                            language=recording.language, temperature_fallback=True)
    context = _fast_encoder(ENCODER_MODES[mode]) if mode in ENCODER_MODES else contextlib.nullcontext()
    with context:
        result = transcribe(model, audio, options)
    return Transcript(recording.id, recording.group, mode, result.text,
                      word_edits(result.text, recording.reference), len(words(recording.reference)),
                      result.encoder_dtype)


def compare(by_mode: Dict[str, List[Transcript]], a: str, b: str, groups: Sequence[str] = (),
            draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> Comparison:
    """Mode b against mode a over the recordings of `groups` (all when empty)."""
    pairs = [(x, y) for x, y in zip(by_mode[a], by_mode[b]) if not groups or x.group in groups]
    assert all(x.recording == y.recording for x, y in pairs), "modes must cover the same recordings"
    edits_a = np.array([x.edits for x, _ in pairs])
    edits_b = np.array([y.edits for _, y in pairs])
    ref_words = np.array([x.reference_words for x, _ in pairs])
    total = max(1, ref_words.sum())
    low, high = (100 * x for x in difference_interval(edits_b, edits_a, ref_words, draws, seed))
    differ = [word_edits(y.text, x.text) for x, y in pairs]
    return Comparison(a, b, len(pairs), int(ref_words.sum()), edits_a.sum() / total, edits_b.sum() / total,
                      float((edits_b.sum() - edits_a.sum()) / total * 100), (float(low), float(high)),
                      int(sum(differ)), sum(1 for d in differ if d))


def describe(c: Comparison) -> str:
    return (f"{c.b} - {c.a}: {c.wer_b:.1%} - {c.wer_a:.1%} = {c.difference_points:+.2f} points, "
            f"95% interval [{c.interval_points[0]:+.2f}, {c.interval_points[1]:+.2f}] "
            f"({c.recordings} recordings, {c.reference_words} words; the transcripts differ by "
            f"{c.words_differ} words in {c.recordings_differ} recordings)")


def scopes(by_mode: Dict[str, List[Transcript]]) -> Dict[str, tuple]:
    """The sets of recordings reported: each group alone, eval-dev, everything."""
    groups = sorted({t.group for t in next(iter(by_mode.values()))})
    found = {g: (g,) for g in groups}
    dev = tuple(g for g in groups if g != "examples")
    if len(dev) > 1:
        found["eval-dev (all)"] = dev
    found["all"] = ()
    return found


def main(argv=None) -> int:
    parser = bench_parser("accuracy", __doc__)
    parser.add_argument("--model", default="tiny.en")
    add_eval_dir_argument(parser)
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated: {', '.join(MODES)}")
    parser.add_argument("--limit", type=int, default=None, help="only the first N recordings (a quick look)")
    parser.add_argument("--save", help="write every transcript and comparison as JSON")
    args = parser.parse_args(argv)

    from ..models import load_model  # here, so that importing this module stays light

    torch.set_num_threads(args.threads)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown or "exact" not in modes:
        parser.error(f"modes: 'exact' and any of {', '.join(MODES)}")
    model = load_model(args.model, progress=False)
    items = recordings(Path(args.eval_dir))[: args.limit]
    started = time.monotonic()
    by_mode = {mode: [transcribe_in(model, item, mode, args.beam_size) for item in items] for mode in modes}
    print(f"{args.model}, beam {args.beam_size}, {len(items)} recordings, temperature fallback (seeded), "
          f"{time.monotonic() - started:.0f} s; encoder: "
          + ", ".join(f"{m} {by_mode[m][0].encoder_dtype}" for m in modes))
    comparisons = []
    for name, groups in scopes(by_mode).items():
        print(f"{name}:")
        for mode in modes[1:]:
            comparisons.append((name, compare(by_mode, "exact", mode, groups)))
            print("  " + describe(comparisons[-1][1]))
        if "fast-float32-encoder" in modes:
            for mode in ("fast", "fast-int8-encoder"):
                if mode in modes:
                    comparisons.append((name, compare(by_mode, "fast-float32-encoder", mode, groups)))
                    print("  " + describe(comparisons[-1][1]) + "  <- the encoder alone")
    if args.save:
        Path(args.save).write_text(json.dumps({
            "model": args.model, "beam_size": args.beam_size,
            "transcripts": {m: [asdict(t) for t in ts] for m, ts in by_mode.items()},
            "comparisons": [{"scope": name, **asdict(c)} for name, c in comparisons]}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
