"""Live per session over the dev set: each recording is one session (start, speak, stop).

    python -m whisper_demo.bench live_eval [--model tiny.en] [--eval-dir DIR]
        [--policies agreement,alignatt] [--feeds fast,paced,realtime] [--every N] [--subset dev]
        [--precision exact]
        [--set NAME=VALUE] [--save runs.jsonl] [--offline-cache offline.json]
    python -m whisper_demo.bench live_eval --report runs.jsonl [more.jsonl ...]

A user opens the Live tab, speaks and stops: so each recording of the manifest is fed as
its own session, with the silence a microphone gives before (0.5 s) and after (1 s) it,
and its committed text is scored against the reference, errors summed over the sessions,
next to the offline decode of the same audio (transcribe with the default options:
openai-whisper's temperature fallback, seeded). Printed per policy and feed:

- errors and WER over all sessions, and offline's;
- sessions whose first five committed words differ from the offline transcript's first
  five (no reference needed: where a session's start was guessed from a short buffer);
- phrases committed twice (live_stream.phrases_committed_twice, per session);
- speech -> commit: from each committed word's end (its own word timestamp) to its
  commit, in stream seconds: the fast feed's is the policy's delay with no compute, the
  paced feed's charges each decode a fixed cost (the same every run), the realtime
  feed's is this machine's (a thread adds a chunk every 0.1 s of wall time);
- the targets, met or NOT met: errors within one WER point of offline's, nothing
  committed twice, and for the realtime feed speech -> commit median <= 1.0 s, p95 <=
  2.0 s and chunk end -> first token median <= 350 ms.

--save writes one JSON line per session and kind; --report prints the table of saved
lines (runs made in parallel, one per policy, merge so). A run's --set changes are part of
its kind ("alignatt/fast frame_seconds=0.3"): runs of several settings saved to one file
report as one trade-off table, errors against delay.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import numpy as np

from ..audio import SAMPLE_RATE, load_audio
from ..events import DecodeOptions
from ..text import word_edits, words as normalized_words
from .data import add_eval_dir_argument, manifest
from .live_stream import phrases_committed_twice
from .feeds import DecodeCosts, feed_fast, feed_paced, feed_realtime
from ..live.config import LiveConfig
from ..live.snapshots import percentile
from ..precision import live_precision

LEAD_SECONDS, TAIL_SECONDS = 0.5, 1.0
PACED_COSTS = {"tiny.en": DecodeCosts(0.163, 0.012), "base": DecodeCosts(0.395, 0.022)}


def load_sessions(eval_dir: Path, every: int = 1, subset: Optional[str] = None, start: int = 0) -> List[dict]:
    """The manifest's recordings (every `every`-th from `start`, of one subset if named),
    each padded with a microphone's silence before and after."""
    items = [item for item in manifest(eval_dir, required=True) if subset is None or item.get("subset") == subset][start::every]
    lead, tail = np.zeros(int(LEAD_SECONDS * SAMPLE_RATE), np.float32), np.zeros(int(TAIL_SECONDS * SAMPLE_RATE), np.float32)
    return [dict(id=item["id"], subset=item.get("subset", ""), reference=item["reference"],
                 audio=np.concatenate([lead, load_audio(eval_dir / item["audio"]), tail])) for item in items]


def offline_text(model, audio: np.ndarray, options: DecodeOptions) -> str:
    from ..decode import transcribe

    return transcribe(model, audio, replace(options, seed=0)).text


def live_record(model, options: DecodeOptions, session: dict, policy: str, feed: str,
                config: LiveConfig, costs: DecodeCosts, settings: str = "") -> dict:
    """One session through one policy and feed. settings: the --set changes, named in the
    record's kind, so that runs of several settings merge into one trade-off table."""
    config = replace(config, policy=policy)
    if feed == "fast":
        result = feed_fast(model, options, session["audio"], 0.1, config)
    elif feed == "realtime":
        result = feed_realtime(model, options, session["audio"], 0.1, config)
    else:
        result = feed_paced(model, options, session["audio"], 0.1, config, costs)
    # every feed's clock starts with the stream: a commit time less a word's end is its delay
    delays = [round(at - end, 3) for at, (_, _, end) in zip(result.commit_times, result.words)]
    kind = f"{policy}/{feed}" + ("" if options.precision == "exact" else f"/{options.precision}")
    kind += f" {settings}" if settings else ""
    return dict(id=session["id"], subset=session["subset"], kind=kind, text=result.committed,
                reference=session["reference"], delays=delays, decodes=result.decodes,
                first_token_ms=[round(ms, 1) for ms in result.first_token_ms])


def first_five_differ(text: str, offline: str) -> bool:
    return normalized_words(text)[:5] != normalized_words(offline)[:5]


def report(records: Iterable[dict]) -> str:
    records = list(records)
    offline = {r["id"]: r["text"] for r in records if r["kind"] == "offline"}
    references = {r["id"]: r["reference"] for r in records}
    kinds = sorted({r["kind"] for r in records if r["kind"] != "offline"})
    # the sessions every kind ran (runs merged from several processes may stop apart)
    common = set(offline).intersection(*({r["id"] for r in records if r["kind"] == kind} for kind in kinds))
    lines, targets = [], []
    width = max([22, *map(len, kinds)])
    for kind in kinds:
        rows = [r for r in records if r["kind"] == kind and r["id"] in common]
        ids = [r["id"] for r in rows]
        ref_words = sum(len(normalized_words(references[i])) for i in ids)
        errors = sum(word_edits(r["text"], r["reference"]) for r in rows)
        offline_errors = sum(word_edits(offline[i], references[i]) for i in ids)
        differ = sum(first_five_differ(r["text"], offline[r["id"]]) for r in rows)
        twice = sum(phrases_committed_twice(r["text"], offline[r["id"]], r["reference"]) for r in rows)
        delays = [d for r in rows for d in r["delays"]]
        lines.append(f"{kind:<{width}} {len(rows):>4} {errors:>5} {100 * errors / max(1, ref_words):>6.1f}% "
                     f"{offline_errors:>5} {100 * offline_errors / max(1, ref_words):>6.1f}% {differ:>6} {twice:>5} "
                     f"{percentile(delays, 50) or 0:>6.2f} {percentile(delays, 95) or 0:>6.2f}")
        first_token = [ms for r in rows for ms in r.get("first_token_ms", ())]
        targets += target_lines(kind, len(rows), errors, offline_errors, ref_words, twice, delays, first_token)
    header = (f"{'policy/feed':<{width}} {'sess':>4} {'errs':>5} {'WER':>7} {'offl':>5} {'offWER':>7} "
              f"{'first5':>6} {'twice':>5} {'med s':>6} {'p95 s':>6}")
    return "\n".join([header, "-" * len(header), *lines,
                      "first5: sessions whose first five committed words differ from offline's; "
                      "twice: phrases committed twice; med/p95: speech -> commit (word end -> commit, stream s)",
                      "targets (tiny.en):", *targets])


def target_lines(kind: str, sessions: int, errors: int, offline_errors: int, ref_words: int, twice: int,
                 delays: List[float], first_token_ms: List[float]) -> List[str]:
    """The live targets this kind of run measures, each marked met or NOT met."""
    def mark(ok: bool) -> str:
        return "met    " if ok else "NOT met"

    allowed = offline_errors + 0.01 * ref_words
    out = [f"  {mark(errors <= allowed)} {kind}: {errors} errors <= offline {offline_errors} + 1 WER point "
           f"({allowed:.1f}) over {sessions} sessions",
           f"  {mark(twice == 0)} {kind}: nothing committed twice ({twice} phrases)"]
    if "/realtime" in kind:
        median, p95 = percentile(delays, 50) or 0.0, percentile(delays, 95) or 0.0
        first = percentile(first_token_ms, 50) or 0.0
        out += [f"  {mark(median <= 1.0)} {kind}: speech -> commit median {median:.2f} s <= 1.0 s",
                f"  {mark(p95 <= 2.0)} {kind}: speech -> commit p95 {p95:.2f} s <= 2.0 s",
                f"  {mark(first <= 350)} {kind}: chunk end -> first token median {first:.0f} ms <= 350 ms"]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whisper_demo.bench live_eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    add_eval_dir_argument(parser)
    parser.add_argument("--policies", default="agreement,alignatt")
    parser.add_argument("--feeds", default="fast,paced")
    parser.add_argument("--every", type=int, default=1, help="take every N-th recording (a quicker look)")
    parser.add_argument("--start", type=int, default=0, help="the first recording taken (with --every)")
    parser.add_argument("--subset", help="dev or dev_ordinary (default: both)")
    parser.add_argument("--set", metavar="NAME=VALUE", action="append", default=[], help="a LiveConfig field")
    parser.add_argument("--save", help="append one JSON line per session and kind here")
    parser.add_argument("--offline-cache", help="offline transcripts by recording id (read and written)")
    parser.add_argument("--no-offline", action="store_true", help="leave the offline decode to another run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default=None,
                        help="the live decodes' precision: exact, or int8 (the fast mode: bfloat16 encoder, int8 "
                             "decoder); default: the Live tab's (int8 on the CPU, exact on a GPU)")
    parser.add_argument("--report", nargs="+", metavar="JSONL", help="print the table of saved runs and stop")
    args = parser.parse_args(argv)
    if args.report:
        records = [json.loads(line) for path in args.report for line in Path(path).read_text().splitlines() if line]
        print(report(records))
        return 0
    config = LiveConfig()
    try:
        config = replace(config, **{name: type(getattr(config, name))(value)
                                    for name, value in (item.split("=", 1) for item in args.set)})
    except (ValueError, TypeError, AttributeError) as error:
        parser.error(f"--set: {error}")
    import torch

    from ..models import load_model

    torch.set_num_threads(args.threads)
    model = load_model(args.model, progress=False)
    options = DecodeOptions(cache="static", language="en" if model.is_multilingual else None,
                            precision=args.precision or live_precision(model))
    costs = PACED_COSTS.get(args.model, PACED_COSTS["base"])
    cache_path = Path(args.offline_cache) if args.offline_cache else None
    cached: Dict[str, str] = json.loads(cache_path.read_text()) if cache_path and cache_path.exists() else {}
    records: List[dict] = []
    for session in load_sessions(Path(args.eval_dir), args.every, args.subset, args.start):
        found = []
        if not args.no_offline:
            if session["id"] not in cached:
                cached[session["id"]] = offline_text(model, session["audio"], DecodeOptions())
                if cache_path:
                    cache_path.write_text(json.dumps(cached))
            found.append(dict(id=session["id"], subset=session["subset"], kind="offline", text=cached[session["id"]],
                              reference=session["reference"], delays=[], decodes=0))
        for policy in args.policies.split(","):
            for feed in args.feeds.split(","):
                found.append(live_record(model, options, session, policy, feed, config, costs, " ".join(args.set)))
        for record in found:
            print(f"{record['id']:<28} {record['kind']:<18} {record['text']}", flush=True)
        if args.save:
            with open(args.save, "a") as out:
                out.writelines(json.dumps(r) + "\n" for r in found)
        records += found
    print(report(records))
    if args.set:
        print("live settings changed from the default: " + ", ".join(args.set))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
