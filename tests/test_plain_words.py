"""What a newcomer reads on the page: plain words first, the technical term only in a
tooltip (a title attribute); counts of one in the singular; an estimate said to be one.
No model and no browser: the panels are built from hand-made events."""

import html
import re
from types import SimpleNamespace

import torch
from whisper.model import ModelDimensions

from whisper_demo.events import TokenEvent
from whisper_demo.ui.render import live_view, panel
from whisper_demo.ui.render.plain_tokens import plain_token

JARGON = ("n_text_ctx", "d_model", "torch.cat", "prefilled", "hypothesis", "put back", "SOT", "EOT", "PREV")


def visible_text(fragment: str) -> str:
    """What the page shows: tags and their title attributes (tooltips) removed."""
    return html.unescape(re.sub(r"<[^>]*>", " ", fragment))


def tiny_like():
    dims = ModelDimensions(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4)
    return SimpleNamespace(dims=dims, name="tiny.en",
                           decoder=SimpleNamespace(token_embedding=SimpleNamespace(weight=torch.zeros(1))))


def event(step=0, window=0, n_windows=1, mode="static"):
    return TokenEvent(step=step, window=window, token_id=1, text=" x", transcript=" x", latency_ms=12.5,
                      cache_tokens=4, cache_capacity=448, self_cache_bytes=4 * 2 * 4 * 384 * 4,
                      self_cache_reserved_bytes=448 * 2 * 4 * 384 * 4, cross_cache_bytes=2 * 4 * 1500 * 384 * 4,
                      rss_bytes=500 << 20, cache_mode=mode, beam_size=1, n_windows=n_windows,
                      window_start=30.0 * window, window_end=30.0 * window + 30, audio_seconds=30.0 * n_windows)


def test_the_panels_speak_plainly_and_keep_the_terms_in_tooltips():
    model = tiny_like()
    idle = panel.panel_html(None, model)
    running = panel.panel_html(event(), model, latencies_ms=[12.5])
    for fragment in (idle, running):
        shown = visible_text(fragment)
        assert not [w for w in JARGON if w in shown], shown
    assert "n_text_ctx" in running and "d_model" in idle  # still there, on hover


def test_one_step_is_singular():
    shown = visible_text(panel.panel_html(event(step=0), tiny_like(), latencies_ms=[12.5]))
    assert "1 decoder step " in shown and "1 decoder steps" not in shown
    # the Live tab's panel shows the last re-decode, also after Stop: it says so
    live = visible_text(panel.panel_html(event(step=0), tiny_like(), latencies_ms=[12.5], encoder_ms=300.0))
    assert "1 decoder step in the last re-decode" in live


def test_the_window_count_is_called_an_estimate():
    shown = visible_text(panel.panel_html(event(window=1, n_windows=6), tiny_like(), latencies_ms=[12.5, 12.5]))
    assert "window 2 of about 6" in shown and "window 2 of 6" not in shown


def test_the_live_idle_panel_is_about_recording():
    transcript, stats, idle, chart = live_view.render(None, tiny_like())
    shown = visible_text(idle)
    assert "Drop a file" not in shown and "Record" in shown


def test_timestamp_chips_say_which_end_of_a_segment():
    # Whisper writes <|3.16|><|3.16|> between two segments: the end of one, the start of the next
    assert plain_token("<|3.16|>", " you") == "to 3.16 s"
    assert plain_token("<|3.16|>", "<|3.16|>") == "from 3.16 s"
    assert plain_token("<|0.00|>", "<|startoftranscript|>") == "from 0 s"
    assert plain_token("<|endoftext|>") == "end"
    assert plain_token("<|en|>") == "english"
