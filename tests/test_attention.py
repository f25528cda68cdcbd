"""Inside the cache (DecodeOptions.attention): what each new token reads, on real speech.

The cached (static) and uncached (off) decodes compute the attention in different ways:
static reads K/V written in place over earlier steps, off recomputes every position from
scratch at every step. Their weights must agree; the hooks mode (openai-whisper's own
modules) must give the same tokens and beam reorders with the view on.
"""

import json

import numpy as np
import pytest

from whisper_demo.attention import AttentionRecord, token_labels
from whisper_demo.decode import stream_transcribe
from whisper_demo.events import DecodeOptions, DecodeResult, TokenEvent

ATOL = 1e-4  # float32 sums in another order (one step vs a whole-sequence recompute)


def run(model, audio, **options):
    """(AttentionRecord, DecodeResult) of one decode with the attention view on."""
    record = AttentionRecord()
    for item in stream_transcribe(model, audio, DecodeOptions(attention=True, **options)):
        if isinstance(item, TokenEvent):
            record.add(item)
        else:
            record.result = item
    return record, record.result


@pytest.fixture(scope="module")
def jfk_static(tiny_model, clip):
    return run(tiny_model, clip("jfk.wav"), cache="static")


@pytest.fixture(scope="module")
def jfk_off(tiny_model, clip):
    return run(tiny_model, clip("jfk.wav"), cache="off")


def test_rows_sum_to_one_and_map_is_steps_by_positions(jfk_static):
    record, result = jfk_static
    (window,) = record.windows
    assert len(window.events) == result.n_tokens > 10
    for i, event in enumerate(window.events):
        att = event.attention
        # one more position cached per step, after the prefilled start-of-transcript tokens
        assert att.self_weights.shape == (4, window.prefill_tokens + i)  # tiny.en: 4 layers
        np.testing.assert_allclose(att.self_weights.sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(att.cross_weights.sum(), 1.0, atol=1e-5)
        assert len(att.positions) == att.self_weights.shape[1]
    smap = window.self_map()
    assert smap.shape == (len(window.events), len(window.positions()))
    assert np.allclose(np.triu(smap, k=window.prefill_tokens), 0)  # lower triangular
    np.testing.assert_allclose(smap.sum(axis=1), 1.0, atol=1e-5)
    # the map's row i is what step i read: each layer's row is one of the rows averaged
    np.testing.assert_allclose(window.self_map(layer=2)[5, : window.prefill_tokens + 5],
                               window.events[5].attention.self_weights[2])


def test_static_and_off_read_the_same_weights(jfk_static, jfk_off):
    (static, r_static), (off, r_off) = jfk_static, jfk_off
    assert r_static.tokens == r_off.tokens
    assert len(static.events) == len(off.events)
    for a, b in zip(static.events, off.events):
        assert a.attention.positions == b.attention.positions
        np.testing.assert_allclose(a.attention.self_weights, b.attention.self_weights, atol=ATOL)
        np.testing.assert_allclose(a.attention.cross_weights, b.attention.cross_weights, atol=ATOL)
        assert a.attention.audio_time == pytest.approx(b.attention.audio_time, abs=0.021)


def test_audio_cursor_moves_forward_over_speech(jfk_static, clip):
    record, _ = jfk_static
    duration = len(clip("jfk.wav")) / 16000
    times = [e.attention.audio_time for e in record.events if e.text.strip()]  # words only
    assert all(0 <= t <= duration for t in times)
    steps_forward = np.mean(np.diff(times) >= -0.1)
    assert steps_forward > 0.8, times
    # the first words are heard in the first seconds, the last near the end
    assert times[0] < 2.0 and times[-1] > duration - 3.0, times


def test_word_timestamps_fall_inside_the_audio_in_order(jfk_static, clip):
    record, _ = jfk_static
    duration = len(clip("jfk.wav")) / 16000
    words = record.words()
    assert [w.text.strip(" ,.").lower() for w in words][:5] == ["and", "so", "my", "fellow", "americans"]
    for w in words:
        assert 0 <= w.start <= w.end <= duration + 0.02
    starts = [w.start for w in words]
    assert starts == sorted(starts)


def test_beam_ribbon_matches_between_cache_modes(tiny_model, clip):
    audio = clip("short_3s.wav")
    static, r_static = run(tiny_model, audio, cache="static", beam_size=5)
    off, r_off = run(tiny_model, audio, cache="off", beam_size=5)
    hooks, r_hooks = run(tiny_model, audio, cache="hooks", beam_size=5)
    assert r_static.tokens == r_off.tokens == r_hooks.tokens
    ribbons = [[e.attention.beam_sources for e in rec.events] for rec in (static, off, hooks)]
    assert ribbons[0] == ribbons[1] == ribbons[2]
    for i, (a, b) in enumerate(zip(static.events, off.events)):
        sources = a.attention.beam_sources
        assert len(sources) == 5 and all(0 <= s < 5 for s in sources)
        assert a.attention.parent == sources[0]
        np.testing.assert_allclose(a.attention.self_weights, b.attention.self_weights, atol=ATOL)
    # the best hypothesis of step i+1 read what a hypothesis of step i read plus its token
    for a, b in zip(static.events, static.events[1:]):
        assert len(b.attention.positions) == len(a.attention.positions) + 1
    # a reorder that moves rows happened (else the ribbon would show nothing to copy)
    assert any(list(s) != sorted(s) or len(set(s)) < 5 for s in ribbons[0])


def test_long_audio_window_by_window(tiny_model, clip):
    """Two recordings end to end (36 s): two windows, the second prefilled with the first's
    text as its prompt; the events say where the decoder is in the audio."""
    audio = np.concatenate([clip("jfk.wav"), clip("speech_25s.wav")])
    duration = len(audio) / 16000
    record, result = run(tiny_model, audio, cache="static")
    assert len(record.windows) == 2
    first, second = record.windows
    assert first.prompt_tokens == 0 and second.prompt_tokens > 10
    assert second.prefill_tokens == second.prompt_tokens + 2  # <|startofprev|> ... <|startoftranscript|>
    assert first.start == 0 and 0 < second.start < 30.01 and second.end == pytest.approx(duration, abs=0.02)
    assert first.encoder_ms > 0 and second.encoder_ms > 0
    assert second.events[0].attention.self_weights.shape[1] == second.prefill_tokens
    for w in record.windows:
        for e in w.events:
            assert e.n_windows == 2 and e.audio_seconds == pytest.approx(duration)
            assert w.start <= e.attention.audio_time <= w.end
    # the prompt's positions are the first window's segments (its hypothesis up to the last
    # complete segment, as openai-whisper's transcribe keeps): the refilled cache starts with them
    prompt = list(second.positions()[1 : 1 + second.prompt_tokens])
    hypothesis = list(first.positions()[first.prefill_tokens:]) + [first.events[-1].token_id]
    assert prompt == hypothesis[: len(prompt)]
    assert prompt == [t for s in result.segments if s.start < second.start for t in s.tokens]


def test_json_export_holds_tokens_weights_and_times(jfk_static, tiny_model):

    record, result = jfk_static
    labels = token_labels(tiny_model, [t for e in record.events for t in e.attention.positions])
    data = json.loads(record.to_json(labels))
    (window,) = data["windows"]
    assert len(window["steps"]) == result.n_tokens
    assert data["words"][0]["text"].strip() == "And"
    step = window["steps"][3]
    assert len(step["self_weights"]) == 4 and abs(sum(step["self_weights"][0]) - 1) < 1e-3
    assert window["positions"][0]["text"] == "<|startoftranscript|>"


def test_default_path_carries_no_attention(tiny_model, clip):
    events = [e for e in stream_transcribe(tiny_model, clip("short_3s.wav"), DecodeOptions())]
    assert isinstance(events[-1], DecodeResult)
    assert all(e.attention is None for e in events[:-1])
    assert all(not s.words for s in events[-1].segments)


@pytest.mark.model  # the benchmark loads tiny.en itself
def test_bench_reports_the_attention_overhead(tmp_path, capsys):
    from whisper_demo.bench import decode_speed as bench

    assert bench.main(["--quick", "--no-peers", "--attention", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    by_name = {c["name"]: c for c in report["contenders"]}
    # the weights are an extra output of the same decode: same tokens
    assert by_name["static +attention"]["same_tokens"] and by_name["off +attention"]["same_tokens"]
    overhead = report["ratios"]["attention view overhead (static)"]
    assert overhead == by_name["static +attention"]["ms_per_token_min"] / by_name["static"]["ms_per_token_min"]
    assert "attention view overhead (static)" in capsys.readouterr().out


def _event(step, window, **fields):
    base = dict(step=step, window=window, token_id=50257, text="", transcript="", latency_ms=10.0 + step,
                cache_tokens=step + 1, cache_capacity=448, self_cache_bytes=0, self_cache_reserved_bytes=0,
                cross_cache_bytes=0, rss_bytes=0, cache_mode="static", beam_size=1, audio_seconds=169.0,
                n_windows=6)
    return TokenEvent(**{**base, **fields})


def test_panel_says_where_a_long_file_is_window_by_window():
    """Events of two windows of a 2:49 file: the panel names the window and its audio, the
    encoder time of the window being decoded, the prompt prefilled, and marks the boundary."""
    from types import SimpleNamespace

    import torch
    from whisper.model import ModelDimensions

    from whisper_demo.ui.render import panel
    from whisper_demo.ui.render.run_stats import RunStats
    from whisper_demo.ui.transcribe.handlers import TranscribeTab

    dims = ModelDimensions(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4)
    model = SimpleNamespace(dims=dims, decoder=SimpleNamespace(token_embedding=SimpleNamespace(weight=torch.zeros(1))))
    stats = RunStats()
    for i in range(3):
        stats.add(_event(i, 0, window_start=0.0, window_end=30.0, prefill_tokens=1, window_encoder_ms=400.0))
    for i in range(3, 5):
        stats.add(_event(i, 1, window_start=28.5, window_end=58.5, prompt_tokens=40, prefill_tokens=42,
                         window_encoder_ms=321.0))
    html = panel.panel_html(stats.last_event, model, latencies_ms=stats.latencies_ms, windows=stats.windows)
    # the count of windows is an estimate while decoding: a window ends at its last timestamp
    assert "decoding window 2 of about 6 · 0:28–0:58 of 2:49" in html
    assert "321 ms" in html and "window 2 of about 6" in html  # this window's encoder time, as it happens
    assert "40 tokens of text so far and 2 start tokens" in html
    assert [w.first_step for w in stats.windows] == [0, 3]
    assert html.count('stroke-dasharray="3,3"') == 2  # a boundary at each window's first step
    # the latency chart: a dashed vertical line where window 2 starts
    chart = TranscribeTab._chart({"KV cache: static": stats.latencies_ms}, None, stats.windows)
    assert chart.count('class="wk-window-mark"') == 1 and "starts at step 3" in chart
