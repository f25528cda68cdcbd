"""Live benchmark: a long stream of real speech, fed to a LiveSession three ways.

    python -m whisper_demo.bench live_stream [--model tiny.en] [--eval-dir DIR]
                                      [--feeds fast,paced,realtime] [--chunk 0.1] [--min-seconds 180]
                                      [--twice] [--encode-audio-only] [--by-recording]
                                      [--save PATH] [--paced-costs ENC_MS,STEP_MS]
                                      [--set NAME=VALUE] [--seeds FIRST-LAST]

The stream: every recording of the evaluation folder (manifest.jsonl with references),
then the package's own example clips, joined with pauses of 0.3-2 s (a fixed seed; `--seed` shuffles them), and
repeated until it lasts `--min-seconds`; its reference is the references joined.

The feeds (feeds.py): fast (no clock: the same text every run, `--twice` checks it),
paced (real time on a simulated clock where each decode costs what the fast feed
measured, or `--paced-costs`: real-time behaviour that repeats itself) and realtime (a
thread adds the chunks in wall time, as a microphone does).

Printed per feed: committed WER beside the offline WER of the same model on the same
stream (decoded as the live decodes are, greedy; and as openai-whisper's transcribe does by
default, with temperature fallback, seeded); phrases committed twice (words the live text has twice in a row where the offline
transcript of the same audio has them once); chunk end -> first token and speech -> commit (median, p95), the
latter from each word's end in the audio as the offline decode's word timestamps place it;
re-decodes per second of audio; the encoder's share of decode time.
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..audio import SAMPLE_RATE, load_audio
from ..decode import transcribe
from ..events import DecodeOptions
from ..examples import CLIPS, clip_path, reference_transcripts
from ..models import DEFAULT_MODEL, load_model
from ..text import word_edits, word_error_rate, words as normalized_words
from .data import add_eval_dir_argument, manifest
from .feeds import DecodeCosts, FeedResult, feed_fast, feed_paced, feed_realtime
from ..live.config import LiveConfig
from ..live.snapshots import percentile
from .cli import add_set_argument, bench_parser, live_config



@dataclass
class Recording:
    name: str
    start: float  # stream seconds
    end: float  # stream seconds, the pause after it included
    reference: str


@dataclass
class Stream:
    audio: np.ndarray
    reference: str
    recordings: List[Recording]

    @property
    def pieces(self) -> int:
        return len(self.recordings)


def load_recordings(eval_dir: Optional[Path]) -> List[Tuple[str, np.ndarray, str]]:
    """(name, audio, reference) of each recording in the evaluation folder's manifest (if
    there is one), then of each example clip the package ships ("jfk.wav", ...)."""
    clips: List[Tuple[str, np.ndarray, str]] = []
    for item in manifest(eval_dir):
        clips.append((item.get("id", item["audio"]), load_audio(eval_dir / item["audio"]), item["reference"]))
    references = reference_transcripts()
    for name in CLIPS:
        clips.append((name, load_audio(clip_path(name)), references[name]))
    return clips


def build_stream(eval_dir: Optional[Path], min_seconds: float = 180.0, seed: int = 0) -> Stream:
    clips = load_recordings(eval_dir)
    rng = random.Random(seed)
    if seed:  # another stream of the same recordings: another order (and other pauses)
        rng.shuffle(clips)
    parts, recordings, samples = [], [], 0
    while samples < min_seconds * SAMPLE_RATE:
        for name, audio, reference in clips:
            pause = np.zeros(int(rng.uniform(0.3, 2.0) * SAMPLE_RATE), dtype=np.float32)
            parts += [audio, pause]
            recordings.append(Recording(name, samples / SAMPLE_RATE,
                                        (samples + audio.size + pause.size) / SAMPLE_RATE, reference))
            samples += audio.size + pause.size
    reference = " ".join(r.reference for r in recordings if r.reference)
    return Stream(np.concatenate(parts), reference, recordings)


def phrases_committed_twice(committed: str, offline: str, reference: Optional[str] = None) -> int:
    """Phrases of two words or more that the live text has right after themselves where
    the offline transcript of the same audio has them once: the same audio committed
    twice. Found on the alignment of the two (normalised) word sequences, so that a
    phrase the speaker really repeats (in the offline text too) does not count. With the
    reference, a repeat it has too is not counted either: the speaker said it twice and
    the offline decode left one out ("forced, uh, um, forced")."""
    live = normalized_words(committed)
    repeats = _repeats_absent_from(normalized_words(offline), live)
    if reference is not None:
        in_reference_too = _repeats_absent_from(normalized_words(reference), live)
        repeats = [(a, b) for a, b in repeats if any(a < d and c < b for c, d in in_reference_too)]
    return len(repeats)


def _repeats_absent_from(other: List[str], live: List[str]) -> List[Tuple[int, int]]:
    """Spans [start, end) of `live` made of a phrase and its copy right after it, where the
    alignment with `other` says the copy is not in `other`."""
    spans = []
    matcher = difflib.SequenceMatcher(None, other, live, autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag not in ("insert", "replace"):
            continue
        for n in range(j2 - j1, 1, -1):
            # the inserted words open by repeating what precedes them, or (the aligner may
            # place the copy first) close by repeating what follows them
            if j1 - n >= 0 and live[j1:j1 + n] == live[j1 - n:j1]:
                spans.append((j1 - n, j1 + n))
                break
            if live[j2 - n:j2] == live[j2:j2 + n]:
                spans.append((j2 - n, j2 + n))
                break
    return spans


MATCH_SECONDS = 1.0  # a committed word and an offline word farther apart are not the same word


def speech_to_commit(result: FeedResult, offline_words: List[Tuple[str, float]]) -> List[Tuple[float, str]]:
    """Per committed word found in the offline transcript: (commit time - the word's end in
    the audio as the offline decode places it, the rule that committed it). A committed
    word is the same offline word when it is spelled the same (normalised) and the two
    ends lie within MATCH_SECONDS, the nearest such in stream order: aligning the texts
    alone pairs a word with the wrong copy when the stream repeats a phrase ("montreal
    forced aligner", forty times), and its latency would be seconds off."""
    offline = [(" ".join(normalized_words(text)), end) for text, end in offline_words]
    latencies, first = [], 0
    for (text, _, end), committed_at, rule in zip(result.words, result.commit_times, result.commit_rules):
        norm = " ".join(normalized_words(text))
        if not norm:
            continue
        near = [j for j in range(first, len(offline))
                if offline[j][0] == norm and abs(offline[j][1] - end) <= MATCH_SECONDS]
        if near:
            j = min(near, key=lambda k: abs(offline[k][1] - end))
            latencies.append((committed_at - offline[j][1], rule))
            first = j + 1
    return latencies


def errors_by_recording(stream: Stream, words: List[Tuple[str, float, float]]) -> List[int]:
    """Word errors per recording of the stream, each word placed in the recording where
    the middle of it falls (roughly: a word's times may stray over a pause)."""
    counts = []
    for rec in stream.recordings:
        said = " ".join(text for text, start, end in words if rec.start <= (start + end) / 2 < rec.end)
        counts.append(word_edits(said, rec.reference))
    return counts


def by_recording_table(stream: Stream, offline_words, results: List[FeedResult]) -> str:
    """The recordings where the live feeds and the offline decode make different numbers of
    errors, and the totals: where a whole-stream WER difference comes from."""
    columns = [("offline", errors_by_recording(stream, offline_words))]
    columns += [(r.feed, errors_by_recording(stream, r.words)) for r in results]
    lines = ["word errors by recording (words placed by time): " + ", ".join(
        f"{name} {sum(counts)}" for name, counts in columns) + " of "
        f"{sum(len(normalized_words(r.reference)) for r in stream.recordings)} reference words"]
    for i, rec in enumerate(stream.recordings):
        row = [counts[i] for _, counts in columns]
        if len(set(row)) > 1:
            lines.append(f"  {rec.name:<28} {len(normalized_words(rec.reference)):>3} words  " + "  ".join(
                f"{name} {n}" for (name, _), n in zip(columns, row)))
    return "\n".join(lines)


def pct(values, q) -> float:
    """The q-th percentile, NaN (printed "nan") for an empty list: a table cell, not a target."""
    value = percentile(values, q)
    return float("nan") if value is None else value


def report(model_name: str, stream: Stream, offline_text: str, offline_words, results: List[FeedResult],
           fallback_text: Optional[str] = None, encoder: str = "30 s window") -> str:
    seconds = stream.audio.size / SAMPLE_RATE
    lines = [f"live benchmark: {model_name}, {seconds:.0f} s stream ({stream.pieces} recordings "
             f"joined with 0.3-2 s pauses), 0.1 s chunks, encoder input: {encoder}",
             f"offline WER (same model, whole stream, greedy as the live decodes): "
             f"{100 * word_error_rate(offline_text, stream.reference):.1f} %"]
    if fallback_text is not None:
        lines.append(f"offline WER with temperature fallback (openai-whisper transcribe's default): "
                     f"{100 * word_error_rate(fallback_text, stream.reference):.1f} %")
    header = (f"{'feed':<9} {'WER':>6} {'twice':>5} {'1st tok ms':>11} {'commit s':>10} "
              f"{'p95':>5} {'decodes/s':>9} {'enc share':>9} {'wall s':>7}")
    lines += [header, "-" * len(header)]
    for r in results:
        commit = [seconds for seconds, _ in speech_to_commit(r, offline_words)]
        first = f"{pct(r.first_token_ms, 50):.0f}/{pct(r.first_token_ms, 95):.0f}" if r.first_token_ms else "-"
        share = r.encoder_ms / (r.encoder_ms + r.decode_ms) if r.decode_ms else 0.0
        lines.append(
            f"{r.feed:<9} {100 * word_error_rate(r.committed, stream.reference):5.1f}% "
            f"{phrases_committed_twice(r.committed, offline_text, stream.reference):>5} {first:>11} {pct(commit, 50):>10.2f} "
            f"{pct(commit, 95):>5.2f} {r.decodes / seconds:>9.2f} {share:>9.0%} {r.wall_seconds:>7.1f}")
    lines.append("fast: commit times in stream seconds (the algorithm's delay, no compute); paced: "
                 "stream seconds with each decode's cost; realtime: wall seconds on this machine")
    for r in results:
        by_rule: Dict[str, List[float]] = {}
        for seconds, rule in speech_to_commit(r, offline_words):
            by_rule.setdefault(rule, []).append(seconds)
        lines.append(f"{r.feed}: speech -> commit by rule: " + "; ".join(
            f"{rule} {len(v)} words, {pct(v, 50):.2f}/{pct(v, 95):.2f} s"
            for rule, v in sorted(by_rule.items(), key=lambda kv: -len(kv[1]))))
    for r in results:
        d, n = r.draft, r.with_result
        if n and d:
            lines.append(
                f"{r.feed}: per re-decode ({n}), {d.get('given', 0) / n:.1f} tokens of committed words "
                f"given (prefilled, not decoded), {d['confirmed'] / n:.1f} tokens "
                f"confirmed from the previous hypothesis in {d['passes'] / n:.1f} passes, "
                f"{d['decoded'] / n:.1f} decoded step by step; encoder {r.encoder_ms / n:.0f} ms, decoder "
                f"{r.decode_ms / n:.0f} ms; {r.looped} of them looped (no vote)")
    return "\n".join(lines)


def offline_transcripts(model, stream: Stream, options: DecodeOptions):
    """(greedy, with temperature fallback, word ends for speech -> commit) of the whole stream."""
    import torch

    offline = transcribe(model, stream.audio, replace(options, word_timestamps=True,
                                                      temperature_fallback=False))
    torch.manual_seed(0)  # the fallback samples at temperatures above 0
    fallback = transcribe(model, stream.audio, replace(options, temperature_fallback=True,
                                                       word_timestamps=True))
    # Speech -> commit reads each word's end from the better offline transcript (base's
    # greedy one loops in a window, and a loop's word times say nothing of the speech).
    timed = min((offline, fallback), key=lambda r: word_error_rate(r.text, stream.reference))
    return offline, fallback, [(w.text, w.end) for s in timed.segments for w in s.words]


def seed_range(text: str) -> range:
    """`--seeds`: "0-6" (both ends included) or one seed, "3"."""
    first, _, last = text.partition("-")
    try:
        seeds = range(int(first), int(last or first) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIRST-LAST, e.g. 0-6") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r}: LAST is before FIRST")
    return seeds


def orders_report(model, options: DecodeOptions, config: LiveConfig, eval_dir: Optional[Path],
                  seeds: range, min_seconds: float, chunk_s: float) -> str:
    """The fast feed on the same recordings joined in several orders (`--seeds 0-6`): how
    much of a WER difference on one stream is the order and the pauses. Prints a line per
    order as it is done; returns the summary. The dev recordings are short and repeat one
    phrase, so one misheard word that goes into the prompt comes back in the recordings
    after it, and where it falls moves the WER by points."""
    print(f"{'seed':>4} {'seconds':>7} {'greedy':>7} {'fallback':>8} {'live':>6} {'twice':>5}", flush=True)
    rows = []
    for seed in seeds:
        stream = build_stream(eval_dir, min_seconds, seed)
        offline, fallback, _ = offline_transcripts(model, stream, replace(options, encode_audio_only=False))
        live = feed_fast(model, options, stream.audio, chunk_s, config)
        wer = [100 * word_error_rate(text, stream.reference) for text in (offline.text, fallback.text, live.committed)]
        twice = phrases_committed_twice(live.committed, offline.text, stream.reference)
        rows.append(wer)
        print(f"{seed:>4} {stream.audio.size / SAMPLE_RATE:>7.0f} {wer[0]:>6.1f}% {wer[1]:>7.1f}% "
              f"{wer[2]:>5.1f}% {twice:>5}", flush=True)  # one line as each order is done
    greedy, fallback, live = (np.array(column) for column in zip(*rows))
    best = np.minimum(greedy, fallback)
    return "\n".join([
        f"mean {'':>7} {greedy.mean():>6.1f}% {fallback.mean():>7.1f}% {live.mean():>5.1f}%",
        f"live (fast feed) within 1 point of offline greedy on {int((live <= greedy + 1).sum())} of "
        f"{len(rows)} orders, of the better offline transcript on {int((live <= best + 1).sum())}; "
        f"live {live.min():.1f}-{live.max():.1f} %, live minus the better offline "
        f"{(live - best).min():+.1f} to {(live - best).max():+.1f} points"])


def arguments() -> argparse.ArgumentParser:
    parser = bench_parser("live_stream", __doc__)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    add_eval_dir_argument(parser)
    parser.add_argument("--feeds", default="fast,paced,realtime")
    parser.add_argument("--paced-costs", metavar="ENCODER_MS,STEP_MS",
                        help="the paced feed's cost of an encoder pass and of a decoder step "
                             "(default: the fast feed's averages; needed when it does not run first)")
    parser.add_argument("--seed", type=int, default=0,
                        help="0: the recordings in the folder's order; another: a shuffled order and "
                             "other pauses (a second stream, to see how much a result owes to one)")
    parser.add_argument("--seeds", metavar="FIRST-LAST", type=seed_range,
                        help="the fast feed against offline on the stream joined in each of these "
                             "orders (e.g. 0-6), one line each and a summary, instead of the feeds' report")
    parser.add_argument("--chunk", type=float, default=0.1)
    parser.add_argument("--min-seconds", type=float, default=180.0)
    parser.add_argument("--cache", default="static")
    parser.add_argument("--language", default="en",
                        help="the stream's language (the dev recordings are English); a multilingual "
                             "model otherwise detects it per decode, offline from the first window only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--twice", action="store_true",
                        help="run the fast and the paced feed twice each and say whether the texts are the same")
    parser.add_argument("--encode-audio-only", action="store_true",
                        help="live decodes encode only the buffer's audio (whisper.cpp's audio_ctx, "
                             "see encoder.py) instead of a 30 s window")
    parser.add_argument("--by-recording", action="store_true",
                        help="also print word errors per recording (offline greedy and each feed) "
                             "where they differ: where a whole-stream WER difference comes from")
    parser.add_argument("--save", metavar="PATH",
                        help="write each feed's committed words (text, start, end), when each was "
                             "committed and by which rule, and the offline word ends, as JSON")
    add_set_argument(parser, help="a LiveConfig field for this run (e.g. min_new_seconds=0.4), to measure "
                                  "a setting against the default; repeatable")
    return parser


def run_feeds(args, parser: argparse.ArgumentParser, model, options: DecodeOptions, config: LiveConfig,
              audio: np.ndarray) -> List[FeedResult]:
    """Each feed of --feeds over the stream, in order (the paced one after the fast one
    takes its measured costs); with --twice the fast and paced ones run again and say
    whether their text repeated."""

    def twice(name: str, run) -> FeedResult:
        first = run()
        if args.twice:
            same = "the same text" if first.committed == run().committed else "DIFFERENT texts"
            print(f"{name} feed, twice: {same}", flush=True)
        return first

    results: List[FeedResult] = []
    for feed in args.feeds.split(","):
        if feed == "fast":
            results.append(twice("fast", lambda: feed_fast(model, options, audio, args.chunk, config)))
        elif feed == "paced":
            if args.paced_costs:
                encoder_ms, step_ms = (float(v) for v in args.paced_costs.split(","))
                costs = DecodeCosts(encoder_ms / 1000, step_ms / 1000)
            elif results and results[0].feed == "fast":
                costs = DecodeCosts.measured(results[0])
            else:
                parser.error("the paced feed needs --paced-costs, or the fast feed before it")
            print(f"paced feed: an encoder pass costs {costs.encoder_s * 1000:.0f} ms, a decoder step "
                  f"{costs.step_s * 1000:.0f} ms of stream time", flush=True)
            results.append(twice("paced", lambda: feed_paced(model, options, audio, args.chunk, config, costs)))
        elif feed == "realtime":
            results.append(feed_realtime(model, options, audio, args.chunk, config))
        else:
            parser.error(f"unknown feed {feed!r}")
    return results


def main(argv=None) -> int:
    parser = arguments()
    args = parser.parse_args(argv)
    config = live_config(parser, args.set)

    import torch

    torch.set_num_threads(args.threads)
    model = load_model(args.model, progress=False)
    eval_dir = Path(args.eval_dir) if Path(args.eval_dir).exists() else None
    # the live decodes may encode only the buffer's audio; the offline ones never do
    offline_options = DecodeOptions(cache=args.cache, language=args.language if model.is_multilingual else None)
    options = replace(offline_options, encode_audio_only=args.encode_audio_only)
    if args.set:
        print("live settings changed from the default: " + ", ".join(args.set), flush=True)
    if args.seeds:
        print(orders_report(model, options, config, eval_dir, args.seeds, args.min_seconds, args.chunk),
              flush=True)
        return 0
    stream = build_stream(eval_dir, args.min_seconds, args.seed)
    offline, fallback, offline_words = offline_transcripts(model, stream, offline_options)
    results = run_feeds(args, parser, model, options, config, stream.audio)
    encoder = "the buffer's audio only (+ margin)" if args.encode_audio_only else "30 s window"
    print(report(args.model, stream, offline.text, offline_words, results, fallback.text, encoder))
    if args.save:
        Path(args.save).write_text(json.dumps({
            "offline_words": offline_words,
            "feeds": {r.feed: {"words": r.words, "commit_times": r.commit_times, "rules": r.commit_rules}
                      for r in results}}))
    if args.by_recording:
        greedy_words = [(w.text, w.start, w.end) for s in offline.segments for w in s.words]
        print(by_recording_table(stream, greedy_words, results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
