"""The command line: every flag the README lists has an effect a test can see.

--cache, --beam-size and --precision: the page app.py builds starts with those choices, and
a decode through it runs with them. --max-file-size: the served page refuses a larger
upload. --list-devices and --mic: what they print on this machine, through `python app.py`.
"""

import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import app as app_cli
from whisper_demo.examples import clip_path
from whisper_demo import cache as cache_module
from whisper_demo import models
from whisper_demo.events import TokenEvent

REPO = Path(__file__).resolve().parents[1]
JFK = clip_path("jfk.wav")


@pytest.fixture
def served(monkeypatch, tiny_model):
    """app.main(argv) as far as serving: the loaded model is the session's tiny.en, the
    page is really launched (not blocking), and what main handed to launch is kept."""
    from whisper_demo import ui

    monkeypatch.setattr(models, "load_model", lambda name, device=None, progress=True: tiny_model)
    seen = {}
    real_launch = ui.launch

    def launch(app, **kwargs):
        seen["app"], seen["kwargs"] = app, kwargs
        seen["url"] = real_launch(app, **kwargs, block=False)
        return seen["url"]

    monkeypatch.setattr(ui, "launch", launch)
    started = []

    def serve(*argv):
        from app_server import free_port

        assert app_cli.main([*argv, "--port", str(free_port())]) == 0
        # the warm-up decodes beside the launch: over before a test counts decodes
        app_cli.warming.join(timeout=600)
        started.append(seen["app"])
        return seen

    yield serve
    for app in started:
        app.close()


def handler(app, api_name):
    """The page's own event (the API's /transcribe and /compare are separate endpoints)."""
    name = {"transcribe": "transcribe_page", "compare": "compare_page"}.get(api_name, api_name)
    fn = next(f.fn for f in app.fns.values() if f.api_name == name)
    return getattr(fn, "__wrapped__", fn)


def page_controls(app):
    """The Transcribe tab's controls, found as the page itself wires them: the inputs of
    its /transcribe event, by label."""
    event = next(f for f in app.fns.values() if f.api_name == "transcribe_page")
    by_label = {getattr(c, "label", None): c for c in event.inputs}
    names = {"mode": "Cache mode", "cache_on": "KV cache", "beam": "Beam size", "language": "Language",
             "timestamps": "Timestamps", "model": "Model", "seed": "Seed"}
    controls = {name: by_label[label] for name, label in names.items()}
    controls["inputs"] = event.inputs
    return controls


def test_cache_beam_and_precision_flags_set_the_page_and_its_decodes(served, monkeypatch):
    seen = served("--cache", "off", "--beam-size", "3", "--precision", "int8")
    app = seen["app"]
    controls = page_controls(app)
    assert controls["mode"].value == "off" and controls["cache_on"].value is False
    assert controls["beam"].value == 3

    strategies = []
    real_make = cache_module.make_cache

    def make_cache(mode, model, initial_token_length, n_beams, precision="exact"):
        made = real_make(mode, model, initial_token_length, n_beams, precision)
        strategies.append((mode, n_beams, precision, getattr(made, "runner", None)))
        return made

    monkeypatch.setattr("whisper_demo.window_decode.make_cache", make_cache)
    # the page's own starting values, as a browser sends them before the user changes any
    values = [str(JFK)] + [c.value for c in controls["inputs"][1:]]
    updates = list(handler(app, "transcribe")(*values))
    assert "ask not" in updates[-1][0].lower()
    assert strategies and {s[:3] for s in strategies} == {("off", 3, "int8")}
    assert all(s[3].precision.name == "int8" for s in strategies)
    assert "no KV cache, beam 3" in updates[-1][1]


def test_defaults_without_flags_are_static_greedy_exact(served):
    app = served()["app"]
    controls = page_controls(app)
    assert controls["mode"].value == "static" and controls["cache_on"].value is True
    assert controls["beam"].value == 1
    assert app.transcribe_tab.defaults.options.precision == "exact"


def test_the_app_warms_up_each_precision_its_page_decodes_in(served, caplog):
    """The first decode's one-time costs are paid at start (warm_up.py), and logged."""
    with caplog.at_level(logging.INFO, logger="whisper_demo"):
        defaults = served()["app"].transcribe_tab.defaults
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("warm-up done"))
    for warmed in ("kernels", "word timing", f"transcribe decode ({defaults.options.precision})",
                   f"live session ({defaults.live_precision})"):
        assert warmed in line


def test_live_decodes_in_the_fast_mode_on_the_cpu_unless_told(served):
    from whisper_demo.ui.live.tab import LiveTab

    defaults = served()["app"].transcribe_tab.defaults
    assert defaults.options.precision == "exact" and defaults.live_precision == "int8"
    tab = LiveTab(store=None, defaults=defaults)
    assert tab._options(True, "static").precision == "int8"
    assert tab._options(True, "hooks").precision == "exact"  # openai-whisper's modules as they are
    exact = served("--live-precision", "exact")["app"].transcribe_tab.defaults
    assert exact.live_precision == "exact" and LiveTab(None, exact)._options(True, "static").precision == "exact"


def _upload(url: str, size: int) -> httpx.Response:
    return httpx.post(url.rstrip("/") + "/gradio_api/upload",
                      files={"files": ("clip.wav", b"\0" * size, "audio/wav")}, timeout=60)


def test_max_file_size_flag_refuses_larger_uploads(served):
    url = served("--max-file-size", "100kb")["url"]
    assert _upload(url, 50_000).status_code == 200
    refused = _upload(url, 200_000)
    assert refused.status_code == 413, (refused.status_code, refused.text[:200])
    # the default (200mb) takes the same 200 kB file
    url = served()["url"]
    assert _upload(url, 200_000).status_code == 200


def _run_app(*args, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "app.py"), *args], cwd=REPO, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _input_devices():
    import sounddevice as sd  # libportaudio2 is installed in CI

    return [d for d in sd.query_devices() if d["max_input_channels"] > 0]


@pytest.mark.process
def test_list_devices_prints_this_machines_inputs_and_exits():
    done = _run_app("--list-devices", timeout=120)
    assert done.returncode == 0, done.stderr
    devices = _input_devices()
    if devices:
        for device in devices:
            assert device["name"] in done.stdout
    else:
        assert "No audio input devices" in done.stdout and "plug in a microphone" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.model  # app.py loads tiny.en before it opens the microphone
def test_mic_without_a_device_fails_with_a_clear_message():
    """No sound card here (nor in CI): `--mic` must exit non-zero and say why. A machine
    that has one is given a device that does not exist instead."""
    args = ["--mic"] if not _input_devices() else ["--mic", "--input-device", "99"]
    done = _run_app(*args, "--model", "tiny.en", "--device", "cpu")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "plug in a microphone" in last, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.process
def test_mic_with_a_device_that_does_not_exist_names_it():
    done = _run_app("--mic", "--input-device", "99", "--model", "tiny.en", "--device", "cpu")
    assert done.returncode != 0
    assert "device 99" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.process
def test_beam_size_below_one_is_refused():
    done = _run_app("--beam-size", "0", timeout=120)
    assert done.returncode == 2 and "--beam-size must be at least 1" in done.stderr


def test_token_events_from_a_flagged_decode_report_the_flagged_mode(tiny_model, clip):
    """What --cache hooks --beam-size 2 become (DecodeOptions) reaches every TokenEvent."""
    args = app_cli.parser().parse_args(["--cache", "hooks", "--beam-size", "2"])
    from whisper_demo.decode import stream_transcribe
    from whisper_demo.events import DecodeOptions

    options = DecodeOptions(cache=args.cache, beam_size=args.beam_size, precision=args.precision)
    events = [e for e in stream_transcribe(tiny_model, clip("short_3s.wav"), options) if isinstance(e, TokenEvent)]
    assert events and {(e.cache_mode, e.beam_size) for e in events} == {("hooks", 2)}


def test_seed_flag_seeds_every_page_decode(served, monkeypatch):
    """--seed reaches the page's decodes (DecodeOptions.seed, default 0): a file that falls
    back gives the same transcript every run, openai-whisper's after torch.manual_seed(N);
    `--seed random` gives openai-whisper's unseeded draws (None), and Advanced's seed field
    starts at the flag's value (-1 for random) and overrides it per run."""
    from whisper_demo.ui.transcribe import handlers as transcribe_tab

    seeds = []
    real_stream = transcribe_tab.stream_transcribe

    def stream(model, samples, options):
        seeds.append(options.seed)
        return real_stream(model, samples, options)

    monkeypatch.setattr(transcribe_tab, "stream_transcribe", stream)
    for argv, expected in (((), 0), (("--seed", "7"), 7), (("--seed", "random"), None)):
        app = served(*argv)["app"]
        controls = page_controls(app)
        assert controls["seed"].value == (-1 if expected is None else expected)
        values = [str(JFK)] + [c.value for c in controls["inputs"][1:]]
        list(handler(app, "transcribe")(*values))
        assert seeds[-1] == expected
        values[controls["inputs"].index(controls["seed"])] = 3  # the field, changed in the page
        list(handler(app, "compare")(*values))
        assert seeds[-2:] == [3, 3]  # both of Compare's runs
