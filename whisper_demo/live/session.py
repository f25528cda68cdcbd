"""One live session: audio in, the two passes in their order, immutable updates out.

    session = model_session(model, DecodeOptions())  # or LiveSession(decoder, config, final_decoder=...)
    session.add_audio(48000, int16_chunk)      # any rate and size; thread safe, never waits
    for item in session.updates():             # nothing unless a decode is due
        if isinstance(item, TokenEvent): ...   # one per decoder step
        else: update = item                    # LiveUpdate: an immutable snapshot
    for item in session.finish(): ...          # the rest, made final
    session.final_text

Two passes, as production recognizers give interim and final results: the streamed pass
(streamed_pass.py) re-decodes the utterance in progress and commits the words its policy
is sure of; the final pass (final_pass.py) runs at each end of an utterance (a pause, a
full buffer, finish()) and gives it the text of one decode that heard all of it, and every
few seconds in speech that does not pause (final up to a few seconds before its end). This
class only decides their order: the final passes that are due, then a streamed decode,
then the final passes due after it (a pause heard while it decoded).

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

import time
from dataclasses import replace
from typing import Callable, Iterator, List, Optional, Tuple, Union

import numpy as np

from ..events import TokenEvent
from .buffer import AudioBuffer, to_samples, to_seconds
from .config import LiveConfig, check_decoder, make_policy
from .context import ContextKeeper
from .decoders import Decoder, FinalDecoder, final_decoder_like, model_decoder
from .final_pass import FinalPass
from .inbox import AudioInbox
from .meter import SessionMeter
from .parts import PassStep, SessionParts
from .snapshots import BufferView, LiveStats, LiveUpdate
from .streamed_pass import StreamedPass
from .transcript import Transcript
from .utterances import FinalDue, Utterances
from .vad import VoiceDetector
from .words import TimedWord

Items = Iterator[Union[TokenEvent, LiveUpdate]]


class LiveSession:
    """One live session (a browser tab or a microphone). Many may share one model."""

    def __init__(self, decoder: Decoder, config: Optional[LiveConfig] = None, vad: Optional[VoiceDetector] = None,
                 clock: Callable[[], float] = time.monotonic, final_decoder: Optional[FinalDecoder] = None):
        """final_decoder: the final pass's; by default the streamed decoder's model with its
        options (cache mode), as transcribe decodes (a scripted decoder that has no model
        must be given one)."""
        self.config = config = config or LiveConfig()
        check_decoder(decoder, config)
        self.vad = vad if vad is not None else VoiceDetector()
        self.clock = clock
        self.inbox = AudioInbox(config.max_backlog_seconds, clock)
        policy = make_policy(config)
        self.transcript = Transcript(capitalises=policy.reopens_last_word)
        self.buffer = AudioBuffer(on_cut=self._forget_before)
        self.utterances = Utterances(self.vad, config)
        self.context = ContextKeeper(self.transcript, policy.reopens_last_word, config.prompt_chars,
                                     config.loop_reset_after)
        self.meter = SessionMeter(config.history)  # what the panel shows of the decodes
        parts = SessionParts(config, clock, self.buffer, self.transcript, self.utterances, self.context,
                             self.meter, self.inbox)
        self.streamed = StreamedPass(parts, decoder, policy)
        self.final = FinalPass(parts, final_decoder or final_decoder_like(decoder, config.final_precision))
        self._buffer_view: Optional[BufferView] = None  # the audio the last decode read
        self.finished = False

    # ------------------------------------------------------------------ input (any thread)

    def add_audio(self, sample_rate: int, chunk, arrived: Optional[float] = None) -> None:
        """Queue a chunk of any rate, dtype and channel count (AudioError if not audio),
        resampled as one stream with the chunks before it (audio.ChunkStream). arrived: when
        it reached the server, on this session's clock (default: now), for a chunk read
        some time after it came."""
        self.inbox.add_chunk(sample_rate, chunk, self.clock() if arrived is None else arrived)

    def add_samples(self, samples: np.ndarray) -> None:
        """Queue float32 mono 16 kHz samples."""
        self.inbox.add(np.ascontiguousarray(samples, dtype=np.float32).reshape(-1), self.clock())

    @property
    def decoder(self) -> Decoder:
        return self.streamed.decoder

    def set_decoder(self, decoder: Decoder) -> None:
        """Use another decoder (e.g. the cache switched off) from the next decode on: the
        final pass too, when the decoder has a model."""
        self.streamed.decoder = decoder
        if getattr(decoder, "model", None) is not None:
            self.final.decoder = final_decoder_like(decoder, self.config.final_precision)

    # ------------------------------------------------------------------ state (the decoding thread)

    # The transcript as the page shows it: everything committed (the final words, then the
    # streamed ones after them), the final words (after finish(): the whole session's
    # text), the streamed committed words after them, and the tentative rest.
    committed_text = property(lambda self: self.transcript.committed_text)
    final_text = property(lambda self: self.transcript.final_text)
    streamed_text = property(lambda self: self.transcript.streamed_text)
    tentative_text = property(lambda self: self.transcript.tentative_text)

    def committed_words(self) -> List[Tuple[TimedWord, float, str, bool]]:
        """(word, when it was first shown committed on this session's clock, by which
        pass: "streamed" or "final pass", whether it is final) for each committed word:
        the benchmarks' delays."""
        return [(r.word, r.shown_at, r.by, r.final) for r in self.transcript.records]

    def stats(self) -> LiveStats:
        stats = self.meter.stats(unprompted=self.context.unprompted(self.streamed.audio_start),
                                 audio_seconds=self.audio_seconds, buffer_seconds=self.buffer_seconds,
                                 dropped_seconds=to_seconds(self.inbox.dropped), lost_seconds=self.lost_seconds)
        return replace(stats, lost_words=len(self.transcript.lost), kept_streamed=self.transcript.kept_streamed,
                       rescued_words=self.transcript.rescued, silent_words=len(self.transcript.silent))

    def preview(self, event: TokenEvent) -> Tuple[str, str]:
        """(committed, tentative) while a decode is still emitting tokens: the streamed
        decode's words after those already committed from its audio. A final pass shows
        nothing until it is done (its text replaces the utterance's at once)."""
        if self.final.running:
            return self.committed_text, self.tentative_text
        given = len(self.transcript.committed_after(to_seconds(self.streamed.audio_start)))
        return self.committed_text, " ".join(event.transcript.split()[given:])

    # ------------------------------------------------------------------ state (any thread)

    last_activity = property(lambda self: self.inbox.last_activity)
    audio_seconds = property(lambda self: to_seconds(self.inbox.received))  # received so far
    buffer_seconds = property(lambda self: self.buffer.seconds)
    lost_seconds = property(lambda self: self.inbox.lost_seconds)

    def ready(self) -> bool:
        """Audio came that updates() has not looked at yet (cheap). Whether it makes a
        decode worth running is updates()' call: only the voice detector, which runs on the
        decoding thread, knows whether the speaker paused."""
        return not self.finished and self.inbox.waiting()

    def idle_seconds(self) -> float:
        return self.clock() - self.last_activity

    def silent_seconds(self) -> float:
        """Audio the voice detector has scored since the last voice in it (all it scored,
        if it never heard any). Only scored audio counts: a decoder that is behind does not
        make a speaker look silent."""
        return to_seconds(self.vad.scored_until - max(self.vad.last_voice_end, 0))

    # ------------------------------------------------------------------ decoding (one thread)

    def updates(self) -> Items:
        """The final passes that are due, then a streamed decode if one is due, then the
        final passes due after it: TokenEvents, then a LiveUpdate each; nothing when
        nothing is due."""
        if self.finished:
            return
        newest_arrival = self._take_pending()
        yield from self._final_passes(newest_arrival)
        yield from self._published(self.streamed.step(newest_arrival, stop=self._pause_heard))
        yield from self._final_passes(newest_arrival)  # a pause heard while it decoded

    def finish(self) -> Items:
        """Decode what is left and make all of it final. The session takes no more decodes."""
        if self.finished:
            yield self._update(PassStep(decoded=False, reason="finished", final=True))
            return
        if self.inbox.stopped_at is None:
            self.inbox.stopped_at = self.clock()
        self.inbox.flush(self.clock())
        newest_arrival = self._take_pending()
        yield from self._final_passes(newest_arrival)
        if self.final.worth_running():
            everything = FinalDue(self.buffer.end, None, False)
            yield from self._published(self.final.run(everything, newest_arrival, last=True))
        else:
            self.meter.skipped += 1
            self.buffer.cut_to(self.buffer.end)
            yield self._update(PassStep(decoded=False, reason="nothing more was said", final=True))
        self.finished = True

    def _final_passes(self, newest_arrival: Optional[float]) -> Items:
        while (due := self.final.due()) is not None:
            yield from self._published(self.final.run(due, newest_arrival))

    def _published(self, steps) -> Items:
        """A pass's TokenEvents, then its step as a LiveUpdate (none if it did nothing)."""
        step = yield from steps
        if step is not None:
            yield self._update(step)

    def _take_pending(self) -> Optional[float]:
        """Move the waiting audio into the buffer and score it; the newest arrival time."""
        newest = self._take_audio()
        limit = to_samples(self.config.hard_limit_seconds)
        if self.buffer.samples.size > limit:  # decodes slower than the stream: never one window more
            self.inbox.dropped += self.buffer.samples.size - limit
            self.buffer.cut_to(self.buffer.end - limit)
            self.final.settle_dropped()
        if not self.transcript.committed_after(self.buffer.start_s):
            # A buffer holding no committed word starts `lead_in_seconds` before its first
            # voice (decided by the voice detector's frames, not by when this runs); while
            # it holds silence only, only that much is kept. (The samples after what the
            # detector scored, less than a frame, may hold the onset: not cut, or the start
            # would depend on where the chunks ended.)
            voice = self.utterances.lead_in_before_voice(self.buffer.offset, otherwise=self.vad.scored_until)
            self.buffer.cut_to(voice)
        return newest

    def _pause_heard(self) -> bool:
        """Asked between a streamed decode's tokens: score the audio that came meanwhile
        (the buffer is not cut mid-decode), and whether an utterance's end is now due."""
        self._take_audio()
        due = self.final.due()
        return due is not None and due.speech_end is not None

    def _take_audio(self) -> Optional[float]:
        """Append the waiting audio to the buffer and score it; its newest arrival time."""
        audio, newest = self.inbox.take()
        if audio is not None:
            self.vad.add(audio)
            self.buffer.append(audio)
        return newest

    def _forget_before(self, offset: int) -> None:
        """The buffer was cut: what else keeps audio or counts per buffer follows it."""
        self.context.new_buffer()
        self.vad.forget_before(min(offset, self.utterances.judged_to))
        self.inbox.forget_before(offset)

    def _update(self, step: PassStep) -> LiveUpdate:
        transcript = self.transcript
        if step.final:
            transcript.tentative = ()
        if step.view is not None:
            self._buffer_view = step.view
        final_words = tuple(transcript.shown_words(0, transcript.final_count))
        final_timed = tuple(replace(word, text=shown) for word, shown in zip(transcript.words, final_words))
        return LiveUpdate(
            committed=transcript.committed_text, tentative=transcript.tentative_text,
            new_committed=transcript.shown_committed(step.committed), decoded=step.decoded,
            first_token_ms=step.first_token_ms, commit_latencies_s=step.latencies,
            stats=self.stats(), result=step.result, last_event=step.last_event,
            trimmed_seconds=self.buffer.take_trimmed(), final=step.final, reason=step.reason,
            buffer=self._buffer_view and self._buffer_view.committed_to(transcript.committed_end),
            final_words=final_words, final_timed_words=final_timed,
            streamed=transcript.streamed_text, revision=step.revision)


def model_session(model, options=None, config: Optional[LiveConfig] = None, **session_args) -> LiveSession:
    """A LiveSession decoding with `model`: the streamed decoder asked for what the
    config's policy reads (AlignAtt: each step's attention), and the final pass's.
    session_args: vad, clock."""
    config = config or LiveConfig()
    return LiveSession(model_decoder(model, options, alignatt=config.reads_attention), config, **session_args)
