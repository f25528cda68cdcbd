"""Live transcription: a rolling audio buffer, re-decoded as audio arrives, and text that
is committed once two consecutive hypotheses agree on it (LocalAgreement-2, as in
whisper_streaming by Machacek, Dabre and Bojar, 2023).

    live = LiveTranscriber(model, DecodeOptions(cache="static"))
    live.add_audio(48000, int16_chunk)          # any rate, any size; cheap, thread safe
    for item in live.updates():                  # nothing unless enough new audio arrived
        if isinstance(item, TokenEvent): ...     # one per decoder step of the re-decode
        else: update = item                      # LiveUpdate: committed / tentative text
    final = drain(live.finish())                 # commits whatever is left

How it works
------------
* Audio is appended to a pending list under a lock (`add_audio`); a decode in progress
  never blocks it and never loses it: the next re-decode takes everything that came.
* Each re-decode runs `stream_transcribe` on the whole buffer (at most one 30 s window),
  with the committed text that came *before* the buffer as the prompt.
* The hypothesis is a list of words. The words already committed from this buffer are
  aligned to the start of the hypothesis (edit distance, so a re-spelt word does not derail
  it); of what follows, the longest common prefix with the previous hypothesis's tail is
  committed. Committed text is append-only: nothing is ever taken back.
  A hypothesis that loses committed words is ignored, at most MAX_REJECTIONS times in a
  row (then the decoder, which has heard more audio, is believed).
* When every word of a Whisper segment is committed, the buffer is cut at that segment's
  end timestamp; past `sentence_cut_seconds`, in the pause after a committed sentence end;
  past `max_buffer_seconds` the cut is forced. So the buffer, the hypothesis and the decoder
  cache are bounded whatever the length of the session. A re-decode after a cut that
  starts by repeating the committed end does not commit it twice; words that the decode
  before a cut heard in audio the cut removed are committed, not lost.
* Silence: an energy gate (adaptive noise floor) skips re-decodes when no new speech came,
  drops silent buffers, and decode.py already refuses windows with a high no_speech_prob.
  After a pause, a hypothesis that two decodes saw in full is committed (pause flush).
* Latency: chunk arrival -> first token of the re-decode that includes it, and, per
  committed word, the arrival of the audio holding the word's end (estimated from segment
  timestamps) -> the moment it is committed.

No UI imports here: ui/live_tab.py and mic.py drive this module.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Deque, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from .audio import load_audio_chunk
from .decode import stream_transcribe
from .events import DecodeOptions, DecodeResult, TokenEvent

SAMPLE_RATE = 16000
FRAME = 320  # 20 ms energy frames
_SENTENCE_END = re.compile(r"[.!?…]['\")\]]*$")


@dataclass
class Word:
    text: str  # as Whisper wrote it, punctuation included, no surrounding spaces
    norm: str  # lower case, punctuation removed: what agreement compares
    end: float  # estimated end time in stream seconds
    segment: int  # index of the segment of the hypothesis it came from


@dataclass(frozen=True)
class LiveStats:
    """Latency and work figures of a session so far (recent history, bounded)."""

    decodes: int
    skipped: int  # re-decodes skipped because no new speech arrived
    first_token_ms_median: Optional[float]
    first_token_ms_p95: Optional[float]
    commit_s_median: Optional[float]  # speech -> commit, agreement commits
    commit_s_p95: Optional[float]
    last_first_token_ms: Optional[float]
    last_decode_ms: Optional[float]  # wall time of the last re-decode, encoder included
    audio_seconds: float  # received so far
    dropped_seconds: float  # discarded because nobody consumed the audio (backlog cap)
    # how far the received audio is behind the wall clock since the first chunk, less the
    # length of one chunk: audio that never reached us (e.g. chunks dropped on the way)
    lost_seconds: float = 0.0


@dataclass(frozen=True)
class LiveUpdate:
    committed: str  # everything committed so far
    tentative: str  # the current hypothesis after the committed text (may still change)
    new_committed: str  # what this update committed ("" if nothing)
    buffer_seconds: float  # audio held for re-decoding
    audio_seconds: float  # audio received in the session
    decoded: bool  # whether a re-decode ran for this update
    first_token_ms: Optional[float]  # newest chunk's arrival -> first token of this decode
    commit_latencies_s: Tuple[float, ...]  # speech -> commit for each newly committed word
    stats: LiveStats
    result: Optional[DecodeResult] = None  # of this re-decode
    last_event: Optional[TokenEvent] = None  # last decoder step (cache panel)
    trimmed_seconds: float = 0.0  # how much audio was cut from the buffer's start
    final: bool = False  # from finish()
    reason: str = ""  # why no decode ran, or what a forced commit was

    @property
    def text(self) -> str:
        return join_text(self.committed, self.tentative)


def join_text(committed: str, tentative: str) -> str:
    return f"{committed} {tentative}".strip() if committed and tentative else (committed or tentative)


def drain(gen) -> Optional[LiveUpdate]:
    """Run an updates()/finish() generator to its end; return its LiveUpdate (or None)."""
    last = None
    for item in gen:
        if isinstance(item, LiveUpdate):
            last = item
    return last


def normalize(word: str) -> str:
    norm = re.sub(r"[^\w']", "", word.lower()).strip("'")
    return norm or word


class LiveTranscriber:
    """One live session (a browser tab or a microphone). Many may share one model."""

    def __init__(
        self,
        model,
        options: Optional[DecodeOptions] = None,
        *,
        min_new_seconds: float = 1.0,
        max_buffer_seconds: float = 25.0,
        sentence_cut_seconds: float = 15.0,
        voice_rms: float = 0.005,
        pause_commit_seconds: float = 1.0,
        max_backlog_seconds: float = 120.0,
        history: int = 2000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.model = model
        self.options = options or DecodeOptions()
        self.min_new_seconds = min_new_seconds
        self.max_buffer_seconds = max_buffer_seconds
        # Past this, the buffer is cut at a committed sentence end. Shorter buffers keep
        # their sentences as context: on speech_25s.wav fed in 1 s and 0.5 s chunks, tiny.en
        # missed 15-17 words of the true text cutting from 5 s, 10-13 from 10 s, 9-10 from
        # 15 s (offline: 9), as whisper_streaming's default of 15 s does.
        self.sentence_cut_seconds = sentence_cut_seconds
        self.voice_rms = voice_rms
        self.pause_commit_seconds = pause_commit_seconds
        self.max_backlog_seconds = max_backlog_seconds
        self.clock = clock

        self._lock = threading.Lock()  # guards the pending audio and arrival marks
        self._decode_lock = threading.Lock()  # one re-decode at a time per session
        self._pending: List[np.ndarray] = []
        self._pending_samples = 0
        self._received = 0  # samples received (stream position of the end)
        self._arrivals: Deque[Tuple[int, float]] = deque()  # (stream end sample, wall time)
        self._last_voice_end = -1  # stream sample where the last voiced chunk ended
        self._noise_floor: Optional[float] = None
        self._dropped = 0
        self._first_arrival: Optional[float] = None  # wall time of the first chunk
        self._first_chunk = 0  # its length in samples
        self._max_chunk = 0  # longest chunk, in samples
        self._behind = 0.0  # wall seconds since the first chunk minus audio seconds after it

        self._buffer = np.zeros(0, dtype=np.float32)
        self._offset = 0  # stream sample of buffer[0]
        self._decoded_to = 0  # stream sample up to which the last re-decode saw audio
        self._prev_words: List[Word] = []  # previous hypothesis (current buffer)
        self._prev_saw_voice_end = False
        self._committed: List[str] = []  # committed words, all session (text only)
        self._committed_in_buffer = 0  # how many of them lie in the current buffer
        self._tentative: List[Word] = []
        self._rejected: List[Word] = []  # last hypothesis ignored for losing committed words
        self._rejections_in_row = 0
        self._after_cut = False  # the last re-decode cut the buffer, keeping its later words
        self._committed_text_cache = ""

        self._first_token_ms: Deque[float] = deque(maxlen=history)
        self._commit_s: Deque[float] = deque(maxlen=history)
        self._decodes = 0
        self._skipped = 0
        self._last_first_token_ms: Optional[float] = None
        self._last_decode_ms: Optional[float] = None
        self.last_activity = self.clock()
        self.last_result: Optional[DecodeResult] = None
        self.last_event: Optional[TokenEvent] = None
        self.finished = False

    # ------------------------------------------------------------------ input

    def add_audio(self, sample_rate: int, chunk) -> None:
        """Queue a chunk of any rate/dtype/channels (AudioError if it is not audio)."""
        arrived = self.clock()
        self._add(load_audio_chunk(sample_rate, np.asarray(chunk)), arrived)

    def add_samples(self, samples: np.ndarray) -> None:
        """Queue float32 mono 16 kHz samples."""
        arrived = self.clock()
        self._add(np.ascontiguousarray(samples, dtype=np.float32).reshape(-1), arrived)

    def _add(self, samples: np.ndarray, arrived: float) -> None:
        if samples.size == 0:
            return
        voiced = self._voiced(samples)
        with self._lock:
            self._pending.append(samples)
            self._pending_samples += samples.size
            self._received += samples.size
            self._arrivals.append((self._received, arrived))
            if self._first_arrival is None:
                self._first_arrival, self._first_chunk = arrived, samples.size
            self._max_chunk = max(self._max_chunk, samples.size)
            self._behind = (arrived - self._first_arrival) - (
                self._received - self._first_chunk) / SAMPLE_RATE
            if voiced:
                self._last_voice_end = self._received
            # Nobody is consuming (a stalled UI): keep memory bounded, oldest audio first.
            limit = int(self.max_backlog_seconds * SAMPLE_RATE)
            while self._pending_samples > limit and len(self._pending) > 1:
                dropped = self._pending.pop(0)
                self._pending_samples -= dropped.size
                self._dropped += dropped.size
            self.last_activity = arrived

    def _voice_threshold(self) -> float:
        """Frame RMS above which a 20 ms frame counts as voice: 3x the noise floor, but
        never above -34 dBFS (a stream that starts mid-speech must not teach the gate that
        speech is the noise) nor below voice_rms."""
        with self._lock:
            floor = self._noise_floor or 0.0
        return max(self.voice_rms, min(3.0 * floor, 0.02))

    def _voiced(self, samples: np.ndarray) -> bool:
        """Energy gate with an adaptive noise floor: enough 20 ms frames above threshold."""
        n = samples.size // FRAME
        if n == 0:
            frames_rms = np.array([np.sqrt(np.mean(np.square(samples, dtype=np.float64)))])
        else:
            frames = samples[: n * FRAME].reshape(n, FRAME).astype(np.float64)
            frames_rms = np.sqrt(np.mean(frames * frames, axis=1))
        quiet = float(np.percentile(frames_rms, 10))
        with self._lock:
            if self._noise_floor is None or quiet < self._noise_floor:
                self._noise_floor = quiet
            else:  # rises slowly, so speech does not lift it
                self._noise_floor += 0.05 * (quiet - self._noise_floor)
        threshold = self._voice_threshold()
        needed = max(1, min(5, len(frames_rms) // 4))  # 100 ms, less for tiny chunks
        return int(np.count_nonzero(frames_rms > threshold)) >= needed

    # ------------------------------------------------------------------ state

    @property
    def committed_text(self) -> str:
        return self._committed_text_cache

    @property
    def tentative_text(self) -> str:
        return " ".join(w.text for w in self._tentative)

    @property
    def transcript(self) -> str:
        return join_text(self.committed_text, self.tentative_text)

    @property
    def buffer_seconds(self) -> float:
        return self._buffer.size / SAMPLE_RATE

    @property
    def audio_seconds(self) -> float:
        return self._received / SAMPLE_RATE

    @property
    def busy(self) -> bool:
        return self._decode_lock.locked()

    def new_seconds(self) -> float:
        """Audio received since the last re-decode saw the buffer."""
        with self._lock:
            return (self._received - self._decoded_to) / SAMPLE_RATE

    def ready(self) -> bool:
        return not self.finished and self.new_seconds() >= self.min_new_seconds

    def idle_seconds(self) -> float:
        return self.clock() - self.last_activity

    @property
    def lost_seconds(self) -> float:
        """Audio that should have arrived by the newest chunk's arrival and did not: the
        wall time since the first chunk minus the audio received after it, once that gap
        exceeds one chunk (late, bunched chunks stay within it; lost ones do not). While
        the session runs, a stream whose chunks stopped coming counts from the clock."""
        with self._lock:
            slack = self._max_chunk / SAMPLE_RATE
            behind = self._behind
            if self._first_arrival is not None and not self.finished:
                # a stream that stopped arriving (chunks dropped before they reach us) is
                # behind now, not only at its next chunk; frozen once finished
                behind = max(behind, (self.clock() - self._first_arrival)
                             - (self._received - self._first_chunk) / SAMPLE_RATE - slack)
            return behind if behind > slack else 0.0

    def stats(self) -> LiveStats:
        def pct(values, q):
            return float(np.percentile(np.asarray(values), q)) if values else None

        ft, cs = list(self._first_token_ms), list(self._commit_s)
        return LiveStats(
            decodes=self._decodes, skipped=self._skipped,
            first_token_ms_median=pct(ft, 50), first_token_ms_p95=pct(ft, 95),
            commit_s_median=pct(cs, 50), commit_s_p95=pct(cs, 95),
            last_first_token_ms=self._last_first_token_ms, last_decode_ms=self._last_decode_ms,
            audio_seconds=self.audio_seconds, dropped_seconds=self._dropped / SAMPLE_RATE,
            lost_seconds=self.lost_seconds,
        )

    def latencies(self) -> Tuple[List[float], List[float]]:
        """(chunk end -> first token in ms, speech -> commit in s), recent history."""
        return list(self._first_token_ms), list(self._commit_s)

    def preview(self, event: TokenEvent) -> Tuple[str, str]:
        """(committed, tentative) to show while a re-decode is still emitting tokens."""
        words = _split_words(event.transcript)
        start, _ = _align(self._buffer_committed_norms(), [normalize(w) for w in words])
        return self.committed_text, " ".join(words[start:])

    # ------------------------------------------------------------------ decoding

    def updates(self, force: bool = False) -> Iterator[Union[TokenEvent, LiveUpdate]]:
        """Re-decode the buffer if enough new audio arrived (or `force`): TokenEvents as
        the decoder emits them, then one LiveUpdate. Yields nothing when not ready or when
        another thread is already decoding this session (its audio waits, buffered)."""
        if self.finished or not (force or self.ready()):
            return
        if not self._decode_lock.acquire(blocking=False):
            return
        try:
            yield from self._update(final=False)
        finally:
            self._decode_lock.release()

    def finish(self) -> Iterator[Union[TokenEvent, LiveUpdate]]:
        """Decode what is left and commit the whole hypothesis. Waits for a running decode."""
        with self._decode_lock:
            if self.finished:
                yield self._make_update("", (), decoded=False, final=True, reason="finished")
                return
            yield from self._update(final=True)
            self.finished = True

    def reset_options(self, options: DecodeOptions) -> None:
        """Change decode options (e.g. the cache mode) from the next re-decode on."""
        self.options = options

    def _take_pending(self) -> Tuple[int, Optional[float], int]:
        with self._lock:
            chunks, self._pending, self._pending_samples = self._pending, [], 0
            newest = self._arrivals[-1][1] if self._arrivals else None
            received = self._received
            voice_end = self._last_voice_end
        if chunks:
            self._buffer = np.concatenate([self._buffer, *chunks])
        return received, newest, voice_end

    def _update(self, final: bool):
        received, newest_arrival, voice_end = self._take_pending()
        buffer_end = self._offset + self._buffer.size
        self._cap_buffer_hard()
        new_voice = voice_end > self._decoded_to
        buffer_has_voice = voice_end > self._offset

        if final and self._decoded_to >= buffer_end and self._decodes:
            # Nothing arrived since the last re-decode: its hypothesis is the final word.
            if self._rejected:
                self._tentative = self._merge_rejected(self._buffer_committed_norms())
            yield self._finalize_if(True, self._make_update(
                "", (), decoded=False, final=True, reason="finish"))
            self._cut_to(buffer_end, keep_words=False)
            return
        if not buffer_has_voice:
            # Only silence held: nothing to transcribe. Keep a short tail for a word onset.
            self._skipped += 1
            if not final:
                self._tentative = []  # heard only in audio the energy gate calls silent
            trimmed = self._cut_to(max(self._offset, buffer_end - int(0.3 * SAMPLE_RATE)), keep_words=False)
            self._decoded_to = buffer_end
            yield self._finalize_if(final, self._make_update(
                "", (), decoded=False, trimmed=trimmed, final=final, reason="silence"))
            return
        if not new_voice and not self._tentative and not final and self._decoded_to > voice_end:
            # No new speech and everything heard is committed: no need to ask again.
            self._skipped += 1
            self._decoded_to = buffer_end
            trimmed = 0.0
            if (buffer_end - voice_end) / SAMPLE_RATE > self.pause_commit_seconds:
                trimmed = self._cut_to(min(buffer_end, voice_end + int(0.3 * SAMPLE_RATE)), keep_words=False)
            yield self._make_update("", (), decoded=False, trimmed=trimmed, reason="no new speech")
            return

        # ---- re-decode the buffer
        self._decodes += 1
        decode_audio = self._buffer
        options = replace(self.options, prompt=self._prompt())
        started = self.clock()
        first_token_ms = None
        result = None
        last_event = None
        gen = stream_transcribe(self.model, decode_audio, options)
        try:
            for item in gen:
                if isinstance(item, TokenEvent):
                    if first_token_ms is None and newest_arrival is not None:
                        first_token_ms = (self.clock() - newest_arrival) * 1000
                    last_event = item
                    self.last_event = item
                    yield item
                else:
                    result = item
        finally:
            gen.close()
        now = self.clock()
        self.last_activity = now
        self._last_decode_ms = (now - started) * 1000
        self._decoded_to = buffer_end
        if first_token_ms is not None:
            self._first_token_ms.append(first_token_ms)
        self._last_first_token_ms = first_token_ms
        self.last_result = result

        words = _hypothesis_words(result, self._offset / SAMPLE_RATE, buffer_end / SAMPLE_RATE)
        committed_norms = self._buffer_committed_norms()
        start, distance = self._known_prefix(committed_norms, words)
        disagrees = bool(committed_norms) and distance > max(1, len(committed_norms) // 2)
        if disagrees and self._rejections_in_row < MAX_REJECTIONS:
            # The decoder lost words it had agreed on before (tiny models sometimes jump
            # ahead). Don't let such a hypothesis vote: keep the previous one and its
            # tentative text, and ask again with the next audio. Not forever, though: a
            # decoder that keeps disagreeing has more audio than the one that agreed (seen:
            # "But" committed from 1 s of audio, then 20 s of "The weather today..." all
            # ignored), so after MAX_REJECTIONS its hypothesis is aligned as well as it
            # goes and votes again.
            self._rejections_in_row += 1
            self._rejected = words
            if final:
                newly = self._merge_rejected(committed_norms)
                latencies = self._commit(newly, now, record=False)
                self._tentative = []
                trimmed = self._cut_to(buffer_end, keep_words=False)
            else:
                newly, latencies, trimmed = [], (), 0.0
            yield self._make_update(" ".join(w.text for w in newly), latencies, decoded=True,
                                    first_token_ms=first_token_ms, result=result,
                                    last_event=last_event, trimmed=trimmed, final=final,
                                    reason="hypothesis disagreed with committed text; ignored")
            return
        if disagrees:
            # Heard in the end: its words no longer line up with the committed ones, so
            # align it as if just after a cut (only a repeat of the committed end is skipped).
            self._committed_in_buffer = 0
            committed_norms = []
            start, distance = self._known_prefix(committed_norms, words)
        self._rejected = []
        self._rejections_in_row = 0
        tail = words[start:]
        prev_tail = self._prev_words[self._known_prefix(committed_norms, self._prev_words)[0]:]

        reason = ""
        if final:
            reason = "finish"
            if _skips_words_of(tail, self._tentative):
                # The last decode heard fewer of the same words than the one before it: tiny
                # models sometimes skip a repeated phrase ("... can do for you country.").
                # Keep what the previous decode heard.
                tail, reason = list(self._tentative), "finish (kept the fuller previous hypothesis)"
            agreed = len(tail)
        else:
            agreed = _common_prefix(prev_tail, tail)
            saw_voice_end = (buffer_end - voice_end) / SAMPLE_RATE >= self.pause_commit_seconds
            if agreed < len(tail) and saw_voice_end and self._prev_saw_voice_end:
                # Two decodes heard the whole utterance and the speaker paused: commit it.
                agreed, reason = len(tail), "pause"
            self._prev_saw_voice_end = saw_voice_end

        orphans: List[Word] = []
        if self._after_cut and prev_tail and tail and not (
                {w.norm for w in prev_tail} & {w.norm for w in tail[:len(prev_tail) + 2]}):
            # The cut came too late (a segment's end timestamp placed after the next words
            # began): the previous hypothesis's words after it are nowhere in this one, and
            # their audio is gone. Heard once, they are committed rather than lost.
            orphans, reason = list(prev_tail), "words heard only before the cut kept"
        self._after_cut = False
        newly = orphans + tail[:agreed]
        latencies = self._commit(newly, now, record=not final)
        self._committed_in_buffer -= len(orphans)  # committed, but not in this buffer
        self._tentative = tail[agreed:]
        self._prev_words = words
        trimmed = self._trim(words, start + agreed, final)
        if final:
            self._tentative = []
        update = self._make_update(" ".join(w.text for w in newly), latencies, decoded=True,
                                   first_token_ms=first_token_ms, result=result, last_event=last_event,
                                   trimmed=trimmed, final=final, reason=reason)
        yield update

    def _known_prefix(self, committed_norms: List[str], words: List["Word"]) -> Tuple[int, int]:
        """(j, distance): words[:j] are what is already committed. With committed words in
        the buffer, they are aligned to the hypothesis. Right after a cut there are none, but
        the decoder may say again what was committed just before the cut (the segment end
        timestamp it was cut at came too early): that repeat is skipped, not committed twice."""
        norms = [w.norm for w in words]
        if committed_norms:
            return _align(committed_norms, norms)
        before = self._committed[-REPEAT_WORDS:]
        return _repeated_tail([normalize(w) for w in before], norms), 0

    def _merge_rejected(self, committed_norms: List[str]) -> List[Word]:
        """Final flush after a rejected hypothesis: the previous tentative words plus what
        the rejected one has after its overlap with the text we already had."""
        known = committed_norms + [w.norm for w in self._tentative]
        overlap = _suffix_prefix_overlap(known, [w.norm for w in self._rejected])
        return list(self._tentative) + self._rejected[overlap:]

    def _finalize_if(self, final: bool, update: LiveUpdate) -> LiveUpdate:
        if final and self._tentative:
            text = " ".join(w.text for w in self._tentative)
            self._commit(self._tentative, self.clock(), record=False)
            self._tentative = []
            return replace(update, committed=self.committed_text, tentative="", new_committed=text)
        return update

    # ------------------------------------------------------------------ commit & trim

    def _commit(self, words: List[Word], now: float, record: bool) -> Tuple[float, ...]:
        latencies = []
        for w in words:
            self._committed.append(w.text)
            self._committed_in_buffer += 1
            latency = now - self._arrival_of(w.end)
            latencies.append(latency)
            if record:
                self._commit_s.append(latency)
        if words:
            self._committed_text_cache = " ".join(self._committed)
            self._bound_committed()
        return tuple(latencies)

    def _bound_committed(self) -> None:
        # Committed words are the product, but we keep the list itself bounded: old words
        # are folded into one string (the transcript text is small next to the audio).
        if len(self._committed) > 4096:
            keep = max(self._committed_in_buffer, 256)
            head = " ".join(self._committed[:-keep])
            self._committed = [head] + self._committed[-keep:]

    def _arrival_of(self, stream_seconds: float) -> float:
        sample = int(stream_seconds * SAMPLE_RATE)
        with self._lock:
            for end, wall in self._arrivals:
                if end >= sample:
                    return wall
            return self._arrivals[-1][1] if self._arrivals else self.clock()

    def _buffer_committed_norms(self) -> List[str]:
        n = self._committed_in_buffer
        return [normalize(w) for w in self._committed[len(self._committed) - n:]] if n else []

    def _prompt(self) -> Optional[str]:
        n = len(self._committed) - self._committed_in_buffer
        if n <= 0:
            return None
        text = " ".join(self._committed[max(0, n - 200):n])
        return text[-800:] or None  # decode.py keeps the last n_text_ctx/2 tokens anyway

    def _trim(self, words: List[Word], committed_upto: int, final: bool) -> float:
        """Cut the buffer at the end of the last fully committed segment; force a cut when
        it grows past max_buffer_seconds. Returns the seconds cut."""
        buffer_end = self._offset + self._buffer.size
        if final:
            return self._cut_to(buffer_end, keep_words=False)
        # Segment boundaries with every word before them committed (not the last segment:
        # its end timestamp is the least reliable, and it may still grow).
        boundary = None
        n_segments = (words[-1].segment + 1) if words else 0
        count = 0
        for seg in range(n_segments - 1):
            count += sum(1 for w in words if w.segment == seg)
            if count <= committed_upto and count > 0:
                boundary = (seg, count)
        if boundary is not None:
            seg, count = boundary
            end = max(w.end for w in words if w.segment == seg)
            return self._cut_at_word_boundary(end, words, count, committed_upto)
        # tiny.en often makes one segment of 20 s of speech: cut at a committed sentence
        # end instead, in the pause after it (a cut in silence never splits a word).
        sentence_end = self._sentence_end_cut(words, committed_upto)
        if sentence_end is not None:
            sample, count = sentence_end
            return self._cut_at_word_boundary(sample / SAMPLE_RATE, words, count, committed_upto)
        if self._buffer.size / SAMPLE_RATE <= self.max_buffer_seconds:
            return 0.0
        # Forced: the buffer is too long and no committed segment boundary exists.
        if committed_upto > 0:
            return self._cut_at_word_boundary(words[committed_upto - 1].end, words, committed_upto, committed_upto)
        if len(words) > 0 and n_segments >= 2:
            # Nothing agreed for ~25 s: commit all but the last segment and move on.
            count = sum(1 for w in words if w.segment < n_segments - 1)
            self._commit(words[:count], self.clock(), record=False)
            self._tentative = words[count:]
            return self._cut_at_word_boundary(words[count - 1].end, words, count, count)
        if words:
            self._commit(words, self.clock(), record=False)
            self._tentative = []
            return self._cut_to(buffer_end, keep_words=False)
        return self._cut_to(buffer_end - int(1.0 * SAMPLE_RATE), keep_words=False)

    def _sentence_end_cut(self, words: List[Word], committed_upto: int) -> Optional[Tuple[int, int]]:
        """(stream sample, words before it) of a cut in the pause after the last committed
        word that ends a sentence, once the buffer is longer than sentence_cut_seconds.
        Word end times are interpolated inside their segment, so the pause is looked for
        within PAUSE_SEARCH_S of the estimate. None without such a word or pause."""
        if self._buffer.size / SAMPLE_RATE < self.sentence_cut_seconds:
            return None
        for k in range(min(committed_upto, len(words)) - 1, -1, -1):
            if words[k].text.rstrip('"\')').endswith((".", "?", "!")):
                pause = self._pause_near(words[k].end)
                return (pause, k + 1) if pause is not None else None
        return None

    def _pause_near(self, stream_seconds: float) -> Optional[int]:
        """The middle (stream sample) of the 60 ms nearest `stream_seconds` that is below the
        voice threshold, within PAUSE_SEARCH_S of it; None if the speech never pauses there."""
        center = int(stream_seconds * SAMPLE_RATE) - self._offset
        radius = int(PAUSE_SEARCH_S * SAMPLE_RATE)
        lo, hi = max(0, center - radius), min(self._buffer.size, center + radius)
        n = (hi - lo) // FRAME
        if n < 3:
            return None
        frames = self._buffer[lo:lo + n * FRAME].reshape(n, FRAME).astype(np.float64)
        rms = np.sqrt(np.mean(frames * frames, axis=1))
        quiet3 = np.convolve(rms, np.ones(3) / 3, mode="valid")  # 60 ms runs
        quiet = np.flatnonzero(quiet3 < self._voice_threshold())
        if quiet.size == 0:
            return None
        # The pause nearest the estimate, cut near its start: the next buffer then opens
        # with silence, not on the onset of its first word (which the decoder mishears).
        starts = quiet[np.r_[True, np.diff(quiet) > 1]]
        best = starts[np.argmin(np.abs(lo + starts * FRAME - center))]
        return lo + int(best) * FRAME + FRAME + self._offset

    def _cut_at_word_boundary(self, end_seconds: float, words: List[Word], n_words: int,
                              committed_upto: int) -> float:
        """Cut the buffer after words[:n_words] (words[:committed_upto] are committed). What
        stays committed in the buffer is counted in hypothesis words, not committed ones:
        the hypothesis may spell the older committed words with a different word count."""
        cut = int(round(end_seconds * SAMPLE_RATE))
        removed = self._cut_to(cut, keep_words=True)
        if removed > 0:
            self._after_cut = True
            self._committed_in_buffer = max(0, committed_upto - n_words)
            self._prev_words = words[n_words:]
            for w in self._prev_words:  # a sentence-end cut may fall inside a segment
                w.segment = max(0, w.segment - (words[n_words - 1].segment + 1 if n_words else 0))
        return removed

    def _cut_to(self, stream_sample: int, keep_words: bool) -> float:
        buffer_end = self._offset + self._buffer.size
        stream_sample = min(max(stream_sample, self._offset), buffer_end)
        n = stream_sample - self._offset
        if n <= 0:
            return 0.0
        self._buffer = self._buffer[n:].copy()
        self._offset = stream_sample
        if not keep_words:
            self._committed_in_buffer = 0
            self._prev_words = []
            self._prev_saw_voice_end = False
            self._rejections_in_row = 0
        with self._lock:
            while len(self._arrivals) > 1 and self._arrivals[1][0] <= self._offset:
                self._arrivals.popleft()
        return n / SAMPLE_RATE

    def _cap_buffer_hard(self) -> None:
        # A backlog larger than one window (decodes slower than real time): keep the last
        # 29.5 s so a re-decode is always a single window. Committed words there are gone.
        limit = int(29.5 * SAMPLE_RATE)
        if self._buffer.size > limit:
            self._cut_to(self._offset + self._buffer.size - limit, keep_words=False)

    def _make_update(self, new_committed, latencies, *, decoded, first_token_ms=None, result=None,
                     last_event=None, trimmed=0.0, final=False, reason="") -> LiveUpdate:
        return LiveUpdate(
            committed=self.committed_text, tentative=self.tentative_text,
            new_committed=new_committed, buffer_seconds=self.buffer_seconds,
            audio_seconds=self.audio_seconds, decoded=decoded, first_token_ms=first_token_ms,
            commit_latencies_s=tuple(latencies), stats=self.stats(), result=result,
            last_event=last_event or self.last_event, trimmed_seconds=trimmed, final=final,
            reason=reason,
        )


# ---------------------------------------------------------------------- word helpers


def _split_words(text: str) -> List[str]:
    return text.split()


def _hypothesis_words(result: Optional[DecodeResult], offset_s: float, end_s: float) -> List[Word]:
    """Words of a re-decode with end times interpolated inside their segment."""
    words: List[Word] = []
    if result is None:
        return words
    for index, seg in enumerate(result.segments):
        pieces = seg.text.split()
        if not pieces:
            continue
        start, stop = offset_s + seg.start, min(offset_s + seg.end, end_s)
        stop = max(stop, start)
        total = sum(len(p) + 1 for p in pieces)
        acc = 0
        for p in pieces:
            acc += len(p) + 1
            words.append(Word(p, normalize(p), start + (stop - start) * acc / total, index))
    # renumber segments densely (empty ones skipped above)
    seen = {}
    for w in words:
        w.segment = seen.setdefault(w.segment, len(seen))
    return words


def _common_prefix(a: List[Word], b: List[Word]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x.norm != y.norm:
            break
        n += 1
    return n


def _skips_words_of(tail: List[Word], previous: List[Word]) -> bool:
    """True when `tail` is `previous` with words left out: same last word, in order, shorter."""
    short, full = [w.norm for w in tail], [w.norm for w in previous]
    if not short or len(short) >= len(full) or short[-1] != full[-1]:
        return False
    remaining = iter(full)
    return all(word in remaining for word in short)  # a subsequence, in order


def _suffix_prefix_overlap(known: List[str], words: List[str]) -> int:
    """Length of the longest prefix of `words` that is a suffix of `known`."""
    for k in range(min(len(known), len(words)), 0, -1):
        if known[-k:] == words[:k]:
            return k
    return 0


PAUSE_SEARCH_S = 0.5  # how far from a sentence end's estimated time a pause is looked for
MAX_REJECTIONS = 2  # hypotheses in a row that may be ignored for disagreeing with committed text
REPEAT_WORDS = 12  # how far back a re-decode's start is checked for repeated committed words


def _repeated_tail(known: List[str], words: List[str]) -> int:
    """How many words at the start of `words` repeat the end of `known` (0 if fewer than
    two): the longest end of `known` that aligns with a start of `words` with at most one
    word in four different: a re-decode re-spells what an earlier one misheard, e.g. "the
    weather today is cool" after a committed "but whenever today is cool")."""
    for k in range(min(len(known), len(words) + 2), 1, -1):
        j, distance = _align(known[-k:], words)
        if j >= 2 and distance <= k // 4:
            return j
    return 0


def _align(committed: List[str], hypothesis: List[str]) -> Tuple[int, int]:
    """Where in `hypothesis` the already committed words end: (j, distance) for the j
    minimising the word edit distance between `committed` and hypothesis[:j] (ties: the j
    nearest len(committed))."""
    if not committed:
        return 0, 0
    if hypothesis[: len(committed)] == committed:
        return len(committed), 0
    m = len(hypothesis)
    prev = list(range(m + 1))  # distance of "" to hypothesis[:j]... as row 0 is j insertions
    for i, c in enumerate(committed, 1):
        cur = [i] + [0] * m
        for j in range(1, m + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (c != hypothesis[j - 1]))
        prev = cur
    n = len(committed)
    j = min(range(m + 1), key=lambda j: (prev[j], abs(j - n)))
    return j, prev[j]


# ---------------------------------------------------------------------- background worker


DECODE_NICENESS = 5


def _lower_thread_priority(niceness: int = DECODE_NICENESS) -> None:
    """Make the calling thread yield the CPU: on Linux a thread is a task with its own nice
    value, so the decode thread runs at a lower priority than the web server's event loop
    and handlers (which must receive every audio chunk in time) on a busy machine. Torch
    ops release the GIL, so only the CPU is contended. Threads this one starts inherit it."""
    if not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, max(current, niceness)))
    except OSError:  # not permitted, or not Linux semantics: run at normal priority
        pass


class BackgroundTranscriber:
    """A LiveTranscriber driven by its own thread: `feed()` never waits for a decode.

    Used by the web UI (browser chunks, desktop microphone): the handler feeds audio and
    reads `snapshot()`; the worker re-decodes whenever enough new audio is there and
    publishes every TokenEvent and LiveUpdate. `finish()` blocks until the rest is committed.
    """

    def __init__(self, live: LiveTranscriber, poll_seconds: float = 0.05, history: int = 400,
                 yield_cpu: bool = False):
        self.live = live
        # In the web server the decode thread must not starve the handlers that receive the
        # audio chunks (see _lower_thread_priority); in a terminal there is nothing to protect
        # and a slower decode only delays commits.
        self.yield_cpu = yield_cpu
        self.poll_seconds = poll_seconds
        self._cond = threading.Condition()
        self._version = 0
        self.update: Optional[LiveUpdate] = None
        self.event: Optional[TokenEvent] = None
        self.preview: Tuple[str, str] = ("", "")
        # per-token decoder latencies of recent re-decodes, by (cache mode, beams): the chart
        self.token_latencies: Dict[Tuple[str, int], Deque[float]] = {}
        self.history = history
        self.error: Optional[BaseException] = None
        self._stop = False
        self._finish_requested = False
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-decode", daemon=True)
        self._thread.start()

    @property
    def version(self) -> int:
        return self._version

    def feed(self, sample_rate: int, chunk) -> None:
        self.live.add_audio(sample_rate, chunk)
        with self._cond:
            self._cond.notify_all()

    def feed_samples(self, samples: np.ndarray) -> None:
        self.live.add_samples(samples)
        with self._cond:
            self._cond.notify_all()

    def _publish(self, item) -> None:
        with self._cond:
            if isinstance(item, TokenEvent):
                self.event = item
                key = (item.cache_mode, item.beam_size)
                self.token_latencies.setdefault(key, deque(maxlen=self.history)).append(item.latency_ms)
                self.preview = self.live.preview(item)
            else:
                self.update = item
                self.preview = (item.committed, item.tentative)
            self._version += 1
            self._cond.notify_all()

    def _run(self) -> None:
        if self.yield_cpu:
            _lower_thread_priority()
        try:
            while True:
                with self._cond:
                    while not (self._stop or self._finish_requested or self.live.ready()):
                        self._cond.wait(self.poll_seconds)
                    if self._stop:
                        return
                    finishing = self._finish_requested
                for item in (self.live.finish() if finishing else self.live.updates()):
                    self._publish(item)
                if finishing:
                    return
        except BaseException as err:  # shown by the UI rather than lost in a thread
            with self._cond:
                self.error = err
                self._version += 1
                self._cond.notify_all()
        finally:
            self.done.set()
            with self._cond:
                self._cond.notify_all()

    def wait_for_change(self, version: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or self.done.is_set(), timeout)
            return self._version

    def latency_series(self) -> Dict[Tuple[str, int], List[float]]:
        """A copy of token_latencies, safe to read while the worker decodes."""
        with self._cond:
            return {k: list(v) for k, v in self.token_latencies.items()}

    def request_finish(self) -> None:
        with self._cond:
            self._finish_requested = True
            self._cond.notify_all()

    def finish(self, timeout: Optional[float] = None) -> Optional[LiveUpdate]:
        self.request_finish()
        self.done.wait(timeout)
        return self.update

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
