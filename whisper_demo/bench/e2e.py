"""Whole files, end to end: what a person transcribing a file waits for, against the peers.

    python -m whisper_demo.bench e2e [--model tiny.en] [--systems exact,fast,...] [--repeats 1]
                                     [--long-minutes 10] [--limit N] [--threads 2]
                                     [--chart e2e.png] [--save e2e.json] [--eval-dir DIR]

Two sets of audio from the eval folder (manifest.jsonl):
  long      one file of at least --long-minutes: recordings in manifest order joined with
            0.5 s pauses (cycled if --limit leaves too few); its reference the joined references.
  separate  the recordings of the long file, one transcription each.

Systems (--systems, comma-separated short names), all on the same weights (the model's
CTranslate2 package: converted for whisper-kv and openai-whisper, read as it is by
faster-whisper), in one process, each with --threads threads:
  exact       whisper-kv, DecodeOptions(precision="exact")
  fast        whisper-kv, DecodeOptions(precision="int8")
  batched, batched-fast
              whisper-kv in batches (DecodeOptions(batch_size=8), exact / int8): the audio cut
              at Silero's pauses into pieces of at most 30 s, 8 decoded at once (batched.py)
  openai      openai-whisper's whisper.transcribe(fp16=False), torch seeded before each run
  fw-int8, fw-float32
              faster-whisper WhisperModel.transcribe, greedy (beam 1, one sample per fallback
              temperature: transcribe()'s decoding), CTranslate2's sampler seeded before each run
  fw-batched-int8, fw-batched-float32
              faster-whisper BatchedInferencePipeline, batch 8, beam 1 (its VAD cuts the audio)
Every system gets the same float32 16 kHz array (decoding the file is not timed), runs once
on a short clip first (loading, kernels), then each item in turn, system after system, the
order reversed on every other repeat. The seconds are the median over repeats (separate: the
sum of each recording's median).

Reported per system: seconds, real-time factor, WER with a 95 % interval (bootstrap over the
recordings, seeded; for the long file each word edit is charged to the recording its
reference word came from), the text tokens written, and the ratio to its peer. Then
whisper-kv's mean decoder step inside the long file's transcription against its step on
one 30 s window alone (the step benchmark's: decode_speed's clip, greedy, no timestamps,
prompt or fallback; probed 3 times right after each of the system's long-file runs, the
median: probed after the separate files instead, ten minutes later, a noisy hour had moved
the exact mode's ratio from 1.00x to 1.24x with the same code), and the targets, each "met"
or "NOT met"; a measure that did not run is "not measured" and fails.
"""

import argparse
import json
import time
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..audio import SAMPLE_RATE
from .data import add_eval_dir_argument, manifest
from .e2e_systems import SYSTEMS, Output, System, make_systems
from .machine import describe as describe_cpu
from .scoring import difference_interval, piece_edits, wer_interval

PAUSE_SECONDS = 0.5
WARM_UP_SECONDS = 5.0
STEP_MAX_RATIO = 1.2  # a step inside transcribe against the step benchmark's
STEP_SYSTEMS = ("exact", "fast")


# --- the audio ------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Item:
    """One thing to transcribe: its audio and the reference of each recording in it."""

    name: str
    audio: np.ndarray
    references: Tuple[str, ...]
    recordings: Tuple[str, ...] = ()  # the recordings' ids, in order

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE

    @property
    def reference(self) -> str:
        return " ".join(r for r in self.references if r)


def load_recordings(eval_dir: Path, limit: Optional[int] = None) -> List[Item]:
    """The eval folder's recordings, one Item each, in manifest order (the first `limit`)."""
    from ..audio import load_audio

    return [Item(entry["id"], load_audio(eval_dir / entry["audio"]), (entry.get("reference") or "",),
                 (entry["id"],))
            for entry in manifest(eval_dir, required=True)[:limit]]


def join_recordings(recordings: Sequence[Item], min_seconds: float,
                    pause_seconds: float = PAUSE_SECONDS, name: str = "long") -> Item:
    """One long Item: the recordings in order, each followed by a pause of silence, taken
    until the file lasts `min_seconds` (cycling through them again when they are too few)."""
    if not recordings:
        raise ValueError("no recordings to join")
    pause = np.zeros(int(round(pause_seconds * SAMPLE_RATE)), dtype=np.float32)
    parts, references, ids, samples = [], [], [], 0
    while samples < min_seconds * SAMPLE_RATE or not parts:
        recording = recordings[len(ids) % len(recordings)]
        parts += [recording.audio, pause]
        references += list(recording.references)
        ids += list(recording.recordings)
        samples += len(recording.audio) + len(pause)
    return Item(name, np.concatenate(parts), tuple(references), tuple(ids))


# --- measuring ------------------------------------------------------------------------------

@dataclass
class Run:
    seconds: float
    output: Output
    alone_ms: Optional[float] = None  # the system's step alone, probed right after this run


# Probes of the step alone after each long-file run (the median is kept)
ALONE_PROBES = 3


def warm_up(systems: Dict[str, System], audio: np.ndarray) -> None:
    """Each system once on a short clip: model loading, kernels and caches out of the timing."""
    for run in systems.values():
        run(audio[: int(WARM_UP_SECONDS * SAMPLE_RATE)])


def measure(systems: Dict[str, System], items: Sequence[Item], repeats: int,
            progress: Callable[[str], None] = lambda line: None,
            probe_after: Optional[str] = None) -> Dict[Tuple[str, str], List[Run]]:
    """Every (system, item) `repeats` times: item by item, each system in turn, the systems'
    order reversed on every other repeat. After each run of the item named `probe_after`
    (the long file), a system with a `step_alone` probe takes it at once, so that the step
    inside transcribe and the step alone are measured in the same minute."""
    runs: Dict[Tuple[str, str], List[Run]] = {(s, i.name): [] for s in systems for i in items}
    names = list(systems)
    for repeat in range(repeats):
        order = names if repeat % 2 == 0 else names[::-1]
        for item in items:
            for name in order:
                started = time.perf_counter()
                output = systems[name](item.audio)
                run = Run(time.perf_counter() - started, output)
                probe = getattr(systems[name], "step_alone", None) if item.name == probe_after else None
                if probe is not None:
                    run.alone_ms = float(np.median([probe() for _ in range(ALONE_PROBES)]))
                runs[name, item.name].append(run)
            if item.seconds > 60:
                progress(f"  repeat {repeat + 1}: {item.name} done")
    return runs


@dataclass
class Measure:
    """One system over one set of items (a scope)."""

    scope: str
    system: str
    seconds: float  # median over repeats (summed over the scope's items)
    audio_seconds: float
    wer: float
    interval: Tuple[float, float]
    tokens: int
    reference_words: int
    edits: np.ndarray = field(repr=False)  # per reference piece (recording)
    counts: np.ndarray = field(repr=False)
    texts: Tuple[str, ...] = field(default=(), repr=False)

    @property
    def rtf(self) -> float:
        return self.seconds / max(1e-9, self.audio_seconds)


def summarise(scope: str, system: str, items: Sequence[Item], runs: Dict[Tuple[str, str], List[Run]]) -> Measure:
    """The system's time, WER and tokens over the items (the first repeat's words)."""
    seconds = sum(float(np.median([r.seconds for r in runs[system, i.name]])) for i in items)
    outputs = [runs[system, i.name][0].output for i in items]
    pieces = [piece_edits(o.text, i.references) for o, i in zip(outputs, items)]
    edits = np.concatenate([e for e, _ in pieces])
    counts = np.concatenate([c for _, c in pieces])
    total = max(1, int(counts.sum()))
    return Measure(scope, system, seconds, sum(i.seconds for i in items), float(edits.sum() / total),
                   wer_interval(edits, counts), sum(o.tokens for o in outputs), int(counts.sum()),
                   edits, counts, tuple(o.text for o in outputs))


# --- the targets ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    scope: str  # "long" or "separate"
    ours: str  # a system name
    peer: str
    max_ratio: float  # ours' seconds <= max_ratio x the peer's
    wer_rule: Optional[str] = None  # "not worse" (beyond the interval), "lower", or None


TARGETS = (
    Target("long", "exact", "fw-float32", 0.5, "not worse"),
    Target("long", "fast", "fw-int8", 0.5, "not worse"),
    Target("separate", "fast", "fw-int8", 0.6),
    Target("separate", "exact", "fw-float32", 0.6),
    Target("long", "batched", "fw-batched-float32", 1.0, "lower"),
    Target("long", "batched-fast", "fw-batched-int8", 1.0, "lower"),
)
PEERS = {"exact": "fw-float32", "fast": "fw-int8"}  # the ratio column


@dataclass
class Verdict:
    target: Target
    met: bool
    text: str
    title: str = ""  # what the target says, where describe_target does not


def describe_target(t: Target) -> str:
    ours = SYSTEMS[t.ours]
    wer = {"not worse": ", WER not worse beyond the interval", "lower": ", lower WER"}.get(t.wer_rule, "")
    return f"{t.scope}: {ours} <= {t.max_ratio:g}x {SYSTEMS[t.peer]}{wer}"


def judge(target: Target, measures: Dict[Tuple[str, str], Measure]) -> Verdict:
    """Met only when both sides were measured, the time ratio holds and the WER rule too."""
    title = describe_target(target)
    ours, peer = measures.get((target.scope, target.ours)), measures.get((target.scope, target.peer))
    absent = [name for name, m in ((target.ours, ours), (target.peer, peer)) if m is None]
    if absent:
        return Verdict(target, False, f"NOT met   {title}: not measured ({', '.join(absent)})")
    ratio = ours.seconds / max(1e-9, peer.seconds)
    fast_enough = ratio <= target.max_ratio
    accurate, wer_text = _wer_rule(target.wer_rule, ours, peer)
    met = fast_enough and accurate
    return Verdict(target, met, f"{'met      ' if met else 'NOT met  '} {title}: "
                                f"{ours.seconds:.1f} s / {peer.seconds:.1f} s = {ratio:.2f}x; {wer_text}")


def _wer_rule(rule: Optional[str], ours: Measure, peer: Measure) -> Tuple[bool, str]:
    low, high = difference_interval(ours.edits, peer.edits, ours.counts)
    text = (f"WER {ours.wer:.1%} vs {peer.wer:.1%}, difference {ours.wer - peer.wer:+.1%} "
            f"[{low:+.1%}, {high:+.1%}]")
    if rule == "not worse":
        return low <= 0, text + ("" if low <= 0 else " (worse beyond the interval)")
    if rule == "lower":
        return ours.wer < peer.wer, text
    return True, text


@dataclass
class StepMeasure:
    """A whisper-kv system's mean decoder step inside the long file's transcription
    against its step on one window alone (the step benchmark's)."""

    system: str
    inside_ms: Optional[float]
    alone_ms: Optional[float]

    @property
    def ratio(self) -> Optional[float]:
        return self.inside_ms / self.alone_ms if self.inside_ms and self.alone_ms else None


def measure_steps(systems: Dict[str, System], runs: Dict[Tuple[str, str], List[Run]], long: Item,
                  repeats: int) -> Dict[str, StepMeasure]:
    """For each whisper-kv system that can say (its run has `step_alone`): the median over
    repeats of its mean step in the long file's runs, and of its step alone as probed right
    after those runs (`measure`'s probe_after; probed here, after everything, where a run
    has none)."""
    steps = {}
    for name in STEP_SYSTEMS:
        probe = getattr(systems.get(name), "step_alone", None)
        if probe is None:
            steps[name] = StepMeasure(name, None, None)
            continue
        inside = [r.output.step_ms for r in runs[name, long.name] if r.output.step_ms]
        alone = [r.alone_ms for r in runs[name, long.name] if r.alone_ms]
        alone = alone or [probe() for _ in range(max(ALONE_PROBES, repeats))]
        steps[name] = StepMeasure(name, float(np.median(inside)) if inside else None, float(np.median(alone)))
    return steps


def judge_step(step: StepMeasure) -> Verdict:
    target = Target("long", step.system, step.system, STEP_MAX_RATIO)
    title = (f"step: {SYSTEMS[step.system]}'s mean step inside transcribe (long file) <= "
             f"{STEP_MAX_RATIO:g}x its step on one window alone")
    if step.ratio is None:
        return Verdict(target, False, f"NOT met   {title}: not measured", title)
    met = step.ratio <= STEP_MAX_RATIO
    return Verdict(target, met, f"{'met      ' if met else 'NOT met  '} {title}: "
                                f"{step.inside_ms:.1f} ms / {step.alone_ms:.1f} ms = {step.ratio:.2f}x", title)


# --- the report -----------------------------------------------------------------------------

def table(scope: str, names: Sequence[str], measures: Dict[Tuple[str, str], Measure],
          missing: Dict[str, str]) -> List[str]:
    """One line per system of a scope: seconds, RTF, WER [95 %], tokens, ratio to its peer."""
    lines = [f"  {'system':<36}{'seconds':>8}{'RTF':>7}   {'WER [95 % interval]':<24}{'tokens':>7}  vs peer"]
    for name in names:
        m = measures.get((scope, name))
        if m is None:
            lines.append(f"  {SYSTEMS[name]:<36}not measured ({missing.get(name, 'did not run')})")
            continue
        peer = measures.get((scope, PEERS.get(name, "")))
        versus = f"{m.seconds / peer.seconds:.2f}x {SYSTEMS[peer.system]}" if peer else ""
        wer = f"{m.wer:5.1%} [{m.interval[0]:.1%}, {m.interval[1]:.1%}]"
        lines.append(f"  {SYSTEMS[name]:<36}{m.seconds:8.1f}{m.rtf:7.3f}   {wer:<24}{m.tokens:7d}  {versus}")
    return lines


def chart(path: str, measures: Dict[Tuple[str, str], Measure], title: str) -> None:
    """A PNG: seconds per system, one group of bars per scope."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scopes = [s for s in ("long", "separate") if any(k[0] == s for k in measures)]
    figure, axes = plt.subplots(1, len(scopes), figsize=(6 * len(scopes), 4), squeeze=False)
    for axis, scope in zip(axes[0], scopes):
        rows = [m for (s, _), m in measures.items() if s == scope]
        axis.barh([SYSTEMS[m.system] for m in rows], [m.seconds for m in rows],
                  color=["tab:blue" if SYSTEMS[m.system].startswith("whisper-kv") else "tab:gray" for m in rows])
        for y, m in enumerate(rows):
            axis.text(m.seconds, y, f" {m.seconds:.1f} s, WER {m.wer:.1%}", va="center", fontsize=8)
        axis.invert_yaxis()
        axis.set_xlabel("seconds (lower is faster)")
        axis.set_title(f"{scope}: {rows[0].audio_seconds:.0f} s of audio" if rows else scope)
        axis.set_xlim(0, max([m.seconds for m in rows] + [1]) * 1.45)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def save(path: str, args, measures: Dict[Tuple[str, str], Measure], verdicts: List[Verdict],
         runs: Dict[Tuple[str, str], List[Run]], missing: Dict[str, str],
         steps: Optional[Dict[str, StepMeasure]] = None) -> None:
    data = {
        "model": args.model, "threads": args.threads, "repeats": args.repeats, "cpu": describe_cpu(),
        "measures": [{**{k: v for k, v in asdict(m).items() if k not in ("edits", "counts", "texts")},
                      "rtf": m.rtf, "texts": list(m.texts)} for m in measures.values()],
        "seconds": {f"{s} | {i}": [r.seconds for r in rs] for (s, i), rs in runs.items()},
        "steps": {name: {**asdict(m), "ratio": m.ratio} for name, m in (steps or {}).items()},
        "targets": [{"target": v.title or describe_target(v.target), "met": v.met, "line": v.text}
                    for v in verdicts],
        "not_measured": missing,
    }
    Path(path).write_text(json.dumps(data, indent=1))


# --- main -----------------------------------------------------------------------------------

def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m whisper_demo.bench e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en", help="tiny.en (default) or base: a model with a CTranslate2 package")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated: {', '.join(SYSTEMS)}")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every item by every system (median kept)")
    parser.add_argument("--long-minutes", type=float, default=10.0, help="the long file's length at least")
    parser.add_argument("--limit", type=int, default=None, help="only the first N recordings (a quick look)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chart", metavar="PATH", help="a PNG bar chart of the seconds per system")
    parser.add_argument("--save", metavar="PATH", help="everything as JSON (texts and every run's seconds too)")
    add_eval_dir_argument(parser)
    args = parser.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown or not args.systems:
        parser.error(f"--systems: any of {', '.join(SYSTEMS)} (not {', '.join(sorted(unknown))})")
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    torch.set_num_threads(args.threads)
    recordings = load_recordings(Path(args.eval_dir), args.limit)
    long = join_recordings(recordings, args.long_minutes * 60)
    recordings = recordings[: len(long.recordings)]  # separate: the very recordings of the long file
    cpu = describe_cpu() or "this CPU"
    print(f"{args.model}, {args.threads} threads on {cpu}, {args.repeats} repeat(s); long file {long.seconds:.1f} s "
          f"({len(long.recordings)} recordings joined with {PAUSE_SECONDS:g} s pauses); separate: "
          f"{len(recordings)} recordings, {sum(r.seconds for r in recordings):.1f} s", flush=True)
    systems, missing = make_systems(args.systems, args.model, args.threads)
    for name, why in missing.items():
        print(f"{SYSTEMS[name]}: not measured ({why})")
    warm_up(systems, recordings[0].audio)
    runs = measure(systems, [long, *recordings], args.repeats, progress=lambda line: print(line, flush=True),
                   probe_after=long.name)
    scopes = {"long": [long], "separate": recordings}
    measures = {(scope, name): summarise(scope, name, items, runs)
                for scope, items in scopes.items() for name in systems}
    for scope, items in scopes.items():
        print(f"\n{scope}: {sum(i.seconds for i in items):.1f} s of audio, "
              f"{sum(len(i.references) for i in items)} recordings")
        print("\n".join(table(scope, args.systems, measures, missing)))
    steps = measure_steps(systems, runs, long, args.repeats)
    print("\nmean decoder step, long file: inside transcribe / one window alone")
    for m in steps.values():
        print(f"  {SYSTEMS[m.system]:<36}" + (f"{m.inside_ms:6.1f} ms / {m.alone_ms:.1f} ms = {m.ratio:.2f}x"
                                             if m.ratio else "not measured"))
    verdicts = [judge(t, measures) for t in TARGETS] + [judge_step(m) for m in steps.values()]
    print("\ntargets:\n" + "\n".join("  " + v.text for v in verdicts))
    if args.chart:
        chart(args.chart, measures, f"Whole files, {args.model}, {args.threads} threads on {cpu}, {date.today()}")
        print(f"chart: {args.chart}")
    if args.save:
        save(args.save, args, measures, verdicts, runs, missing, steps)
        print(f"saved: {args.save}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
