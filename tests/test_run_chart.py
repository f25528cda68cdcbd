"""The Transcribe tab's latency chart (run_chart.py): each run in its colour, the previous
one grey, each run's median step dashed (the first step apart, as the caption says), a mark
where each later window starts; before any run, one line saying what will be drawn."""

import html
import re

from whisper_demo.ui.render import run_chart
from whisper_demo.ui.render.latency_chart import MODE_COLORS


def test_each_run_is_drawn_in_its_colour_with_its_median_step():
    previous = run_chart.Line("previous: KV cache: static", [40.0, 5.0, 6.0, 5.0], "#94a3b8")
    current = run_chart.Line("no KV cache", [60.0, 20.0, 30.0, 40.0, 50.0], MODE_COLORS["off"])
    chart = run_chart.chart_html([previous, current], window_starts=[3], caption="what is drawn")
    strokes = re.findall(r'<polyline class="wk-series" points="([^"]*)" fill="none" stroke="([^"]*)"', chart)
    assert [color for _, color in strokes] == ["#94a3b8", MODE_COLORS["off"]]  # the current run on top
    assert [len(points.split()) for points, _ in strokes] == [4, 5]
    # the medians leave out the first step (it also fills the cache)
    assert "median step 5.0 ms" in chart and "median step 35.0 ms" in chart
    assert chart.count('class="wk-median"') == 2
    assert chart.count('class="wk-window-mark"') == 1 and "starts at step 3" in chart
    assert "what is drawn" in chart


def test_before_any_run_the_chart_says_what_it_will_draw():
    chart = run_chart.chart_html([], caption="what is drawn")
    assert html.escape(run_chart.EMPTY_TEXT) in chart and "<svg" not in chart and "what is drawn" not in chart


def test_typical_step_needs_a_second_step():
    assert run_chart.typical_step_ms([12.0]) is None
    assert run_chart.typical_step_ms([100.0, 4.0, 6.0]) == 5.0
