"""Live sessions under load: k visitors speaking into the Live tab at once, through the route.

    python -m whisper_demo.bench live_load [--model tiny.en] [--max-k 8]
        [--clients-recordings N] [--hostile] [--save FILE.json] [--eval-dir DIR]

The app (app.py) serves on 127.0.0.1 at a free port, with --max-live-sessions above the
largest k. Each visitor is one browser tab without the browser (page_visitor.py): it
presses Record through the page's own event, gets its ticket, and posts its recording's
int16 PCM to the ticket as the page's recorder does: one request at a time, 0.1 s each
as the wall clock records it (more in one request when the last reply came late), with
its sample offset; meanwhile it asks the page's timer event for the redraw every 0.25 s,
noting when each committed text was shown; then Stop, whose reply holds the final text.
A visitor's recordings are dev_ordinary clips (the eval folder's read speech) chained
with the silence a microphone gives between them (0.5 s before each, 1 s after) into a
session of 30-52 s (--clients-recordings N: N clips each, for short runs). Visitors
start 0.7 s apart, so their utterances do not end in step.

For k = 1, 2, ... until the targets break (or --max-k), printed per k:

- speech -> commit, median and p95 over all the visitors' timed words: when a word of the
  final text was first shown at its place for good (live_page.shown_since), less the
  word's end in the audio (word timestamps of the offline decode of each clip);
- the final texts' WER against the same recordings' solo run (k = 1: each set alone);
- audio lost: chunks the route refused, the seconds it filled with silence (audio that
  never came) and the seconds the session dropped (a decoder too slow), as the page's
  stats say them;
- whether other visitors' page events stayed responsive: one more tab times a trivial
  page event (the Live tab's KV cache switch, with no session: nothing to do) every
  second during the load, median and max.

The targets: speech -> commit median <= 1.5 s and p95 <= 3.0 s, and nothing lost; the
largest k that holds all three is printed. An empty measure is "not measured" and fails.

With --hostile, a hostile tab (a process of its own) posts from 4 threads at once, 0.5 s of
speech each every 50 ms (10x real time), endlessly, until the others are done; twice:

- under the server's limit (the target): a fresh app with --max-live-sessions at the
  largest k that held (as the app's default is set from this benchmark), k visitors
  without and beside the hostile tab, alternated twice. It presses Record after them and
  is refused a place, so it posts to a ticket it made up (410) and presses Record again
  every second. The others must not notice: their p95 over both runs within 10 % of the
  runs without it, and the same final texts.
- with a place of its own (reported): the search's app, whose limit is above k. It must be
  refused (409: a request while one of its ticket is in flight; 429: audio ahead of the
  wall clock); what the server lets it send (real time) is decoded as any session's, one
  more session on the same cores, so the others' p95 is reported, not judged.

The figures are those of this machine with app and visitors on the same cores: a busy
machine shows a lower k. --save writes every run (summaries, each visitor's final text,
delays and refusals) as JSON.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..audio import SAMPLE_RATE, load_audio
from ..live.snapshots import percentile
from ..text import word_edits, words as normalized_words
from .cli import bench_parser
from .data import add_eval_dir_argument, manifest
from .live_page import (COMMIT_MEDIAN_TARGET_S, COMMIT_P95_TARGET_S, LEAD_SECONDS, TAIL_SECONDS, Recording,
                        judged_s, load, offline_all, padded)
from .app_process import running_app
from .load_clients import RECORD_REFUSED, ClientRun, Probe, RecordingSet, hostile, visit
from .report import judged, verdict

STAGGER_S = 0.7  # between visitors' Records: real visitors do not pause in step
SESSION_S = 30.0  # a visitor's clips (with their silence) are chained until this long...
LONGEST_CLIP_S = 20.0  # ...and none is longer than this: sessions of 30-52 s
SETTLE_S = 2.0  # between runs: the last final passes end before the next run's Record
DEFAULT_MAX_K = 8
HOSTILE_P95_TOLERANCE = 0.10  # the others' p95 beside the hostile tab: at most 10 % above without
HOSTILE_REPEATS = 2  # runs without and beside it under the limit: a p95 over twice the words
SUBSET = "dev_ordinary"


# --- what the visitors say

def chained_clips(items: Sequence[dict], k: int, per_client: Optional[int]) -> List[List[dict]]:
    """The clips of visitors 0..k-1: consecutive manifest items, each visitor's taking up
    where the last one's ended (round the list again past its end), `per_client` each, or
    as many as make a session of SESSION_S with their silence. Clips over LONGEST_CLIP_S
    are left out."""
    pool = [item for item in items if item["duration_s"] <= LONGEST_CLIP_S]
    sets, at = [], 0
    for _ in range(k):
        clips: List[dict] = []
        while (len(clips) < per_client if per_client else
               sum(c["duration_s"] + LEAD_SECONDS + TAIL_SECONDS for c in clips) < SESSION_S):
            clips.append(pool[at % len(pool)])
            at += 1
        sets.append(clips)
    return sets


def recording_sets(eval_dir: Path, k: int, per_client: Optional[int], model: str) -> List[RecordingSet]:
    """Visitors 0..k-1's sessions, with word ends from the offline decode of each clip
    (done here, before the app starts, so it does not take the app's cores)."""
    items = [item for item in manifest(eval_dir, required=True) if item.get("subset") == SUBSET]
    chosen = chained_clips(items, k, per_client)
    unique = {item["id"]: item for clips in chosen for item in clips}
    recordings = [Recording(i, padded(load_audio(eval_dir / item["audio"])), item["reference"])
                  for i, item in unique.items()]
    offline = dict(zip(unique, offline_all(model, recordings)))
    audio = {r.name: r.audio for r in recordings}
    sets = []
    for n, clips in enumerate(chosen):
        ends = chained_word_ends([audio[c["id"]].size / SAMPLE_RATE for c in clips],
                                 [offline[c["id"]].word_ends for c in clips])
        sets.append(RecordingSet(f"set {n}: " + " ".join(c["id"] for c in clips),
                                 np.concatenate([audio[c["id"]] for c in clips]), ends))
    return sets


def chained_word_ends(seconds: Sequence[float], word_ends: Sequence[Sequence[Tuple[str, float]]]
                      ) -> List[Tuple[str, float]]:
    """Each clip's (word, end) moved to where the clip starts in the chain."""
    offsets = np.cumsum([0.0, *seconds])
    return [(word, round(end + float(offset), 3)) for ends, offset in zip(word_ends, offsets) for word, end in ends]


# --- one run at k

@dataclass
class LoadRun:
    k: int
    clients: List[ClientRun]
    probe_s: List[float]  # the probe tab's event latencies, seconds
    probe_failures: int = 0
    hostile: Optional[Dict[object, int]] = None  # the hostile tab's replies: by status, RECORD_REFUSED


def run_load(url: str, sets: Sequence[RecordingSet], hostile_after_s: Optional[float] = None) -> LoadRun:
    """The sets' visitors at once (STAGGER_S apart), the probe beside them, and the hostile
    tab if `hostile_after_s` is given (it presses Record that long after the first visitor);
    returns when every visitor has stopped."""
    results: List[Optional[ClientRun]] = [None] * len(sets)

    def one(i: int) -> None:
        results[i] = visit(url, sets[i], i * STAGGER_S)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(sets))]
    probe = Probe(url)
    probe.start()
    with_hostile = hostile_after_s is not None
    if with_hostile:
        go, stop_hostile, hostile_process, replies = _start_hostile(url, sets, hostile_after_s)
        go.set()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    probe.done.set()
    probe.join()
    counts = _end_hostile(stop_hostile, hostile_process, replies) if with_hostile else None
    time.sleep(SETTLE_S)
    return LoadRun(len(sets), list(results), probe.latencies, probe.failures, counts)


def _start_hostile(url: str, sets: Sequence[RecordingSet], record_after_s: float):
    context = multiprocessing.get_context("spawn")  # not fork: this process runs threads
    ready, go, stop, replies = context.Event(), context.Event(), context.Event(), context.Queue()
    speech = np.concatenate([s.audio for s in sets])
    process = context.Process(target=hostile, args=(url, speech, ready, go, stop, replies, record_after_s),
                              daemon=True)
    process.start()
    ready.wait(timeout=120)  # the others start with it (a fresh interpreter imports torch first)
    return go, stop, process, replies


def _end_hostile(stop, process, replies) -> Dict[object, int]:
    stop.set()
    try:
        counts = replies.get(timeout=120)
    except Exception:  # queue.Empty: it never reported (said as no replies at all)
        counts = {}
    process.join(timeout=30)
    return counts


# --- the figures

@dataclass
class Summary:
    """One run at k, summed up over its visitors."""

    k: int
    hostile: bool
    words: int  # timed words
    median_s: Optional[float]
    p95_s: Optional[float]
    wer: Optional[float]  # % of the solo runs' words; None without a solo text for every set
    lost_s: Optional[float]  # None: no visitor finished
    refused: int
    failed: int  # visitors whose Record or session failed
    probe_failures: int  # the probe tab's events that failed
    probe_median_ms: Optional[float]
    probe_max_ms: Optional[float]

    def lost_total(self) -> Optional[float]:
        """Anything lost at all: seconds, plus one for each refused chunk or failed visitor."""
        return None if self.lost_s is None else self.lost_s + self.refused + self.failed

    def holds(self) -> Optional[bool]:
        """Every target met (True), one NOT met (False), else one not measured (None: fails)."""
        checks = [judged(self.median_s, COMMIT_MEDIAN_TARGET_S), judged(self.p95_s, COMMIT_P95_TARGET_S),
                  judged(self.lost_total(), 0.0)]
        if False in checks:
            return False
        return None if None in checks else True


def summarise(run: LoadRun, solo: Dict[str, str], hostile: bool = False) -> Summary:
    """`run` against the targets; WER of each final text against `solo` (set name -> the
    final text of that set alone)."""
    done = [c for c in run.clients if c.error is None]
    delays = [d for c in done for d in c.delays]
    return Summary(
        k=run.k, hostile=hostile, words=len(delays), median_s=percentile(delays, 50), p95_s=percentile(delays, 95),
        wer=solo_wer(done, solo) if len(done) == len(run.clients) else None,
        lost_s=sum(c.lost_s for c in done) if done else None,
        refused=sum(sum(c.refused.values()) for c in run.clients),
        failed=len(run.clients) - len(done), probe_failures=run.probe_failures,
        probe_median_ms=_ms(percentile(run.probe_s, 50)), probe_max_ms=_ms(max(run.probe_s, default=None)))


def _ms(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else round(1000 * seconds, 1)


def solo_wer(clients: Sequence[ClientRun], solo: Dict[str, str]) -> Optional[float]:
    """Word errors of the final texts against their sets' solo final texts, as a % of the
    solo texts' words; None when a set has no solo text, or the solo texts no words."""
    if not clients or any(c.set_name not in solo for c in clients):
        return None
    words = sum(len(normalized_words(solo[c.set_name])) for c in clients)
    edits = sum(word_edits(c.final, solo[c.set_name]) for c in clients)
    return 100 * edits / words if words else None


def largest_holding(summaries: Sequence[Summary]) -> Optional[int]:
    """The largest k of an unbroken run of holding k from 1 (the search stops at the first
    that breaks); None when k = 1 does not hold."""
    held = None
    for s in sorted(summaries, key=lambda s: s.k):
        if s.holds() is not True or s.k != (held or 0) + 1:
            break
        held = s.k
    return held


# --- the search over k, and the report

HEADER = (f"{'k':>4} {'words':>6} {'commit median':>14} {'p95':>7} {'WER vs solo':>12} {'lost s':>7} "
          f"{'refused':>7} {'failed':>6} {'probe ms median/max':>20}  holds")


def _figure(value: Optional[float], spec: str, unit: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{unit}"


def row(s: Summary) -> str:
    """One k's line of the table (— for an empty measure)."""
    probe = f"{_figure(s.probe_median_ms, '.0f')} / {_figure(s.probe_max_ms, '.0f')}"
    if s.probe_failures:
        probe += f" ({s.probe_failures} failed)"
    return (f"{str(s.k) + ('+H' if s.hostile else ''):>4} {s.words:>6} {_figure(s.median_s, '.2f', ' s'):>14} "
            f"{_figure(s.p95_s, '.2f', ' s'):>7} {_figure(s.wer, '.1f', ' %'):>12} {_figure(s.lost_s, '.1f'):>7} "
            f"{s.refused:>7} {s.failed:>6} {probe:>20}  {verdict(s.holds())}")


def client_notes(run: LoadRun) -> List[str]:
    """What went wrong for a visitor, one line each."""
    notes = []
    for c in run.clients:
        if c.error:
            notes.append(f"     {c.set_name[:40]}: FAILED: {c.error}")
        elif c.refused or c.lost_s:
            notes.append(f"     {c.set_name[:40]}: refused {c.refused}, lost {c.lost_s:.1f} s")
    return notes


def verdict_lines(summaries: Sequence[Summary]) -> List[str]:
    """The largest k that holds, and the first k that broke and why."""
    held = largest_holding(summaries)
    lines = [f"largest k that holds (speech -> commit median <= {COMMIT_MEDIAN_TARGET_S} s, p95 <= "
             f"{COMMIT_P95_TARGET_S} s, nothing lost): {held if held is not None else 'none'}"]
    broke = next((s for s in sorted(summaries, key=lambda s: s.k) if s.holds() is not True), None)
    if broke is not None:
        lost = broke.lost_total()
        lines.append(f"  k = {broke.k}: median {judged_s(broke.median_s, COMMIT_MEDIAN_TARGET_S)}, "
                     f"p95 {judged_s(broke.p95_s, COMMIT_P95_TARGET_S)}, lost "
                     f"{_figure(lost, '.1f')} (target 0: {verdict(judged(lost, 0.0))})")
    return lines


def search(url: str, sets: Sequence[RecordingSet], max_k: int) -> Tuple[List[Summary], List[LoadRun], Dict[str, str]]:
    """k = 1, 2, ... until a k does not hold, or max_k: each set's solo run first (its final
    text is what the same set's text under load is compared with; k = 1 is set 0's)."""
    solo: Dict[str, str] = {}
    summaries, runs = [], []
    print(HEADER, flush=True)
    for k in range(1, max_k + 1):
        for alone in sets[1:k]:
            if alone.name not in solo:
                _take_solo(run_load(url, [alone]), solo)
        run = run_load(url, sets[:k])
        if k == 1:
            _take_solo(run, solo)
        summaries.append(summarise(run, solo))
        runs.append(run)
        print("\n".join([row(summaries[-1])] + client_notes(run)), flush=True)
        if summaries[-1].holds() is not True:
            break
    return summaries, runs, solo


def _take_solo(run: LoadRun, solo: Dict[str, str]) -> None:
    client = run.clients[0]
    if client.error is None:
        solo[client.set_name] = client.final
    else:  # its set's WER is then not measured
        print(f"     solo run of {client.set_name[:40]} FAILED: {client.error}", flush=True)


def hostile_lines(without: Summary, with_: Summary, plain: LoadRun, beside: LoadRun,
                  refusals: Sequence[object] = (409, 429), judge: bool = True) -> List[str]:
    """The hostile tab against its targets: refused (a reply of each of `refusals`), the
    others' p95 within HOSTILE_P95_TOLERANCE of the run without it, and their final texts
    the same (`plain` and `beside` hold the same visitors in the same order). judge=False:
    the p95 is reported, not judged."""
    counts = beside.hostile or {}
    refused = all(counts.get(r, 0) > 0 for r in refusals) if counts else None  # None: never reported
    rise = (with_.p95_s / without.p95_s - 1) if with_.p95_s and without.p95_s else None
    finished = all(c.error is None for c in plain.clients + beside.clients)
    same = [a.final == b.final for a, b in zip(plain.clients, beside.clients)] if finished else None
    replies = ", ".join(f"{status} x {n}" for status, n in sorted(counts.items(), key=str)) or "none"
    p95_verdict = (f"target <= +{100 * HOSTILE_P95_TOLERANCE:.0f} %: {verdict(judged(rise, HOSTILE_P95_TOLERANCE))}"
                   if judge else "reported")
    return [
        f"hostile tab's replies: {replies}: refused with {' and '.join(map(str, refusals))} ({verdict(refused)})",
        f"the others' speech -> commit p95: {_figure(without.p95_s, '.2f', ' s')} without, "
        f"{_figure(with_.p95_s, '.2f', ' s')} beside it: {_figure(rise and 100 * rise, '+.0f', ' %')} ({p95_verdict})",
        f"the others' final texts: {'—' if same is None else f'{sum(same)} of {len(same)} the same'} "
        f"(target all: {verdict(None if same is None else all(same))})"]


def pooled(runs: Sequence[LoadRun]) -> LoadRun:
    """Several runs of the same visitors as one: their visitors one after another (a p95
    over more words), the probe's times and the hostile tab's replies summed."""
    counts: Dict[object, int] = {}
    for run in runs:
        for reply, n in (run.hostile or {}).items():
            counts[reply] = counts.get(reply, 0) + n
    return LoadRun(runs[0].k, [c for r in runs for c in r.clients], [t for r in runs for t in r.probe_s],
                   sum(r.probe_failures for r in runs), counts if any(r.hostile is not None for r in runs) else None)


def main(argv=None) -> int:
    parser = bench_parser("live_load", __doc__)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--max-k", type=int, default=DEFAULT_MAX_K, help=f"at most this many visitors (default {DEFAULT_MAX_K})")
    parser.add_argument("--clients-recordings", type=int, default=None, metavar="N",
                        help=f"N clips per visitor (default: clips chained to a session of {SESSION_S:.0f} s)")
    parser.add_argument("--hostile", action="store_true", help="run the largest k that held again beside a hostile tab")
    parser.add_argument("--save", metavar="FILE.json", help="every run's figures, texts and refusals as JSON")
    add_eval_dir_argument(parser)
    args = parser.parse_args(argv)

    sets = recording_sets(Path(args.eval_dir), args.max_k, args.clients_recordings, args.model)
    print(f"load average {load()}; up to {args.max_k} visitors, sessions of "
          f"{', '.join(f'{s.audio.size / SAMPLE_RATE:.0f}' for s in sets)} s", flush=True)
    # room for every visitor, the hostile tab and one more: a place is never what limits k here
    with running_app(args.model, "--max-live-sessions", str(args.max_k + 2), until_warm=True) as app:
        url = app.url
        summaries, runs, solo = search(url, sets, args.max_k)
        print("\n".join(verdict_lines(summaries)), flush=True)
        hostile_runs = [_hostile_with_a_place(url, sets, summaries, runs, solo)] if args.hostile else []
    if args.hostile:
        hostile_runs.append(_hostile_under_limit(args.model, sets, largest_holding(summaries) or 1, solo))
    print(f"load average at the end {load()}")
    if args.save:
        _save(Path(args.save), args, summaries, runs, hostile_runs)
    return 1 if any(c.error for r in runs + [run for _, run in hostile_runs] for c in r.clients) else 0


def _hostile_with_a_place(url, sets, summaries: List[Summary], runs: List[LoadRun], solo) -> Tuple[Summary, LoadRun]:
    """The largest k that held (k = 1 if none did) again, beside the hostile tab given a
    place of its own (this app's limit is above k): the route's refusals under load. The
    audio it is let send is one more real-time session on the same cores, so the others'
    p95 is reported, not judged (the k + 1 row says what one more session costs)."""
    k = largest_holding(summaries) or 1
    run = run_load(url, sets[:k], hostile_after_s=0.0)  # it presses Record with the first visitor
    summary = summarise(run, solo, hostile=True)
    print("beside a hostile tab with a place of its own (the limit raised above k):", flush=True)
    print("\n".join([row(summary)] + client_notes(run)
                    + hostile_lines(summaries[k - 1], summary, runs[k - 1], run, judge=False)), flush=True)
    return summary, run


def _hostile_under_limit(model: str, sets, k: int, solo) -> Tuple[Summary, LoadRun]:
    """k visitors on an app whose --max-live-sessions is k (as the default is set from this
    benchmark), without and beside the hostile tab, which presses Record after them and is
    refused a place, alternated HOSTILE_REPEATS times; judged on the pooled runs."""
    plain_runs, beside_runs = [], []
    print(f"under the server's limit (--max-live-sessions {k}), without and beside the hostile tab, "
          f"{HOSTILE_REPEATS} runs each, alternated:", flush=True)
    with running_app(model, "--max-live-sessions", str(k), until_warm=True) as app:
        for _ in range(HOSTILE_REPEATS):
            plain_runs.append(run_load(app.url, sets[:k]))
            beside_runs.append(run_load(app.url, sets[:k], hostile_after_s=(k - 1) * STAGGER_S + 1.0))
            for run, hostile_ in ((plain_runs[-1], False), (beside_runs[-1], True)):
                print("\n".join([row(summarise(run, solo, hostile=hostile_))] + client_notes(run)), flush=True)
    plain, beside = pooled(plain_runs), pooled(beside_runs)
    without, with_ = summarise(plain, solo), summarise(beside, solo, hostile=True)
    print(f"pooled over the {HOSTILE_REPEATS} runs of each:", flush=True)
    print("\n".join([row(without), row(with_)]
                    + hostile_lines(without, with_, plain, beside, refusals=(RECORD_REFUSED, 410))), flush=True)
    return with_, beside


def _save(path: Path, args, summaries, runs, hostile_runs) -> None:
    data = {"model": args.model, "load_average": load(), "summaries": [asdict(s) for s in summaries],
            "runs": [asdict(r) for r in runs],
            "hostile": [{"summary": asdict(summary), "run": asdict(run)} for summary, run in hostile_runs]}
    path.write_text(json.dumps(data, indent=1))
    print(f"saved {path}")


if __name__ == "__main__":
    raise SystemExit(main())
