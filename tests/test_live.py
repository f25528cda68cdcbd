"""Live sessions: real speech through the real tiny.en model and Silero VAD, committed text
that only grows, silence that is never decoded, bounded memory; and the session's own
bookkeeping (prompt, cuts, clocks) with a scripted decoder, deterministically."""

import re
import threading
import time

import numpy as np
import pytest

from whisper_demo.decode import transcribe
from whisper_demo.events import DecodeOptions, DecodeResult, Segment, TokenEvent
from whisper_demo.live import (LiveConfig, LiveSession, LiveUpdate, LiveWorker, SessionRegistry,
                               drain, model_session)
from whisper_demo.live import worker as worker_mod
from whisper_demo.live.decoder import looped
from whisper_demo.text import word_edits, words
from whisper_demo.timing import Word
from whisper_demo.ui.live_view import stats_html

SR = 16000


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


def stream_file(model, samples, chunk_seconds, *, as_browser=False, config=None):
    """Feed `samples` chunk by chunk, draining the updates after each (no clock in play)."""
    session = model_session(model, DecodeOptions(), config)
    log = CommitLog()
    n = int(chunk_seconds * SR)
    for start in range(0, len(samples), n):
        chunk = samples[start:start + n]
        if as_browser:  # what gr.Audio(streaming=True) sends: 48 kHz int16
            import soxr
            session.add_audio(48000, (soxr.resample(chunk, SR, 48000) * 32767).astype(np.int16))
        else:
            session.add_audio(SR, chunk)
        for item in session.updates():
            if isinstance(item, LiveUpdate):
                log.check(item)
    final = drain(session.finish())
    log.check(final)
    return session, log, final


@pytest.fixture(scope="module")
def offline(tiny_model, clip):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = transcribe(tiny_model, clip(name), DecodeOptions()).text
        return cache[name]

    return get


def repeated_4grams(text: str) -> int:
    from whisper_demo.text import words
    w = words(text)
    grams = [tuple(w[i:i + 4]) for i in range(len(w) - 3)]
    return len(grams) - len(set(grams))


# --------------------------------------------------------------------- real model


@pytest.mark.parametrize("chunk_seconds,as_browser", [(0.1, True), (0.3, False), (1.0, False)])
def test_chunked_jfk_commits_the_offline_transcript(tiny_model, clip, offline, chunk_seconds, as_browser):
    session, log, final = stream_file(tiny_model, clip("jfk.wav"), chunk_seconds, as_browser=as_browser)
    reference = offline("jfk.wav")
    assert word_edits(final.committed, reference) <= 1, (final.committed, reference)
    # a sentence the page shows starts with a capital, though AlignAtt's decoder, not given
    # the period before it, may write it in lower case ("Americans. ask not")
    assert not re.search(r"[.?!] [a-z]", final.committed), final.committed
    assert final.tentative == "" and final.final
    assert any(u.new_committed for u in log.updates[:-1]), "nothing committed before the end"
    stats = session.stats()
    assert stats.audio_seconds == pytest.approx(len(clip("jfk.wav")) / SR, abs=0.01)
    assert stats.dropped_seconds == 0.0
    assert stats.decodes >= 3


def test_the_same_stream_always_gives_the_same_text(tiny_model, clip):
    audio = np.concatenate([clip("short_3s.wav"), np.zeros(SR // 2, np.float32), clip("jfk.wav")])
    texts = {stream_file(tiny_model, audio, 0.1)[2].committed for _ in range(2)}
    assert len(texts) == 1, texts


def test_25s_of_speech_is_cut_and_prompted_and_stays_close_to_offline(tiny_model, clip, offline, transcripts):
    session, log, final = stream_file(tiny_model, clip("speech_25s.wav"), 0.5)
    reference, truth = offline("speech_25s.wav"), transcripts["speech_25s.wav"]
    # Close to the offline transcript of the same model: at most 6 more of the 74 words
    # wrong (measured: 10 against offline's 5). From its first seconds alone tiny.en hears
    # the opening "The weather" as "But whenever", and live decoding must start from
    # those seconds; "the old bridge to watch the boats go by", heard a few seconds at a
    # time, comes out garbled where the whole clip does not. The benchmark measures the
    # gap on a long stream (README).
    live_errors, offline_errors = word_edits(final.committed, truth), word_edits(reference, truth)
    assert live_errors <= offline_errors + 6, (final.committed, reference, live_errors, offline_errors)
    assert any(u.trimmed_seconds > 0 for u in log.updates[:-1]), "the buffer was never cut"
    assert max(u.stats.buffer_seconds for u in log.updates) < 25.0
    assert repeated_4grams(final.committed) == 0, final.committed


@pytest.mark.process
def test_loading_the_voice_detector_leaves_torch_on_all_its_threads():
    # silero_vad's import sets torch to one thread for the whole process; in a fresh
    # process (the import happens once), loading it must leave the decoder its cores.
    import subprocess
    import sys

    code = ("import torch; torch.set_num_threads(2); "
            "from whisper_demo.live.vad import VoiceDetector; VoiceDetector(); "
            "print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "2"


def test_silence_and_hiss_are_never_decoded(tiny_model):
    session = model_session(tiny_model, DecodeOptions())
    rng = np.random.default_rng(0)
    chunks = [np.zeros(8000, np.float32)] * 10  # digital silence
    chunks += [(rng.standard_normal(8000) * 0.01).astype(np.float32) for _ in range(10)]  # hiss
    for c in chunks:
        session.add_audio(SR, c)
        for item in session.updates():
            assert not isinstance(item, TokenEvent), "a stream without speech was decoded"
    final = drain(session.finish())
    assert final.committed == "" and final.tentative == ""
    assert session.stats().decodes == 0 and session.buffer_seconds <= 0.5


def test_a_pause_commits_the_utterance_after_one_decode(tiny_model, clip, offline):
    session = model_session(tiny_model, DecodeOptions())
    log = CommitLog()
    audio = np.concatenate([clip("short_3s.wav"), np.zeros(3 * SR, np.float32)])
    for start in range(0, len(audio), SR // 10):
        session.add_audio(SR, audio[start:start + SR // 10])
        for item in session.updates():
            if isinstance(item, LiveUpdate):
                log.check(item)
    # the pause alone (no finish()) committed the whole sentence, by one decode
    assert word_edits(session.committed_text, offline("short_3s.wav")) <= 1, session.committed_text
    assert any(u.reason == "end of speech" and u.new_committed for u in log.updates)
    assert session.tentative_text == ""
    decodes, committed = session.stats().decodes, session.committed_text
    for _ in range(30):  # more silence: not decoded, adds nothing
        session.add_audio(SR, np.zeros(SR // 10, np.float32))
        for item in session.updates():
            assert not isinstance(item, TokenEvent)
    assert session.stats().decodes == decodes
    assert drain(session.finish()).committed == committed


def test_memory_stays_bounded_over_five_minutes_of_speech(tiny_model, clip):
    """Five minutes of real speech (three clips looped with short pauses), fed as fast as
    it decodes. Keeping the audio would take 19 MiB (float32, 15 MiB after the first loop).
    The session holds at most one window of it: its numpy and Python memory (what
    tracemalloc sees; numpy reports its buffers to it) grows by less than 3 MiB after the
    first loop. (RSS is no measure here: tracemalloc's own records grow it; without them
    it grew 14 MiB, allocator noise included. Torch's cache tensors are freed after every
    decode, which tests/test_claims.py checks with weak references.)"""
    import tracemalloc

    pause = np.zeros(SR // 2, np.float32)
    period = np.concatenate([clip("speech_25s.wav"), pause, clip("jfk.wav"), pause, clip("short_3s.wav"), pause])
    loops = int(np.ceil(300 * SR / len(period)))
    session = model_session(tiny_model, DecodeOptions(), LiveConfig(min_new_seconds=3.0))
    traced, held = [], []
    tracemalloc.start()
    try:
        for loop in range(loops):
            for start in range(0, len(period), SR):
                session.add_audio(SR, period[start:start + SR])
                drain(session.updates())
                held.append((session.buffer_seconds, len(session._arrivals), len(session.vad._voiced)))
            traced.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    final = drain(session.finish())
    assert final.stats.audio_seconds == pytest.approx(loops * len(period) / SR)
    assert max(b for b, _, _ in held) <= 29.5
    assert max(a for _, a, _ in held) <= 30  # one arrival mark per 1 s chunk held
    assert max(v for _, _, v in held) <= 29.5 * SR / 512 + 1  # VAD decisions for the buffer only
    assert final.committed.lower().count("country") >= 2 * loops - 2, final.committed
    # from the end of the first loop: the allocator and the caches have warmed up
    assert traced[-1] - traced[0] < 3 * 2**20, f"Python/numpy memory grew {(traced[-1] - traced[0]) / 2**20:.1f} MiB"


@pytest.mark.realtime
def test_a_worker_fed_in_real_time_loses_no_audio(tiny_model, clip, offline):
    """Chunks arrive in real time from another thread while decodes run. Whatever the
    scheduling: nothing is lost, committed text only grows, the speech's last words are
    committed as offline writes them. Which buffers the decodes saw depends on the machine's
    speed, and a session's first words depend on them (a slow CI machine wrote "And so am I
    fellow Americans"): the whole text is asserted with a deterministic feed
    (test_chunked_jfk_commits_the_offline_transcript), its accuracy measured by live_eval."""
    audio = clip("jfk.wav")
    worker = LiveWorker(model_session(tiny_model, DecodeOptions()))
    log = CommitLog()
    seen = []
    n = SR // 10
    t0 = time.monotonic()
    for i, start in enumerate(range(0, len(audio), n)):
        delay = t0 + i * 0.1 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        worker.feed(SR, audio[start:start + n])
        view = worker.view()
        if view.update is not None and view.update not in seen:
            seen.append(view.update)
            log.check(view.update)
    final = worker.finish(timeout=120)
    assert worker.view().error is None
    assert final is not None and final.final
    log.check(final)
    assert final.stats.audio_seconds == pytest.approx(len(audio) / SR)
    assert final.stats.dropped_seconds == 0.0
    # the audio's end reached the model: the last sentence, decoded once the stream ended
    assert words(final.committed)[-8:] == words(offline("jfk.wav"))[-8:], final.committed
    stats = final.stats
    print(f"\nreal time jfk: first token median {stats.first_token_ms_median:.0f} ms, "
          f"speech->commit median {stats.commit_s_median} s")


# --------------------------------------------------------------------- scripted decoder


class LoudVoice:
    """A stand-in voice detector: a 32 ms frame is voiced when its peak passes 0.1."""

    FRAME = 512

    def __init__(self):
        self.flags, self.first, self.last_voice_end, self._remainder = [], 0, -1, np.zeros(0, np.float32)

    def add(self, samples):
        data = np.concatenate([self._remainder, samples])
        n = data.size // self.FRAME
        self._remainder = data[n * self.FRAME:]
        for i in range(n):
            voiced = bool(np.abs(data[i * self.FRAME:(i + 1) * self.FRAME]).max() > 0.1)
            self.flags.append(voiced)
            if voiced:
                self.last_voice_end = (self.first + len(self.flags)) * self.FRAME

    def voiced_seconds(self, start, end=None):
        lo = max(0, start // self.FRAME - self.first)
        return sum(self.flags[lo:]) * self.FRAME / SR

    def forget_before(self, sample):
        drop = min(len(self.flags), max(0, sample // self.FRAME - self.first))
        del self.flags[:drop]
        self.first += drop

    def pause_after(self, sample, within, min_frames=2):
        return None


class Script:
    """A decoder that answers each call with the next scripted list of (word, start, end)
    (times relative to the buffer), and records what it was given."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []  # (buffer seconds, prompt)
        self.prefixes = []  # the committed words each call was given as its start

    def __call__(self, audio, prompt, draft=None, prefix=None):
        self.calls.append((audio.size / SR, prompt))
        self.prefixes.append(prefix.words if prefix else ())
        words = self.answers.pop(0) if self.answers else []
        yield TokenEvent(step=0, window=0, token_id=1, text="", transcript=" ".join(w for w, _, _ in words),
                         latency_ms=1.0, cache_tokens=1, cache_capacity=448, self_cache_bytes=0,
                         self_cache_reserved_bytes=0, cross_cache_bytes=0, rss_bytes=0,
                         cache_mode="static", beam_size=1)
        yield scripted_result(words)


def token_event(step: int, transcript: str) -> TokenEvent:
    return TokenEvent(step=step, window=0, token_id=1, text="", transcript=transcript,
                      latency_ms=1.0, cache_tokens=1, cache_capacity=448, self_cache_bytes=0,
                      self_cache_reserved_bytes=0, cross_cache_bytes=0, rss_bytes=0,
                      cache_mode="static", beam_size=1)


def scripted_result(words) -> DecodeResult:
    """A decode's result with these (word, start, end) in one segment."""
    segment = Segment(0.0, words[-1][2] if words else 0.0, " ".join(w for w, _, _ in words), [],
                      [Word(" " + w, a, b) for w, a, b in words])
    return DecodeResult(text=segment.text, tokens=[], segments=[segment] if words else [],
                        language="en", cache_mode="static", beam_size=1, n_tokens=1,
                        decode_seconds=0.001, encoder_ms=5.0, tokens_per_second=1.0,
                        mean_latency_ms=1.0, p95_latency_ms=1.0, peak_self_cache_bytes=0,
                        peak_cross_cache_bytes=0, peak_rss_bytes=0)


def loud(seconds):
    return np.full(int(seconds * SR), 0.5, np.float32)


def quiet(seconds):
    return np.zeros(int(seconds * SR), np.float32)


# The scripted decoders give no attention: they script the agreement policy's sessions
# (tests/test_live_alignatt.py has AlignAtt's).
AGREEMENT = LiveConfig(policy="agreement")
# A buffer of a few 1 s decodes is cut once it holds two committed sentences.
CUT_AFTER_TWO_SENTENCES = LiveConfig(policy="agreement", min_new_seconds=0.5, cut_after_seconds=1.2,
                                     max_buffer_seconds=25.0, min_vote_seconds=0.0, right_context_seconds=0.3)


def commits_second_by_second(session, seconds):
    """Feed `seconds` of loud audio 1 s at a time; what each second committed."""
    committed = []
    for _ in range(seconds):
        session.add_samples(loud(1.0))
        committed.append(drain(session.updates()).new_committed)
    return committed


def test_scripted_session_commits_agreement_prompts_and_cuts():
    late = [("It", 0.1, 0.4), ("is", 0.4, 0.6), ("late.", 0.6, 1.0)]
    script = Script(
        late[:2], late,
        late + [("We", 1.4, 1.6), ("go.", 1.6, 2.0)],
        late + [("We", 1.4, 1.6), ("go.", 1.6, 2.0), ("Now", 3.2, 3.5)],
    )
    session = LiveSession(script, CUT_AFTER_TWO_SENTENCES, vad=LoudVoice())
    assert commits_second_by_second(session, 4) == ["", "It is", "late.", "We go."]
    # past cut_after_seconds with two committed sentences: cut after the first ("late.",
    # 1.0 s); the second stays in the buffer as context
    assert session._offset == SR
    session.add_samples(loud(1.0))
    drain(session.updates())
    assert script.calls[-1] == (4.0, "It is late.")  # the prompt: committed text before the buffer
    assert script.calls[0][1] is None


def test_each_decode_is_given_the_words_committed_from_its_buffer():
    # The words committed from the buffer are the next decode's given start (its prefix),
    # so the decoder goes on after them instead of hearing them again; they come back at
    # the head of its hypothesis and are not committed again. A cut takes the words before
    # it out of the prefix: they become the prompt.
    late = [("It", 0.1, 0.4), ("is", 0.4, 0.6), ("late.", 0.6, 1.0)]
    go = [("We", 1.4, 1.6), ("go.", 1.6, 2.0)]
    script = Script(late[:2], late, late + go, late + go + [("Now", 3.2, 3.5)],
                    [("We", 0.4, 0.6), ("go.", 0.6, 1.0), ("Now", 2.2, 2.5), ("then.", 2.5, 2.9)])
    session = LiveSession(script, CUT_AFTER_TWO_SENTENCES, vad=LoudVoice())
    committed = commits_second_by_second(session, 5)
    assert script.prefixes == [(), (), ("It", "is"), ("It", "is", "late."), ("We", "go.")]
    assert committed == ["", "It is", "late.", "We go.", "Now"]
    assert session.committed_text == "It is late. We go. Now"  # each word once
    assert script.calls[-1][1] == "It is late."  # before the cut: the prompt


class LoopsWhenGivenWords(Script):
    """A scripted decoder that, given committed words to start from, takes up their last
    word and repeats it to its token limit ("Montreal. Uh. Uh." and "Uh." for ever, as
    tiny.en did), and without them answers from its script."""

    def __call__(self, audio, prompt, draft=None, prefix=None):
        if prefix is None:
            yield from super().__call__(audio, prompt, draft, prefix)
            return
        self.calls.append((audio.size / SR, prompt))
        self.prefixes.append(prefix.words)
        words = [(w, 0.1 * i, 0.1 * i + 0.1) for i, w in enumerate(prefix.words)]
        words += [(prefix.words[-1], 1.0 + 0.01 * i, 1.0 + 0.01 * i) for i in range(30)]
        yield token_event(0, " ".join(w for w, _, _ in words))
        yield scripted_result(words)


def test_a_buffer_whose_decode_loops_on_its_given_words_is_decoded_without_them():
    said = [("Montreal.", 0.1, 0.5), ("Uh.", 0.6, 0.8), ("um,", 1.6, 1.8), ("forced", 2.4, 2.7),
            ("aligner.", 2.7, 3.2)]
    decoder = LoopsWhenGivenWords(said[:2], said[:3], said[:4], said, said)
    config = LiveConfig(policy="agreement", min_new_seconds=1.0, min_vote_seconds=0.0, right_context_seconds=0.0)
    session = LiveSession(decoder, config, vad=LoudVoice())
    reasons = []
    for _ in range(6):
        session.add_samples(loud(1.0))
        update = drain(session.updates())
        reasons.append(update.reason)
    # the second decode commits "Montreal. Uh."; given them, the third loops and gets no
    # vote; from then on the buffer is decoded without its committed words, and goes on
    assert decoder.prefixes[:3] == [(), (), ("Montreal.", "Uh.")]
    assert "decoded without the words committed from it" in reasons[2]
    assert decoder.prefixes[3:] == [()] * (len(decoder.prefixes) - 3)
    assert session.committed_text == "Montreal. Uh. um, forced aligner."
    assert session.stats().loops == 1


def test_the_decode_that_commits_an_utterance_runs_as_soon_as_the_pause_is_long_enough():
    # Re-decodes every 1 s of new audio; the speaker stops at ~1.2 s. The decode that
    # commits the utterance (end of speech) runs once the pause reaches pause_seconds,
    # at the first chunk past 1.2 + 0.5 s, not at the next 1 s mark (2.2 s).
    words = [("Hello", 0.1, 0.5), ("there.", 0.6, 1.1)]
    script = Script(words, words, words)
    config = LiveConfig(policy="agreement", min_new_seconds=1.0, pause_seconds=0.5, min_vote_seconds=0.0)
    session = LiveSession(script, config, vad=LoudVoice())
    session.add_samples(loud(1.2))
    assert drain(session.updates()).new_committed == ""  # one hypothesis: nothing agreed yet
    commits = {}
    for k in range(1, 31):  # 3 s of silence in 0.1 s chunks
        session.add_samples(quiet(0.1))
        update = drain(session.updates())
        if update is not None and update.decoded:
            commits[round(1.2 + 0.1 * k, 1)] = (update.new_committed, update.reason)
    voice_end = session.vad.last_voice_end / SR  # the end of the last voiced 32 ms frame
    first_chunk_past_pause = round(np.ceil((voice_end + 0.5) * 10) / 10, 1)
    assert commits == {first_chunk_past_pause: ("Hello there.", "end of speech")}
    assert [seconds for seconds, _ in script.calls] == [1.2, first_chunk_past_pause]


def test_a_looping_decoder_is_not_believed():
    script = Script(*[[("aaaa" * 30, 0.1, 1.0)]] * 3)
    session = LiveSession(script, LiveConfig(policy="agreement"), vad=LoudVoice())
    for _ in range(3):
        session.add_samples(loud(0.6))
        update = drain(session.updates())
    assert update.committed == "" and "looped" in update.reason


class LoopsWhenPrompted(Script):
    """A scripted decoder that, given a prompt, repeats it until its token limit (as the
    real decoder's loops end, decoder.py), and without one answers from its script."""

    TOKEN_LIMIT = 30

    def __init__(self, *answers, then_loops_unprompted: bool = False):
        super().__init__(*answers)
        self.then_loops_unprompted = then_loops_unprompted  # once the script is spent

    def __call__(self, audio, prompt, draft=None, prefix=None):
        if prompt is None and (self.answers or not self.then_loops_unprompted):
            yield from super().__call__(audio, prompt, draft, prefix)
            return
        self.calls.append((audio.size / SR, prompt))
        for step in range(self.TOKEN_LIMIT):
            yield token_event(step, " Hello there." * (step + 1))
        yield scripted_result([(word, 0.1 * i, 0.1 * i + 0.1) for i, word in
                               enumerate(["Hello", "there."] * self.TOKEN_LIMIT)])


def test_a_decode_that_loops_gets_no_vote():
    hello = [("Hello", 0.1, 0.5), ("there.", 0.6, 1.1)]
    decoder = LoopsWhenPrompted(hello, hello)
    config = LiveConfig(policy="agreement", min_new_seconds=1.0, pause_seconds=0.5, long_pause_seconds=1.0,
                        lead_in_seconds=0.3, min_vote_seconds=0.0)
    session = LiveSession(decoder, config, vad=LoudVoice())
    updates = []
    for audio in [loud(1.2)] + [quiet(0.1)] * 25 + [loud(1.2)] + [quiet(0.1)] * 6:
        session.add_samples(audio)
        update = drain(session.updates())
        if update is not None and update.decoded:
            updates.append(update)
    # The second utterance's buffer starts after the first was cut (a long pause), so it
    # is prompted with it, and the scripted decoder loops.
    assert [prompt for _, prompt in decoder.calls] == [None, None, "Hello there.", "Hello there."]
    assert session.committed_text == "Hello there." and session.stats().loops == 2
    assert [u.reason for u in updates[-2:]] == ["decoder looped; hypothesis ignored"] * 2


class RunOfFillers(Script):
    """A decoder whose text repeats itself on the way ("Montreal, uh, uh, uh, ...": what
    tiny.en made of a speaker's run of fillers) and then goes on with the speech, so the
    whole text passes the loop test although the text so far failed it."""

    WORDS = [("Montreal,", 0.1, 0.5)] + [("uh,", 0.5 + 0.2 * i, 0.7 + 0.2 * i) for i in range(12)] + [
        (w, 3.0 + 0.3 * i, 3.3 + 0.3 * i) for i, w in enumerate(
            "forced aligner. And so my fellow Americans, ask not what your country can do for you.".split())]

    def __call__(self, audio, prompt, draft=None, prefix=None):
        self.calls.append((audio.size / SR, prompt))
        for step in range(len(self.WORDS)):
            yield token_event(step, " ".join(w for w, _, _ in self.WORDS[:step + 1]))
        yield scripted_result(self.WORDS)


def test_a_decode_judged_by_its_whole_text_not_the_text_so_far():
    # Stopping a decode as soon as its text so far looked like a loop left a buffer of
    # real speech with no vote until its audio was dropped (20 s of a 57 s recording).
    decoder = RunOfFillers()
    partial = " ".join(w for w, _, _ in RunOfFillers.WORDS[:13])  # "Montreal," and twelve "uh,"
    assert looped(partial) and not looped(scripted_result(RunOfFillers.WORDS).text)  # the premise
    config = LiveConfig(policy="agreement", min_new_seconds=1.0, min_vote_seconds=0.0, right_context_seconds=0.0)
    session = LiveSession(decoder, config, vad=LoudVoice())
    for _ in range(10):  # the words end by 8.1 s
        session.add_samples(loud(1.0))
        drain(session.updates())
    assert session.stats().loops == 0
    assert session.committed_text.startswith("Montreal, uh, uh,") and "fellow Americans" in session.committed_text


def test_a_buffer_that_keeps_looping_on_its_prompt_is_decoded_without_it():
    # A buffer whose every decode loops on its prompt would never commit a word (base
    # did this to 58 words of running speech, prompted "... This is the Montreal Forest
    # Aligner."). One loop is common and the prompt usually right, so only loops that
    # persist (loop_reset_after in a row) drop it, and only until that buffer is cut.
    hello = [("Hello", 0.1, 0.5), ("there.", 0.6, 1.1)]
    here = [("We", 0.4, 0.6), ("are", 0.7, 0.9), ("here.", 1.0, 1.4)]
    decoder = LoopsWhenPrompted(*[hello] * 3, *[here] * 4)
    config = LiveConfig(policy="agreement", min_new_seconds=0.5, pause_seconds=0.5, long_pause_seconds=1.0,
                        lead_in_seconds=0.3, min_vote_seconds=0.0, loop_reset_after=3)
    session = LiveSession(decoder, config, vad=LoudVoice())
    chunks = [loud(1.2)] + [quiet(0.1)] * 25 + [loud(0.5)] * 5 + [quiet(0.1)] * 25 + [loud(0.5)] * 2
    updates = []
    for audio in chunks:
        session.add_samples(audio)
        updates.append(drain(session.updates()))
    prompts = [prompt for _, prompt in decoder.calls]
    # the panel says so while that buffer lasts, and the update that decided it says why
    unprompted = [u for u in updates if u is not None and u.stats.unprompted]
    assert unprompted and unprompted[0].reason.endswith("3 in a row: this buffer is decoded without the prompt")
    assert not updates[-1].stats.unprompted

    def tiles(update):
        return stats_html(worker_mod.LiveView(1, "", "", update, None, update.stats, None, False))
    assert "decoded without one until it is cut" in tiles(unprompted[0])
    assert "without one" not in tiles(updates[-1])
    # three loops on "Hello there.", then the same buffer unprompted until it is committed
    first_loop = prompts.index("Hello there.")
    assert prompts[first_loop:first_loop + 4] == ["Hello there."] * 3 + [None]
    assert session.committed_text == "Hello there. We are here."
    # the next utterance (a new buffer after a long pause) is prompted again
    assert prompts[-1] == "Hello there. We are here."


def test_loops_are_counted_in_a_row_per_buffer():
    # A buffer that loops even without its prompt is cut after a long pause; the next
    # buffer, prompted again, must get its own count of loops in a row, not inherit one
    # already past loop_reset_after (it would then keep its prompt for ever).
    hello = [("Hello", 0.1, 0.5), ("there.", 0.6, 1.1)]
    decoder = LoopsWhenPrompted(*[hello] * 3, then_loops_unprompted=True)
    config = LiveConfig(policy="agreement", min_new_seconds=0.5, pause_seconds=0.5, long_pause_seconds=1.0,
                        lead_in_seconds=0.3, min_vote_seconds=0.0, loop_reset_after=2)
    session = LiveSession(decoder, config, vad=LoudVoice())
    utterance = [loud(0.5)] * 3 + [quiet(0.1)] * 25
    for audio in [loud(1.2)] + [quiet(0.1)] * 25 + utterance:
        session.add_samples(audio)
        drain(session.updates())
    second = [prompt for _, prompt in decoder.calls[3:]]
    assert second[:3] == ["Hello there.", "Hello there.", None] and len(second) > 3  # loops on
    calls_before = len(decoder.calls)
    for audio in utterance:
        session.add_samples(audio)
        drain(session.updates())
    third = [prompt for _, prompt in decoder.calls[calls_before:]]
    assert third[:3] == ["Hello there.", "Hello there.", None]


def test_add_audio_is_thread_safe_and_the_idle_clock_moves():
    now = [100.0]
    session = LiveSession(Script(), AGREEMENT, vad=LoudVoice(), clock=lambda: now[0])
    threads = [threading.Thread(target=lambda: [session.add_audio(48000, np.zeros(4800, np.int16))
                                                for _ in range(50)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert session.audio_seconds == pytest.approx(4 * 50 * 0.1)
    now[0] = 160.0
    assert session.idle_seconds() == pytest.approx(60.0)
    session.add_audio(SR, np.zeros(10, np.float32))
    assert session.idle_seconds() == 0.0


def test_audio_lost_when_received_audio_falls_behind_the_clock():
    """Chunks late but complete: nothing lost; a missing chunk: its length shows as lost."""
    now = [100.0]
    session = LiveSession(Script(), AGREEMENT, vad=LoudVoice(), clock=lambda: now[0])
    chunk = np.zeros(SR // 2, dtype=np.float32)
    for t in (0.0, 0.5, 1.2, 1.3, 2.0):  # jittery, bunched: all 5 chunks there
        now[0] = 100.0 + t
        session.add_samples(chunk)
    assert session.stats().lost_seconds == 0.0
    now[0] = 100.0 + 4.0  # 2.0 s of wall clock, one 0.5 s chunk: 1.5 s never arrived
    session.add_samples(chunk)
    assert session.stats().lost_seconds == pytest.approx(1.5)
    now[0] = 100.0 + 6.0  # nothing more arrives: the gap grows with the clock...
    assert session.stats().lost_seconds == pytest.approx(3.0)
    drain(session.finish())  # ...until the session is finished
    assert session.stats().lost_seconds == pytest.approx(1.5)


def test_a_stalled_decoder_drops_the_oldest_audio_and_says_so():
    session = LiveSession(Script(), LiveConfig(policy="agreement", max_backlog_seconds=2.0), vad=LoudVoice())
    for _ in range(5):
        session.add_samples(quiet(1.0))
    update = drain(session.finish())
    assert update.stats.dropped_seconds == pytest.approx(3.0)


def test_decode_thread_runs_at_lower_priority():
    import os

    if not hasattr(os, "setpriority"):
        pytest.skip("no per-thread priorities here")
    seen = {}

    def probe():
        worker_mod.lower_thread_priority()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert seen["nice"] >= min(19, worker_mod.DECODE_NICENESS)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) < seen["nice"]  # only that thread


def test_worker_views_are_snapshots_and_errors_are_shown():
    def broken(audio, prompt, draft=None, prefix=None):
        raise RuntimeError("decoder exploded")
        yield  # a generator

    worker = LiveWorker(LiveSession(broken, LiveConfig(policy="agreement", min_new_seconds=0.1), vad=LoudVoice()))
    before = worker.view()
    worker.feed_samples(loud(0.5))
    assert worker.done.wait(120)  # a hang's bound: the worker runs at a lower priority, late on a busy machine
    after = worker.view()
    assert before.version == 0 and before.error is None  # an old view never changes
    assert isinstance(after.error, RuntimeError) and after.done


def test_idle_sessions_are_closed_by_the_registry():
    class Fake:
        def __init__(self, idle):
            self.idle, self.closed = idle, False

        def idle_seconds(self):
            return self.idle

        def close(self):
            self.closed = True

    registry = SessionRegistry(idle_timeout_s=600, reap_every_s=3600)
    idle, busy = Fake(3600), Fake(1)
    registry.get_or_create("a", lambda: idle)
    registry.get_or_create("b", lambda: busy)
    assert registry.get_or_create("b", lambda: Fake(0)) is busy  # found, not replaced
    assert registry.reap_idle() == 1
    assert idle.closed and not busy.closed and registry.get("a") is None and len(registry) == 1
    replacement = registry.replace("b", lambda: Fake(0))
    assert busy.closed and registry.get("b") is replacement
    registry.close_all()
    assert replacement.closed and len(registry) == 0


def test_every_streamed_chunk_reaches_the_session(tmp_path):
    """Gradio keeps only the latest chunk of a stream (`event.data = body`); the Live tab's
    tap must see every one, in order, and read only files from Gradio's upload folder."""
    import types
    from pathlib import Path

    import soundfile as sf
    from gradio import queueing
    from gradio import utils as gr_utils

    from whisper_demo.ui import live_tab
    from whisper_demo.ui.chunk_tap import install_chunk_tap

    tab = live_tab.LiveTab(store=None, defaults=None)
    assert install_chunk_tap(), "this Gradio's Event changed: the tap cannot see chunks"
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
        feed=lambda sr, data, arrived: fed.append((sr, int(np.asarray(data).reshape(-1)[0])))))
    assert tab._feed_inbox("sess", session) == 5
    assert fed == [(48000, (i + 1) * 1000) for i in range(5)]  # all, in order, not outside.wav
    assert tab._feed_inbox("sess", session) == 0
