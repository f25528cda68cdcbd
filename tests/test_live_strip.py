"""The Live tab's buffer strip (ui/render/live_strip.py): the audio the last re-decode read, the
committed part of it, and for AlignAtt the cursor at the newest token's attention peak and
the edge `frame_seconds` before the buffer's end. The SVG is checked from constructed
snapshots (where each line lands, in the strip's own x), then a real AlignAtt session of
tiny.en on a real clip is checked to fill the snapshot as the policy decided."""

import re
import types
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from whisper_demo.live.alignatt import AlignAttPolicy
from whisper_demo.live.transcript import Transcript
from whisper_demo.live.words import Hypothesis, TimedWord
from whisper_demo.live.snapshots import ENVELOPE_BARS, BufferView, WordMark, buffer_view, envelope, newest_peak
from whisper_demo.ui.render.live_strip import EDGE_LABEL, strip_html

# The strip's geometry, written out here so a wrong scale fails: a 640-wide SVG whose plot
# runs from x=10 to x=630 (620 across), the buffer's start at the left.
PLOT_LEFT, PLOT_WIDTH = 10, 620


def expected_x(seconds, start, end):
    return PLOT_LEFT + PLOT_WIDTH * (seconds - start) / (end - start)


def svg_of(page_html):
    return ET.fromstring(re.search(r"<svg.*</svg>", page_html, re.S).group(0))


def line_x(svg, cls):
    lines = [e for e in svg.iter("line") if e.get("class") == cls]
    assert len(lines) == 1, f"one {cls} line expected, found {len(lines)}"
    assert lines[0].get("x1") == lines[0].get("x2"), "a vertical line"
    return float(lines[0].get("x1"))


def view(**changes):
    fields = dict(start=10.0, end=20.0, envelope=(0.01,) * 100 + (0.5,) * 100 + (0.02,) * 40,
                  committed_until=14.0, cursor=19.2, edge=19.6,
                  words=(WordMark("cool", 13.9, True), WordMark("and", 16.0, False), WordMark("cloudy", 19.2, False)))
    fields.update(changes)
    return BufferView(**fields)


# ------------------------------------------------------------------ the SVG


def test_cursor_edge_and_committed_boundary_land_at_their_stream_times():
    svg = svg_of(strip_html(view(), "alignatt"))
    assert line_x(svg, "wk-strip-cursor") == pytest.approx(expected_x(19.2, 10, 20), abs=0.1)
    assert line_x(svg, "wk-strip-edge") == pytest.approx(expected_x(19.6, 10, 20), abs=0.1)
    assert line_x(svg, "wk-strip-boundary") == pytest.approx(expected_x(14.0, 10, 20), abs=0.1)
    # the shading: committed from the buffer's start to the boundary, unheard from the edge on
    committed = next(e for e in svg.iter("rect") if e.get("class") == "wk-strip-committed")
    assert float(committed.get("x")) == pytest.approx(PLOT_LEFT, abs=0.1)
    assert float(committed.get("width")) == pytest.approx(expected_x(14.0, 10, 20) - PLOT_LEFT, abs=0.2)
    unheard = next(e for e in svg.iter("rect") if e.get("class") == "wk-strip-unheard")
    assert float(unheard.get("x")) == pytest.approx(expected_x(19.6, 10, 20), abs=0.1)
    assert float(unheard.get("x")) + float(unheard.get("width")) == pytest.approx(PLOT_LEFT + PLOT_WIDTH, abs=0.2)


def test_the_same_times_in_another_buffer_move_with_it():
    # a later buffer (after a cut): the same stream time is further left
    svg = svg_of(strip_html(view(start=15.0, end=25.0, cursor=19.2, edge=24.6), "alignatt"))
    assert line_x(svg, "wk-strip-cursor") == pytest.approx(expected_x(19.2, 15, 25), abs=0.1)
    assert line_x(svg, "wk-strip-edge") == pytest.approx(expected_x(24.6, 15, 25), abs=0.1)


def test_the_edge_is_labelled_in_plain_words_and_the_words_are_ticked():
    page = strip_html(view(), "alignatt")
    svg = svg_of(page)
    assert EDGE_LABEL in "".join(svg.itertext())
    ticks = [e for e in svg.iter("line") if e.get("class") == "wk-strip-word"]
    assert [float(t.get("x1")) for t in ticks] == pytest.approx(
        [expected_x(s, 10, 20) for s in (13.9, 16.0, 19.2)], abs=0.1)
    assert ticks[0].get("stroke") != ticks[1].get("stroke")  # committed and tentative look different
    assert ticks[1].find("title").text.startswith("and: read at 16.00 s")
    caption = re.search(r'wk-strip-caption[^>]*>(.*?)</div></div>', page, re.S).group(1)
    assert "0.4 s before the end of the audio so far" in caption and "not fully heard" in caption
    assert "where the newest token was reading" in caption  # the legend names the cursor


def test_the_waveform_has_one_bar_per_envelope_value_taller_where_louder():
    svg = svg_of(strip_html(view(), "alignatt"))
    wave = next(e for e in svg.iter("path") if e.get("class") == "wk-strip-wave")
    bars = re.findall(r"M([\d.]+) ([\d.]+)V([\d.]+)", wave.get("d"))
    assert len(bars) == 240
    heights = [float(bottom) - float(top) for _, top, bottom in bars]
    assert min(heights[100:200]) > 10 * max(heights[:100])  # the loud middle stands out
    xs = [float(x) for x, _, _ in bars]
    assert PLOT_LEFT < xs[0] < xs[-1] < PLOT_LEFT + PLOT_WIDTH and xs == sorted(xs)


def test_agreement_shows_waveform_and_boundary_and_says_why_there_is_no_cursor():
    page = strip_html(view(cursor=None, edge=None, words=()), "agreement")
    svg = svg_of(page)
    classes = {e.get("class") for e in svg.iter()}
    assert {"wk-strip-wave", "wk-strip-boundary", "wk-strip-committed"} <= classes
    assert not classes & {"wk-strip-cursor", "wk-strip-edge", "wk-strip-unheard"}
    assert "No cursor" in page and "AlignAtt" in page


def test_nothing_committed_in_this_buffer_draws_no_boundary():
    svg = svg_of(strip_html(view(committed_until=8.0), "alignatt"))  # committed before the buffer
    classes = {e.get("class") for e in svg.iter()}
    assert "wk-strip-committed" not in classes and "wk-strip-boundary" not in classes


def test_before_the_first_decode_the_strip_says_what_will_appear():
    page = strip_html(None, "alignatt")
    assert "<svg" not in page and "where the model is reading" in page


def test_the_live_tab_draws_the_strip_of_the_last_update_under_the_transcript():
    from whisper_demo.live.snapshots import LiveUpdate
    from whisper_demo.live.worker import LiveView
    from whisper_demo.ui.render import live_view

    def rendered(policy):
        update = LiveUpdate("cool", "and cloudy", "", True, None, (), None, buffer=view())
        shown = LiveView(3, "cool", "and cloudy", update, None, None, None, False)
        session = types.SimpleNamespace(final=None, mic_stream=None, model=None, policy=policy, worker=types.SimpleNamespace(
            latency_series=lambda: {}, view=lambda: shown))
        _, stats_box, _, _ = live_view.render(session, None)
        return stats_box

    assert 'id="live-strip"' in rendered("alignatt") and "wk-strip-cursor" in rendered("alignatt")
    assert "No cursor" in rendered("agreement")  # the session's own policy, not a guess from the data


def test_the_policy_choice_reaches_the_handlers_that_open_a_session():
    # Gradio passes a handler's inputs by position: each must land on the parameter named for it
    import inspect

    import gradio as gr

    from whisper_demo.ui.live.layout import build_live_tab
    from whisper_demo.ui.store import Defaults, ModelStore

    with gr.Blocks() as page:
        header_model = gr.Dropdown(["tiny.en"], value="tiny.en", elem_id="header-model")
        tab = build_live_tab(ModelStore(device="cpu"), Defaults(model="tiny.en"), model_choice=header_model)
    parameter_of = {"live-mic-problem": "problem", "live_kv_toggle": "cache_on", "live_cache_mode": "mode",
                    "live_policy": "policy", "header-model": "model_name"}
    # the browser microphone's Record and this computer's Start
    handlers = {fn.fn.__self__: fn for fn in page.fns.values() if fn.fn is not None and fn.fn.__name__ == "start"}
    assert set(handlers) == {tab.browser, tab.desktop}
    for owner, fn in handlers.items():
        parameters = list(inspect.signature(fn.fn).parameters)
        given = [parameter_of[component.elem_id] for component in fn.inputs]
        assert parameters[:len(given)] == given, (owner, parameters, given)
    assert "policy" in [parameter_of[component.elem_id] for component in handlers[tab.browser].inputs]


# ------------------------------------------------------------------ the snapshot


def test_envelope_is_the_loudest_sample_of_each_slice():
    samples = np.zeros(16000, np.float32)
    samples[8000:8010] = -0.7  # a click in the middle
    env = envelope(samples)
    assert len(env) == ENVELOPE_BARS and max(env) == pytest.approx(0.7)
    assert env.index(max(env)) in (ENVELOPE_BARS // 2 - 1, ENVELOPE_BARS // 2)
    assert envelope(np.zeros(0, np.float32)) == ()
    assert len(envelope(np.ones(50, np.float32))) == 50  # fewer samples than bars


def test_alignatt_decision_carries_its_edge_and_the_view_its_cursor():
    words = (TimedWord("the", 10.1, 10.3), TimedWord("weather", 10.3, 10.8), TimedWord("today", 10.9, 11.5))
    hyp = Hypothesis(words, buffer_start=10.0, buffer_end=11.6, peaks=((10.2,), (10.5, 10.7), (11.4,)))
    policy = AlignAttPolicy(frame_seconds=0.4)
    transcript = Transcript()
    decision = policy.update(transcript, hyp)
    transcript.apply(decision, 0.0)
    assert decision.edge == pytest.approx(11.6 - 0.4)
    assert [w.text for w in decision.committed] == ["the", "weather"]  # "today" read past the edge
    steps = [(" the", 10.2), (" weather", 10.5), ("", 10.7), (" today", 11.4), (".", 10.1), ("", 10.3)]
    shown = buffer_view(np.zeros(int(1.6 * 16000), np.float32), 10.0, hyp, decision, steps,
                        transcript.committed_end, at_pause=False)
    assert (shown.start, shown.end) == (10.0, pytest.approx(11.6))
    assert shown.cursor == 11.4  # the newest word's last token: "." and the end of text read nothing
    assert shown.edge == decision.edge and shown.committed_until == 10.8
    assert [(m.text, m.seconds, m.committed) for m in shown.words] == [
        ("the", 10.2, True), ("weather", 10.7, True), ("today", 11.4, False)]


def test_a_decode_that_wrote_nothing_after_the_given_words_has_no_cursor():
    # its one step is the end of text, carrying the given words' text
    hyp = Hypothesis((), buffer_start=0.0, buffer_end=3.5, after_committed=True)
    decision = AlignAttPolicy().update(Transcript(), hyp)
    shown = buffer_view(np.zeros(56000, np.float32), 0.0, hyp, decision,
                        [(" And so my fellow Americans.", 0.42)], 2.6)
    assert shown.cursor is None and shown.words == ()
    assert "no cursor" in strip_html(shown, "alignatt")


def test_words_the_tokens_do_not_spell_take_the_tokens_cursor():
    hyp = Hypothesis((TimedWord("so...", 0.5, 0.9),), buffer_start=0.0, buffer_end=2.0)
    shown = buffer_view(np.zeros(32000, np.float32), 0.0, hyp, AlignAttPolicy().update(Transcript(), hyp),
                        [(" so", 0.6), ("..", 0.2)], 0.0, at_pause=False)
    assert shown.cursor == 0.6 and shown.words == ()


def test_the_cursor_is_the_newest_token_with_attention():
    assert newest_peak([(" so", 1.0), (" my", 1.4), (",", 0.2), ("<|1.50|>", None)]) == 1.4
    assert newest_peak([("...", 0.9)]) == 0.9  # only punctuation: its peak is all there is
    assert newest_peak([(" so", None)]) is None  # a decoder asked for no attention


# ------------------------------------------------------------------ the real model


def test_a_real_alignatt_session_places_its_cursor_inside_the_buffer_and_its_edge_frame_seconds_before_its_end(
        tiny_model, clip):
    from whisper_demo.events import DecodeOptions
    from whisper_demo.live import LiveConfig, LiveSession, LiveUpdate, model_decoder

    config = LiveConfig(policy="alignatt")
    session = LiveSession(model_decoder(tiny_model, DecodeOptions(), alignatt=True), config)
    audio = np.concatenate([np.zeros(8000, np.float32), clip("jfk.wav"), np.zeros(16000, np.float32)])
    updates = []
    for start in range(0, audio.size, 8000):
        session.add_samples(audio[start:start + 8000])
        updates += [u for u in session.updates() if isinstance(u, LiveUpdate)]
    updates += [u for u in session.finish() if isinstance(u, LiveUpdate)]

    decoded = [u for u in updates if u.decoded and u.revision is None]  # the streamed decodes
    assert len(decoded) >= 5
    with_cursor = 0
    for update in decoded:
        shown = update.buffer
        assert shown is not None and shown.envelope and shown.end > shown.start
        if shown.words:  # the cursor: the newest word's last token
            assert shown.cursor == shown.words[-1].seconds
        if shown.cursor is not None:
            with_cursor += 1
            assert shown.start <= shown.cursor <= shown.end
        # frame_seconds before the end; more while the buffer is short
        lacking = config.start_seconds - (shown.end - shown.start)
        assert shown.edge == pytest.approx(shown.end - max(config.frame_seconds, lacking), abs=1e-6)
        svg = svg_of(strip_html(shown, "alignatt"))
        if shown.cursor is not None:
            assert line_x(svg, "wk-strip-cursor") == pytest.approx(
                expected_x(shown.cursor, shown.start, shown.end), abs=0.1)
    assert with_cursor >= len(decoded) * 3 // 4  # all but the decodes that wrote no new word
    # the committed boundary follows the committed words, and moves forward only
    committed_until = [u.buffer.committed_until for u in decoded]
    assert committed_until == sorted(committed_until) and committed_until[-1] > 9.0
    # a final pass's strip says what it did
    paused = [u.buffer for u in updates if u.revision is not None and not u.final]
    assert paused and all(b.at_pause and b.edge is None for b in paused)
    assert "final text" in strip_html(paused[0], "alignatt")
    assert "do for your country" in updates[-1].committed.lower()


def test_an_alignatt_tab_session_decodes_with_attention(tiny_model):
    from whisper_demo.events import DecodeOptions
    from whisper_demo.ui.live.tab_session import TabSession

    for policy, attention in (("alignatt", True), ("agreement", False)):
        session = TabSession(tiny_model, DecodeOptions(), policy=policy)
        try:
            live = session.worker.session
            assert live.config.policy == policy and live.decoder.options.attention is attention
            session.set_options(DecodeOptions(cache="hooks"))  # a chunk's options: the policy stays
            assert live.decoder.options.attention is attention and live.decoder.options.cache == "hooks"
        finally:
            session.close()
