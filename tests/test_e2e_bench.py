"""The whole-file benchmark's pure parts (bench/e2e.py): the long file it builds, the word
edits charged to each recording, the bootstrap intervals and the target verdicts. Nothing
here is timed or transcribed."""

import numpy as np
import pytest

from whisper_demo.bench import e2e
from whisper_demo.bench.e2e import Item, Measure, Target, describe_target, join_recordings, judge, table
from whisper_demo.bench.scoring import difference_interval, piece_edits, wer_interval

RATE = e2e.SAMPLE_RATE


def recording(name, seconds, reference, value=0.1):
    return Item(name, np.full(int(seconds * RATE), value, dtype=np.float32), (reference,), (name,))


def measure(system, seconds, edits, counts=None, scope="long"):
    edits = np.array(edits)
    counts = np.array(counts if counts is not None else [10] * len(edits))
    return Measure(scope, system, seconds, 600.0, float(edits.sum() / counts.sum()),
                   wer_interval(edits, counts), 100, int(counts.sum()), edits, counts)


# --- the long file --------------------------------------------------------------------------

def test_the_long_file_joins_recordings_with_pauses_and_their_references():
    a, b = recording("a", 2.0, "hello there", 0.1), recording("b", 1.0, "general kenobi", 0.2)
    long = join_recordings([a, b], min_seconds=3.0)
    pause = int(e2e.PAUSE_SECONDS * RATE)
    assert len(long.audio) == 2 * RATE + pause + 1 * RATE + pause
    assert np.all(long.audio[: 2 * RATE] == np.float32(0.1))
    assert np.all(long.audio[2 * RATE: 2 * RATE + pause] == 0)  # the pause is silence
    assert np.all(long.audio[2 * RATE + pause: 3 * RATE + pause] == np.float32(0.2))
    assert long.references == ("hello there", "general kenobi")
    assert long.reference == "hello there general kenobi"
    assert long.recordings == ("a", "b")


def test_the_long_file_stops_once_long_enough_and_cycles_when_too_few():
    a, b = recording("a", 2.0, "one"), recording("b", 2.0, "two")
    assert join_recordings([a, b], min_seconds=2.0).recordings == ("a",)  # 2.5 s with its pause
    cycled = join_recordings([a, b], min_seconds=9.0)
    assert cycled.recordings == ("a", "b", "a", "b")
    assert cycled.seconds == pytest.approx(10.0)
    with pytest.raises(ValueError):
        join_recordings([], min_seconds=1.0)


def test_an_empty_reference_adds_no_words_to_the_joined_reference():
    long = join_recordings([recording("a", 1.0, "yes"), recording("silence", 1.0, "")], min_seconds=2.0)
    assert long.references == ("yes", "") and long.reference == "yes"


# --- word edits per recording ---------------------------------------------------------------

def test_edits_are_charged_to_the_recording_their_reference_word_came_from():
    edits, counts = piece_edits("the cat sat on a mat and a dog barked loudly",
                                ["the cat sat on the mat", "a dog barked"])
    assert counts.tolist() == [6, 3]
    # "the" -> "a" in the first; "and" inserted after "mat" (first), "loudly" after "barked" (second)
    assert edits.tolist() == [2, 1]


def test_edits_add_up_to_the_projects_word_edits():
    from whisper_demo.text import word_edits

    references = ["montreal forced aligner", "press pound to continue", "", "thank you for calling"]
    hypothesis = "montreal forced aligner forced press the pound key to continue hmm thanks for calling"
    edits, counts = piece_edits(hypothesis, references)
    assert edits.sum() == word_edits(hypothesis, " ".join(references))
    assert counts.tolist() == [3, 4, 0, 4]


def test_nothing_written_deletes_every_word_and_nothing_to_say_inserts_every_word():
    edits, counts = piece_edits("", ["alpha beta", "gamma"])
    assert edits.tolist() == [2, 1] and counts.tolist() == [2, 1]
    edits, counts = piece_edits("hello there", [""])
    assert edits.tolist() == [2] and counts.tolist() == [0]


# --- intervals ------------------------------------------------------------------------------

def test_the_wer_interval_holds_the_wer_is_seeded_and_narrows_with_agreement():
    rng = np.random.default_rng(1)
    counts = rng.integers(5, 30, 80)
    edits = rng.binomial(counts, 0.2)
    low, high = wer_interval(edits, counts)
    assert low < edits.sum() / counts.sum() < high
    assert (low, high) == wer_interval(edits, counts)  # seeded: the same every run
    assert wer_interval(counts * 0, counts) == (0.0, 0.0)


def test_the_difference_interval_is_paired_over_the_same_recordings():
    counts = np.full(50, 10)
    a = np.arange(50) % 5
    assert difference_interval(a, a, counts) == (0.0, 0.0)  # same edits: no difference at all
    low, high = difference_interval(a + 1, a, counts)  # one more edit in every recording
    assert low == pytest.approx(0.1) and high == pytest.approx(0.1)


# --- targets --------------------------------------------------------------------------------

def test_a_target_is_met_when_fast_enough_and_not_worse():
    measures = {("long", "exact"): measure("exact", 10.0, [2] * 40),
                ("long", "fw-float32"): measure("fw-float32", 25.0, [2] * 40)}
    verdict = judge(Target("long", "exact", "fw-float32", 0.5, "not worse"), measures)
    assert verdict.met and verdict.text.startswith("met") and "0.40x" in verdict.text


def test_a_target_is_not_met_when_too_slow():
    measures = {("long", "exact"): measure("exact", 15.0, [2] * 40),
                ("long", "fw-float32"): measure("fw-float32", 25.0, [2] * 40)}
    verdict = judge(Target("long", "exact", "fw-float32", 0.5, "not worse"), measures)
    assert not verdict.met and verdict.text.startswith("NOT met") and "0.60x" in verdict.text


def test_a_target_is_not_met_when_worse_beyond_the_interval():
    measures = {("long", "fast"): measure("fast", 5.0, [4] * 40),
                ("long", "fw-int8"): measure("fw-int8", 25.0, [2] * 40)}
    verdict = judge(Target("long", "fast", "fw-int8", 0.5, "not worse"), measures)
    assert not verdict.met and "worse beyond the interval" in verdict.text


def test_a_worse_wer_within_the_interval_still_meets_it():
    rng = np.random.default_rng(0)
    peer = rng.integers(0, 5, 40)
    ours = peer.copy()
    ours[0] += 1  # one word more over 400: well inside the noise
    measures = {("long", "fast"): measure("fast", 5.0, ours), ("long", "fw-int8"): measure("fw-int8", 25.0, peer)}
    assert judge(Target("long", "fast", "fw-int8", 0.5, "not worse"), measures).met


def test_a_separate_files_target_is_on_time_alone():
    measures = {("separate", "fast"): measure("fast", 5.0, [9] * 40, scope="separate"),
                ("separate", "fw-int8"): measure("fw-int8", 10.0, [1] * 40, scope="separate")}
    assert judge(Target("separate", "fast", "fw-int8", 0.6), measures).met


@pytest.mark.parametrize("missing", ["exact", "fw-float32"])
def test_a_side_not_measured_fails_its_target(missing):
    measures = {("long", "exact"): measure("exact", 1.0, [0] * 40),
                ("long", "fw-float32"): measure("fw-float32", 25.0, [2] * 40)}
    del measures["long", missing]
    verdict = judge(Target("long", "exact", "fw-float32", 0.5, "not worse"), measures)
    assert not verdict.met
    assert verdict.text.startswith("NOT met") and f"not measured ({missing})" in verdict.text


def test_the_batched_targets_compare_whisper_kv_batched_with_faster_whisper_batched():
    measures = {("long", "fw-batched-int8"): measure("fw-batched-int8", 5.0, [2] * 40),
                ("long", "batched-fast"): measure("batched-fast", 4.0, [1] * 40)}
    verdicts = {t.ours: judge(t, measures) for t in e2e.TARGETS if t.ours.startswith("batched")}
    assert set(verdicts) == {"batched", "batched-fast"}
    assert verdicts["batched-fast"].met  # faster and fewer errors
    assert not verdicts["batched"].met and "not measured (batched, fw-batched-float32)" in verdicts["batched"].text
    slower = {**measures, ("long", "batched-fast"): measure("batched-fast", 6.0, [1] * 40)}
    assert not judge(next(t for t in e2e.TARGETS if t.ours == "batched-fast"), slower).met


def test_every_target_names_its_systems_and_its_rule():
    lines = [describe_target(t) for t in e2e.TARGETS]
    assert "long: whisper-kv exact <= 0.5x faster-whisper float32 greedy, WER not worse" in lines[0]
    assert lines[2] == "separate: whisper-kv fast (int8) <= 0.6x faster-whisper int8 greedy"
    assert lines[4] == ("long: whisper-kv batched (8) exact <= 1x faster-whisper batched (8) float32, "
                        "lower WER")
    assert "batched (8) int8, lower WER" in lines[5]


def test_the_table_says_which_systems_were_not_measured():
    measures = {("long", "fast"): measure("fast", 5.0, [1] * 40), ("long", "fw-int8"): measure("fw-int8", 20.0, [1] * 40)}
    lines = table("long", ["fast", "fw-int8", "openai"], measures, {"openai": "ImportError: no whisper"})
    assert "0.25x faster-whisper int8 greedy" in lines[1]
    assert "not measured (ImportError: no whisper)" in lines[3]


# --- the step inside transcribe against the step alone ---------------------------------------

class _Run:
    def __init__(self, step_ms, alone_ms=None):
        self.output = e2e.Output("text", 10, step_ms)
        self.alone_ms = alone_ms


def test_the_step_target_compares_a_step_inside_transcribe_with_one_alone():
    long = recording("long", 1.0, "a b c")
    probed = []

    def fast(audio):
        return None
    fast.step_alone = lambda: probed.append(1) or 6.0
    runs = {("fast", "long"): [_Run(7.0), _Run(8.0), _Run(30.0)]}  # the median, not the mean
    steps = e2e.measure_steps({"fast": fast}, runs, long, repeats=3)
    assert len(probed) == 3 and steps["fast"].inside_ms == 8.0 and steps["fast"].alone_ms == 6.0
    verdict = e2e.judge_step(steps["fast"])
    assert verdict.text.startswith("NOT met") and "8.0 ms / 6.0 ms = 1.33x" in verdict.text
    assert "inside transcribe" in verdict.title
    runs = {("fast", "long"): [_Run(7.0)]}
    assert e2e.judge_step(e2e.measure_steps({"fast": fast}, runs, long, repeats=1)["fast"]).met  # 1.17x


def test_the_step_alone_is_probed_right_after_each_long_run():
    # the step alone in the same minute as the step inside: measured ten minutes later (after
    # the separate files) a noisy hour had moved an unchanged system's ratio by 0.24
    long, short = recording("long", 2000 / RATE, "a b"), recording("short", 10 / RATE, "a")
    calls = []

    def fast(audio):
        calls.append(("fast", len(audio)))
        return e2e.Output("a b", 2, 7.0 if len(audio) > 1000 else 5.0)

    def peer(audio):
        calls.append(("peer", len(audio)))
        return e2e.Output("a b", 2)
    alone = iter([6.0, 9.0, 3.0, 5.0, 5.0, 5.0])
    fast.step_alone = lambda: calls.append("probe") or next(alone)
    runs = e2e.measure({"fast": fast, "peer": peer}, [long, short], repeats=2, probe_after="long")
    # repeat 1: fast's long run, its 3 probes, then the peer; repeat 2 reversed: the peer first
    assert calls[:5] == [("fast", 2000), "probe", "probe", "probe", ("peer", 2000)]
    assert calls[7:12] == [("peer", 2000), ("fast", 2000), "probe", "probe", "probe"]
    assert [r.alone_ms for r in runs["fast", "long"]] == [6.0, 5.0]  # each run's median of 3
    assert all(r.alone_ms is None for r in runs["fast", "short"] + runs["peer", "long"])
    fast.step_alone = lambda: pytest.fail("probed again after the runs")
    steps = e2e.measure_steps({"fast": fast}, runs, long, repeats=2)
    assert steps["fast"].inside_ms == 7.0 and steps["fast"].alone_ms == 5.5


def test_a_step_not_measured_fails_its_target():
    steps = e2e.measure_steps({}, {}, recording("long", 1.0, "a"), repeats=1)
    assert set(steps) == {"exact", "fast"}
    verdicts = [e2e.judge_step(m) for m in steps.values()]
    assert all(not v.met and v.text.endswith("not measured") for v in verdicts)


def test_the_cpu_is_named_with_the_vector_units_its_speed_turns_on():
    from whisper_demo.bench.machine import describe

    zen3 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse avx avx2 fma\n\nprocessor\t: 1\n"
    assert describe(zen3) == "AMD EPYC 7B13, AVX2"
    xeon = "model name\t: Intel(R) Xeon(R)  Platinum 8481C CPU\nflags\t: avx2 avx512f avx512_bf16 amx_bf16\n"
    assert describe(xeon) == "Intel(R) Xeon(R) Platinum 8481C CPU, AMX"  # the best unit, spaces folded
    assert describe("model name\t: AMD EPYC\nflags\t: avx2 avx512f avx512_bf16\n") == "AMD EPYC, AVX-512 BF16"
    assert describe("flags\t: sse2\n") == "" and describe("") == ""
