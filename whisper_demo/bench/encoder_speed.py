"""The encoder, measured: ours in both precisions and CTranslate2's, and its share of a live re-decode.

    python -m whisper_demo.bench encoder_speed [--models tiny.en,base] [--repeats 7] [--threads 2]
                                         [--accuracy eval-tiny.json,eval-base.json] [--no-live]

One 30 s window (the first of speech_25s.wav), encoded by four contenders in turn, round
after round (interleaved, so that other work on a shared machine falls on all of them):
ours exact (the model's float32 encoder), ours fast (DecodeOptions(precision="int8"):
bfloat16 where the CPU has it, bf16_encoder.py, else int8 linears, int8_encoder.py),
CTranslate2 float32 and CTranslate2 int8 on the same model.bin. Printed: each one's median and range in ms, and the ratios the
targets are about, each round's ratio and their median (a ratio within one round compares
contenders that ran seconds apart).

Then a live re-decode's split: the real live decoder (live/decoders.py: word timestamps,
the previous hypothesis as a draft) on a buffer that grows by 1 s from 3 s to 20 s of
speech, exact and fast in turn; the encoder's share is encoder / (encoder + decoder), as
the live benchmark reports it.

--accuracy reads what `python -m whisper_demo.bench accuracy --save` wrote (a few minutes
per model; the word error rate of fast against exact over eval-dev and the examples, with
its 95 % interval) and prints the accuracy target beside the speed ones.
"""

import os

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import torch
import whisper
from whisper.audio import N_FRAMES, N_SAMPLES

from ..audio import load_audio
from ..encoder import encode, encoder_dtype
from ..examples import clip_path
from .cli import bench_parser
from .report import WER_TARGET_POINTS, judged, verdict

AUDIO = clip_path("speech_25s.wav")
# The targets: the fast encoder at most this fraction of ours in float32 and of
# CTranslate2 int8's; a live re-decode's encoder share below this; fast WER at most this
# many points above exact.
SPEED_TARGET = 0.55
LIVE_SHARE_TARGET = 0.60


@dataclass
class Timings:
    ms: Dict[str, List[float]] = field(default_factory=dict)  # contender -> one time per round

    def median(self, name: str) -> float:
        return statistics.median(self.ms[name])

    def ratios(self, a: str, b: str) -> List[float]:
        return [x / y for x, y in zip(self.ms[a], self.ms[b])]


def window_mel(model) -> torch.Tensor:
    audio = load_audio(AUDIO, max_seconds=None)[:N_SAMPLES]
    mel = whisper.log_mel_spectrogram(torch.from_numpy(audio), model.dims.n_mels, padding=N_SAMPLES)
    return whisper.pad_or_trim(mel[:, : mel.shape[-1] - N_FRAMES], N_FRAMES).unsqueeze(0)


def encoders(model_name: str, model, mel: torch.Tensor, threads: int) -> Dict[str, Callable[[], object]]:
    contenders = {"ours exact": lambda: encode(model, mel, "exact"),
                  "ours fast": lambda: encode(model, mel, "int8")}
    try:
        import ctranslate2

        from .ct2_folder import ctranslate2_model_dir
    except ImportError:
        print("ctranslate2 not installed: ours only (pip install -r requirements-bench.txt)")
        return contenders
    features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel.numpy()))
    for compute_type in ("float32", "int8"):
        engine = ctranslate2.models.Whisper(ctranslate2_model_dir(model_name), device="cpu",
                                            compute_type=compute_type, intra_threads=threads)
        contenders[f"CT2 {compute_type}"] = lambda engine=engine: engine.encode(features)
    return contenders


def time_interleaved(contenders: Dict[str, Callable[[], object]], repeats: int) -> Timings:
    with torch.inference_mode():
        for run in contenders.values():  # warm-up: weight casts, first allocations
            run()
        timings = Timings({name: [] for name in contenders})
        for _ in range(repeats):
            for name, run in contenders.items():
                started = time.perf_counter()
                run()
                timings.ms[name].append((time.perf_counter() - started) * 1000)
    return timings


def live_split(model, first_s: float = 3.0, last_s: float = 20.0) -> Dict[str, Dict[str, float]]:
    """Encoder and decoder ms summed over the re-decodes of a growing buffer, per precision."""
    from ..events import DecodeOptions, DecodeResult
    from ..live.decoders import model_decoder

    audio = load_audio(AUDIO, max_seconds=None)
    decoders = {p: model_decoder(model, DecodeOptions(precision=p)) for p in ("exact", "int8")}
    totals = {p: {"encoder_ms": 0.0, "decoder_ms": 0.0, "redecodes": 0} for p in decoders}
    drafts = {p: None for p in decoders}
    for seconds in np.arange(first_s, last_s + 1e-9, 1.0):
        buffer = audio[: int(seconds * 16000)]
        for precision, decode in decoders.items():  # in turn, buffer by buffer
            result = [item for item in decode(buffer, None, drafts[precision]) if isinstance(item, DecodeResult)][-1]
            drafts[precision] = tuple(result.tokens)
            if seconds > first_s:  # the first decode of a buffer has no draft: not a re-decode
                totals[precision]["encoder_ms"] += result.encoder_ms
                totals[precision]["decoder_ms"] += result.decode_seconds * 1000
                totals[precision]["redecodes"] += 1
    return totals


def spread(values: List[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def report_model(model_name: str, repeats: int, threads: int, live: bool) -> List[dict]:
    from ..models import load_model

    model = load_model(model_name, progress=False)
    mel = window_mel(model)
    timings = time_interleaved(encoders(model_name, model, mel, threads), repeats)
    print(f"\n{model_name}: one 30 s window, {repeats} interleaved rounds; fast encoder computes in "
          f"{encoder_dtype(model, 'int8')}")
    print(f"{'encoder':<12}{'median ms':>10}{'min':>8}{'max':>8}")
    for name, ms in timings.ms.items():
        print(f"{name:<12}{statistics.median(ms):>10.0f}{min(ms):>8.0f}{max(ms):>8.0f}")
    checks = []
    for other in ("ours exact", "CT2 int8", "CT2 float32"):
        if other in timings.ms:
            found = timings.ratios("ours fast", other)
            print(f"ours fast / {other:<12} per round: median (range) {spread(found)}")
            if other != "CT2 float32":
                value = statistics.median(found) if found else None
                checks.append(dict(target=f"{model_name} fast encoder / {other}", value=value,
                                   at_most=SPEED_TARGET, met=bool(judged(value, SPEED_TARGET))))
    if "CT2 float32" in timings.ms:
        print(f"ours exact / CT2 float32 per round: median (range) {spread(timings.ratios('ours exact', 'CT2 float32'))}")
    if live:
        split = live_split(model)
        for precision, t in split.items():
            share = t["encoder_ms"] / (t["encoder_ms"] + t["decoder_ms"])
            print(f"live re-decode ({precision}, {t['redecodes']} re-decodes of a buffer growing 3-20 s): "
                  f"encoder {t['encoder_ms'] / t['redecodes']:.0f} ms, decoder {t['decoder_ms'] / t['redecodes']:.0f} ms"
                  f", encoder share {share:.0%}")
        t = split["int8"]
        share = t["encoder_ms"] / (t["encoder_ms"] + t["decoder_ms"])
        checks.append(dict(target=f"{model_name} live re-decode encoder share (fast)", value=share,
                           at_most=LIVE_SHARE_TARGET, met=bool(judged(share, LIVE_SHARE_TARGET, strictly=True))))
    return checks


def accuracy_checks(path: Path) -> List[dict]:
    """The WER target from a saved accuracy run: fast - exact over eval-dev and the examples."""
    saved = json.loads(path.read_text())
    checks = []
    for c in saved["comparisons"]:
        if c["a"] == "exact" and c["b"] == "fast" and c["scope"] in ("eval-dev (all)", "examples", "all"):
            low, high = c["interval_points"]
            print(f"{saved['model']} WER {c['scope']}: exact {c['wer_a']:.1%}, fast {c['wer_b']:.1%}, "
                  f"fast - exact {c['difference_points']:+.2f} points, 95% interval [{low:+.2f}, {high:+.2f}]; "
                  f"{c['words_differ']} words differ in {c['recordings_differ']} of {c['recordings']} recordings")
            value = c["difference_points"] if c["reference_words"] else None  # no words: nothing measured
            checks.append(dict(target=f"{saved['model']} fast - exact WER, {c['scope']} (points)",
                               value=value, at_most=WER_TARGET_POINTS,
                               met=bool(judged(value, WER_TARGET_POINTS)), interval=(low, high)))
        elif c["a"] == "fast-float32-encoder" and c["b"] == "fast" and c["scope"] == "eval-dev (all)":
            # not a target: what the bfloat16 encoder alone changes (the same int8 decoder on both sides)
            low, high = c["interval_points"]
            print(f"{saved['model']} WER {c['scope']}, the encoder alone (bfloat16 - float32 encoder): "
                  f"{c['difference_points']:+.2f} points, 95% interval [{low:+.2f}, {high:+.2f}]; "
                  f"{c['words_differ']} words differ in {c['recordings_differ']} recordings")
    return checks


def main(argv=None) -> int:
    parser = bench_parser("encoder_speed", __doc__)
    parser.add_argument("--models", default="tiny.en,base")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds (at least 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-live", action="store_true", help="skip the live re-decode split")
    parser.add_argument("--accuracy", default="", help="comma-separated accuracy --save files")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats: at least 1 round")
    torch.set_num_threads(args.threads)
    print(f"{os.cpu_count()} CPUs, torch {torch.__version__}, {args.threads} threads, {time.strftime('%Y-%m-%d %H:%M')}")
    checks = []
    for model_name in [m.strip() for m in args.models.split(",") if m.strip()]:
        checks += report_model(model_name, args.repeats, args.threads, live=not args.no_live)
    print()
    for path in [p for p in args.accuracy.split(",") if p]:
        checks += accuracy_checks(Path(path))
    for c in checks:
        bound = "<" if "share" in c["target"] else "<="
        value, met = ("-", None) if c["value"] is None else (f"{c['value']:.2f}", c["met"])
        print(f"target: {c['target']} = {value} (target {bound} {c['at_most']}) {verdict(met)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
