"""Benchmark: what the KV cache buys, measured against its peers in one process.

    python -m whisper_demo.bench decode_speed [--model tiny.en] [--audio clip.wav] [--beam-size 1]
        [--repeats 3] [--threads 2] [--quick] [--eval-dir [DIR]]
        [--contenders static,static int8,...] [--no-rss]

Every contender decodes the same log-mel (the first 30 s window of the clip), greedy or
beam, without timestamps, in interleaved order after a warm-up, so that a noisy shared
machine hurts them all alike. The decoders all start from the same encoder output: ours and
whisper.decode run the same model's encoder on the same log-mel, and CTranslate2's decoder
is handed our encoder's output (its own encoder is timed apart, for the encoder column).
Reported: median and min over repeats of ms per token (mean, first 10 % and last 10 % of
positions), total decode time, encoder time, peak cache bytes, peak RSS of each contender
alone (a fresh process that loads only what it needs and decodes once), and whether the
tokens equal our static mode's. Ratios are the point: they are measured in one run, side by
side; the issue's targets are printed with them (report.py: the table, the ratios, the
targets and the chart). --eval-dir adds the word error rate of the fast mode against the
exact mode on a folder of recordings (manifest.jsonl with references) and the example clips,
with a 95 % interval of the difference (accuracy.py). The encoder alone, with more
rounds and the live re-decode's split: encoder_speed.py.
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import psutil
import torch
import whisper
from whisper.audio import N_FRAMES, N_SAMPLES

from ..audio import load_audio
from .cli import bench_parser
from .report import (
    WER_TARGET_POINTS, Summary, plot, print_ratios, print_table, print_targets, ratios, target_checks,
    judged, verdict,
)
from ..decode import transcribe
from ..events import DecodeOptions
from ..examples import clip_path, reference_transcripts
from ..models import DEFAULT_MODEL, load_model
from .ct2_folder import ctranslate2_model_dir
from .data import DEFAULT_AUDIO, add_eval_dir_argument
from .accuracy import Comparison, compare, describe, recordings, scopes, transcribe_in
from ..text import word_error_rate

CONTENDERS = ("static", "hooks", "off", "static int8", "whisper.decode",
              "ctranslate2 float32", "ctranslate2 int8")


@dataclass
class Run:
    """One decode by one contender."""

    tokens: List[int]
    latencies_ms: List[float]  # per position; empty when the engine does not expose them
    decode_ms: float
    encoder_ms: float
    cache_bytes: int
    rss_bytes: int


# --- contenders -------------------------------------------------------------------------

def ours(model, audio, mode: str, beam_size: int, precision: str = "exact",
         attention: bool = False) -> Callable[[], Run]:
    # one greedy (or beam) pass per window, no retries: the same work for every contender
    options = DecodeOptions(cache=mode, beam_size=beam_size, timestamps=False, precision=precision,
                            no_speech_threshold=1.0, temperature_fallback=False, attention=attention)

    def run() -> Run:
        result = transcribe(model, audio, options)
        return Run(result.tokens, result.latencies_ms, result.decode_seconds * 1000,
                   result.encoder_ms, result.peak_self_cache_bytes + result.peak_cross_cache_bytes,
                   result.peak_rss_bytes)
    return run


def openai_decode(model, mel, beam_size: int) -> Callable[[], Run]:
    """whisper.decode itself, timed per step by wrapping its Inference.logits."""
    fp16 = model.decoder.token_embedding.weight.dtype == torch.float16  # on CUDA (models.py)
    options = whisper.DecodingOptions(language="en" if not model.is_multilingual else None,
                                      without_timestamps=True, fp16=fp16,
                                      beam_size=beam_size if beam_size > 1 else None)
    mel = mel.to(model.device, torch.float16 if fp16 else torch.float32)

    def run() -> Run:
        task = whisper.decoding.DecodingTask(model, options)
        started = time.perf_counter()
        audio_features = model.encoder(mel.unsqueeze(0))
        encoder_ms = (time.perf_counter() - started) * 1000
        task._get_audio_features = lambda _: audio_features  # encoder timed apart
        stamps = []
        inner = task.inference.logits

        def timed_logits(tokens, features):
            stamps.append(time.perf_counter())
            return inner(tokens, features)
        task.inference.logits = timed_logits
        started = time.perf_counter()
        result = task.run(mel.unsqueeze(0))[0]
        ended = time.perf_counter()
        stamps.append(ended)
        latencies = list(np.diff(stamps) * 1000)
        return Run(result.tokens, latencies, (ended - started) * 1000, encoder_ms, 0,
                   psutil.Process().memory_info().rss)
    return run


def ctranslate2_contenders(model_name: str, mel, beam_size: int, threads: int, audio_features=None,
                           compute_types=("float32", "int8"), device: str = "cpu") -> Dict[str, Callable[[], Run]]:
    """CTranslate2 (faster-whisper's engine) on the very same bundled model.bin. Its decoder
    gets `audio_features` (our encoder's output, [1, 1500, d]) when given, so that the
    decoders compare on the same input; its own encoder is run and timed on the log-mel."""
    try:
        import ctranslate2
    except ImportError:
        print("ctranslate2 not installed: skipping it (pip install -r requirements-bench.txt)")
        return {}
    try:
        model_dir = ctranslate2_model_dir(model_name)
    except Exception as error:  # a model name with no bundled model.bin
        print(f"ctranslate2: no bundled model.bin for {model_name} ({error}); skipping it")
        return {}
    features = ctranslate2.StorageView.from_array(mel.unsqueeze(0).numpy())
    ours_encoded = None
    if audio_features is not None:
        ours_encoded = ctranslate2.StorageView.from_array(
            np.ascontiguousarray(audio_features.float().cpu().numpy()))
    contenders = {}
    for compute_type in compute_types:
        engine = ctranslate2.models.Whisper(model_dir, device=device.split(":")[0], compute_type=compute_type,
                                            intra_threads=threads)
        tokenizer = whisper.tokenizer.get_tokenizer(
            engine.is_multilingual, num_languages=engine.num_languages, language="en")
        prompt = list(tokenizer.sot_sequence_including_notimestamps)

        def run(engine=engine, prompt=prompt) -> Run:
            started = time.perf_counter()
            encoded = engine.encode(features)
            encoder_ms = (time.perf_counter() - started) * 1000
            if ours_encoded is not None:
                encoded = ours_encoded
            started = time.perf_counter()
            result = engine.generate(encoded, [prompt], beam_size=beam_size,
                                     suppress_blank=True, return_scores=False)[0]
            decode_ms = (time.perf_counter() - started) * 1000
            tokens = result.sequences_ids[0]
            return Run(tokens, [], decode_ms, encoder_ms, 0, psutil.Process().memory_info().rss)
        contenders[f"ctranslate2 {compute_type}"] = run
    return contenders


# --- measuring --------------------------------------------------------------------------

def summarise(name: str, runs: List[Run], reference: Optional[List[int]]) -> Summary:
    per_token = [r.decode_ms / max(1, len(r.tokens) + 1) for r in runs]  # +1: the EOT step
    curves = [r.latencies_ms for r in runs if r.latencies_ms]
    curve = list(np.median(np.array([c[: min(map(len, curves))] for c in curves]), axis=0)) if curves else []
    tenth = max(1, len(curve) // 10)
    return Summary(
        name=name, tokens=len(runs[0].tokens),
        ms_per_token=statistics.median(per_token), ms_per_token_min=min(per_token),
        first10_ms=float(np.mean(curve[:tenth])) if curve else None,
        last10_ms=float(np.mean(curve[-tenth:])) if curve else None,
        decode_ms=statistics.median(r.decode_ms for r in runs),
        encoder_ms=statistics.median(r.encoder_ms for r in runs),
        peak_cache_bytes=max(r.cache_bytes for r in runs),
        peak_rss_bytes=max(r.rss_bytes for r in runs),
        same_tokens=None if reference is None else list(runs[0].tokens) == list(reference),
        curve_ms=[float(x) for x in curve],
    )


def measure(contenders: Dict[str, Callable[[], Run]], repeats: int) -> Dict[str, List[Run]]:
    for run in contenders.values():  # warm-up: first-call allocations, lazy inits
        run()
    runs = {name: [] for name in contenders}
    for _ in range(repeats):  # interleaved, so machine noise spreads over everyone
        for name, run in contenders.items():
            runs[name].append(run())
    return runs


def word_error_rates(model, beam_size: int) -> Dict[str, Dict[str, float]]:
    """Exact and int8 transcripts of every example clip against its reference."""
    references = reference_transcripts()
    precisions = ("exact", "int8") if model.device.type == "cpu" else ("exact",)
    rates = {}
    for clip, reference in references.items():
        audio = load_audio(clip_path(clip), max_seconds=None)
        rates[clip] = {p: word_error_rate(transcribe(model, audio, DecodeOptions(
            beam_size=beam_size, precision=p, temperature_fallback=False)).text, reference)
            for p in precisions}
    return rates


def eval_dev_wer(model, eval_dir: Path, beam_size: int) -> Dict[str, Comparison]:
    """Word error rate of the fast mode against the exact mode over every recording of
    `eval_dir` (manifest.jsonl: audio, reference, language) and the example clips, by set
    of recordings, with a 95 % bootstrap interval of the difference (accuracy.py:
    each recording's language given, the temperature fallback on and seeded alike)."""
    items = recordings(eval_dir)
    by_mode = {mode: [transcribe_in(model, item, mode, beam_size) for item in items] for mode in ("exact", "fast")}
    return {scope: compare(by_mode, "exact", "fast", groups) for scope, groups in scopes(by_mode).items()}


def rss_alone(name: str, args) -> Optional[int]:
    """Peak RSS of a fresh process that loads only what contender `name` needs and decodes
    the clip once with it (python, torch and the audio included, as for any user)."""
    command = [sys.executable, "-m", "whisper_demo.bench", "decode_speed", "--rss-of", name, "--model", args.model,
               "--audio", args.audio, "--beam-size", str(args.beam_size), "--threads", str(args.threads),
               "--device", args.device]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
        return int(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError) as error:
        print(f"RSS of {name}: not measured ({type(error).__name__})")
        return None


def _peak_rss_bytes() -> int:
    """This process's peak RSS. VmHWM, not getrusage's ru_maxrss: Linux keeps ru_maxrss
    across exec, so a child started from a big parent would report the parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def make_contenders(names, args, audio, mel, model=None) -> Dict[str, Callable[[], Run]]:
    """The contenders in `names`; `model` (ours, whisper.decode) is loaded when needed."""
    needs_model = any(not n.startswith("ctranslate2") for n in names)
    if model is None and needs_model:
        model = load_model(args.model, device=args.device, progress=False)
    contenders = {}
    for name in names:
        if name in ("static", "hooks", "off"):
            contenders[name] = ours(model, audio, name, args.beam_size)
        elif name == "static int8" and model.device.type == "cpu":
            contenders[name] = ours(model, audio, "static", args.beam_size, precision="int8")
        elif name in ("static +attention", "off +attention"):
            contenders[name] = ours(model, audio, name.split()[0], args.beam_size, attention=True)
        elif name == "whisper.decode":
            contenders[name] = openai_decode(model, mel, args.beam_size)
    ct2 = [n.split()[1] for n in names if n.startswith("ctranslate2")]
    if ct2:
        features = None
        if model is not None:
            with torch.inference_mode():
                features = model.encoder(mel.unsqueeze(0).to(model.device, model.decoder.token_embedding.weight.dtype))
        contenders.update(ctranslate2_contenders(args.model, mel, args.beam_size, args.threads,
                                                 features, tuple(ct2), args.device))
    return {n: contenders[n] for n in names if n in contenders}


def parse_args(argv=None):
    parser = bench_parser("decode_speed", __doc__)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--audio", default=str(DEFAULT_AUDIO), help="speech clip (first 30 s are used)")
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (scripts/gpu-check); int8 runs on the CPU only")
    parser.add_argument("--quick", action="store_true", help="a few tokens, one repeat (for tests)")
    parser.add_argument("--out", default="bench-out", help="folder for bench.json and bench.png")
    parser.add_argument("--no-peers", action="store_true", help="only our own contenders")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help=f"comma-separated subset of: {', '.join(CONTENDERS)}")
    parser.add_argument("--no-rss", action="store_true",
                        help="skip the per-contender RSS (one fresh process each); the column shows this process's")
    add_eval_dir_argument(parser, optional=True)  # exact and int8 WER over the eval folder's recordings
    parser.add_argument("--attention", action="store_true",
                        help="also static and off with DecodeOptions.attention (the attention view's cost)")
    parser.add_argument("--rss-of", help=argparse.SUPPRESS)  # internal: one contender, print peak RSS
    args = parser.parse_args(argv)
    if args.eval_dir and args.device != "cpu":
        parser.error("--eval-dir compares with the int8 mode, which runs on the CPU only")
    if args.quick:
        args.repeats = 1
    return parser, args


def first_window(args):
    """(audio, log-mel) of the clip's first 30 s window (its first 3 s with --quick)."""
    audio = load_audio(args.audio, max_seconds=None)[:N_SAMPLES]
    if args.quick:
        audio = audio[: 16000 * 3]
    n_mels = 128 if args.model.startswith("large-v3") else 80
    mel = whisper.log_mel_spectrogram(torch.from_numpy(audio), n_mels, padding=N_SAMPLES)
    return audio, whisper.pad_or_trim(mel[:, : mel.shape[-1] - N_FRAMES], N_FRAMES)


def contender_names(args, parser) -> List[str]:
    """The contenders asked for, static first (the reference every "same" compares with)."""
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = set(names) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders: {', '.join(sorted(unknown))}")
    if args.no_peers:
        names = [n for n in names if n in ("static", "hooks", "off", "static int8")]
    if "static" not in names:
        names.insert(0, "static")
    if args.attention:  # the "Inside the cache" view: explicit attention, weights kept per step
        names += [f"{mode} +attention" for mode in ("static", "off")]
    return names


def print_rss_alone(args, audio, mel) -> int:
    """--rss-of: this fresh process loads one contender, decodes once and prints its peak RSS."""
    run = make_contenders([args.rss_of], args, audio, mel)[args.rss_of]
    with torch.inference_mode():
        run()
    print(_peak_rss_bytes())
    return 0


def speed_report(summaries: List[Summary], args) -> tuple:
    """Print the table, the ratios and the speed targets: (machine, ratios, target checks)."""
    machine = f"{psutil.cpu_count()} CPUs, torch {torch.__version__}, {args.threads} threads"
    print(f"\n{args.model}, {Path(args.audio).name}, beam {args.beam_size}, "
          f"{args.repeats} repeats, {machine}, {time.strftime('%Y-%m-%d')}")
    print_table(summaries)
    rss_note = ("this process, all contenders loaded" if args.no_rss or args.quick
                else "each contender alone in a fresh process, peak")
    print(f"decoders compared on the same encoder output (our encoder's, handed to CTranslate2's "
          f"decoder too), interleaved; RSS MB: {rss_note}")
    found = ratios(summaries)
    by_name = {s.name: s for s in summaries}
    for mode in ("static", "off"):
        if f"{mode} +attention" in by_name:  # measured in this run, interleaved with the rest
            # the cheapest repeat of each: the least disturbed by other work on the machine
            found[f"attention view overhead ({mode})"] = (
                by_name[f"{mode} +attention"].ms_per_token_min / by_name[mode].ms_per_token_min)
    print_ratios(found)
    checks = target_checks(summaries, args.beam_size)
    print_targets(checks)
    return machine, found, checks


def eval_wer_report(model, eval_dir: Path, beam_size: int) -> Dict[str, dict]:
    """--eval-dir: fast against exact WER by set of recordings, and the WER target."""
    found = eval_dev_wer(model, eval_dir, beam_size)
    print(f"WER, fast against exact (beam {beam_size}, temperature fallback):")
    for scope, comparison in found.items():
        print(f"  {scope}: {describe(comparison)}")
    eval_wer = {scope: asdict(c) for scope, c in found.items()}
    for scope in ("eval-dev (all)", "examples"):
        if scope in found:
            c = found[scope]
            met = judged(c.difference_points if c.reference_words else None, WER_TARGET_POINTS)
            eval_wer[scope]["met"] = bool(met)
            print(f"target: fast WER - exact WER, {scope} = {c.difference_points:+.2f} points, 95% interval "
                  f"[{c.interval_points[0]:+.2f}, {c.interval_points[1]:+.2f}] (target <= {WER_TARGET_POINTS}) "
                  f"{verdict(met)}")
    return eval_wer


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    torch.set_num_threads(args.threads)
    audio, mel = first_window(args)
    if args.rss_of:
        return print_rss_alone(args, audio, mel)

    model = load_model(args.model, device=args.device, progress=True)
    contenders = make_contenders(contender_names(args, parser), args, audio, mel, model)
    with torch.inference_mode():
        runs = measure(contenders, args.repeats)
    reference = runs["static"][0].tokens
    summaries = [summarise(name, r, reference) for name, r in runs.items()]
    if not args.no_rss and not args.quick:
        for s in summaries:
            s.peak_rss_bytes = rss_alone(s.name, args) or 0
    machine, found, checks = speed_report(summaries, args)

    accuracy = {} if args.quick else word_error_rates(model, args.beam_size)
    for clip, by_precision in accuracy.items():
        print(f"WER {clip:<18}" + "  ".join(f"{p} {w:.1%}" for p, w in by_precision.items()))
    eval_wer = eval_wer_report(model, Path(args.eval_dir), args.beam_size) if args.eval_dir else None

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"model": args.model, "audio": args.audio, "beam_size": args.beam_size,
              "repeats": args.repeats, "machine": machine, "date": time.strftime("%Y-%m-%d"),
              "contenders": [asdict(s) for s in summaries], "ratios": found,
              "word_error_rates": accuracy, "targets": checks, "eval_dev_wer": eval_wer}
    (out / "bench.json").write_text(json.dumps(report, indent=1))
    plot(summaries, out / "bench.png", f"{args.model}: decoder latency per token position")
    print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
