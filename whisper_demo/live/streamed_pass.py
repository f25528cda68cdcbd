"""The streamed pass: when the utterance in progress is re-decoded, from where, with what
context, and which of its words the policy commits.

It re-decodes whenever `min_new_seconds` of audio came and something may have changed
(new speech, or tentative words left to settle). Its audio is the utterance in progress
(Utterances.in_progress), from a committed word's end on once that is long
(utterances.trimmed_start). Its policy (alignatt.py or agreement.py) reads the decode as a
Hypothesis and commits the words it is sure of; the rest is tentative.
"""

from __future__ import annotations

import time
from typing import Callable, Generator, Optional

import numpy as np

from ..events import TokenEvent
from .attempt import Attempt, decode_attempt
from .buffer import to_samples, to_seconds
from .config import Policy
from .context import DecodeContext
from .decoders import Decoder
from .hypotheses import hypothesis
from .loops import loop_start
from .parts import PassStep, SessionParts
from .snapshots import buffer_view
from .utterances import trimmed_start
from .vad import FRAME
from .words import Decision

Steps = Generator[TokenEvent, None, Optional[PassStep]]


class StreamedPass:
    def __init__(self, parts: SessionParts, decoder: Decoder, policy: Policy):
        self.parts = parts
        self.decoder = decoder  # replaced by LiveSession.set_decoder (e.g. the cache switch)
        self.policy = policy
        self.audio_start = 0  # stream sample where its decodes' audio starts
        self._heard_to = 0  # stream sample up to which the last decode heard
        self._trimmed_start = 0  # audio_start at the earliest, once a long utterance moved it on

    def step(self, newest_arrival: Optional[float], stop: Callable[[], bool]) -> Steps:
        """A re-decode if one is due: its TokenEvents; returns what it did (None: not due).
        `stop`, asked after each token: True ends the decode (the final pass takes over)."""
        parts = self.parts
        end = parts.buffer.end
        heard_to = max(self._heard_to, parts.buffer.offset)  # audio cut away counts as heard
        if to_seconds(end - heard_to) < parts.config.min_new_seconds:
            return None  # not due: too little new audio
        # (the voice detector's frames are 32 ms: the last one may straddle the decode's end)
        new_speech = parts.utterances.vad.last_voice_end > heard_to + FRAME
        unjudged = parts.utterances.unjudged_speech()
        if not unjudged or (not new_speech and not parts.transcript.tentative):
            # Nothing said that is not final yet, or nothing new said and nothing tentative
            # left to settle: don't ask the decoder
            parts.meter.skipped += 1
            self._heard_to = end
            return PassStep(decoded=False, reason="no speech" if not unjudged else "no new speech")
        parts.meter.decodes += 1
        self.audio_start = start = self._start(end)
        audio = parts.buffer.slice(start)  # (audio that comes while it decodes is not in it)
        context = parts.context.for_decode(start, to_seconds(start))
        started, cpu_started = parts.clock(), time.process_time()
        attempt = yield from decode_attempt(
            self.decoder(audio, context.prompt, context.draft, context.prefix),
            newest_arrival, parts.clock, to_seconds(start), stop=stop)
        now = parts.clock()
        self._heard_to = end
        if attempt.stopped:
            # The speaker paused while it decoded: the final pass, due now, hears the whole
            # utterance; finishing this decode would only keep it waiting.
            parts.meter.last_decode_ms = (now - started) * 1000
            return PassStep(decoded=True, reason="a pause was heard while decoding: the final pass takes over")
        parts.meter.decoded(now - started, time.process_time() - cpu_started, attempt.result)
        parts.meter.first_token(attempt.first_token_ms)
        return self._commit(attempt, audio, start, end, context, now)

    def _commit(self, attempt: Attempt, audio: np.ndarray, start: int, end: int, context: DecodeContext,
                now: float) -> PassStep:
        """What the policy commits of a decode of `audio`, stream samples start..end."""
        parts, result = self.parts, attempt.result
        hyp = hypothesis(result, to_seconds(start), to_seconds(end), context.prefix, attempt.token_peaks)
        context_change = parts.context.decoded(start, context, result, attempt.looped)
        if attempt.looped:
            parts.meter.loops += 1
            if not self.policy.reads_loops:
                hyp = None  # a loop's words get no vote
        if hyp is None:
            reason = "decoder looped; hypothesis ignored" + context_change
            decision = Decision((), parts.transcript.tentative, reason=reason)
        else:
            decision = self.policy.update(parts.transcript, hyp)
        parts.transcript.apply(decision, now)
        latencies = parts.commit_latencies(decision.committed, now)
        view = buffer_view(audio, to_seconds(start), hyp, decision, attempt.token_peaks,
                           parts.transcript.committed_end)
        if attempt.looped:  # its words after the loop began were not heard: not shown
            tentative = parts.transcript.tentative
            parts.transcript.tentative = tentative[:loop_start([w.norm for w in tentative])]
        return PassStep(decoded=True, reason=decision.reason, committed=len(decision.committed),
                        first_token_ms=attempt.first_token_ms, latencies=latencies, result=result,
                        last_event=attempt.last_event, view=view)

    def _start(self, end: int) -> int:
        """Where a decode's audio starts: the utterance in progress, from a committed word's
        end on once it is long; the start only moves forward until the buffer moves on."""
        parts = self.parts
        start = max(parts.utterances.in_progress(parts.buffer.offset, end), self._trimmed_start)
        self._trimmed_start = trimmed_start(start, end, parts.transcript.words,
                                            to_samples(parts.config.streamed_window_seconds),
                                            to_samples(parts.config.streamed_keep_seconds))
        return self._trimmed_start
