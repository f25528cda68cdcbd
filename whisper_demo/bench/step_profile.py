"""Where one decoder step's time goes: torch.profiler over real decoding steps.

    python -m whisper_demo.bench step_profile [--model tiny.en] [--beam-size 1] [--precision exact]
        [--steps 40] [--threads 2]

Decodes the first window of the benchmark clip (no timestamps, as the benchmark) with the
static cache, and profiles every step of it: the decoder forward, each kind of matmul (the
runner's maps are wrapped in profiler labels), attention, the logit filters and the token
choice (openai-whisper's GreedyDecoder / BeamSearchDecoder.update). It prints the share of
each in a step, the time no operator accounts for (Python and dispatch), and the bytes a
step reads (weights, cross-attention K/V, the self-attention cache so far) against its time.
"""

import time
from collections import defaultdict
from contextlib import contextmanager

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from ..audio import load_audio
from .cli import bench_parser
from .data import DEFAULT_AUDIO
from ..encoder import encode
from ..events import DecodeOptions
from ..models import load_model
from ..runner import decoder_runner
from ..window_decode import decode_window


def _labelled(label, fn):
    def call(*args, **kwargs):
        with record_function(label):
            return fn(*args, **kwargs)
    return call


def weight_bytes(runner) -> dict:
    """Bytes of the matrices one step reads, by kind."""
    out = defaultdict(int)
    for b in runner.blocks:
        for name in ("qkv", "out", "cross_query", "cross_out", "mlp_hidden", "mlp_out"):
            out["block linears"] += _fn_bytes(getattr(b, name))
    out["vocab projection"] = _fn_bytes(runner.project)
    return dict(out)


def _fn_bytes(fn) -> int:
    if hasattr(fn, "nbytes"):  # kernels.PackedLinear
        return fn.nbytes
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]
    for c in cells:
        if hasattr(c, "nbytes") and not isinstance(c, torch.Tensor):
            return c.nbytes  # the packed linear inside step_linear's closure
    tensors = [c for c in cells if isinstance(c, torch.Tensor)]
    if tensors:
        return sum(t.nbytes for t in tensors)
    return 0


BLOCK_LABELS = (("qkv", "matmul: query/key/value"), ("out", "matmul: attention out"),
                ("cross_query", "matmul: cross query"), ("cross_out", "matmul: cross out"),
                ("mlp_hidden", "matmul: mlp (gelu fused)"), ("mlp_out", "matmul: mlp"))
UNPROFILED_STEPS = 5  # decoded before the profiler starts


@contextmanager
def labelled_step(runner):
    """The runner's maps, the attention kernels, the logit filters and the token choice
    wrapped in profiler labels while inside; all put back after."""
    from .. import kernels
    import whisper.decoding as wd

    originals = {}
    for i, b in enumerate(runner.blocks):
        for name, label in BLOCK_LABELS:
            originals[(i, name)] = getattr(b, name)
            setattr(b, name, _labelled(label, getattr(b, name)))
    original_project = runner.project
    runner.project = _labelled("matmul: vocabulary projection", runner.project)
    original_attend, original_self_attend = kernels.attend, kernels.self_attend
    cross_dtype = "float16" if runner.kind == "i8" else "float32"
    kernels.attend = _labelled(f"attention: cross, kernel ({cross_dtype} K/V)", original_attend)
    kernels.self_attend = _labelled("attention: self, kernel", original_self_attend)
    from .. import logit_filters, window_decode

    patched = []
    # the loop's own filters and greedy pick (logit_filters.py, window_decode.ArgmaxGreedy);
    # openai-whisper's where a window still uses them (a filter of another kind, beam search)
    for cls, label in ((logit_filters.WindowFilters, "logit filters"),
                       (window_decode.ArgmaxGreedy, "token choice (decoder.update)"),
                       (wd.SuppressBlank, "logit filters"), (wd.SuppressTokens, "logit filters"),
                       (wd.ApplyTimestampRules, "logit filters"),
                       (wd.BeamSearchDecoder, "token choice (decoder.update)")):
        attr = "apply" if "decoder" not in label else "update"
        patched.append((cls, attr, getattr(cls, attr)))
        setattr(cls, attr, _labelled(label, getattr(cls, attr)))
    try:
        yield
    finally:
        for cls, attr, fn in patched:
            setattr(cls, attr, fn)
        for (i, name), fn in originals.items():
            setattr(runner.blocks[i], name, fn)
        runner.project = original_project
        kernels.attend, kernels.self_attend = original_attend, original_self_attend


def profile_steps(model, features, tokenizer, options, runner, steps: int):
    """(each profiled step's ms, the profiler, the profiled loop's wall ms)."""
    step_ms = []
    with labelled_step(runner):
        window = decode_window(model, features, tokenizer, options, "en", 0.0, [])
        with torch.inference_mode():
            for _ in range(UNPROFILED_STEPS):
                next(window)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                started = time.perf_counter()
                for step in window:
                    step_ms.append(step.latency_ms)
                    if len(step_ms) == steps:
                        break
                wall_ms = (time.perf_counter() - started) * 1000
            window.close()
    return step_ms, prof, wall_ms


def print_shares(prof, n: int, step: float) -> None:
    """Each labelled part's ms and share of a step, and what no label accounts for."""
    events = prof.key_averages()
    by = {e.key: e for e in events}
    rows = []
    labelled_total = 0.0
    for key in sorted(k for k in by if k.startswith(("matmul:", "logit filters", "token choice", "attention:"))):
        ms = by[key].cpu_time_total / 1000 / n
        rows.append((key, ms))
        labelled_total += ms
    attention = sum(by[k].cpu_time_total for k in by if k == "aten::scaled_dot_product_attention") / 1000 / n
    rows.append(("attention: SDPA (where the kernels do not take it)", attention))
    heavy = ("scaled_dot_product", "aten::mm", "aten::addmm", "linear_dynamic", "aten::_log_softmax",
             "aten::argmax", "aten::topk")
    other_ops = sorted(((e.self_cpu_time_total / 1000 / n, e.key) for e in events
                        if e.key.startswith("aten::") and not any(h in e.key for h in heavy)), reverse=True)
    print(f"{'part of a step':<52}{'ms':>7}{'share':>7}")
    for key, ms in rows:
        print(f"{key:<52}{ms:7.2f}{ms / step:7.0%}")
    accounted = labelled_total + attention
    print(f"{'everything else (norms, adds, views, calls, Python)':<52}{step - accounted:7.2f}{(step - accounted) / step:7.0%}")
    print(f"{'  of it: other aten operators (self time)':<52}{sum(t for t, _ in other_ops):7.2f}"
          f"   top: {', '.join(f'{k[6:]} {t:.2f}' for t, k in other_ops[:4])}")


def print_bytes(model, runner, position: int, beam_size: int, step: float) -> None:
    """The bytes one step reads (weights, cross K/V, the self cache at `position`) and the rate."""
    weights = weight_bytes(runner)
    d = model.dims
    cross_element = 2 if runner.kind == "i8" else 4  # float16 K/V in the int8 mode
    cross = 2 * d.n_text_layer * d.n_audio_ctx * d.n_text_state * cross_element
    self_kv = 2 * d.n_text_layer * d.n_text_state * position * beam_size * 4
    total = sum(weights.values()) + cross + self_kv
    print("bytes read per step:")
    for key, value in [*weights.items(), (f"cross-attention K/V (float{8 * cross_element})", cross),
                       (f"self-attention K/V at position {position}", self_kv)]:
        print(f"  {key:<50}{value / 2**20:8.1f} MB")
    print(f"  {'total':<50}{total / 2**20:8.1f} MB in {step:.2f} ms = {total / step / 1e6:.1f} GB/s")


def main(argv=None) -> int:
    parser = bench_parser("step_profile", __doc__)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--precision", default="exact")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40, help=f"steps profiled (after {UNPROFILED_STEPS} unprofiled)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from whisper.tokenizer import get_tokenizer

    from .. import kernels
    from ..windowing import window_mel

    model = load_model(args.model, device="cpu", progress=False)
    audio = load_audio(DEFAULT_AUDIO)[: 16000 * 30]
    features = encode(model, window_mel(audio, 0, 3000, model.dims.n_mels).unsqueeze(0))
    tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages, language="en")
    options = DecodeOptions(beam_size=args.beam_size, precision=args.precision, timestamps=False,
                            no_speech_threshold=1.0, temperature_fallback=False,
                            max_tokens_per_window=UNPROFILED_STEPS + args.steps)
    runner = decoder_runner(model, args.precision)
    back_offs_before = kernels.team_back_offs()
    step_ms, prof, wall_ms = profile_steps(model, features, tokenizer, options, runner, args.steps)

    n = len(step_ms)
    step = sum(step_ms) / n
    first = UNPROFILED_STEPS + len(tokenizer.sot_sequence_including_notimestamps)
    print(f"{args.model}, beam {args.beam_size}, {args.precision}, {args.threads} threads, "
          f"{n} steps from position {first}, torch {torch.__version__}")
    print(f"step: {step:.2f} ms (timed by window_decode.py; profiler on, which adds a little)")
    print_shares(prof, n, step)
    print_bytes(model, runner, first + n // 2, args.beam_size, step)
    print(f"(profiled wall time {wall_ms / n:.2f} ms per step, including the loop's bookkeeping; "
          f"kernel team back-offs: {kernels.team_back_offs() - back_offs_before})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
