"""The live_load benchmark's pure parts: which clips each visitor says, the page's pacing,
the summary of a run, the search's verdicts and the hostile tab's. No server, no timing."""

from whisper_demo.audio import SAMPLE_RATE
from whisper_demo.bench import live_load as bench
from whisper_demo.bench import load_clients as clients
from whisper_demo.bench.live_load import LoadRun, Summary
from whisper_demo.bench.load_clients import ClientRun
from whisper_demo.bench.page_visitor import committed_text
from whisper_demo.bench.report import NOT_MEASURED

BLOCK = int(clients.CHUNK_SECONDS * SAMPLE_RATE)


def clip(name, seconds):
    return {"id": name, "duration_s": seconds}


def summary(k=1, median=1.0, p95=2.0, lost=0.0, refused=0, failed=0, hostile=False):
    return Summary(k=k, hostile=hostile, words=10, median_s=median, p95_s=p95, wer=0.0, lost_s=lost,
                   refused=refused, failed=failed, probe_failures=0, probe_median_ms=10.0, probe_max_ms=20.0)


def test_each_visitor_takes_up_where_the_last_left_and_long_clips_are_left_out():
    items = [clip("a", 12), clip("long", 73), clip("b", 15), clip("c", 4), clip("d", 20)]
    sets = bench.chained_clips(items, 3, None)  # to 30 s, with 1.5 s of silence a clip
    assert [[c["id"] for c in s] for s in sets] == [["a", "b"], ["c", "d", "a"], ["b", "c", "d"]]  # round again
    assert [[c["id"] for c in s] for s in bench.chained_clips(items, 2, 1)] == [["a"], ["b"]]


def test_the_recorder_hands_on_whole_blocks_as_the_clock_records_them():
    total = 10 * BLOCK
    assert clients.recorded(0.0, total, BLOCK) == 0
    assert clients.recorded(0.15, total, BLOCK) == BLOCK  # the second block is not complete yet
    assert clients.recorded(0.2, total, BLOCK) == 2 * BLOCK
    assert clients.recorded(60.0, total, BLOCK) == total  # never past the recording


def test_a_late_reply_makes_the_next_request_longer_up_to_the_limit():
    assert clients.next_request(0, BLOCK, 9 * BLOCK) == (0, BLOCK)
    assert clients.next_request(BLOCK, 4 * BLOCK, 9 * BLOCK) == (BLOCK, 4 * BLOCK)  # three blocks at once
    assert clients.next_request(0, 20 * BLOCK, 9 * BLOCK) == (0, 9 * BLOCK)
    assert clients.next_request(BLOCK, BLOCK, 9 * BLOCK) == (BLOCK, BLOCK)  # nothing new: wait


def run_of(*clients, probe=(0.01, 0.03), hostile=None):
    return LoadRun(k=len(clients), clients=list(clients), probe_s=list(probe), hostile=hostile)


def test_a_run_is_summed_over_all_visitors_words_and_against_each_sets_solo_text():
    a = ClientRun("set 0", final="red green blue black", delays=[0.5, 1.0, 1.5])
    b = ClientRun("set 1", final="white grey", delays=[2.0], refused={429: 2}, lost_s=0.3)
    s = bench.summarise(run_of(a, b), {"set 0": "red green blue black", "set 1": "white brown"})
    assert (s.k, s.words, s.median_s) == (2, 4, 1.25)
    assert s.wer == 100 * 1 / 6  # one word of the solo texts' six
    assert (s.lost_s, s.refused, s.failed) == (0.3, 2, 0)
    assert (s.probe_median_ms, s.probe_max_ms) == (20.0, 30.0)
    assert s.holds() is False  # something was lost


def test_a_failed_visitor_or_a_missing_solo_text_is_not_measured_and_fails():
    ok = ClientRun("set 0", final="one", delays=[0.5])
    failed = ClientRun("set 1", error="EventFailed: busy")
    s = bench.summarise(run_of(ok, failed), {"set 0": "one", "set 1": "two"})
    assert s.failed == 1 and s.wer is None and s.holds() is False
    assert bench.summarise(run_of(ok), {}).wer is None  # no solo text for its set
    nothing = bench.summarise(run_of(ClientRun("set 0", final="")), {"set 0": ""})
    assert nothing.median_s is None and nothing.holds() is None  # no word timed
    assert NOT_MEASURED in bench.row(nothing) and "—" in bench.row(nothing)


def test_the_targets_of_one_k():
    assert summary().holds() is True
    assert summary(median=1.6).holds() is False
    assert summary(p95=3.1).holds() is False
    assert summary(lost=0.1).holds() is False and summary(refused=1).holds() is False
    assert summary(failed=1).holds() is False
    assert summary(median=None, p95=None).holds() is None
    assert summary(median=None, p95=None, lost=1.0).holds() is False  # one NOT met is enough


def test_the_largest_k_that_holds_is_the_last_of_an_unbroken_run_from_one():
    assert bench.largest_holding([summary(1), summary(2), summary(3, p95=3.5)]) == 2
    assert bench.largest_holding([summary(1), summary(2)]) == 2  # --max-k reached
    assert bench.largest_holding([summary(1, median=2.0)]) is None
    assert bench.largest_holding([summary(1, median=None, p95=None)]) is None  # not measured fails
    lines = bench.verdict_lines([summary(1), summary(2, lost=0.5)])
    assert lines[0].endswith(": 1") and "k = 2" in lines[1] and "NOT met" in lines[1]
    assert bench.verdict_lines([summary(1), summary(2)]) == [bench.verdict_lines([summary(1), summary(2)])[0]]


def test_the_hostile_tab_must_be_refused_and_leave_the_others_as_they_were():
    plain = run_of(ClientRun("set 0", final="a b"), ClientRun("set 1", final="c"))
    beside = run_of(ClientRun("set 0", final="a b"), ClientRun("set 1", final="c"), hostile={200: 9, 409: 5, 429: 3})
    lines = bench.hostile_lines(summary(p95=2.0), summary(p95=2.1, hostile=True), plain, beside)
    assert "409 x 5" in lines[0] and lines[0].endswith("(met)")
    assert "+5 %" in lines[1] and lines[1].endswith("met)") and "NOT" not in lines[1]
    assert "2 of 2 the same" in lines[2] and "NOT" not in lines[2]

    slower = bench.hostile_lines(summary(p95=2.0), summary(p95=2.3), plain, beside)
    assert "+15 %" in slower[1] and "NOT met" in slower[1]
    other = run_of(ClientRun("set 0", final="a c"), ClientRun("set 1", final="c"), hostile={200: 9, 429: 3})
    changed = bench.hostile_lines(summary(), summary(), plain, other)
    assert "NOT met" in changed[0]  # never refused with 409
    assert "1 of 2 the same" in changed[2] and "NOT met" in changed[2]
    silent = bench.hostile_lines(summary(p95=None), summary(), plain, run_of(*plain.clients))
    assert all(NOT_MEASURED in line for line in silent[:2])  # no replies reported, no p95 without it
    reported = bench.hostile_lines(summary(p95=2.0), summary(p95=2.3), plain, beside, judge=False)
    assert "+15 %" in reported[1] and reported[1].endswith("(reported)")


def test_under_the_limit_the_hostile_tab_is_refused_a_place_and_its_made_up_ticket():
    plain = run_of(ClientRun("set 0", final="a b"))
    refusals = (clients.RECORD_REFUSED, 410)
    beside = run_of(ClientRun("set 0", final="a b"), hostile={clients.RECORD_REFUSED: 40, 410: 900})
    lines = bench.hostile_lines(summary(p95=2.0), summary(p95=2.0), plain, beside, refusals=refusals)
    assert "410 x 900" in lines[0] and "Record refused x 40" in lines[0] and lines[0].endswith("(met)")
    placed = run_of(ClientRun("set 0", final="a b"), hostile={clients.RECORD_REFUSED: 1, 200: 5, 409: 30})
    assert "NOT met" in bench.hostile_lines(summary(), summary(), plain, placed, refusals=refusals)[0]


def test_runs_pool_their_visitors_probe_times_and_hostile_replies():
    one = run_of(ClientRun("set 0", final="a"), probe=(0.01,), hostile={410: 3})
    two = run_of(ClientRun("set 0", final="b"), probe=(0.02, 0.03), hostile={410: 2, clients.RECORD_REFUSED: 1})
    both = bench.pooled([one, two])
    assert [c.final for c in both.clients] == ["a", "b"] and both.probe_s == [0.01, 0.02, 0.03]
    assert both.hostile == {410: 5, clients.RECORD_REFUSED: 1}
    assert bench.pooled([run_of(ClientRun("set 0"))]).hostile is None


def test_lost_audio_is_read_from_the_pages_stats():
    stats = ('<div class="wk-tile" title="The audio not yet committed. 1.5 s of the microphone&#x27;s audio never '
             'reached the server (heard as silence)."><div class="wk-sub">of 9.0 s heard · 0.4 s dropped '
             '(decoding slower than speech)</div></div>')
    assert clients.lost_seconds(stats) == 1.9
    assert clients.lost_seconds("audio lost 2.0 s (arrived slower than real time)") == 0.0  # late, not lost
    assert clients.lost_seconds(None) == 0.0


def test_the_committed_words_are_read_from_the_transcript_as_the_page_shows_them():
    shown = ('<div id="live-transcript-body" data-state="live"><button id="live-copy">Copy text</button>'
             '<span class="wk-committed" style=""><span class="wk-final">Ask <mark class="wk-revised">not</mark>'
             ' what</span> <span class="wk-streamed">your country</span></span> '
             '<span class="wk-tentative">can do</span></div>')
    assert committed_text(shown) == "Ask not what your country"
    assert committed_text(None) == ""


def test_a_visitors_words_are_timed_from_their_end_in_the_chained_audio():
    ends = bench.chained_word_ends([2.0, 3.5, 1.0], [[("one", 1.2)], [("two", 0.4), ("three", 3.0)], [("four", 0.5)]])
    assert ends == [("one", 1.2), ("two", 2.4), ("three", 5.0), ("four", 6.0)]
