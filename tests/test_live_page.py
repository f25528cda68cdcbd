"""The live_page benchmark's arithmetic, without a browser: which recordings it picks, how
it times a word's commit from what the page drew, and how it reads the stats tiles."""

import html
import json
import re
from types import SimpleNamespace

import numpy as np

from whisper_demo.bench.live_page import (COMMIT_TILE, FIRST_TOKEN_TILE, Offline, Recording, SessionResult,
                                          commit_delays, report, spread, tile_figures)
from whisper_demo.bench.page_mic import PageSession
from whisper_demo.live.snapshots import LiveStats
from whisper_demo.ui.render.live_view import stats_html


def page(versions, final, mic_opened_s=0.5, stopped_s=10.0, details=()):
    return PageSession(final=final, versions=versions, mic_opened_s=mic_opened_s, stopped_s=stopped_s,
                       tentative_seen=True, stats_text="", stats_details=list(details))


def test_a_word_is_timed_from_its_end_in_the_audio_to_the_first_text_that_showed_it():
    ends = [("Hello", 1.0), ("there,", 1.5), ("my", 2.0), ("friend.", 2.6)]
    shown = page([(0.0, ""), (3.0, "Hello there,"), (4.5, "Hello there, my friend.")], "Hello there, my friend.",
                 mic_opened_s=0.5)
    delays, at_stop, untimed = commit_delays(shown, ends)
    # the file starts when the microphone opens (0.5 s after Record)
    assert delays == [1.5, 1.0, 2.0, 1.4]
    assert at_stop == [False] * 4 and untimed == 0


def test_words_the_offline_decode_lacks_are_not_timed_and_words_after_stop_are_marked():
    ends = [("and", 0.5), ("so", 0.8), ("my", 1.0), ("fellow", 1.4)]
    shown = page([(2.0, "And so am I"), (12.0, "And so am I fellow")], "And so am I fellow", stopped_s=11.0,
                 mic_opened_s=0.0)
    delays, at_stop, untimed = commit_delays(shown, ends)
    assert delays == [1.5, 1.2, 10.6]  # and, so, fellow ("am I" is not in the offline words)
    assert at_stop == [False, False, True]
    assert untimed == 2


def test_the_tiles_median_and_p95_are_read_in_seconds():
    stats = LiveStats(decodes=3, skipped=0, loops=0, unprompted=False, first_token_ms_median=640.0,
                      first_token_ms_p95=1200.0, commit_s_median=2.1, commit_s_p95=3.0, last_first_token_ms=700.0,
                      last_decode_ms=900.0, last_encoder_ms=300.0, last_tokens=10, last_from_draft=0,
                      last_draft_passes=0, last_given=0, audio_seconds=5.0, buffer_seconds=2.0,
                      dropped_seconds=0.0, lost_seconds=0.0)
    # the tooltips as the page draws them (the benchmark reads the tiles' title attributes)
    details = [html.unescape(t) for t in re.findall(r'title="([^"]*)"', stats_html(SimpleNamespace(stats=stats)))]
    assert tile_figures(details, FIRST_TOKEN_TILE) == (0.64, 1.2)
    assert tile_figures(details, COMMIT_TILE) == (2.1, 3.0)
    assert tile_figures(["From the end of each word ... Median —, p95 —."], COMMIT_TILE) == (None, None)


def test_the_default_recordings_take_each_speaker_in_turn_then_spread_through_the_manifest(tmp_path):
    items = [dict(id=f"a{i}", subset="dev_ordinary", source_package="A", audio="x.wav", reference="") for i in range(8)]
    items += [dict(id="b0", subset="dev_ordinary", source_package="B", audio="x.wav", reference=""),
              dict(id="c0", subset="dev", source_package="C", audio="x.wav", reference="")]
    (tmp_path / "manifest.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    assert [item["id"] for item in spread(tmp_path, 5)] == ["a0", "a2", "a4", "a6", "b0"]
    assert [item["id"] for item in spread(tmp_path, 2)] == ["a0", "b0"]
    assert len(spread(tmp_path, 50)) == 9  # every dev_ordinary recording, none of the other subset


def test_the_report_marks_the_targets():
    def result(delays, final, reference, offline):
        return SessionResult(Recording("r", np.zeros(16000, np.float32), reference), Offline(offline, []),
                             page([], final), delays, [False] * len(delays), 0)

    quick = report([result([0.5, 1.0, 1.2], "the cat sat", "the cat sat", "the cat sat")], "alignatt")
    assert "median 1.00 s (target <= 1.5 s: met)" in quick and "(target <= 3.0 s: met)" in quick
    assert "gap +0.0 points (target <= 1: met)" in quick
    slow = report([result([2.0, 2.5, 4.0], "the cat sad", "the cat sat", "the cat sat")], "agreement")
    assert "median 2.50 s (target <= 1.5 s: NOT met)" in slow and "(target <= 3.0 s: NOT met)" in slow
    assert "gap +33.3 points (target <= 1: NOT met)" in slow


def test_one_recording_played_several_times_is_judged_by_its_worst_run():
    reference = " ".join(["word"] * 50)  # a point is half a word

    def run(final, delays):
        return SessionResult(Recording("talk", np.zeros(16000, np.float32), reference), Offline(reference, []),
                             page([], final), delays, [False] * len(delays), 0)

    steady = report([run(reference, [1.0, 1.2]), run(reference, [1.1, 1.4])], "alignatt")
    assert "talk, 2 runs: final text the same in every run" in steady
    assert "worst run: gap +0.0 points (target <= 2: met), median 1.25 s (target <= 1.5: met)" in steady
    shaky = report([run(reference, [1.0, 1.2]), run(reference.replace("word", "bird", 2), [2.0, 4.0])], "alignatt")
    assert "differs between runs" in shaky
    assert "worst run: gap +4.0 points (target <= 2: NOT met), median 3.00 s (target <= 1.5: NOT met)" in shaky


def test_a_recording_that_is_not_there_is_named_not_a_traceback(tmp_path, capsys):
    import pytest

    from whisper_demo.bench import live_page

    with pytest.raises(SystemExit) as stop:
        live_page.main(["--audio", str(tmp_path / "nowhere.wav")])
    assert stop.value.code == 2  # argparse's error: usage and the message
    message = capsys.readouterr().err
    assert "nowhere.wav" in message and "not found" in message and "Traceback" not in message
