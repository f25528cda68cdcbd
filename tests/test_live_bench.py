"""The live benchmark's measures (whisper_demo/bench/live_stream.py), on tables: what counts as a
phrase committed twice, and how speech -> commit is read from word times."""

import pytest

from whisper_demo.bench.live_stream import phrases_committed_twice, speech_to_commit
from whisper_demo.bench.feeds import FeedResult


def test_a_phrase_committed_right_after_itself_counts_once():
    offline = "ask not what your country can do for you"
    assert phrases_committed_twice("ask not what your country what your country can do for you", offline) == 1
    assert phrases_committed_twice(offline, offline) == 0


def test_a_phrase_the_offline_transcript_also_repeats_does_not_count():
    said_twice = "we shall fight we shall fight on the beaches"
    assert phrases_committed_twice(said_twice, said_twice) == 0
    # a single repeated word is a slip, not a phrase committed twice
    assert phrases_committed_twice("the the cat sat", "the cat sat") == 0


def test_speech_to_commit_pairs_each_committed_word_with_its_end_in_the_audio():
    result = FeedResult("fast", "Hello, there big world.", [2.0, 2.0, 3.5, 3.5],
                        ["end of speech"] * 2 + ["two decodes agreed"] * 2, [], 0, 0.0, 0.0, 0.0,
                        words=[("Hello,", 0.1, 0.6), ("there", 0.6, 1.1), ("big", 2.0, 2.4), ("world.", 2.5, 2.9)])
    offline_words = [(" hello", 0.5), (" there", 1.0), (" world", 3.0)]  # "big" is not offline
    assert speech_to_commit(result, offline_words) == [
        (1.5, "end of speech"), (1.0, "end of speech"), (0.5, "two decodes agreed")]


def test_a_repeat_the_speaker_made_is_not_counted_even_when_offline_left_it_out():
    reference = "we shall fight uh we shall fight on the beaches"
    offline = "we shall fight on the beaches"
    live = "we shall fight um we shall fight on the beaches"  # the normaliser drops uh and um
    assert phrases_committed_twice(live, offline) == 1
    assert phrases_committed_twice(live, offline, reference) == 0
    # a real double commit is in neither the offline text nor the reference
    assert phrases_committed_twice(live, offline, offline) == 1


def test_a_word_matched_to_the_wrong_copy_of_a_repeated_phrase_is_not_timed():
    # the stream says "forced aligner" twice; the live text has only the second one, which
    # the text alignment pairs with the first copy (ends at 1.0 s) although it ends at 6.0 s
    result = FeedResult("fast", "forced aligner", [6.5, 6.5], ["end of speech"] * 2, [], 0, 0.0, 0.0, 0.0,
                        words=[("forced", 5.2, 5.5), ("aligner", 5.5, 6.0)])
    offline_words = [(" forced", 0.5), (" aligner", 1.0), (" forced", 5.5), (" aligner", 6.0)]
    assert speech_to_commit(result, offline_words) == [(1.0, "end of speech"), (0.5, "end of speech")]


def test_the_paced_feed_charges_each_decode_its_cost_and_repeats_itself(tiny_model, clip):
    # Real time on a simulated clock: a decode that costs more of the stream's time sees
    # more new audio when it ends, so fewer decodes run; the same costs give the same text.
    from whisper_demo.events import DecodeOptions
    from whisper_demo.bench.feeds import DecodeCosts, feed_paced
    from whisper_demo.live.config import LiveConfig
    from whisper_demo.decode import transcribe
    from whisper_demo.text import word_edits

    audio = clip("jfk.wav")
    offline = transcribe(tiny_model, audio, DecodeOptions()).text
    cheap, dear = DecodeCosts(0.05, 0.001), DecodeCosts(1.0, 0.02)
    runs = {costs: feed_paced(tiny_model, DecodeOptions(), audio, 0.1, LiveConfig(), costs)
            for costs in (cheap, dear)}
    assert runs[dear].decodes < runs[cheap].decodes
    for costs, result in runs.items():
        # a first token comes an encoder pass and a step after the decode starts, which is
        # never before the newest audio it hears arrived
        assert min(result.first_token_ms) >= 1000 * (costs.encoder_s + costs.step_s) - 1e-6
        # the feed transcribed the clip: within two words of offline (a word at the growing
        # edge may differ: AlignAtt commits it with 0.4 s of audio after it, "Watch your
        # country" for "what your country")
        assert word_edits(result.committed, offline) <= 2, result.committed
    again = feed_paced(tiny_model, DecodeOptions(), audio, 0.1, LiveConfig(), dear)
    assert again.committed == runs[dear].committed and again.commit_times == runs[dear].commit_times


def test_the_paced_clock_charges_a_decode_stopped_early_for_every_token_it_made():
    # A decode the session stops in a loop never reports its costs; the simulated machine
    # must still have spent a step on each token it made (not one step for all of them).
    from whisper_demo.events import TokenEvent
    from whisper_demo.bench.feeds import DecodeCosts, SimulatedClock, paced_decoder

    def looping(audio, prompt, draft=None, prefix=None):
        for step in range(1000):
            yield TokenEvent(step=step, window=0, token_id=1, text="", transcript="", latency_ms=1.0,
                             cache_tokens=1, cache_capacity=448, self_cache_bytes=0,
                             self_cache_reserved_bytes=0, cross_cache_bytes=0, rss_bytes=0,
                             cache_mode="static", beam_size=1, from_draft=3 <= step < 8)

    clock = SimulatedClock()
    clock.now = 10.0
    decode = paced_decoder(looping, clock, DecodeCosts(encoder_s=0.2, step_s=0.01))
    for count, _ in enumerate(decode(None, None), start=1):
        if count == 1:
            assert clock.now == pytest.approx(10.0 + 0.2 + 0.01)  # encoder pass, first step
        if count == 12:
            break  # stopped here, as the session stops a loop
    # 12 tokens: 3 steps, one pass that confirmed 5 draft tokens, 4 steps
    assert clock.now == pytest.approx(10.0 + 0.2 + 0.01 * 8)



def test_the_orders_summary_compares_live_with_each_offline_transcript(monkeypatch, capsys):
    """`--seeds`: one line per order, then how often live is within a point of offline. Three
    orders of a 10-word reference, scripted: live 1 word off where offline greedy is right
    (+10 points), level, and 2 better than a looping greedy but 1 worse than the fallback."""
    from types import SimpleNamespace

    import numpy as np

    import whisper_demo.bench.live_stream as bench
    from whisper_demo.events import DecodeOptions

    reference = "the quick brown fox jumps over a lazy sleeping dog"

    def wrong(n):  # the reference with its first n words misheard
        return " ".join(["x"] * n + reference.split()[n:])

    greedy_fallback_live = {0: (reference, reference, wrong(1)), 1: (wrong(2), wrong(3), wrong(2)),
                            2: (wrong(5), wrong(2), wrong(3))}
    order = {}

    def build_stream(eval_dir, seconds, seed):
        order["seed"] = seed
        return bench.Stream(np.zeros(16000, dtype=np.float32), reference, [])

    def offline_transcripts(model, stream, options):
        greedy, fallback, _ = greedy_fallback_live[order["seed"]]
        return SimpleNamespace(text=greedy), SimpleNamespace(text=fallback), []

    monkeypatch.setattr(bench, "build_stream", build_stream)
    monkeypatch.setattr(bench, "offline_transcripts", offline_transcripts)
    monkeypatch.setattr(bench, "feed_fast", lambda model, options, audio, chunk, config: SimpleNamespace(
        committed=greedy_fallback_live[order["seed"]][2]))
    summary = bench.orders_report(None, DecodeOptions(), None, None, bench.seed_range("0-2"), 10, 0.1)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4  # the header and one line per order
    assert [line.split()[4] for line in lines[1:]] == ["10.0%", "20.0%", "30.0%"]  # live WER
    assert "within 1 point of offline greedy on 2 of 3 orders, of the better offline transcript on 1" in summary
    assert "live 10.0-30.0 %" in summary and "+0.0 to +10.0 points" in summary


def test_your_own_recordings_are_sessions_with_a_reference_when_one_lies_beside(tmp_path, clip):
    import soundfile

    from whisper_demo.bench.live_sessions import file_sessions

    for name in ("talk.wav", "other.wav"):
        soundfile.write(tmp_path / name, clip("short_3s.wav"), 16000)
    (tmp_path / "talk.txt").write_text("Please close the door quietly when you leave the room.\n")
    sessions = file_sessions([str(tmp_path / "talk.wav"), str(tmp_path / "other.wav")])
    assert [(name, reference) for name, _, reference in sessions] == [
        ("talk.wav", "Please close the door quietly when you leave the room."), ("other.wav", None)]
    assert sessions[0][1].size == clip("short_3s.wav").size


def test_the_per_session_report_marks_each_target_met_or_not_per_subset():
    from whisper_demo.bench.live_eval import report

    def record(kind, id, subset, text, reference, delays=(), first=(), final=(), **extra):
        return dict(id=id, subset=subset, kind=kind, text=text, reference=reference, delays=list(delays),
                    decodes=1, first_token_ms=list(first), final_delays=list(final), **extra)

    read = "the cat sat on the mat " * 20  # 120 words: half a point is 0.6 words
    hard = "montreal forced aligner"  # 3 words: a point is 0.03 words
    out = report([record("offline", "r", "dev_ordinary", read, read), record("offline", "h", "dev", hard, hard),
                  record("alignatt/fast", "r", "dev_ordinary", read.replace("mat", "hat", 1), read,
                         streamed=read, streamed_committed=100, revised=5),
                  record("alignatt/fast", "h", "dev", hard, hard),
                  record("alignatt/realtime", "r", "dev_ordinary", read, read, [0.5, 0.9, 2.5], [300, 320, 900],
                         [0.4, 0.5, 0.9]),
                  record("alignatt/realtime", "h", "dev", "montreal forced", hard, [0.5], [300], [0.5])])
    # each subset against its own allowance: one read word over offline is more than half a point of 120
    assert "NOT met alignatt/fast read: final 1 errors <= offline 0 + 0.5 WER point" in out
    assert "met     alignatt/fast hard: final 0 errors <= offline 0 + 1.0 WER point" in out
    assert "NOT met alignatt/realtime hard: final 1 errors" in out
    assert "met     alignatt/realtime: speech -> commit median 0.70 s" in out
    assert "NOT met alignatt/realtime: speech -> commit p95" in out
    assert "met     alignatt/realtime: chunk end -> first token median 310 ms" in out
    assert "met     alignatt/realtime: pause heard -> final text median 0.50 s" in out
    assert "nothing written twice" in out
    # the final text depends on the audio alone: the realtime feed's against the fast feed's
    assert "NOT met alignatt/realtime: the same final text as alignatt/fast in 0 of 2 sessions" in out
    # the revision rate: 5 of the 100 streamed committed words
    assert "  5.0%" in out.splitlines()[2]


def test_a_subset_is_named_as_the_report_names_it_or_as_the_manifest_does(capsys):
    import argparse

    from whisper_demo.bench.live_eval import subset_name

    parser = argparse.ArgumentParser(prog="live_eval")
    assert subset_name("hard", parser) == "dev"
    assert subset_name("read", parser) == "dev_ordinary"
    assert subset_name("dev", parser) == "dev"
    with pytest.raises(SystemExit):  # an unknown name is said, not run as an empty set
        subset_name("spontaneous", parser)
    said = capsys.readouterr().err
    assert "'spontaneous'" in said and "hard (dev)" in said and "read (dev_ordinary)" in said


def test_layouts_feed_each_recording_as_people_record_and_say_where_the_pauses_are(tmp_path, clip):
    import json

    import soundfile

    from whisper_demo.bench.layouts import load_sessions, words_in_pauses
    from whisper_demo.bench.live_eval import report

    rows = []
    for i in range(6):
        name = f"c{i}.wav"
        soundfile.write(tmp_path / name, clip("short_3s.wav")[:16000], 16000)
        rows.append(dict(id=f"c{i}", subset="dev_ordinary" if i % 2 else "dev", audio=name, reference=f"word{i}"))
    (tmp_path / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recorded = load_sessions(tmp_path, layout="recorded")
    assert recorded[0]["id"] == "recorded:c0" and recorded[0]["audio"].size == 16000 and recorded[0]["pauses"] == []
    lead = load_sessions(tmp_path, layout="lead90")[0]
    assert lead["audio"].size == 16000 + 1440 and lead["pauses"] == [(0.0, 0.09)]
    padded = load_sessions(tmp_path)[0]
    assert padded["id"] == "c0" and padded["pauses"] == [(0.0, 0.5), (1.5, 2.5)]
    chained = load_sessions(tmp_path, layout="chained")
    assert [s["subset"] for s in chained] == ["dev", "dev_ordinary"]  # hard and read alternate
    hard = chained[0]
    assert len(hard["pauses"]) == 2 and all(0.3 <= b - a <= 2.0 for a, b in hard["pauses"])
    assert hard["audio"].size / 16000 == pytest.approx(3 + sum(b - a for a, b in hard["pauses"]), abs=1e-3)
    assert load_sessions(tmp_path, layout="chained") [0]["pauses"] == hard["pauses"]  # seeded
    # a word inside a pause of >= 1 s is counted; one at its edge or in a short pause is not
    assert words_in_pauses([("you", 1.4, 1.8), ("Hi", 0.9, 1.05), ("so", 3.1, 3.3)], [(1.0, 2.5), (3.0, 3.5)]) == [
        "you@1.4"]
    # given the reference, a word said before the pause whose timing runs on into it is not
    # counted; one the reference does not have there is
    said = [("Hi", 0.5, 0.9), ("putty.", 0.92, 2.2), ("You", 2.3, 2.4), ("so", 3.1, 3.3)]
    assert words_in_pauses(said, [(1.0, 2.5)], "Hi putty so") == ["You@2.3"]
    assert words_in_pauses(said, [(1.0, 2.5)], "Hi so") == ["putty.@0.9", "You@2.3"]
    records = [dict(id=s["id"], subset=s["subset"], layout=s["layout"], kind=kind, text=text, reference=s["reference"],
                    delays=[], decodes=1, lost=lost, in_pauses=0)
               for s in recorded[:2] + [lead] for kind, text, lost in
               (("offline", s["reference"], 0), ("alignatt/fast", s["reference"], 1 if s is lead else 0))]
    out = report(records)
    assert "alignatt/fast @recorded" in out and "lead90" in out
    assert "NOT met alignatt/fast read @lead90: nothing lost (1)" in out or "NOT met alignatt/fast hard @lead90: nothing lost (1)" in out
