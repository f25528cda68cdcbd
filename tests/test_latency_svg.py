"""The Live tab's latency chart as inline SVG (whisper_demo/ui/render/latency_svg.py): every token
is a point, tokens confirmed from the draft are marked, the axis covers the largest value."""

import re

import pytest

from whisper_demo.ui.render.latency_chart import DRAFT_COLORS, DRAFT_SUFFIX, MODE_COLORS, series_label
from whisper_demo.ui.render.latency_svg import HEIGHT, TOP, latency_svg
from whisper_demo.ui.render.svg_axes import nice_ceiling


def polylines(svg: str):
    """(stroke colour, [(x, y), ...]) per series line."""
    lines = []
    for points, color in re.findall(r'<polyline class="wk-series" points="([^"]*)" fill="none" stroke="([^"]*)"', svg):
        lines.append((color, [tuple(map(float, p.split(","))) for p in points.split()]))
    return lines


@pytest.mark.parametrize("value, top", [(0.4, 0.5), (1, 1), (7, 10), (12, 20), (55, 100), (180, 200), (0, 1)])
def test_axis_top_is_a_round_number_above_the_largest_value(value, top):
    assert nice_ceiling(value) == top


def test_one_point_per_token_and_the_draft_tokens_marked():
    static = series_label("static")
    values = [(40.0, False), (60.0, True), (0.5, True), (0.4, True), (9.0, False), (8.0, False)]
    svg = latency_svg({static: values})
    (color, points), = polylines(svg)
    assert color == MODE_COLORS["static"] and len(points) == len(values)
    xs = [x for x, _ in points]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)  # tokens left to right
    ys = [y for _, y in points]
    # higher latency is higher on the chart (smaller y); the largest sits inside the plot
    assert ys[1] < ys[0] < ys[4] < ys[2] and ys[1] >= TOP and max(ys) <= HEIGHT
    assert svg.count('class="wk-draft"') == 3 and DRAFT_COLORS["static"] in svg
    assert DRAFT_SUFFIX.strip(" ·") in svg  # the legend names the draft tokens


def test_each_cache_mode_is_its_own_line_and_no_draft_legend_without_draft_tokens():
    svg = latency_svg({series_label("static"): [(10.0, False)] * 5,
                       series_label("off"): [(20.0, False), (30.0, False)]})
    assert sorted(c for c, _ in polylines(svg)) == sorted([MODE_COLORS["static"], MODE_COLORS["off"]])
    assert "wk-draft" not in svg and DRAFT_SUFFIX.strip(" ·") not in svg


def test_nothing_to_draw_says_so_and_labels_are_escaped():
    assert "<svg" not in latency_svg({}) and "re-decode" in latency_svg({})
    assert "<svg" not in latency_svg({series_label("static"): []})
    svg = latency_svg({"<b>odd</b>": [(1.0, False)]})
    assert "<b>odd</b>" not in svg and "&lt;b&gt;odd&lt;/b&gt;" in svg
