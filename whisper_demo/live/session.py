"""One live session: the audio buffer, when to re-decode it, and what to show.

    session = model_session(model, DecodeOptions())  # or LiveSession(decoder, config, vad)
    session.add_audio(48000, int16_chunk)      # any rate and size; thread safe, never waits
    for item in session.updates():             # nothing unless a re-decode is due
        if isinstance(item, TokenEvent): ...   # one per decoder step of the re-decode
        else: update = item                    # LiveUpdate: an immutable snapshot
    for item in session.finish(): ...          # decodes the rest and commits it
    session.committed_text

The decoder is passed in (a callable: audio, prompt -> TokenEvents then a DecodeResult
with word timestamps), the voice detector too, so the session can be driven by a stand-in
of either. What is final is the policy's call (policy.py); this module only feeds it:

* Audio arrives on any thread and waits in a pending list; updates() moves it into the
  buffer and the voice detector scores it (on the decoding thread).
* A re-decode runs when `min_new_seconds` of audio came since the last one, or as soon
  as the speaker has paused for `pause_seconds` after words not yet committed: that
  decode commits the utterance (policy rule 4), so it does not wait for the next
  `min_new_seconds` mark. Nothing is decoded while the buffer holds no speech (silence
  is trimmed to a short lead-in), nor when no new speech came and every word heard is
  committed.
* Each decode is given the committed text said before the buffer as its prompt, the
  words committed from the buffer as the start of its transcript, and the previous
  decode's tokens as a draft; a loop takes the prefix or the prompt away for the rest of
  the buffer (context.py).
* The buffer is cut where the policy allows it, moved into the pause that follows when
  there is one (a cut in silence never splits a word), so the buffer, the decode and the
  cache stay bounded however long the session runs.

All state belongs to the thread that calls updates()/finish() (the worker); other threads
only add audio (under a lock) or read the LiveUpdates it produced, which never change.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Deque, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..audio import SAMPLE_RATE, load_audio_chunk
from ..events import DecodeResult, TokenEvent
from .config import LiveConfig, check_decoder, make_policy
from .context import ContextKeeper
from .decoder import Decoder, model_decoder
from .attempt import decode_attempt
from .hypotheses import hypothesis
from .policy import Decision, TimedWord
from .snapshots import BufferView, LiveStats, LiveUpdate, buffer_view, percentile
from .vad import VoiceDetector


class LiveSession:
    """One live session (a browser tab or a microphone). Many may share one model."""

    def __init__(self, decoder: Decoder, config: Optional[LiveConfig] = None,
                 vad: Optional[VoiceDetector] = None, clock: Callable[[], float] = time.monotonic):
        self.decoder = decoder  # replaced by set_decoder (e.g. the cache switch)
        self.config = config or LiveConfig()
        self.vad = vad if vad is not None else VoiceDetector()
        self.clock = clock
        check_decoder(decoder, self.config)
        self.policy = make_policy(self.config)

        self._lock = threading.Lock()  # guards the audio that waits and its arrival marks
        self._pending: List[np.ndarray] = []
        self._pending_samples = 0
        self._received = 0  # stream samples received
        self._arrivals: Deque[Tuple[int, float]] = deque()  # (stream end sample, wall time)
        self._first_arrival: Optional[float] = None
        self._first_chunk = 0  # samples
        self._max_chunk = 0
        self._behind = 0.0  # wall time since the first chunk minus audio after it
        self._dropped = 0  # samples

        self._buffer = np.zeros(0, dtype=np.float32)
        self._offset = 0  # stream sample of buffer[0]
        self._decoded_to = 0  # stream sample up to which the last re-decode heard
        self._tentative: Tuple[TimedWord, ...] = ()
        self._last_result: Optional[DecodeResult] = None
        self._buffer_view: Optional[BufferView] = None  # the audio the last re-decode read
        self._decodes = 0
        self._skipped = 0
        self._loops = 0  # decodes that fell into a loop
        self._context = ContextKeeper(self.policy, self.config.prompt_chars, self.config.loop_reset_after)
        self._first_token_ms: Deque[float] = deque(maxlen=self.config.history)
        self._commit_s: Deque[float] = deque(maxlen=self.config.history)
        self._last_first_token_ms: Optional[float] = None
        self._last_decode_ms: Optional[float] = None
        self._last_encoder_ms: Optional[float] = None
        self.last_activity = clock()
        self.finished = False
        self._stopped_at: Optional[float] = None  # when finish() was called

    # ------------------------------------------------------------------ input (any thread)

    def add_audio(self, sample_rate: int, chunk, arrived: Optional[float] = None) -> None:
        """Queue a chunk of any rate, dtype and channel count (AudioError if not audio).
        arrived: when it reached the server, on this session's clock (default: now), for a
        chunk read some time after it came."""
        arrived = self.clock() if arrived is None else arrived
        self._add(load_audio_chunk(sample_rate, np.asarray(chunk)), arrived)

    def add_samples(self, samples: np.ndarray) -> None:
        """Queue float32 mono 16 kHz samples."""
        arrived = self.clock()
        self._add(np.ascontiguousarray(samples, dtype=np.float32).reshape(-1), arrived)

    def _add(self, samples: np.ndarray, arrived: float) -> None:
        if samples.size == 0:
            return
        with self._lock:
            self._pending.append(samples)
            self._pending_samples += samples.size
            self._received += samples.size
            self._arrivals.append((self._received, arrived))
            if self._first_arrival is None:
                self._first_arrival, self._first_chunk = arrived, samples.size
            self._max_chunk = max(self._max_chunk, samples.size)
            self._behind = (arrived - self._first_arrival) - (self._received - self._first_chunk) / SAMPLE_RATE
            # Nobody consumes (a stalled decoder): keep memory bounded, oldest audio first.
            limit = int(self.config.max_backlog_seconds * SAMPLE_RATE)
            while self._pending_samples > limit and len(self._pending) > 1:
                dropped = self._pending.pop(0)
                self._pending_samples -= dropped.size
                self._dropped += dropped.size
            self.last_activity = arrived

    def set_decoder(self, decoder: Decoder) -> None:
        """Use another decoder (e.g. the cache switched off) from the next re-decode on."""
        self.decoder = decoder

    # ------------------------------------------------------------------ state

    @property
    def committed_text(self) -> str:
        return self.policy.shown_committed()

    @property
    def tentative_text(self) -> str:
        return self.policy.shown_after(self._tentative)

    @property
    def audio_seconds(self) -> float:
        return self._received / SAMPLE_RATE

    @property
    def buffer_seconds(self) -> float:
        return self._buffer.size / SAMPLE_RATE

    def ready(self) -> bool:
        """Audio came that updates() has not looked at yet (cheap; any thread). Whether
        it makes a re-decode worth running is updates()' call: only the voice detector,
        which runs on the decoding thread, knows whether the speaker paused."""
        with self._lock:
            return not self.finished and self._pending_samples > 0

    def idle_seconds(self) -> float:
        return self.clock() - self.last_activity

    def silent_seconds(self) -> float:
        """Audio the voice detector has scored since the last voice in it (all it scored,
        if it never heard any). Only scored audio counts: a decoder that is behind does not
        make a speaker look silent. Any thread (it reads two counters)."""
        vad = self.vad
        return (vad.scored_until - max(vad.last_voice_end, 0)) / SAMPLE_RATE

    @property
    def lost_seconds(self) -> float:
        """Audio that should have arrived and did not: the wall time since the first chunk
        less the audio received after it, beyond the slack of one chunk. While the session
        runs, a stream that stopped arriving counts from the clock; from finish() on, the
        clock no longer counts (the final decode may take a while)."""
        with self._lock:
            slack = self._max_chunk / SAMPLE_RATE
            behind = self._behind
            if self._first_arrival is not None and self._stopped_at is None:
                behind = max(behind, (self.clock() - self._first_arrival)
                             - (self._received - self._first_chunk) / SAMPLE_RATE - slack)
        return behind if behind > slack else 0.0

    def stats(self) -> LiveStats:
        ft, cs = list(self._first_token_ms), list(self._commit_s)
        return LiveStats(
            decodes=self._decodes, skipped=self._skipped, loops=self._loops,
            unprompted=self._context.unprompted(self._offset),
            first_token_ms_median=percentile(ft, 50), first_token_ms_p95=percentile(ft, 95),
            commit_s_median=percentile(cs, 50), commit_s_p95=percentile(cs, 95),
            last_first_token_ms=self._last_first_token_ms, last_decode_ms=self._last_decode_ms,
            last_encoder_ms=self._last_encoder_ms,
            last_tokens=self._last_result.n_tokens if self._last_result else 0,
            last_from_draft=self._last_result.draft_accepted if self._last_result else 0,
            last_draft_passes=self._last_result.draft_passes if self._last_result else 0,
            last_given=self._last_result.prefix_given if self._last_result else 0,
            audio_seconds=self.audio_seconds,
            buffer_seconds=self.buffer_seconds, dropped_seconds=self._dropped / SAMPLE_RATE,
            lost_seconds=self.lost_seconds)

    def preview(self, event: TokenEvent) -> Tuple[str, str]:
        """(committed, tentative) while a re-decode is still emitting tokens: its words
        after the ones already committed from this buffer."""
        in_buffer = sum(1 for w in self.policy.committed if w.end > self._offset / SAMPLE_RATE)
        return self.committed_text, " ".join(event.transcript.split()[in_buffer:])

    # ------------------------------------------------------------------ decoding (one thread)

    def updates(self) -> Iterator[Union[TokenEvent, LiveUpdate]]:
        """Re-decode if it is due: TokenEvents, then one LiveUpdate; nothing otherwise."""
        if self.finished:
            return
        self._take_pending()
        if self._due():
            yield from self._step(final=False)

    def _due(self) -> bool:
        """Enough new audio since the last re-decode, or the pause that ends an utterance
        has just become long enough (and there is something to commit)."""
        end = self._offset + self._buffer.size
        if end - self._decoded_to >= self.config.min_new_seconds * SAMPLE_RATE:
            return True
        pause = int(self.config.pause_seconds * SAMPLE_RATE)
        voice_end = self.vad.last_voice_end
        unheard_speech = voice_end > self._decoded_to
        # the last re-decode ran before this pause was long enough to count as one
        pause_new = self._decoded_to - voice_end < pause <= end - voice_end
        return pause_new and (unheard_speech or bool(self._tentative))

    def finish(self) -> Iterator[Union[TokenEvent, LiveUpdate]]:
        """Decode what is left and commit all of it. The session takes no more decodes."""
        if self.finished:
            yield self._update(Decision((), ()), decoded=False, final=True, reason="finished")
            return
        if self._stopped_at is None:
            self._stopped_at = self.clock()
        yield from self._step(final=True)
        self.finished = True

    def _take_pending(self) -> Optional[float]:
        """Move the waiting audio into the buffer and score it; the newest arrival time."""
        with self._lock:
            chunks, self._pending, self._pending_samples = self._pending, [], 0
            newest = self._arrivals[-1][1] if self._arrivals else None
        if chunks:
            audio = np.concatenate(chunks)
            self.vad.add(audio)
            self._buffer = np.concatenate([self._buffer, audio])
        limit = int(self.config.hard_limit_seconds * SAMPLE_RATE)
        if self._buffer.size > limit:  # decodes slower than the stream: never one window more
            self._dropped += self._buffer.size - limit
            self._cut_to(self._offset + self._buffer.size - limit)
        return newest

    def _step(self, final: bool):
        newest_arrival = self._take_pending()
        end = self._offset + self._buffer.size
        config = self.config
        voice_end = self.vad.last_voice_end
        has_speech = self.vad.voiced_seconds(self._offset) >= (1e-9 if final else config.min_speech_seconds)
        new_speech = voice_end > self._decoded_to

        if not has_speech or (not final and not new_speech and not self._tentative):
            # Nothing to transcribe, or nothing new said and all of it committed: don't ask
            # the decoder. After a long pause the buffer restarts: what was said before it
            # is committed and becomes the prompt, and Whisper is not left to invent text
            # in a long silence. A short pause stays, with the speech before it as context.
            self._skipped += 1
            self._decoded_to = end
            trimmed = 0.0
            silence = end - max(voice_end, self._offset)
            if not self._tentative and silence >= config.long_pause_seconds * SAMPLE_RATE:
                trimmed = self._cut_to(end - int(config.lead_in_seconds * SAMPLE_RATE))
            decision = self.policy.finish() if final else Decision((), self._tentative)
            yield self._update(decision, decoded=False, final=final, trimmed=trimmed,
                               reason="no speech" if not has_speech else "no new speech")
            return

        self._decodes += 1
        offset_s = self._offset / SAMPLE_RATE
        context = self._context.for_decode(self._offset, offset_s)
        started = self.clock()
        attempt = yield from decode_attempt(self.decoder(self._buffer, context.prompt, context.draft, context.prefix),
                                            newest_arrival, self.clock, self._offset / SAMPLE_RATE)
        first_token_ms, last_event, result = attempt.first_token_ms, attempt.last_event, attempt.result
        now = self.clock()
        self.last_activity = now
        self._decoded_to = end
        self._last_decode_ms = (now - started) * 1000
        self._last_encoder_ms = result.encoder_ms if result is not None else None
        self._last_result = result
        self._last_first_token_ms = first_token_ms
        if first_token_ms is not None:
            self._first_token_ms.append(first_token_ms)

        hyp = hypothesis(result, offset_s, end / SAMPLE_RATE, context.prefix, attempt.token_peaks)
        pause = (end - voice_end) >= config.pause_seconds * SAMPLE_RATE
        speech_end = voice_end / SAMPLE_RATE if pause else None
        context_change = self._context.decoded(self._offset, context, result, attempt.looped)
        if attempt.looped:
            self._loops += 1
            if not self.policy.reads_loops:
                hyp = None  # a loop's words get no vote
        if final:
            decision = self.policy.finish(hyp, speech_end)
        elif hyp is None:
            decision = Decision((), self._tentative, reason="decoder looped; hypothesis ignored" + context_change)
        else:
            decision = self.policy.update(hyp, speech_end)
        latencies = self._commit_latencies(decision.committed, now, record=not final)
        self._buffer_view = buffer_view(self._buffer, offset_s, hyp, decision, attempt.token_peaks,
                                        self.policy.committed_end, pause)
        trimmed = self._cut_to(cut_sample(self.vad, decision.cut_at)) if decision.cut_at is not None else 0.0
        if final:
            trimmed += self._cut_to(self._offset + self._buffer.size)
        yield self._update(decision, decoded=True, final=final, first_token_ms=first_token_ms,
                           latencies=latencies, result=result, last_event=last_event,
                           trimmed=trimmed, reason=decision.reason)

    def _cut_to(self, stream_sample: int) -> float:
        end = self._offset + self._buffer.size
        stream_sample = min(max(stream_sample, self._offset), end)
        n = stream_sample - self._offset
        if n <= 0:
            return 0.0
        self._buffer = self._buffer[n:].copy()
        self._offset = stream_sample
        self._context.new_buffer()
        self.vad.forget_before(self._offset)
        with self._lock:  # arrival marks are kept only for audio still held
            while len(self._arrivals) > 1 and self._arrivals[1][0] <= self._offset:
                self._arrivals.popleft()
        return n / SAMPLE_RATE

    def _commit_latencies(self, words, now: float, record: bool) -> Tuple[float, ...]:
        """Per committed word: from the arrival of the audio holding its end to now."""
        with self._lock:
            arrivals = list(self._arrivals)
        latencies = tuple(now - arrival_of(arrivals, w.end, now) for w in words)
        if record:
            self._commit_s.extend(latencies)
        return latencies

    def _update(self, decision: Decision, *, decoded: bool, final: bool, first_token_ms=None,
                latencies=(), result=None, last_event=None, trimmed=0.0, reason="") -> LiveUpdate:
        self._tentative = () if final else decision.tentative
        return LiveUpdate(
            committed=self.committed_text, tentative=self.tentative_text,
            new_committed=self.policy.shown_committed(len(decision.committed)), decoded=decoded,
            first_token_ms=first_token_ms, commit_latencies_s=tuple(latencies),
            stats=self.stats(), result=result, last_event=last_event,
            trimmed_seconds=trimmed, final=final, reason=reason,
            buffer=self._buffer_view and self._buffer_view.committed_to(self.policy.committed_end))


def cut_sample(vad: VoiceDetector, cut_at: float) -> int:
    """The policy's cut point moved into the pause that follows it, if one comes soon."""
    sample = int(round(cut_at * SAMPLE_RATE))
    pause = vad.pause_after(sample, within=int(0.5 * SAMPLE_RATE))
    return pause if pause is not None else sample


def arrival_of(arrivals: Sequence[Tuple[int, float]], stream_seconds: float, default: float) -> float:
    """When the audio holding a stream time arrived ((end sample, wall time) marks)."""
    sample = int(stream_seconds * SAMPLE_RATE)
    return next((wall for end, wall in arrivals if end >= sample), arrivals[-1][1] if arrivals else default)


def model_session(model, options=None, config: Optional[LiveConfig] = None, **session_args) -> LiveSession:
    """A LiveSession decoding with `model`, its decoder asked for what the config's policy
    reads (AlignAtt: each step's attention). session_args: vad, clock."""
    config = config or LiveConfig()
    return LiveSession(model_decoder(model, options, alignatt=config.reads_attention), config, **session_args)
