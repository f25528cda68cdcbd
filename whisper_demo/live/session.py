"""One live session: the audio buffer, when to decode it, and what to show.

    session = model_session(model, DecodeOptions())  # or LiveSession(decoder, final_decoder, ...)
    session.add_audio(48000, int16_chunk)      # any rate and size; thread safe, never waits
    for item in session.updates():             # nothing unless a decode is due
        if isinstance(item, TokenEvent): ...   # one per decoder step
        else: update = item                    # LiveUpdate: an immutable snapshot
    for item in session.finish(): ...          # the rest, made final
    session.final_text

Two passes, as production recognizers give interim and final results:

* The streamed pass re-decodes the utterance in progress (the buffer's audio since the
  last utterance a final pass judged; utterances.py) whenever `min_new_seconds` of audio
  came, and its policy (alignatt.py, policy.py) commits the words it is sure of within
  about a second: normal type on the page, never taken back by the streamed pass. The
  rest of each decode is tentative.
* The final pass (final_pass.py) runs at each end of an utterance: when the voice
  detector has heard `pause_seconds` without voice after speech, when the buffer reaches
  `cut_after_seconds` (it is then cut), and at finish(). It decodes the buffer's audio up
  to that point with transcribe's defaults; its words replace the streamed ones of the
  utterance, and the page marks those it changed (revision.py).

Which audio a final pass decodes depends on the audio alone: the end of an utterance is
the voice detector's (frame by frame, utterances.py), a buffer restarts `lead_in_seconds`
before its first voice, and a long buffer is cut where the final pass of its first
`cut_after_seconds` says; the prompt and the given words are earlier final text, and the
sampling of a window that falls back is seeded. So the final text is the same however
the chunks arrive and whenever the decodes run.

The decoders are passed in (callables, so a test can script them), the voice detector
too. All state belongs to the thread that calls updates()/finish() (the worker); other
threads only add audio (inbox.py) or read the LiveUpdates it produced, which never change.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterator, List, Optional, Tuple, Union

import numpy as np

from ..audio import SAMPLE_RATE, ChunkStream
from ..events import DecodeResult, TokenEvent
from .attempt import decode_attempt
from .config import LiveConfig, check_decoder, make_policy
from .context import ContextKeeper
from .decoder import Decoder, Prefix, loop_start, model_decoder
from .final_pass import FinalDecoder, Given, cut_point, final_words, midpoint, model_final_decoder
from .hypotheses import hypothesis
from .inbox import AudioInbox
from .meter import SessionMeter
from .policy import START_SLACK_S, Decision, TimedWord
from .revision import Revision, compare
from .snapshots import BufferView, LiveStats, LiveUpdate, buffer_view
from .utterances import FinalDue, Utterances, trimmed_start
from .vad import FRAME, VoiceDetector


class LiveSession:
    """One live session (a browser tab or a microphone). Many may share one model."""

    def __init__(self, decoder: Decoder, config: Optional[LiveConfig] = None, vad: Optional[VoiceDetector] = None,
                 clock: Callable[[], float] = time.monotonic, final_decoder: Optional[FinalDecoder] = None):
        """final_decoder: the final pass's; by default the streamed decoder's model with its
        options (cache mode, precision), as transcribe decodes (a scripted decoder that has
        no model must be given one)."""
        self.config = config or LiveConfig()
        check_decoder(decoder, self.config)
        self.decoder = decoder  # replaced by set_decoder (e.g. the cache switch)
        self.final_decoder = final_decoder or final_decoder_like(decoder, self.config)
        self.vad = vad if vad is not None else VoiceDetector()
        self.utterances = Utterances(self.vad, self.config)
        self.clock = clock
        self.policy = make_policy(self.config)
        self.inbox = AudioInbox(self.config.max_backlog_seconds, clock)
        self._chunks = ChunkStream()
        self._resampling = threading.Lock()

        self._buffer = np.zeros(0, dtype=np.float32)
        self._offset = 0  # stream sample of buffer[0]
        self._decoded_to = 0  # stream sample up to which the last streamed decode heard
        self._streamed_from = 0  # stream sample where the streamed decodes' audio starts
        self._streamed_trim = 0  # ... at the earliest, once a long utterance moved it on
        self._final_count = 0  # the policy's committed words that are final (the first ones)
        # the tokens the last final pass wrote for the final words of the buffer:
        # (buffer start, final words then, tokens)
        self._final_tokens: Optional[Tuple[int, int, Tuple[int, ...]]] = None
        # per committed word: when it was first shown committed, and by which pass
        self._committed_at: List[Tuple[float, str]] = []
        self._tentative: Tuple[TimedWord, ...] = ()
        self._buffer_view: Optional[BufferView] = None  # the audio the last decode read
        self._context = ContextKeeper(self.policy, self.config.prompt_chars, self.config.loop_reset_after)
        self.meter = SessionMeter(self.config.history)  # what the panel shows of the decodes
        self._in_final_pass = False
        self._trimmed = 0.0  # audio cut from the buffer's start since the last update
        self.finished = False

    # ------------------------------------------------------------------ input (any thread)

    def add_audio(self, sample_rate: int, chunk, arrived: Optional[float] = None) -> None:
        """Queue a chunk of any rate, dtype and channel count (AudioError if not audio),
        resampled as one stream with the chunks before it (audio.ChunkStream). arrived: when
        it reached the server, on this session's clock (default: now), for a chunk read
        some time after it came."""
        arrived = self.clock() if arrived is None else arrived
        with self._resampling:  # chunks are resampled, and queued, in the order they come
            self.inbox.add(self._chunks(sample_rate, np.asarray(chunk)), arrived)

    def add_samples(self, samples: np.ndarray) -> None:
        """Queue float32 mono 16 kHz samples."""
        self.inbox.add(np.ascontiguousarray(samples, dtype=np.float32).reshape(-1), self.clock())

    def set_decoder(self, decoder: Decoder) -> None:
        """Use another decoder (e.g. the cache switched off) from the next decode on: the
        final pass too, when the decoder has a model."""
        self.decoder = decoder
        if getattr(decoder, "model", None) is not None:
            self.final_decoder = final_decoder_like(decoder, self.config)

    # ------------------------------------------------------------------ state

    @property
    def committed_text(self) -> str:
        """Everything committed: the final words, then the streamed ones after them."""
        return self.policy.shown_committed()

    @property
    def final_text(self) -> str:
        """The words final passes gave (after finish(): the whole session's text)."""
        return " ".join(self.policy.shown_words(0, self._final_count))

    @property
    def streamed_text(self) -> str:
        """The streamed pass's committed words after the final ones (not final yet)."""
        return " ".join(self.policy.shown_words(self._final_count, len(self.policy.committed)))

    @property
    def tentative_text(self) -> str:
        return self.policy.shown_after(self._tentative)

    @property
    def last_activity(self) -> float:
        return self.inbox.last_activity

    @property
    def audio_seconds(self) -> float:
        return self.inbox.received / SAMPLE_RATE

    @property
    def buffer_seconds(self) -> float:
        return self._buffer.size / SAMPLE_RATE

    @property
    def lost_seconds(self) -> float:
        return self.inbox.lost_seconds

    def committed_words(self) -> List[Tuple[TimedWord, float, str, bool]]:
        """(word, when it was first shown committed on this session's clock, by which
        pass: "streamed" or "final pass", whether it is final) for each committed word:
        the benchmarks' delays."""
        return [(w, at, how, i < self._final_count)
                for i, (w, (at, how)) in enumerate(zip(self.policy.committed, self._committed_at))]

    def ready(self) -> bool:
        """Audio came that updates() has not looked at yet (cheap; any thread). Whether
        it makes a decode worth running is updates()' call: only the voice detector, which
        runs on the decoding thread, knows whether the speaker paused."""
        return not self.finished and self.inbox.waiting()

    def idle_seconds(self) -> float:
        return self.clock() - self.last_activity

    def silent_seconds(self) -> float:
        """Audio the voice detector has scored since the last voice in it (all it scored,
        if it never heard any). Only scored audio counts: a decoder that is behind does not
        make a speaker look silent. Any thread (it reads two counters)."""
        vad = self.vad
        return (vad.scored_until - max(vad.last_voice_end, 0)) / SAMPLE_RATE

    def stats(self) -> LiveStats:
        return self.meter.stats(unprompted=self._context.unprompted(self._streamed_from),
                                audio_seconds=self.audio_seconds, buffer_seconds=self.buffer_seconds,
                                dropped_seconds=self.inbox.dropped / SAMPLE_RATE, lost_seconds=self.lost_seconds)

    def preview(self, event: TokenEvent) -> Tuple[str, str]:
        """(committed, tentative) while a decode is still emitting tokens: the streamed
        decode's words after those already committed from this buffer. A final pass shows
        nothing until it is done (its text replaces the utterance's at once)."""
        if self._in_final_pass:
            return self.committed_text, self.tentative_text
        given = len(self.policy.committed_after(self._streamed_from / SAMPLE_RATE))
        return self.committed_text, " ".join(event.transcript.split()[given:])

    # ------------------------------------------------------------------ decoding (one thread)

    def updates(self) -> Iterator[Union[TokenEvent, LiveUpdate]]:
        """The final passes that are due, then a streamed decode if one is due: TokenEvents,
        then a LiveUpdate each; nothing when nothing is due."""
        if self.finished:
            return
        newest_arrival = self._take_pending()
        while (due := self._final_due()) is not None:
            yield from self._final_pass(due, newest_arrival)
        yield from self._streamed_step(newest_arrival)
        while (due := self._final_due()) is not None:  # a pause heard while it decoded
            yield from self._final_pass(due, newest_arrival)

    def finish(self) -> Iterator[Union[TokenEvent, LiveUpdate]]:
        """Decode what is left and make all of it final. The session takes no more decodes."""
        if self.finished:
            yield self._update(Decision((), ()), decoded=False, final=True, reason="finished")
            return
        if self.inbox.stopped_at is None:
            self.inbox.stopped_at = self.clock()
        with self._resampling:  # what the resampler still holds: the end of the recording
            self.inbox.add(self._chunks.flush(), self.clock())
        newest_arrival = self._take_pending()
        while (due := self._final_due()) is not None:
            yield from self._final_pass(due, newest_arrival)
        end = self._offset + self._buffer.size
        if self.utterances.unjudged_speech() or self._final_count < len(self.policy.committed):
            yield from self._final_pass(FinalDue(end, None, False), newest_arrival, last=True)
        else:
            self.meter.skipped += 1
            self._tentative = ()
            self._cut_to(end)
            yield self._update(Decision((), ()), decoded=False, final=True, reason="nothing more was said")
        self.finished = True

    def _take_pending(self) -> Optional[float]:
        """Move the waiting audio into the buffer and score it; the newest arrival time."""
        newest = self._take_audio()
        limit = int(self.config.hard_limit_seconds * SAMPLE_RATE)
        if self._buffer.size > limit:  # decodes slower than the stream: never one window more
            self.inbox.dropped += self._buffer.size - limit
            self._cut_to(self._offset + self._buffer.size - limit)
            self._final_before_buffer()
        self._restart_buffer()
        return newest

    def _pause_heard(self) -> bool:
        """Asked between a streamed decode's tokens: score the audio that came meanwhile
        (the voice detector only; the buffer is not cut mid-decode), and whether an
        utterance's end is now due for its final pass."""
        self._take_audio()
        due = self._final_due()
        return due is not None and due.speech_end is not None

    def _take_audio(self) -> Optional[float]:
        """Append the waiting audio to the buffer and score it; its newest arrival time."""
        audio, newest = self.inbox.take()
        if audio is not None:
            self.vad.add(audio)
            self._buffer = np.concatenate([self._buffer, audio])
        return newest

    def _restart_buffer(self) -> None:
        """A buffer holding no committed word starts `lead_in_seconds` before its first
        voice (decided by the voice detector's frames, not by when this runs); while it
        holds silence only, only that much of it is kept."""
        if not self.policy.committed_after(self._offset / SAMPLE_RATE):
            # no voice yet: what the detector has scored is silence (the samples after it,
            # less than a frame, may hold the onset: not cut, or the start would depend on
            # where the chunks ended)
            self._cut_to(self.utterances.lead_in_before_voice(self._offset, otherwise=self.vad.scored_until))

    def _final_before_buffer(self) -> None:
        """Audio was dropped unjudged (a decoder slower than the stream): the streamed words
        said before the buffer become final as they are, and its speech counts as judged."""
        start = self._offset / SAMPLE_RATE
        before = [w for w in self.policy.committed[self._final_count:] if w.end <= start + START_SLACK_S]
        if before:
            self.policy.finalize(self._final_count, len(before), before, self._tentative)
            self._final_count += len(before)
            self._final_tokens = None
        self.utterances.judged(self._offset)

    def _final_due(self) -> Optional[FinalDue]:
        return self.utterances.next_end(self._offset, self._offset + self._buffer.size)

    # ------------------------------------------------------------------ the final pass

    def _final_pass(self, due: FinalDue, newest_arrival: Optional[float], last: bool = False):
        """Decode the buffer up to `due.until`; its words after the final ones replace the
        streamed words there (all of them at a pause or the end; before the cut point at a
        cut)."""
        offset_s = self._offset / SAMPLE_RATE
        final_in_buffer = [self.policy.committed[i] for i in range(self._final_count)
                           if self.policy.committed[i].end > offset_s + START_SLACK_S]
        given_end = final_in_buffer[-1].end if final_in_buffer else None
        given = self._given(final_in_buffer, offset_s)
        decoded = self.utterances.unjudged_speech(due.until) or self._final_count < len(self.policy.committed)
        result, words, continued = None, [], False
        if decoded:
            result, words, continued = yield from self._final_words(due, final_in_buffer, given, newest_arrival)
        cut_s = None
        if due.cut:
            segment_ends = [offset_s + s.end for s in result.segments] if result is not None else []
            before = offset_s + self.config.cut_after_seconds - self.config.cut_keep_seconds
            cut_s = cut_point(words, segment_ends, given_end, before)
            if cut_s is None:  # no word there: cut the audio as it is
                cut_s = before
            cut_s = self.utterances.cut_sample(cut_s) / SAMPLE_RATE
            words = [w for w in words if midpoint(w) < cut_s]
        revision = self._make_final(words, cut_s, None if continued else result, due)
        self._buffer_view = buffer_view(self._buffer[:due.until - self._offset], offset_s, None,
                                        Decision((), ()), (), self.policy.committed_end, at_pause=True)
        if due.speech_end is not None:
            self.meter.final_delay_s.append(self.clock() - self.inbox.arrival_of(due.until / SAMPLE_RATE, self.clock()))
        self.utterances.judged(due.until if cut_s is None else int(round(cut_s * SAMPLE_RATE)))
        if cut_s is not None:
            self._cut_to(int(round(cut_s * SAMPLE_RATE)))
        if last:
            self._cut_to(self._offset + self._buffer.size)
        reason = ("the end" if last else "a pause: the utterance heard whole" if due.speech_end is not None
                  else "a long buffer, cut")
        yield self._update(Decision((), self._tentative), decoded=decoded, final=last, result=result,
                           reason=f"final pass at {reason}", revision=revision)

    def _final_words(self, due: FinalDue, final_in_buffer: List[TimedWord], given: Optional[Given],
                     newest_arrival: Optional[float]):
        """The final pass's decodes of the buffer up to `due.until` (final_pass.final_words):
        its TokenEvents; returns (the first decode's result, the new words, whether they
        came from a later decode)."""
        def decode(start: int, prompt: Optional[str], given_words: Optional[Given]):
            return self._final_decode(start, due.until, prompt, given_words, newest_arrival)

        utterance = self.utterances.lead_in_before_voice(self.utterances.judged_to, otherwise=self._offset)
        return (yield from final_words(
            decode, self._offset, self._context.text_before(self._offset / SAMPLE_RATE), final_in_buffer, given,
            speech_left=not due.cut and self.utterances.unjudged_speech(due.until),
            utterance_start=max(self._offset, utterance), prompt_chars=self.config.prompt_chars))

    def _final_decode(self, start: int, until: int, prompt: Optional[str], given: Optional[Given],
                      newest_arrival: Optional[float]):
        """One call to the final pass's decoder over stream samples start..until: its
        TokenEvents; returns its DecodeResult."""
        started, cpu_started = self.clock(), time.process_time()
        self._in_final_pass = True
        try:
            attempt = yield from decode_attempt(
                self.final_decoder(self._buffer[start - self._offset:until - self._offset], prompt, given),
                newest_arrival, self.clock, start / SAMPLE_RATE)
        finally:
            self._in_final_pass = False
        result = attempt.result
        self.meter.final_decoded(self.clock() - started, time.process_time() - cpu_started, result)
        return result

    def _given(self, words: List[TimedWord], offset_s: float) -> Optional[Given]:
        """The final words of the buffer as the final pass is given them: with the tokens
        the last final pass wrote for exactly these words, when it did."""
        if not words:
            return None
        tokens = None
        if self._final_tokens is not None and self._final_tokens[:2] == (self._offset, self._final_count):
            tokens = self._final_tokens[2]
        return Given(Prefix(tuple(w.text for w in words), max(0.0, words[0].start - offset_s)), tokens)

    def _make_final(self, words: List[TimedWord], cut_s: Optional[float], result: Optional[DecodeResult],
                    due: FinalDue) -> Revision:
        """Replace the streamed words the pass judged by its `words`; the revision made."""
        now = self.clock()
        first = self._final_count
        streamed = self.policy.committed[first:]
        tentative = list(self._tentative)
        if cut_s is not None:  # only what lies before the cut is judged
            streamed = [w for w in streamed if midpoint(w) < cut_s]
            tentative = [w for w in tentative if midpoint(w) < cut_s]
        changes, revised, kept = compare(streamed, tentative, words)
        at = [self._committed_at[first + kept[i]] if i in kept else (now, "final pass") for i in range(len(words))]
        self._commit_latencies([w for i, w in enumerate(words) if i not in kept], now)
        self._committed_at[first:first + len(streamed)] = at
        left = tuple(w for w in self._tentative if cut_s is not None and midpoint(w) >= cut_s)
        self.policy.finalize(first, len(streamed), words, left)
        self._tentative = left
        self._final_count = first + len(words)
        self.meter.streamed_judged += len(streamed)
        self.meter.revised += revised
        self._final_tokens = None
        if cut_s is None and result is not None:
            self._final_tokens = (self._offset, self._final_count, tuple(result.tokens))
        shown = tuple(self.policy.shown_words(first, self._final_count))
        return Revision(first, shown, changes, tuple(w.text for w in streamed), tuple(w.text for w in tentative),
                        revised, now)

    # ------------------------------------------------------------------ the streamed pass

    def _streamed_step(self, newest_arrival: Optional[float]):
        end = self._offset + self._buffer.size
        if end - self._decoded_to < self.config.min_new_seconds * SAMPLE_RATE:
            return  # not due: too little new audio
        # (the voice detector's frames are 32 ms: the last one may straddle the decode's end)
        new_speech = self.vad.last_voice_end > self._decoded_to + FRAME
        unjudged = self.utterances.unjudged_speech()
        if not unjudged or (not new_speech and not self._tentative):
            # Nothing said that is not final yet, or nothing new said and nothing tentative
            # left to settle: don't ask the decoder
            self.meter.skipped += 1
            self._decoded_to = end
            yield self._update(Decision((), self._tentative), decoded=False,
                               reason="no speech" if not unjudged else "no new speech")
            return
        self.meter.decodes += 1
        self._streamed_from = start = self._streamed_start(end)
        audio = self._buffer[start - self._offset:]
        offset_s = start / SAMPLE_RATE
        context = self._context.for_decode(start, offset_s)
        started, cpu_started = self.clock(), time.process_time()
        attempt = yield from decode_attempt(self.decoder(audio, context.prompt, context.draft, context.prefix),
                                            newest_arrival, self.clock, offset_s, stop=self._pause_heard)
        result = attempt.result
        now = self.clock()
        self._decoded_to = end
        if attempt.stopped:
            # The speaker paused while it decoded: the final pass, due now, hears the whole
            # utterance; finishing this decode would only keep it waiting.
            self.meter.last_decode_ms = (now - started) * 1000
            yield self._update(Decision((), self._tentative), decoded=True,
                               reason="a pause was heard while decoding: the final pass takes over")
            return
        self.meter.decoded(now - started, time.process_time() - cpu_started, result)
        self.meter.first_token(attempt.first_token_ms)

        hyp = hypothesis(result, offset_s, end / SAMPLE_RATE, context.prefix, attempt.token_peaks)
        context_change = self._context.decoded(start, context, result, attempt.looped)
        if attempt.looped:
            self.meter.loops += 1
            if not self.policy.reads_loops:
                hyp = None  # a loop's words get no vote
        if hyp is None:
            decision = Decision((), self._tentative, reason="decoder looped; hypothesis ignored" + context_change)
        else:
            decision = self.policy.update(hyp)
        self._committed_at += [(now, "streamed")] * len(decision.committed)
        latencies = self._commit_latencies(decision.committed, now)
        self._buffer_view = buffer_view(audio, offset_s, hyp, decision, attempt.token_peaks,
                                        self.policy.committed_end)
        self._tentative = decision.tentative
        if attempt.looped:  # its words after the loop began were not heard: not shown
            self._tentative = self._tentative[:loop_start([w.norm for w in self._tentative])]
        yield self._update(decision, decoded=True, first_token_ms=attempt.first_token_ms,
                           latencies=latencies, result=result, last_event=attempt.last_event,
                           reason=decision.reason)

    def _streamed_start(self, end: int) -> int:
        """Where a streamed decode's audio starts: the utterance in progress
        (Utterances.in_progress), from a committed word's end on once it is long
        (trimmed_start); the start only moves forward until the buffer moves on."""
        start = max(self.utterances.in_progress(self._offset, end), self._streamed_trim)
        trimmed = trimmed_start(start, end, self.policy.committed,
                                int(self.config.streamed_window_seconds * SAMPLE_RATE),
                                int(self.config.streamed_keep_seconds * SAMPLE_RATE))
        self._streamed_trim = trimmed
        return trimmed

    # ------------------------------------------------------------------ bookkeeping

    def _cut_to(self, stream_sample: int) -> float:
        end = self._offset + self._buffer.size
        stream_sample = min(max(stream_sample, self._offset), end)
        n = stream_sample - self._offset
        if n <= 0:
            return 0.0
        self._buffer = self._buffer[n:].copy()
        self._offset = stream_sample
        self._decoded_to = max(self._decoded_to, self._offset)
        self._context.new_buffer()
        self.vad.forget_before(min(self._offset, self.utterances.judged_to))
        self.inbox.forget_before(self._offset)
        self._trimmed += n / SAMPLE_RATE
        return n / SAMPLE_RATE

    def _commit_latencies(self, words, now: float) -> Tuple[float, ...]:
        """Per newly committed word: from the arrival of the audio holding its end to now."""
        latencies = tuple(now - self.inbox.arrival_of(w.end, now) for w in words)
        self.meter.commit_s.extend(latencies)
        return latencies

    def _update(self, decision: Decision, *, decoded: bool, final: bool = False, first_token_ms=None,
                latencies=(), result=None, last_event=None, reason="",
                revision: Optional[Revision] = None) -> LiveUpdate:
        if final:
            self._tentative = ()
        trimmed, self._trimmed = self._trimmed, 0.0
        return LiveUpdate(
            committed=self.committed_text, tentative=self.tentative_text,
            new_committed=self.policy.shown_committed(len(decision.committed)), decoded=decoded,
            first_token_ms=first_token_ms, commit_latencies_s=tuple(latencies),
            stats=self.stats(), result=result, last_event=last_event,
            trimmed_seconds=trimmed, final=final, reason=reason,
            buffer=self._buffer_view and self._buffer_view.committed_to(self.policy.committed_end),
            final_words=tuple(self.policy.shown_words(0, self._final_count)),
            streamed=self.streamed_text,
            revision=revision)


def final_decoder_like(decoder: Decoder, config: LiveConfig) -> FinalDecoder:
    """The final pass's decoder for a streamed one: its model and options (the cache mode),
    in the config's final precision."""
    model = getattr(decoder, "model", None)
    if model is None:
        raise ValueError("this decoder has no model to make the final pass's decoder of: "
                         "pass LiveSession(..., final_decoder=...)")
    return model_final_decoder(model, decoder.options, config.final_precision)


def model_session(model, options=None, config: Optional[LiveConfig] = None, **session_args) -> LiveSession:
    """A LiveSession decoding with `model`: the streamed decoder asked for what the
    config's policy reads (AlignAtt: each step's attention), and the final pass's.
    session_args: vad, clock."""
    config = config or LiveConfig()
    return LiveSession(model_decoder(model, options, alignatt=config.reads_attention), config, **session_args)
