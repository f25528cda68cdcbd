"""whisper-kv: watch Whisper's decoder KV cache while it transcribes.

    python app.py                      # tiny.en, http://127.0.0.1:7860
    python app.py --model base --port 8000
    python app.py --mic                # transcribe this computer's microphone in the terminal
    python app.py --help
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
from typing import Optional

# Before torch loads (it reads this once): OpenMP's default active wait made every decoder
# step 6-10x slower whenever anything else ran on a small machine (the web server, a second
# decode); passive waiting keeps ~10 ms per token. README, "Threads". A user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DEFAULT_MAX_FILE_SIZE = "200mb"
DEFAULT_HOST = "127.0.0.1"  # this computer only, unless asked otherwise
DEFAULT_PORT = 7860


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, not {value}")
    return value


def _file_size(text: str) -> str:
    import re

    if not re.fullmatch(r"\s*\d+(\.\d+)?\s*(b|kb|mb|gb|tb)?\s*", text.lower()):
        raise argparse.ArgumentTypeError(f"a size like 200mb or 1gb, not {text!r}")
    return text.lower().replace(" ", "")


def _whole_number(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value
    return parse


def _bytes(text: str) -> int:
    from whisper_demo.limits import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def _seed(text: str):
    from whisper_demo.options import parse_seed

    try:
        return parse_seed(text)  # None: random
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def parser() -> argparse.ArgumentParser:
    from whisper_demo import limits
    from whisper_demo.audio import DEFAULT_MAX_SECONDS
    from whisper_demo.events import CACHE_MODES
    from whisper_demo.models import DEFAULT_MODEL
    from whisper_demo.precision import PRECISIONS

    p = argparse.ArgumentParser(
        prog="python app.py",
        description="A local web page where Whisper transcribes token by token while a live\n"
                    "panel shows the decoder's KV cache (length, memory) and per-token latency,\n"
                    "with a switch that turns the cache off.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n"
               "  python app.py                       serve tiny.en on http://127.0.0.1:7860\n"
               "  python app.py --model base          the multilingual base model\n"
               "  python app.py --host 0.0.0.0        reachable from other machines on your network\n"
               "  python app.py --mic                 live transcription in this terminal\n",
    )
    p.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME_OR_PATH",
                   help=f"Whisper model: tiny.en (default, offline), base (offline, multilingual), "
                        f"any openai-whisper name (downloaded on first use; needs internet), or a "
                        f"path to a .pt checkpoint. More can be chosen in the page. Default: {DEFAULT_MODEL}")
    p.add_argument("--device", default=None, metavar="DEVICE",
                   help="torch device: cpu, cuda, cuda:1, mps. Default: cuda when available, else cpu")
    p.add_argument("--host", default=None,
                   help=f"address to listen on. Default {DEFAULT_HOST} (this computer only), or "
                        f"$GRADIO_SERVER_NAME when set (as Gradio and Hugging Face Spaces do); "
                        f"0.0.0.0 makes the page reachable from your network")
    p.add_argument("--port", type=_port, default=None,
                   help=f"port to listen on. Default {DEFAULT_PORT}, or $GRADIO_SERVER_PORT when set")
    p.add_argument("--share", action="store_true",
                   help="also open a public gradio.live link (off by default; needs internet)")
    p.add_argument("--max-audio-seconds", type=_positive_float, default=DEFAULT_MAX_SECONDS,
                   metavar="SECONDS",
                   help=f"refuse audio longer than this, with a message saying so. Default {DEFAULT_MAX_SECONDS:g}")
    p.add_argument("--max-file-size", type=_file_size, default=DEFAULT_MAX_FILE_SIZE, metavar="SIZE",
                   help=f"largest file the page accepts for upload (Gradio's max_file_size), e.g. "
                        f"50mb, 1gb. Default {DEFAULT_MAX_FILE_SIZE} (about 18 minutes of 48 kHz "
                        f"stereo 16-bit WAV; compressed formats hold far more)")
    p.add_argument("--cache", choices=CACHE_MODES, default="static",
                   help="initial KV cache mode: static (preallocated, ours), hooks (openai-whisper's), "
                        "off. The page can switch it per run. Default static")
    p.add_argument("--beam-size", type=int, default=1, metavar="N",
                   help="initial beam size (1 = greedy). Default 1")
    p.add_argument("--batch-size", type=int, default=0, metavar="N",
                   help="long files in batches: audio over 30 s cut at Silero's pauses into pieces "
                        "of at most 30 s, N decoded at once (greedy, no prompt; whisper_demo/"
                        "batched.py). 0: off, window after window as transcribe. The page's switch "
                        "starts on when N > 1 and then uses N. Default 0")
    p.add_argument("--precision", choices=PRECISIONS, default="exact",
                   help="exact: the model's own weights, tokens equal openai-whisper's. int8: the "
                        "fast mode, the decoder's matrices int8 weight-only, activations float32, "
                        "the encoder in bfloat16 or with int8 linears by the CPU "
                        "(CPU; static and off modes). Default exact")
    p.add_argument("--live-precision", choices=PRECISIONS, default=None,
                   help="the precision of live decodes (the Live tab, --mic). Default int8 on the "
                        "CPU: per session as accurate as exact, and its bfloat16 encoder about 3x "
                        "faster where the CPU has bfloat16 (AVX512_BF16 or AMX; float32 elsewhere, "
                        "docs/live.md); exact on a GPU")
    p.add_argument("--seed", type=_seed, default=0, metavar="N|random",
                   help="seed of the sampling in a window that falls back to a higher temperature: "
                        "the same file gives the same transcript every run, the one openai-whisper's "
                        "transcribe gives after torch.manual_seed(N). 'random': openai-whisper's "
                        "unseeded draws (torch's global generator). The page's Advanced can change "
                        "it per run. Default 0")
    shared = p.add_argument_group(
        "sharing the app",
        "Beyond this computer (--host other than 127.x/localhost/::1, or --share) visitors "
        "cannot record this computer's microphone and can load only the models already on "
        "disk, unless these flags say otherwise. At 127.0.0.1 every feature is on.")
    shared.add_argument("--allow-server-mic", action="store_true",
                        help="let visitors of a shared page record this computer's microphone "
                             "(off when shared; always on at 127.0.0.1)")
    shared.add_argument("--models", default=None, metavar="NAMES",
                        help="the models visitors may choose, comma-separated (e.g. tiny.en,base,small), "
                             "or 'all' (downloads included). Default: any model at 127.0.0.1, "
                             "the offline models when shared; --model is always included")
    lim = p.add_argument_group("limits (what one visitor may take)")
    lim.add_argument("--max-live-sessions", type=_whole_number(0), default=limits.DEFAULT_MAX_LIVE_SESSIONS,
                     metavar="N", help=f"live sessions at once; the next visitor is told the server is "
                                       f"busy. 0: no limit. Default {limits.DEFAULT_MAX_LIVE_SESSIONS}")
    lim.add_argument("--live-quiet-minutes", type=_positive_float, default=limits.DEFAULT_LIVE_QUIET_MINUTES,
                     metavar="MINUTES", help=f"close a live session that sends no audio, or only "
                                             f"silence, for this long. Default {limits.DEFAULT_LIVE_QUIET_MINUTES:g}")
    lim.add_argument("--max-live-minutes", type=_positive_float, default=limits.DEFAULT_MAX_LIVE_MINUTES,
                     metavar="MINUTES", help=f"end a live session this long after its Record (its text is "
                                             f"kept). Default {limits.DEFAULT_MAX_LIVE_MINUTES:g}")
    lim.add_argument("--max-chunk-size", type=_bytes, default=limits.DEFAULT_MAX_CHUNK_BYTES, metavar="SIZE",
                     help="largest live audio chunk, refused before it is decoded (the browser sends "
                          "~10 KB a chunk). Default 1mb")
    lim.add_argument("--max-chunk-seconds", type=_positive_float, default=limits.DEFAULT_MAX_CHUNK_SECONDS,
                     metavar="SECONDS", help=f"longest live audio chunk (the browser sends 0.1 s). "
                                             f"Default {limits.DEFAULT_MAX_CHUNK_SECONDS:g}")
    lim.add_argument("--decode-budget", type=_positive_float, default=None,
                     metavar="N", help="largest decode: audio seconds x beam size (Compare counts "
                                       "twice). Default: twice --max-audio-seconds (1200), so the "
                                       "longest file allowed fits a greedy Compare"),
    lim.add_argument("--max-models", type=_whole_number(1), default=limits.DEFAULT_MAX_MODELS, metavar="N",
                     help=f"models kept in memory; past it the least recently used is unloaded "
                          f"(--model stays). Default {limits.DEFAULT_MAX_MODELS}")
    lim.add_argument("--cache-minutes", type=_positive_float, default=limits.DEFAULT_CACHE_MINUTES,
                     metavar="MINUTES", help=f"delete uploads and served files older than this. "
                                             f"Default {limits.DEFAULT_CACHE_MINUTES:g}")
    mic = p.add_argument_group("terminal microphone (no browser)")
    mic.add_argument("--mic", action="store_true",
                     help="transcribe this computer's microphone live in the terminal instead of "
                          "serving the page (needs PortAudio: apt-get install libportaudio2)")
    mic.add_argument("--list-devices", action="store_true",
                     help="list this computer's audio input devices and exit")
    mic.add_argument("--input-device", default=None, metavar="ID_OR_NAME",
                     help="input device for --mic (index or part of its name, see --list-devices). "
                          "Default: the system default input")
    return p


def listen_address(host, port, environ=os.environ):
    """--host/--port, else Gradio's own variables (GRADIO_SERVER_NAME, GRADIO_SERVER_PORT,
    which Hugging Face Spaces and Gradio containers set), else 127.0.0.1:7860."""
    if host is None:
        host = environ.get("GRADIO_SERVER_NAME") or DEFAULT_HOST
    if port is None:
        text = environ.get("GRADIO_SERVER_PORT")
        try:
            port = _port(text) if text else DEFAULT_PORT
        except argparse.ArgumentTypeError as exc:
            fail(f"GRADIO_SERVER_PORT: {exc}")
    return host, port


def fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            fail(f"cannot listen on {host}:{port} ({exc.strerror or exc}); "
                 f"choose another with --port, or stop what uses it")


def _check_device(device):
    if device is None:
        return None
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        fail(f"unknown --device {device!r}: {exc}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        fail(f"--device {device}: no CUDA GPU is available to this torch build; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        fail(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    if dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        fail(f"--device {device}: Apple MPS is not available here; use --device cpu")
    return device


def _sharing(args, host: str):
    """The sharing policy and the limits from the flags; says on stderr what a visitor of
    a shared page can do, so the operator sees it next to the address."""
    from whisper_demo.limits import Limits
    from whisper_demo.sharing import sharing_policy

    try:
        policy = sharing_policy(host, args.share, args.model, allow_server_mic=args.allow_server_mic,
                                models=args.models)
    except ValueError as exc:
        fail(str(exc))
    limits = Limits(max_live_sessions=args.max_live_sessions or None,
                    live_quiet_seconds=args.live_quiet_minutes * 60,
                    max_chunk_bytes=args.max_chunk_size, max_chunk_seconds=args.max_chunk_seconds,
                    decode_budget=args.decode_budget or 2 * args.max_audio_seconds,
                    max_models=args.max_models,
                    cache_seconds=args.cache_minutes * 60)
    if policy.shared:
        models = "any model" if policy.models is None else ", ".join(policy.models)
        mic = "on (--allow-server-mic)" if policy.server_mic else "off (--allow-server-mic turns it on)"
        print(f"shared page: visitors may use {models}; this computer's microphone is {mic}",
              file=sys.stderr)
    return policy, limits


# The warm-up thread main() started (tests wait for it before they count decodes)
warming: Optional[threading.Thread] = None


def _start_warm_up(model, options, live_options) -> threading.Thread:
    """Pay the first decode's one-time costs (warm_up.py: kernels, word timing's compile,
    the tokenizer, packed weights, a decode in each precision the page uses) and the
    page's first event's (ui.warm_up_events) on a thread, while the page loads; the log
    says what was warmed and how long it took."""
    from whisper_demo.ui import warm_up_events
    from whisper_demo.warm_up import live_session, warm_up

    def run():
        # the Live tab's session as it runs: its decodes (word timing, attention, precision,
        # a shorter encoder input), the voice detector, the final pass
        warm_up(model, {"transcribe": options},
                also={f"live session ({live_options.precision})": live_session(model, live_options),
                      "the page's first event": warm_up_events})

    thread = threading.Thread(target=run, name="warm-up", daemon=True)
    thread.start()
    return thread


def _log_to_stderr() -> None:
    """The app's own log (one line per decode and live session) on stderr, at INFO; the
    libraries underneath keep their defaults (uvicorn and httpx would log every request)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger = logging.getLogger("whisper_demo")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    _log_to_stderr()
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

    if args.list_devices:
        try:
            from whisper_demo.live.mic_device import list_devices_text
        except ImportError as exc:
            fail(f"the terminal microphone is not available: {exc}")
        print(list_devices_text())
        return 0

    if args.beam_size < 1:
        fail("--beam-size must be at least 1")
    if args.batch_size < 0:
        fail("--batch-size must be 0 (off) or more")
    device = _check_device(args.device)
    if not args.mic:
        host, port = listen_address(args.host, args.port)
        _check_port(host, port)  # fail before a minute of model loading, not after
        policy, limits = _sharing(args, host)

    from whisper_demo.events import DecodeOptions
    from whisper_demo.models import ModelError, load_model
    from whisper_demo.options import decode_options
    from whisper_demo.precision import live_precision

    # The page's starting choices and the terminal mic's options, by the same rule as the page.
    try:
        options = decode_options(DecodeOptions(), cache=args.cache, beam_size=args.beam_size,
                                 precision=args.precision, seed=args.seed, batch_size=args.batch_size)
    except ValueError as exc:
        fail(str(exc))
    if options.precision != args.precision:
        print(f"note: --cache {args.cache} runs openai-whisper's modules as they are, in exact "
              f"precision; --precision {args.precision} applies to static and off", file=sys.stderr)
    print(f"loading {args.model}…", file=sys.stderr, flush=True)
    try:
        model = load_model(args.model, device=device, progress=True)
    except ModelError as exc:
        fail(str(exc))
    except (OSError, RuntimeError) as exc:  # unreadable checkpoint, out of memory, no network
        fail(f"could not load model {args.model!r}: {exc}")
    try:
        # batches are for files: a live session decodes its buffer window by window
        live_options = decode_options(options, precision=args.live_precision or live_precision(model),
                                      batch_size=0)
    except ValueError as exc:
        fail(f"--live-precision: {exc}")

    if args.mic:
        try:
            from whisper_demo.live import mic
        except ImportError as exc:
            fail(f"the terminal microphone is not available: {exc}")
        return mic.run_terminal(model, live_options, device=args.input_device) or 0

    from whisper_demo.ui import Defaults, ModelStore, build_app, launch

    global warming
    warming = _start_warm_up(model, options, live_options)
    store = ModelStore(device=device, policy=policy, max_models=limits.max_models)
    store.put(args.model, model)
    defaults = Defaults(model=args.model, device=device, live_precision=live_options.precision,
                        max_audio_seconds=args.max_audio_seconds,
                        options=options, policy=policy, limits=limits,
                        max_live_seconds=args.max_live_minutes * 60)
    app = build_app(store, defaults)
    try:
        launch(app, host=host, port=port, share=args.share, max_file_size=args.max_file_size)
    except OSError as exc:
        fail(f"cannot serve on {host}:{port}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
