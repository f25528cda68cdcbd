"""The README's headline claims, each checked so that it turns the suite red if it breaks.
Work is counted (calls, positions, tensors alive), never timed: a timed assert depends on
what else the machine runs. What the counted work buys in time (the cache makes decoding
faster) is measured side by side by the benchmarks (python -m whisper_demo.bench
decode_speed), which print their ratios.
"""

import gc
import math
import weakref

import numpy as np
import pytest
import whisper

from whisper_demo.examples import clip_path
from whisper_demo import cache as cache_module
from whisper_demo import decode, window_decode
from whisper_demo import runner as runner_module
from whisper_demo.cache import cross_cache_bytes, self_cache_bytes
from whisper_demo.decode import stream_transcribe
from whisper_demo.events import DecodeOptions, TokenEvent
from whisper_demo.ui.render import panel
from decoding import decode_all

SR = 16000


drain = decode_all  # tests/decoding.py


@pytest.fixture
def made_caches(monkeypatch):
    """Weak references to every cache strategy object created (all of them run
    CacheStrategy.__init__), so a test can look inside the cache a decode uses without
    keeping it alive."""
    made = []
    real_init = cache_module.CacheStrategy.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(weakref.ref(self))

    monkeypatch.setattr(cache_module.CacheStrategy, "__init__", init)
    return made


@pytest.fixture
def runner_calls(monkeypatch):
    """Every DecoderRunner.forward call (the static and off modes' decoder): offset, the
    tokens run, and weak references to the K/V tensors it was handed."""
    calls = []
    real_forward = runner_module.DecoderRunner.forward

    def forward(self, tokens, offset, self_kv, cross_kv, logit_positions=None, **keywords):
        calls.append({
            "offset": offset, "n_tokens": tokens.shape[1], "n_beams": tokens.shape[0],
            "self_refs": [weakref.ref(t) for kv in self_kv for t in kv],
            "cross_refs": [weakref.ref(t) for kv in cross_kv for t in kv],
            "previous_alive": sum(r() is not None for c in calls for r in c["self_refs"] + c["cross_refs"]),
        })
        return real_forward(self, tokens, offset, self_kv, cross_kv, logit_positions, **keywords)

    monkeypatch.setattr(runner_module.DecoderRunner, "forward", forward)
    return calls


def held_tensors(strategy):
    """(self-attention tensors, cross-attention tensors) the cache object holds now."""
    if isinstance(strategy, cache_module.HooksCache):
        self_t = [t for m, t in strategy.kv_cache.items() if m in strategy.self_modules]
        cross_t = [t for m, t in strategy.kv_cache.items() if m not in strategy.self_modules]
        return self_t, cross_t
    self_t = [t for kv in (getattr(strategy, "self_kv", None) or []) for t in kv]
    cross_t = [t for kv in (getattr(strategy, "cross_kv", None) or []) for t in kv]
    return self_t, cross_t


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


# --------------------------------------------------------------------------------------
# 1. The cache makes decoding faster


def test_off_writes_the_same_tokens_as_static_by_running_the_whole_sequence_each_step(tiny_model, clip, runner_calls):
    """speech_25s.wav (~100 decoder steps): the cache changes how much the decoder runs, not
    what it writes. Work is counted (token positions through the decoder), not timed: a timed
    assert depends on what else the machine runs, so the speed this buys is measured side by
    side by `python -m whisper_demo.bench decode_speed` (off / static, 4-7x per token here).
    Without the cache, step n runs all n positions again, so the work of a window grows with
    the square of its length; with it, each step runs one."""
    audio = clip("speech_25s.wav")
    static_events, _ = drain(tiny_model, audio, cache="static")
    static_positions = sum(call["n_tokens"] for call in runner_calls)
    n_static_calls = len(runner_calls)
    off_events, _ = drain(tiny_model, audio, cache="off")
    off_positions = sum(call["n_tokens"] for call in runner_calls[n_static_calls:])
    assert [e.token_id for e in off_events] == [e.token_id for e in static_events]
    steps = len(static_events)
    assert steps > 60
    print(f"\n{steps} steps: positions run off {off_positions}, static {static_positions}")
    # one decoder call per token in both; off reruns every earlier position at each step
    assert len(runner_calls) == 2 * n_static_calls == 2 * steps
    assert off_positions > steps * steps / 4 > 10 * static_positions


# --------------------------------------------------------------------------------------
# 2. The memory figures are measured, and the formula is checked against them


@pytest.mark.parametrize("mode,beams", [("static", 1), ("hooks", 1), ("static", 3)])
def test_reported_bytes_are_the_tensors_held_and_equal_the_formula(tiny_model, clip, made_caches, mode, beams):
    elem = tiny_model.decoder.token_embedding.weight.element_size()
    n = 0
    for item in stream_transcribe(tiny_model, clip("short_3s.wav"), DecodeOptions(cache=mode, beam_size=beams)):
        if not isinstance(item, TokenEvent):
            continue
        strategy = made_caches[-1]()
        self_t, cross_t = held_tensors(strategy)
        if mode == "static":
            # the filled positions of the buffers actually allocated
            filled = sum(t.shape[0] * t.shape[1] * strategy.cache_tokens() * t.shape[3] * t.element_size()
                         for t in self_t)
            assert item.self_cache_bytes == filled
            # what is allocated: the memory behind the buffers, which is all n_text_ctx
            # positions and no more (a view of a larger block would hide the rest)
            storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in self_t}
            assert len(storages) == len(self_t)
            assert item.self_cache_reserved_bytes == sum(storages.values())
            assert item.self_cache_reserved_bytes == self_cache_bytes(
                tiny_model, tiny_model.dims.n_text_ctx, beams, elem)
        else:
            assert item.self_cache_bytes == tensor_bytes(self_t)  # the grown tensors
        assert item.cross_cache_bytes == tensor_bytes(cross_t)
        # ...and the README's formula agrees with what is held
        assert item.self_cache_bytes == self_cache_bytes(tiny_model, item.cache_tokens, beams, elem)
        assert item.cross_cache_bytes == cross_cache_bytes(tiny_model, elem)
        n += 1
    assert n > 3


def test_the_page_says_when_measured_bytes_differ_from_the_formula(tiny_model, clip, monkeypatch):
    """The panel's "✓ formula" compares a measurement with the formula, so it can fail: a
    cache that miscounts the positions it holds by one is shown as "≠ formula"."""
    audio = clip("short_3s.wav")[: SR * 2]

    def last_event():
        return [e for e in stream_transcribe(tiny_model, audio, DecodeOptions(cache="static"))
                if isinstance(e, TokenEvent)][-1]

    good = panel.panel_html(last_event(), tiny_model)
    monkeypatch.setattr(cache_module.StaticCache, "cache_tokens", lambda self: self.length + 1)
    bad = panel.panel_html(last_event(), tiny_model)
    assert good.count("✓ formula") == 2 and "≠ formula" not in good
    assert "≠ formula" in bad


# --------------------------------------------------------------------------------------
# 3. Stop, a closed generator and a closed tab free the cache


def _refs_to_cache(strategy, runner_calls):
    self_t, cross_t = held_tensors(strategy)
    refs = [weakref.ref(strategy)] + [weakref.ref(t) for t in self_t + cross_t]
    refs += [r for c in runner_calls for r in c["self_refs"] + c["cross_refs"]]
    return refs


def _alive(refs):
    gc.collect()
    return sum(r() is not None for r in refs)


@pytest.mark.parametrize("mode", ["static", "hooks", "off"])
def test_closing_the_decode_frees_every_cache_tensor(tiny_model, clip, made_caches, runner_calls, mode):
    stream = stream_transcribe(tiny_model, clip("jfk.wav"), DecodeOptions(cache=mode))
    for _, item in zip(range(5), stream):
        assert isinstance(item, TokenEvent)
    refs = _refs_to_cache(made_caches[-1](), runner_calls)
    if mode != "off":
        assert _alive(refs) > 4  # mid-decode the cache's tensors exist
    stream.close()
    assert _alive(refs) == 0


@pytest.fixture(scope="module")
def page_app(tiny_model):
    from whisper_demo.ui import Defaults, ModelStore, build_app

    store = ModelStore(device="cpu")
    store.put("tiny.en", tiny_model)
    return build_app(store, Defaults(model="tiny.en", max_audio_seconds=60))


@pytest.mark.parametrize("mode", ["static", "hooks", "off"])
def test_stop_on_the_page_frees_every_cache_tensor(page_app, tiny_model, made_caches, runner_calls, mode,
                                                   monkeypatch):
    """Stop: Gradio closes the handler's generator (SyncToAsyncIterator.aclose).

    Every token is a page update here: the page's Throttle sends one every 100-200 ms, and
    on a fast machine jfk.wav's whole decode fits in one such interval, so Stop would come
    after the decode instead of in the middle of it."""
    from whisper_demo.ui.transcribe import throttle

    monkeypatch.setattr(throttle.Throttle, "due", lambda self: True)
    fn = next(f.fn for f in page_app.fns.values() if f.api_name == "transcribe_page")
    jfk = str(clip_path("jfk.wav"))
    gen = fn(jfk, mode != "off", mode if mode != "off" else "static", 1, "auto", True, "tiny.en", None)
    streaming = 0
    for update in gen:
        if "decoding…" in update[1]:
            streaming += 1
            if streaming == 2:
                break
    assert streaming == 2
    refs = _refs_to_cache(made_caches[-1](), runner_calls)
    gen.close()
    assert _alive(refs) == 0


@pytest.mark.browser
def test_closing_the_tab_frees_every_cache_tensor(tiny_model, clip, made_caches, runner_calls, tmp_path):
    """A real Chromium tab on the page served in this process: the tab closes mid-decode
    (static, beam 5, 55 s of speech), and every tensor of that decode's cache goes away."""
    import soundfile as sf
    from app_server import CHROMIUM, IN_CI, chromium_args, free_port, require_chromium

    from whisper_demo.ui import Defaults, ModelStore, build_app, launch

    require_chromium()
    sync_api = (__import__("playwright.sync_api", fromlist=["sync_playwright"]) if IN_CI
                else pytest.importorskip("playwright.sync_api"))
    long_file = tmp_path / "long_55s.wav"
    sf.write(str(long_file), np.concatenate([clip("speech_25s.wav")] * 2 + [clip("jfk.wav")[: SR * 4]]),
             SR, subtype="PCM_16")
    store = ModelStore(device="cpu")
    store.put("tiny.en", tiny_model)
    app = build_app(store, Defaults(model="tiny.en", options=DecodeOptions(cache="static", beam_size=5)))
    url = launch(app, port=free_port(), block=False)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=chromium_args())
            try:
                page = browser.new_page()
                page.goto(url)
                page.wait_for_selector("#audio_in")
                page.locator("#audio_in input[type=file]").set_input_files(str(long_file))
                page.wait_for_function(
                    "() => (document.querySelector('#transcript textarea')?.value || '').length > 20",
                    timeout=180_000)
                strategy = next(r() for r in reversed(made_caches) if r() is not None)
                assert strategy.mode == "static" and strategy.n_beams == 5
                refs = _refs_to_cache(strategy, runner_calls)
                del strategy
                assert _alive(refs) > 4
                page.close()
            finally:
                browser.close()
        import time

        deadline = time.monotonic() + 120
        while _alive(refs) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _alive(refs) == 0, "the closed tab's decode still holds its cache"
    finally:
        app.close()


# --------------------------------------------------------------------------------------
# 4. "Off" keeps nothing


def test_off_runs_every_step_over_the_whole_sequence_and_reuses_nothing(tiny_model, clip, made_caches, runner_calls):
    events, _ = drain(tiny_model, clip("jfk.wav"), cache="off")
    strategy = made_caches[-1]()
    n_initial = strategy.initial_token_length if strategy is not None else 1
    assert len(runner_calls) == len(events) > 20
    for step, call in enumerate(runner_calls):
        assert call["offset"] == 0, f"step {step} started at position {call['offset']}"
        assert call["n_tokens"] == n_initial + step, f"step {step} did not run the whole sequence"
        # nothing from an earlier step (self K/V scratch, audio K/V) is alive at this one
        assert call["previous_alive"] == 0, f"step {step} found {call['previous_alive']} tensors kept"
    assert _alive([r for c in runner_calls for r in c["self_refs"] + c["cross_refs"]]) == 0


def test_static_runs_each_step_over_the_new_token_only(tiny_model, clip, runner_calls):
    """The other side of the same claim: with the cache, step n runs one token at
    position n, so its work does not grow with position."""
    events, _ = drain(tiny_model, clip("jfk.wav"), cache="static")
    first = runner_calls[0]
    assert first["offset"] == 0
    for step, call in enumerate(runner_calls[1:], start=1):
        assert call["n_tokens"] == 1 and call["offset"] == first["n_tokens"] + step - 1
    # one buffer set for the whole window: the same tensors every step
    assert all(c["self_refs"][0]() is first["self_refs"][0]() for c in runner_calls)
    assert len(runner_calls) == len(events)


# --------------------------------------------------------------------------------------
# 5. Temperature fallback


def test_fallback_restarts_the_window_replaces_its_text_and_drops_the_prompt(tiny_model, clip, monkeypatch):
    """Window 0 of 36.7 s of speech is judged failed three times (as openai-whisper's test
    would judge a repetitive or unlikely decode), so it is decoded at 0.0, 0.2, 0.4 and
    kept at 0.6. Each retry is announced (restart=True on its first token), the window's
    text is the kept attempt's alone, and window 1 gets no prompt, since the text before it
    came from a high temperature."""
    audio = np.concatenate([clip("speech_25s.wav"), clip("jfk.wav")])
    tasks = []
    real_task = window_decode.DecodingTask

    def recording_task(model, options):
        tasks.append(options)
        return real_task(model, options)

    monkeypatch.setattr(window_decode, "DecodingTask", recording_task)
    verdicts = []
    real_needs = decode.needs_fallback

    def judged(outcome, tokenizer, options):
        verdict = len(verdicts) < 3 or real_needs(outcome, tokenizer, options)
        verdicts.append((verdict, list(outcome.tokens)))
        return verdict

    monkeypatch.setattr(decode, "needs_fallback", judged)
    events, result = drain(tiny_model, audio, temperature_fallback=True)

    window0 = [o for o in tasks[:4]]
    assert [o.temperature for o in window0] == [0.0, 0.2, 0.4, 0.6]
    assert verdicts[3][0] is False  # the 0.6 attempt is kept
    restarts = [e for e in events if e.restart]
    assert [e.window for e in restarts] == [0, 0, 0]
    # the transcript starts again at each restart: a retry replaces, never appends
    for e in restarts:
        assert e.transcript == e.text, e.transcript
    tokenizer = whisper.tokenizer.get_tokenizer(False, language="en")
    kept = verdicts[3][1]
    window0_text = tokenizer.decode([t for t in kept if t < tokenizer.eot])
    last_of_window0 = [e for e in events if e.window == 0][-1]
    assert last_of_window0.transcript == window0_text
    assert result.text.startswith(window0_text.strip())
    # the prompt: dropped after the 0.6 window
    window1 = tasks[4]
    assert window1.temperature == 0.0 and window1.prompt is None
    # and kept without the forced retries (the control)
    tasks.clear()
    verdicts.append(None)  # any further verdicts: the real test only
    monkeypatch.setattr(decode, "needs_fallback", real_needs)
    drain(tiny_model, audio, temperature_fallback=True)
    assert [o.temperature for o in tasks] == [0.0, 0.0] and tasks[1].prompt


def test_fallback_test_fires_on_a_repetitive_window():
    """openai-whisper's rule, not a stub: a window that repeats itself compresses too well."""
    tokenizer = whisper.tokenizer.get_tokenizer(False, language="en")
    repeated = window_decode.WindowOutcome(tokens=tokenizer.encode(" thank you." * 30), avg_logprob=-0.1)
    normal = window_decode.WindowOutcome(tokens=tokenizer.encode(" Please close the door."), avg_logprob=-0.2)
    unlikely = window_decode.WindowOutcome(tokens=tokenizer.encode(" Please close the door."), avg_logprob=-1.5)
    on = DecodeOptions(temperature_fallback=True)
    assert decode.needs_fallback(repeated, tokenizer, on)
    assert decode.needs_fallback(unlikely, tokenizer, on)
    assert not decode.needs_fallback(normal, tokenizer, on)
    assert not decode.needs_fallback(repeated, tokenizer, DecodeOptions(temperature_fallback=False))
    # the thresholds are the options' (openai-whisper's names); None turns a test off
    assert not decode.needs_fallback(repeated, tokenizer, DecodeOptions(compression_ratio_threshold=None))
    assert decode.needs_fallback(normal, tokenizer, DecodeOptions(logprob_threshold=-0.1))
    # silence is no failure: improbable text where P(no speech) is high is not retried
    silent = window_decode.WindowOutcome(tokens=tokenizer.encode(" you"), avg_logprob=-1.5,
                                         no_speech_prob=0.9)
    assert not decode.needs_fallback(silent, tokenizer, on)
    assert decode.needs_fallback(silent, tokenizer, DecodeOptions(no_speech_threshold=0.95))


# --------------------------------------------------------------------------------------
# 6. Silent windows are skipped without running the model (skip_digital_silence)


@pytest.fixture
def encoder_calls(tiny_model, monkeypatch):
    calls = []
    real_forward = tiny_model.encoder.forward

    def forward(x):
        calls.append(x.shape)
        return real_forward(x)

    monkeypatch.setattr(tiny_model.encoder, "forward", forward)
    return calls


def test_digital_silence_never_reaches_the_encoder(tiny_model, clip, encoder_calls):
    # 65 s: two windows of digital silence, then jfk.wav (skip_digital_silence, off by default
    # as openai-whisper's transcribe decodes every window)
    audio = np.concatenate([np.zeros(SR * 60, np.float32), clip("jfk.wav")[: SR * 5]])
    _, result = drain(tiny_model, audio, skip_digital_silence=True)
    assert len(encoder_calls) == 1, f"the encoder ran {len(encoder_calls)} times for 1 window with sound"
    assert "ask not" in result.text.lower()
    # quiet room noise is not digital silence: the model runs and writes nothing
    encoder_calls.clear()
    noise = (np.random.default_rng(0).standard_normal(SR * 5) * 0.003).astype(np.float32)
    # seeded: the window falls back and samples; unseeded, the draws depend on the global
    # generator's state, which the tests before this one leave (in CI it wrote ". . . .")
    _, result = drain(tiny_model, noise, skip_digital_silence=True, seed=0)
    assert len(encoder_calls) == 1 and result.text == ""


# --------------------------------------------------------------------------------------
# 12. Expected values derived independently


def test_mean_and_p95_against_hand_computed_values():
    # p95 of 1..20 (linear interpolation, numpy's default): rank 0.95 x 19 = 18.05
    # -> 19 + 0.05 x (20 - 19) = 19.05; mean 10.5; 20 steps in 210 ms = 95.238 tokens/s
    summary = panel.latency_summary([float(i) for i in range(20, 0, -1)])
    assert summary["mean"] == 10.5
    assert summary["p95"] == pytest.approx(19.05)
    assert summary["tps"] == pytest.approx(20 / 0.210)
    assert summary["last"] == 1.0


def test_result_mean_and_p95_recomputed_by_hand(tiny_model, clip):
    _, result = drain(tiny_model, clip("short_3s.wav"))
    lat = sorted(result.latencies_ms)
    rank = 0.95 * (len(lat) - 1)
    lo = math.floor(rank)
    p95 = lat[lo] + (rank - lo) * (lat[min(lo + 1, len(lat) - 1)] - lat[lo])
    assert result.mean_latency_ms == pytest.approx(sum(lat) / len(lat))
    assert result.p95_latency_ms == pytest.approx(p95)
    assert result.tokens_per_second == pytest.approx(len(lat) * 1000 / sum(lat))


def whisper_parameter_count(dims) -> int:
    """openai-whisper's architecture, counted by hand (model.py): per attention 4 d x d
    weights and 3 biases (the key has none), MLP d -> 4d -> d, LayerNorms 2d; the audio
    positional embedding is a buffer, the text one a parameter."""
    def attention(d):
        return 4 * d * d + 3 * d

    def block(d, cross):
        return attention(d) + 2 * d + (attention(d) + 2 * d if cross else 0) + 8 * d * d + 5 * d + 2 * d

    a, t = dims.n_audio_state, dims.n_text_state
    encoder = (dims.n_mels * a * 3 + a) + (a * a * 3 + a) + dims.n_audio_layer * block(a, False) + 2 * a
    decoder = dims.n_vocab * t + dims.n_text_ctx * t + dims.n_text_layer * block(t, True) + 2 * t
    return encoder + decoder


def test_parameter_count_shown_is_the_architectures(tiny_model):
    from whisper_demo import model_sources, models

    counted = whisper_parameter_count(tiny_model.dims)
    fresh = whisper.model.Whisper(tiny_model.dims)  # openai-whisper's own class, untrained
    assert counted == sum(p.numel() for p in fresh.parameters())
    assert counted == sum(p.numel() for p in tiny_model.parameters())
    assert models.model_label(tiny_model) == f"tiny.en ({counted / 1e6:.1f} M params)"
    info = next(i for i in model_sources.list_models() if i.name == "tiny.en")
    assert info.n_params == counted


def test_readme_model_table_states_the_counted_parameters(tiny_model):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `tiny.en`"))
    counted = whisper_parameter_count(tiny_model.dims)
    assert f"| {counted / 1e6:.1f} M |" in row, row
