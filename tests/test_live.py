"""LiveTranscriber: chunked real speech through the real tiny.en model, LocalAgreement
commits that are never taken back, silence, bounded memory, and the commit policy on
scripted hypotheses (no model)."""

import re
import threading
import time

import numpy as np
import psutil
import pytest

from whisper_demo import live as live_mod
from whisper_demo.decode import transcribe
from whisper_demo.events import DecodeOptions, DecodeResult, Segment, TokenEvent
from whisper_demo.live import BackgroundTranscriber, LiveTranscriber, LiveUpdate, drain

SR = 16000


def words(text):
    return [w for w in re.sub(r"[^\w' ]", " ", text.lower()).split() if w]


def word_distance(a, b):
    a, b = words(a), words(b)
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


class CommitLog:
    """Checks, at every update, that committed text only ever grows at its end."""

    def __init__(self):
        self.committed = ""
        self.updates = []

    def check(self, update: LiveUpdate):
        assert update.committed.startswith(self.committed), (self.committed, update.committed)
        if update.new_committed:
            assert update.committed.endswith(update.new_committed)
        self.committed = update.committed
        self.updates.append(update)


def stream_file(model, samples, chunk_seconds, *, as_browser=False, **kwargs):
    """Feed `samples` chunk by chunk, re-decoding whenever the transcriber is ready."""
    live = LiveTranscriber(model, DecodeOptions(), **kwargs)
    log = CommitLog()
    n = int(chunk_seconds * SR)
    for start in range(0, len(samples), n):
        chunk = samples[start:start + n]
        if as_browser:  # what gr.Audio(streaming=True) sends: 48 kHz int16
            import soxr
            live.add_audio(48000, (soxr.resample(chunk, SR, 48000) * 32767).astype(np.int16))
        else:
            live.add_audio(SR, chunk)
        for item in live.updates():
            if isinstance(item, LiveUpdate):
                log.check(item)
    final = drain(live.finish())
    log.check(final)
    return live, log, final


@pytest.fixture(scope="module")
def offline(tiny_model, clip):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = transcribe(tiny_model, clip(name), DecodeOptions()).text
        return cache[name]

    return get


# --------------------------------------------------------------------- real model


@pytest.mark.parametrize("chunk_seconds,as_browser", [(0.3, False), (0.5, True), (1.0, False)])
def test_chunked_jfk_commits_offline_transcript(tiny_model, clip, offline, chunk_seconds, as_browser):
    live, log, final = stream_file(tiny_model, clip("jfk.wav"), chunk_seconds, as_browser=as_browser)
    reference = offline("jfk.wav")
    assert word_distance(final.committed, reference) <= 2, (final.committed, reference)
    assert final.tentative == "" and final.final
    # text was committed before the end, not only by finish()
    assert any(u.new_committed for u in log.updates[:-1])
    assert abs(final.audio_seconds - len(clip("jfk.wav")) / SR) < 0.01  # nothing dropped
    stats = live.stats()
    assert stats.decodes >= 3 and stats.first_token_ms_median is not None


def test_25s_speech_trims_buffer_and_prompts(tiny_model, clip, offline, transcripts):
    live, log, final = stream_file(tiny_model, clip("speech_25s.wav"), 1.0, min_new_seconds=2.0)
    reference, truth = offline("speech_25s.wav"), transcripts["speech_25s.wav"]
    # tiny.en hears the first 5 s as "But whenever today..." (offline too, given only 5 s):
    # LocalAgreement commits that early. So: close to offline (~10% of 75 words), and as
    # close to the true text as offline is, give or take 3 words.
    assert word_distance(final.committed, reference) <= 8, (final.committed, reference)
    assert word_distance(final.committed, truth) <= word_distance(reference, truth) + 3
    assert any(u.trimmed_seconds > 0 for u in log.updates[:-1]), "buffer was never trimmed"
    assert max(u.buffer_seconds for u in log.updates) < 25.0


def test_silence_adds_no_text(tiny_model):
    live = LiveTranscriber(tiny_model, DecodeOptions())
    rng = np.random.default_rng(0)
    chunks = [np.zeros(8000, np.float32)] * 10  # digital silence
    chunks += [(rng.standard_normal(8000) * 0.002).astype(np.float32) for _ in range(10)]  # hiss
    for c in chunks:
        live.add_audio(SR, c)
        for item in live.updates():
            assert not isinstance(item, TokenEvent), "a silent stream was decoded"
    final = drain(live.finish())
    assert final.committed == "" and final.tentative == ""
    assert live.stats().decodes == 0 and live.buffer_seconds <= 0.5


def test_pause_commits_and_silence_after_speech_adds_nothing(tiny_model, clip, offline):
    live = LiveTranscriber(tiny_model, DecodeOptions())
    log = CommitLog()
    audio = np.concatenate([clip("short_3s.wav"), np.zeros(5 * SR, np.float32)])
    for start in range(0, len(audio), SR):
        live.add_audio(SR, audio[start:start + SR])
        for item in live.updates():
            if isinstance(item, LiveUpdate):
                log.check(item)
    # the pause alone (no finish()) committed the whole sentence
    assert word_distance(live.committed_text, offline("short_3s.wav")) <= 1, live.committed_text
    assert live.tentative_text == ""
    committed = live.committed_text
    skipped_before = live.stats().skipped
    for _ in range(6):  # more silence: skipped without decoding, adds nothing
        live.add_audio(SR, np.zeros(SR, np.float32))
        for item in live.updates():
            assert not isinstance(item, TokenEvent)
    assert live.stats().skipped > skipped_before
    assert drain(live.finish()).committed == committed


def test_memory_bounded_over_ten_minutes(tiny_model, clip):
    """10 minutes of audio (JFK looped, with pauses), fed as fast as it decodes."""
    jfk = clip("jfk.wav")
    period = np.concatenate([jfk, np.zeros(109 * SR, np.float32)])  # 120 s
    live = LiveTranscriber(tiny_model, DecodeOptions(), min_new_seconds=5.0)
    rss = []
    max_buffer = 0.0
    process = psutil.Process()
    started = time.monotonic()
    for loop in range(5):
        for start in range(0, len(period), SR):
            live.add_audio(SR, period[start:start + SR])
            update = drain(live.updates())
            if update is not None:
                max_buffer = max(max_buffer, update.buffer_seconds)
        rss.append(process.memory_info().rss)
    final = drain(live.finish())
    assert final.audio_seconds == pytest.approx(600.0)
    assert max_buffer <= 30.0
    assert len(live._arrivals) < 100 and len(live._prev_words) < 100
    assert final.committed.lower().count("country") >= 8, final.committed  # 2 per loop
    growth = rss[-1] - rss[0]
    assert growth < 64 * 2**20, f"RSS grew {growth / 2**20:.0f} MiB over 8 minutes of audio"
    assert time.monotonic() - started < 240


# Real-time: audio is played by a thread while decodes run in another, so which
# hypotheses the agreement policy compares depends on scheduling on 2 busy cores; a rerun
# absorbs a slow scheduler, while the assertions keep their full strength.
@pytest.mark.flaky(reruns=2)
def test_background_worker_buffers_audio_during_decodes(tiny_model, clip, offline):
    """Chunks arrive in real time from another thread while decodes run: none is lost."""
    audio = clip("jfk.wav")
    worker = BackgroundTranscriber(LiveTranscriber(tiny_model, DecodeOptions()))
    seen_busy = 0
    n = SR // 2
    t0 = time.monotonic()
    for i, start in enumerate(range(0, len(audio), n)):
        delay = t0 + i * 0.5 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        seen_busy += worker.live.busy
        worker.feed(SR, audio[start:start + n])
    final = worker.finish(timeout=120)
    assert worker.error is None
    assert final is not None and final.final
    assert final.audio_seconds == pytest.approx(len(audio) / SR)
    assert seen_busy > 0  # chunks did arrive during decodes
    assert word_distance(final.committed, offline("jfk.wav")) <= 2, final.committed
    stats = worker.live.stats()
    print(f"\nreal time jfk: first token median {stats.first_token_ms_median:.0f} ms "
          f"p95 {stats.first_token_ms_p95:.0f} ms; speech->commit median {stats.commit_s_median} s")


# --------------------------------------------------------------------- scripted (no model)


def _result(*segments):
    """segments: (start, end, text) in buffer seconds."""
    segs = [Segment(s, e, " " + t, []) for s, e, t in segments]
    text = "".join(s.text for s in segs).strip()
    return DecodeResult(text=text, tokens=[], segments=segs, language="en", cache_mode="static",
                        beam_size=1, n_tokens=1, decode_seconds=0.0, encoder_ms=0.0,
                        tokens_per_second=0.0, mean_latency_ms=0.0, p95_latency_ms=0.0,
                        peak_self_cache_bytes=0, peak_cross_cache_bytes=0, peak_rss_bytes=0)


@pytest.fixture
def scripted(monkeypatch):
    """Replace stream_transcribe with a script of hypotheses; record each call's input."""
    calls = []

    def install(script):
        def fake(model, audio, options):
            calls.append((len(audio) / SR, options.prompt))
            result = script[min(len(calls) - 1, len(script) - 1)]
            yield TokenEvent(step=0, window=0, token_id=1, text="", transcript=result.text,
                             latency_ms=1.0, cache_tokens=4, cache_capacity=448,
                             self_cache_bytes=1, self_cache_reserved_bytes=1, cross_cache_bytes=1,
                             rss_bytes=1, cache_mode="static", beam_size=1)
            yield result

        monkeypatch.setattr(live_mod, "stream_transcribe", fake)
        return calls

    return install


def _voice(seconds):
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def test_local_agreement_commits_common_prefix_only(scripted):
    calls = scripted([
        _result((0, 1, "hello there")),
        _result((0, 2, "hello there general")),
        _result((0, 3, "Hello, there! General Kenobi")),  # punctuation and case don't matter
        _result((0, 4, "hello there general kenobi you are")),
    ])
    live = LiveTranscriber(None, min_new_seconds=1.0)
    log = CommitLog()
    for _ in range(4):
        live.add_audio(SR, _voice(1.0))
        log.check(drain(live.updates()))
    assert [u.new_committed for u in log.updates] == ["", "hello there", "General", "kenobi"]
    assert log.updates[-1].tentative == "you are"
    assert live.committed_text == "hello there General kenobi"
    assert calls[0][1] is None  # nothing committed before the buffer: no prompt


def test_respelt_committed_word_does_not_block_agreement(scripted):
    scripted([
        _result((0, 1, "ask not what")),
        _result((0, 2, "ask not what your")),
        _result((0, 3, "as not what your country can")),  # an earlier word re-spelt
        _result((0, 4, "as not what your country can do")),
    ])
    live = LiveTranscriber(None)
    for _ in range(4):
        live.add_audio(SR, _voice(1.0))
        drain(live.updates())
    assert live.committed_text == "ask not what your country can"


def test_trim_at_committed_segment_and_prompt_with_committed_text(scripted):
    calls = scripted([
        _result((0, 1.5, "One sentence."), (1.5, 2.0, "Two")),
        _result((0, 1.5, "One sentence."), (1.5, 3.0, "Two words")),
        _result((0, 1.5, "Two words here")),  # after the cut at 1.5 s
        _result((0, 2.5, "Two words here now")),
    ])
    live = LiveTranscriber(None)
    updates = []
    for _ in range(4):
        live.add_audio(SR, _voice(1.0) if len(updates) < 3 else _voice(1.0))
        updates.append(drain(live.updates()))
    assert updates[1].new_committed == "One sentence. Two"
    assert updates[1].trimmed_seconds == pytest.approx(1.5)
    assert calls[2] == (pytest.approx(1.5), "One sentence.")  # buffer 3.0 - 1.5 + 0 new, prompt
    assert live.committed_text == "One sentence. Two words here"


def test_hypothesis_that_drops_committed_words_is_ignored(scripted):
    scripted([
        _result((0, 1, "ask what you")),
        _result((0, 2, "ask what you can do")),
        _result((0, 3, "country.")),  # the decoder jumped ahead and lost what it agreed on
    ])
    live = LiveTranscriber(None)
    for _ in range(3):
        live.add_audio(SR, _voice(1.0))
        update = drain(live.updates())
    assert "ignored" in update.reason and update.tentative == "can do"
    final = drain(live.finish())
    assert final.committed == "ask what you can do country."


def test_one_misheard_committed_word_does_not_stall_the_session(scripted):
    """Seen through the browser: "But" committed from the first second of audio, then every
    later decode began "The weather today ..." and was ignored as disagreeing, so nothing
    more was committed for 20 s. A re-spelt single word is no disagreement; and a decoder
    that keeps disagreeing is heard after MAX_REJECTIONS decodes."""
    scripted([
        _result((0, 1, "But when")),
        _result((0, 2, "But whenever today")),
        _result((0, 3, "the weather today is cool")),
        _result((0, 4, "the weather today is cool and cloudy")),
    ])
    live = LiveTranscriber(None)
    for _ in range(4):
        live.add_audio(SR, _voice(1.0))
        drain(live.updates())
    assert live.committed_text == "But weather today is cool"


def test_a_decoder_that_keeps_disagreeing_is_heard_in_the_end(scripted):
    scripted([
        _result((0, 1, "ask what you")),
        _result((0, 2, "ask what you can do")),
        _result((0, 3, "country.")),  # lost what it agreed on: ignored...
        _result((0, 4, "country. And so")),  # ...twice...
        _result((0, 5, "country. And so on")),  # ...then it votes again
        _result((0, 6, "country. And so on and")),
    ])
    live = LiveTranscriber(None)
    reasons = []
    for _ in range(6):
        live.add_audio(SR, _voice(1.0))
        reasons.append(drain(live.updates()).reason)
    assert [("ignored" in r) for r in reasons] == [False, False, True, True, False, False]
    assert live_mod.MAX_REJECTIONS == 2
    assert live.committed_text.startswith("ask what you") and live.committed_text.endswith("And so on")


def test_buffer_is_cut_in_the_pause_after_a_committed_sentence(scripted):
    """tiny.en often returns one segment for many seconds of speech, so there is no segment
    boundary to cut at; the cut goes in the pause after a committed sentence end, once the
    buffer is longer than sentence_cut_seconds, and nothing is committed twice after it."""
    calls = scripted([_result((0, 30, "Aaaa bbbb cccc. Dddd eeee"))] * 5
                     + [_result((0, 30, "Dddd eeee ffff"))] * 2)
    live = LiveTranscriber(None, sentence_cut_seconds=5.0)
    pause = np.zeros(SR // 2, np.float32)  # 3.0-3.5 s
    chunks = [_voice(1.0)] * 3 + [np.concatenate([pause, _voice(0.5)])] + [_voice(1.0)] * 3
    trims = []
    for chunk in chunks:
        live.add_audio(SR, chunk)
        update = drain(live.updates())
        trims.append(round(update.trimmed_seconds, 2))
    cut = [t for t in trims if t]
    assert len(cut) == 1 and 3.0 <= cut[0] <= 3.5, trims  # in the pause, not in a word
    assert trims.index(cut[0]) == 4  # the first decode with a buffer over 5 s
    assert calls[-1] == (pytest.approx(7.0 - cut[0], abs=0.01), "Aaaa bbbb cccc.")  # the rest, prompted
    assert live.committed_text == "Aaaa bbbb cccc. Dddd eeee ffff"


def test_words_whose_audio_a_late_cut_removed_are_kept(scripted):
    """A segment end timestamp placed after the next words began: the cut removes their
    audio, and the next decode no longer hears them (seen: "... can do for you country."
    for "... can do for you, ask what you can do for your country."). The words the
    previous decode heard there are committed rather than lost."""
    scripted([
        _result((0, 2, "One two.")),
        _result((0, 2, "One two."), (2, 3, "three four")),  # cut at 2 s; "three four" tentative
        _result((0, 1, "five.")),  # after the cut: "three four" is gone from the audio
    ])
    live = LiveTranscriber(None)
    reasons = []
    for _ in range(3):
        live.add_audio(SR, _voice(1.0))
        reasons.append(drain(live.updates()).reason)
    assert "kept" in reasons[2]
    final = drain(live.finish())
    assert final.committed == "One two. three four five."


def test_forced_trim_keeps_buffer_bounded(scripted):
    # Hypotheses never agree (a new word each time): the buffer must still be cut.
    script = [_result((0, 1 + i, " ".join(f"w{i}x{j}" for j in range(3)))) for i in range(40)]
    scripted(script)
    live = LiveTranscriber(None, max_buffer_seconds=10.0)
    for _ in range(40):
        live.add_audio(SR, _voice(1.0))
        drain(live.updates())
        assert live.buffer_seconds <= 11.0
    assert live.committed_text  # forced commits happened


def test_add_audio_is_thread_safe_and_idle_clock(scripted):
    scripted([_result((0, 1, "hi"))])
    now = [100.0]
    live = LiveTranscriber(None, clock=lambda: now[0])
    threads = [threading.Thread(target=lambda: [live.add_audio(48000, np.zeros(4800, np.int16))
                                                for _ in range(50)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert live.audio_seconds == pytest.approx(4 * 50 * 0.1)
    now[0] = 160.0
    assert live.idle_seconds() == pytest.approx(60.0)
    live.add_audio(SR, np.zeros(10, np.float32))
    assert live.idle_seconds() == 0.0


def test_audio_lost_when_received_audio_falls_behind_the_clock():
    """Chunks late but complete: nothing lost; a missing chunk: its length shows as lost."""
    now = [100.0]
    live = LiveTranscriber(None, DecodeOptions(), clock=lambda: now[0])
    chunk = np.zeros(SR // 2, dtype=np.float32)
    for t in (0.0, 0.5, 1.2, 1.3, 2.0):  # jittery, bunched: all 5 chunks there
        now[0] = 100.0 + t
        live.add_samples(chunk)
    assert live.stats().lost_seconds == 0.0
    now[0] = 100.0 + 4.0  # 2.0 s of wall clock, one 0.5 s chunk: 1.5 s never arrived
    live.add_samples(chunk)
    assert live.stats().lost_seconds == pytest.approx(1.5)
    now[0] = 100.0 + 6.0  # nothing more arrives: the gap grows with the clock...
    assert live.stats().lost_seconds == pytest.approx(3.0)
    live.finished = True  # ...until the session is finished
    assert live.stats().lost_seconds == pytest.approx(1.5)


def test_decode_thread_runs_at_lower_priority():
    import os

    if not hasattr(os, "setpriority"):
        pytest.skip("no per-thread priorities here")
    seen = {}

    def probe():
        live_mod._lower_thread_priority()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert seen["nice"] >= min(19, live_mod.DECODE_NICENESS)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) < seen["nice"]  # only that thread


def test_every_streamed_chunk_reaches_the_session(tmp_path):
    """Gradio keeps only the latest chunk of a stream (`event.data = body`); the Live tab's
    tap must see every one, in order, and read only files from Gradio's upload folder."""
    import types
    from pathlib import Path

    import soundfile as sf
    from gradio import queueing
    from gradio import utils as gr_utils

    from whisper_demo.ui import live_tab

    tab = live_tab.LiveTab(store=None, defaults=None)
    assert live_tab._install_chunk_tap(), "this Gradio's Event changed: the tap cannot see chunks"
    fn = types.SimpleNamespace(fn=tab.chunk, concurrency_id="live", connection="stream")
    event = queueing.Event("sess", fn, request=None, username=None)
    upload = Path(gr_utils.get_upload_folder()) / "test_live_tap"
    upload.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(5):
        path = upload / f"chunk{i}.wav"
        sf.write(path, np.full(4800, (i + 1) * 1000, dtype=np.int16), 48000, subtype="PCM_16")
        paths.append(path)
    outside = tmp_path / "outside.wav"
    sf.write(outside, np.zeros(4800, dtype=np.int16), 48000, subtype="PCM_16")
    for path in paths[:3] + [outside] + paths[3:]:  # back to back: Gradio overwrites
        event.data = types.SimpleNamespace(data=[{"path": str(path)}, True, "static"])
    assert event.data.data[0]["path"] == str(paths[-1])  # Gradio's own view is unchanged

    fed = []
    session = types.SimpleNamespace(worker=types.SimpleNamespace(
        feed=lambda sr, data: fed.append((sr, int(np.asarray(data).reshape(-1)[0])))))
    assert tab._feed_inbox("sess", session) == 5
    assert fed == [(48000, (i + 1) * 1000) for i in range(5)]  # all, in order, not outside.wav
    assert tab._feed_inbox("sess", session) == 0


def test_idle_live_sessions_are_closed_by_the_reaper(tiny_model, clip):
    """A browser tab that stops sending chunks (closed, asleep) does not keep its worker."""
    from whisper_demo.ui.live_tab import LiveSession, reap_idle

    idle = LiveSession(tiny_model, DecodeOptions())
    busy = LiveSession(tiny_model, DecodeOptions())
    busy.worker.feed(SR, clip("short_3s.wav")[: SR // 2])
    idle.live.last_activity -= 3600  # nothing for an hour (it was never fed, so no decode resets it)
    try:
        assert reap_idle(timeout_s=600) == 1
        idle.worker.done.wait(timeout=30)
        assert idle.worker.done.is_set() and not idle.active
        assert busy.active and busy.worker._thread.is_alive()
    finally:
        busy.close()
        idle.close()


def test_finish_keeps_the_fuller_hypothesis_when_the_last_decode_skips_words():
    """tiny.en sometimes skips a repeated phrase in its last decode ("... for you country.");
    the finish must not commit that over the previous decode's fuller words, and must not keep
    a previous tail that ends differently (e.g. a hallucinated "Thank you.")."""
    from whisper_demo.live import Word, _skips_words_of

    def words(text):
        return [Word(t, live_mod.normalize(t), 0.0, 0) for t in text.split()]

    assert _skips_words_of(words("country."), words("ask what you can do for your country."))
    assert not _skips_words_of(words("for your country."), words("for your country. Thank you."))
    assert not _skips_words_of(words("do for your country."), words("do for your country."))


def test_a_redecode_that_repeats_text_committed_before_the_cut_is_not_committed_twice():
    """After a cut, the decoder may start by saying again what was committed just before it
    (seen through the browser: "But whenever today is cool and cloudy in the morning. The
    weather today is cool and cloudy. In the morning ..."). That repeat is skipped, even
    re-spelt; a hypothesis that merely shares a word with the committed text is not cut."""
    from whisper_demo.live import _repeated_tail

    def norms(text):
        return [live_mod.normalize(w) for w in text.split()]

    committed = norms("But whenever today is cool and cloudy in the morning.")
    assert _repeated_tail(committed, norms("The weather today is cool and cloudy. In the morning there was")) == 10
    assert _repeated_tail(norms("my fellow Americans, ask not"), norms("ask not what your country")) == 2
    assert _repeated_tail(norms("can do for your country."), norms("Thank you.")) == 0
    assert _repeated_tail(norms("we walked to the"), norms("the river was calm")) == 0  # one word: kept
    assert _repeated_tail([], norms("anything at all")) == 0
