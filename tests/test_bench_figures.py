"""The benchmarks' figures on small hand-made tables, no model and no timing: a committed
word is timed by the moment the page began to show that very word, and an empty measure
prints "not measured" and fails its target, never "met"."""

import argparse

import numpy as np
import pytest

from whisper_demo.bench.cli import live_config
from whisper_demo.bench.live_eval import realtime_targets, report as eval_report, same_final_text
from whisper_demo.bench.live_page import (Offline, Recording, SessionResult, accuracy_line, commit_delays,
                                          report as page_report, shown_since)
from whisper_demo.bench.page_mic import PageSession
from whisper_demo.bench.report import Summary, judged, print_targets, target_checks, verdict


def page(versions, final, mic_opened_s=0.0, stopped_s=10.0):
    return PageSession(final=final, versions=versions, mic_opened_s=mic_opened_s, stopped_s=stopped_s,
                       tentative_seen=True, stats_text="", stats_details=[])


# --- live_page: when a committed word showed -------------------------------------------

def test_a_word_the_final_pass_corrected_is_timed_by_the_correction():
    # streamed "sad" at 2 s; after Stop (11 s) the final pass wrote "sat" at 12 s
    shown = page([(1.0, "the cat"), (2.0, "the cat sad"), (12.0, "the cat sat")], "the cat sat", stopped_s=11.0)
    ends = [("the", 0.3), ("cat", 0.6), ("sat", 1.0)]
    delays, at_stop, untimed = commit_delays(shown, ends)
    assert delays == [0.7, 0.4, 11.0]  # not 1.0: the page never showed "sat" at 2 s
    assert at_stop == [False, False, True] and untimed == 0


def test_a_word_is_timed_from_the_version_after_which_it_stayed():
    versions = [(1.0, "a b"), (2.0, "a c"), (3.0, "a b c"), (4.0, "A b, c d.")]
    # "b" showed at 1 s, was replaced at 2 s and came back at 3 s: it stayed from 3 s on;
    # "c" showed from 2 s on (before "b" came back); case and punctuation are not a change
    assert shown_since(versions, "A b, c d.") == [1.0, 3.0, 2.0, 4.0]


def test_a_word_inserted_or_removed_before_a_word_does_not_retime_it():
    # the final pass inserted "big": "cat" moved one place on, and was on screen since 1 s
    versions = [(1.0, "the cat"), (5.0, "the big cat")]
    assert shown_since(versions, "the big cat") == [1.0, 5.0, 1.0]
    # a streamed opening the final pass dropped ("Alright, so") moves every word after it
    versions = [(1.0, "Alright, so this is"), (2.0, "Alright, so this is the corpus"), (9.0, "So this is the corpus.")]
    assert shown_since(versions, "So this is the corpus.") == [1.0, 1.0, 1.0, 2.0, 2.0]
    # two words that swapped: only one of them can have stood where it stands now
    assert shown_since([(1.0, "b a"), (2.0, "a b")], "a b") == [2.0, 1.0]


def test_a_word_the_last_version_lacks_is_not_timed():
    assert shown_since([(1.0, "one two")], "one two three") == [1.0, 1.0, None]
    delays, at_stop, untimed = commit_delays(page([(1.0, "one two")], "one two three"),
                                             [("one", 0.2), ("two", 0.5), ("three", 0.9)])
    assert delays == [0.8, 0.5] and untimed == 0
    assert shown_since([], "one") == [None]


# --- live_page: an empty measure --------------------------------------------------------

def session(delays, final="the cat sat", reference="the cat sat", offline="the cat sat", name="r"):
    return SessionResult(Recording(name, np.zeros(16000, np.float32), reference), Offline(offline, []),
                         page([], final), delays, [False] * len(delays), 0)


def test_no_timed_word_is_not_measured_and_fails_the_delay_targets():
    out = page_report([session([])], "alignatt")
    assert "speech -> commit through the page, 0 words" in out
    assert "median — (target <= 1.5 s: not measured), p95 — (target <= 3.0 s: not measured)" in out
    assert ": met)" not in out.split("speech -> commit through the page")[1].split("\n")[0]


def test_the_worst_run_of_runs_that_timed_nothing_is_not_measured():
    out = page_report([session([]), session([1.0, 1.2])], "alignatt")
    assert "speech -> commit median —, 1.10 s" in out
    assert "median — (target <= 1.5: not measured), p95 — (target <= 3.0: not measured)" in out


def test_no_words_to_count_a_gap_over_is_not_measured():
    assert accuracy_line([session([1.0], final="", reference="", offline="")]).endswith(
        "(target <= 1: not measured)")
    assert accuracy_line([session([1.0], final="", reference=None, offline="")]).endswith(
        "— points (target <= 1: not measured)")
    out = page_report([session([1.0], reference=None, offline="", name="x"),
                       session([1.0], reference=None, offline="", name="x")], "alignatt")
    assert "worst run: gap — points (target <= 2: not measured)" in out


# --- live_eval --------------------------------------------------------------------------

def record(kind, id, text="a b c", delays=(), first=(), final=(), reference="a b c", subset="dev_ordinary"):
    return dict(id=id, subset=subset, kind=kind, text=text, reference=reference, delays=list(delays), decodes=1,
                first_token_ms=list(first), final_delays=list(final))


def test_a_realtime_run_that_measured_no_delay_says_not_measured_for_each():
    out = eval_report([record("offline", "r"), record("alignatt/realtime", "r")])
    lines = [line for line in out.splitlines() if "alignatt/realtime:" in line]
    assert len(lines) == 4 and all(line.startswith("  not measured alignatt/realtime") for line in lines), lines
    assert "speech -> commit median not measured <= 1.0 s" in out
    assert "pause heard -> final text median not measured <= 0.6 s (p95 not measured)" in out
    table_row = out.splitlines()[2]
    assert "0.00" not in table_row and "—" in table_row


def test_measured_delays_are_still_judged():
    lines = realtime_targets("k", dict(median=0.5, p95=2.5, first_token=300.0, final_delay=0.4,
                                       final_delay_p95=0.9))
    assert lines[0].startswith("  met     k: speech -> commit median 0.50 s")
    assert lines[1].startswith("  NOT met k: speech -> commit p95 2.50 s")


def test_no_reference_words_is_not_measured_and_no_common_session_meets_nothing():
    out = eval_report([record("offline", "r", text="", reference=""),
                       record("alignatt/fast", "r", text="", reference="")])
    assert "  not measured alignatt/fast read: final 0 errors" in out
    assert same_final_text([], ["a/fast", "a/paced"], set()) == [
        "  not measured a/paced: the same final text as a/fast in 0 of 0 sessions"]


# --- the shared verdict, decode_speed's targets, --set ------------------------------------

def test_the_verdict_of_nothing_is_not_measured_and_fails():
    assert judged(None, 1.0) is None and verdict(None) == "not measured"
    assert verdict(judged(1.0, 1.0)) == "met" and verdict(judged(1.0, 1.0, strictly=True)) == "NOT met"


def summary(name, ms_per_token, encoder_ms=100.0):
    return Summary(name=name, tokens=10, ms_per_token=ms_per_token, ms_per_token_min=ms_per_token,
                   first10_ms=None, last10_ms=None, decode_ms=10 * ms_per_token, encoder_ms=encoder_ms,
                   peak_cache_bytes=0, peak_rss_bytes=0, same_tokens=True)


def test_a_speed_target_without_a_figure_is_not_measured(capsys):
    checks = target_checks([summary("static", 0.0), summary("whisper.decode", 10.0)], beam_size=1)
    decode = next(c for c in checks if c["target"] == "exact greedy / whisper.decode")
    assert decode["ratio"] is None and decode["met"] is False
    print_targets([decode])
    assert capsys.readouterr().out.strip() == (
        "target: exact greedy / whisper.decode = - (target <= 0.5) not measured")
    measured = target_checks([summary("static", 4.0), summary("whisper.decode", 10.0)], beam_size=1)
    assert next(c for c in measured if c["target"] == "exact greedy / whisper.decode")["met"] is True


def test_set_changes_a_live_setting_in_its_own_type_and_refuses_a_bad_one(capsys):
    parser = argparse.ArgumentParser(prog="bench")
    config = live_config(parser, ["min_new_seconds=0.4", "prompt_chars=100", "policy=agreement"])
    assert (config.min_new_seconds, config.prompt_chars, config.policy) == (0.4, 100, "agreement")
    # a field that defaults to None takes a string; a flag reads false as False
    assert live_config(parser, ["final_precision=exact"]).final_precision == "exact"
    assert live_config(parser, ["final_precision=none"]).final_precision is None
    assert live_config(parser, ["pad_lead_in=false"]).pad_lead_in is False
    assert live_config(parser, ["pad_lead_in=true"]).pad_lead_in is True
    for bad in (["no_such_field=1"], ["prompt_chars=many"], ["prompt_chars"], ["pad_lead_in=perhaps"]):
        with pytest.raises(SystemExit):
            live_config(parser, bad)
        assert "--set" in capsys.readouterr().err
