"""The three ways the live benchmark feeds a stream of audio to a LiveSession, and what
each feed records (live_stream.py measures it).

- fast: every chunk is added, then the session's updates are drained; no clock is in
  play, so the same stream always gives the same text.
- paced: real time on a simulated clock. Chunks arrive every chunk-length of stream time
  and each re-decode costs an encoder pass plus a cost per decoder forward (by default
  the averages the fast feed measured), during which audio keeps arriving. Each decode
  then hears what it would on a machine of that speed, and the same costs always give
  the same text: a real-time result that can be reproduced, and compared between two
  versions of the code.
- realtime: a thread adds a chunk every chunk-length of wall time, as a microphone does;
  the decoder runs whenever enough audio came, as in the app.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from ..audio import SAMPLE_RATE
from ..events import TokenEvent
from ..live.config import LiveConfig
from ..live.decoders import model_decoder, model_final_decoder
from ..live.driver import Source, drive
from ..live.revision import Revision
from ..live.session import LiveSession, model_session
from ..live.snapshots import LiveUpdate


@dataclass
class FeedResult:
    feed: str
    committed: str  # the session's final text (after finish(), every committed word is final)
    # per final word: when it was first shown committed (stream seconds for the fast and
    # paced feeds, wall seconds since the first chunk for realtime), and by which pass:
    # "streamed" (the streamed pass committed it and the final pass kept it) or "final pass"
    commit_times: List[float]
    commit_rules: List[str]
    first_token_ms: List[float]
    decodes: int
    encoder_ms: float  # summed over the decodes that reported a result (with_result)
    decode_ms: float
    wall_seconds: float
    draft: Dict[str, int] = field(default_factory=dict)
    words: List[Tuple[str, float, float]] = field(default_factory=list)  # final, stream times
    looped: int = 0  # re-decodes that looped (no vote; see streamed_pass.py)
    with_result: int = 0  # decodes that reported a result, and with it their costs
    revisions: List[Revision] = field(default_factory=list)  # one per final pass
    final_delays_s: List[float] = field(default_factory=list)  # pause heard -> final text, at each pause
    final_passes: int = 0
    lost_words: int = 0  # streamed words a final pass removed with no final word over their time
    kept_streamed: int = 0  # streamed words no final word covered, kept as they are
    rescued: int = 0  # streamed words a final pass wrote around, kept (Transcript.revise)
    silent: int = 0  # streamed words dropped as heard in silence

    @property
    def streamed_text(self) -> str:
        """What the page showed of each utterance just before its final pass (the
        streamed words, committed and tentative): the interim result."""
        return " ".join(r.was for r in self.revisions if r.was)

    @property
    def streamed_committed(self) -> int:
        return sum(len(r.streamed) for r in self.revisions)

    @property
    def revised(self) -> int:
        return sum(r.revised for r in self.revisions)


class _Recorder:
    """The driver's publish: what each LiveUpdate adds to the feed's result."""

    def __init__(self, result: FeedResult):
        self.result = result

    def __call__(self, item) -> None:
        if not isinstance(item, LiveUpdate):
            return
        result, decode = self.result, item.result
        result.committed = item.committed
        result.looped = item.stats.loops
        if item.revision is not None:
            result.revisions.append(item.revision)
        if item.decoded and decode is not None:
            result.with_result += 1
            result.encoder_ms += decode.encoder_ms
            result.decode_ms += decode.decode_seconds * 1000
            confirmed = decode.draft_accepted
            for key, n in (("confirmed", confirmed), ("decoded", decode.n_tokens - confirmed),
                           ("passes", decode.draft_passes), ("given", decode.prefix_given)):
                result.draft[key] = result.draft.get(key, 0) + n


def _run(name: str, session: LiveSession, source: Source, clock_zero: float = 0.0) -> FeedResult:
    """Drive the session from the source to its end (driver.drive); what it committed, with
    each word's commit time in the feed's clock."""
    result = FeedResult(name, "", [], [], [], 0, 0.0, 0.0, 0.0)
    started = time.perf_counter()
    drive(session, source, _Recorder(result))
    stats = session.stats()
    words = session.committed_words()
    result.committed = session.final_text
    result.words = [(w.text, w.start, w.end) for w, _, _, _ in words]
    result.commit_times = [at - clock_zero for _, at, _, _ in words]
    result.commit_rules = [how for _, _, how, _ in words]
    result.first_token_ms = list(session.meter.first_token_ms)
    result.final_delays_s = list(session.meter.final_delay_s)
    result.decodes = stats.decodes
    result.final_passes = stats.final_passes
    result.lost_words = getattr(stats, 'lost_words', 0)
    result.kept_streamed = getattr(stats, 'kept_streamed', 0)
    result.rescued = getattr(stats, 'rescued_words', 0)
    result.silent = getattr(stats, 'silent_words', 0)
    result.wall_seconds = time.perf_counter() - started
    return result


def live_decoder(model, options, config: LiveConfig):
    """The model as the session's decoder, as the policy reads it."""
    return model_decoder(model, options, alignatt=config.reads_attention)


class _Chunks(Source):
    """The stream in chunks of `chunk_s`, each arriving at its end's stream time."""

    def __init__(self, audio: np.ndarray, chunk_s: float):
        self.audio = audio
        self.step = int(chunk_s * SAMPLE_RATE)
        self.starts = range(0, audio.size, self.step)
        self.arrivals = [min(audio.size, start + self.step) / SAMPLE_RATE for start in self.starts]
        self.next = 0  # the next chunk to add

    def add_next(self, session: LiveSession) -> None:
        session.add_samples(self.audio[self.starts[self.next]:self.starts[self.next] + self.step])
        self.next += 1

    def ended(self, session: LiveSession) -> bool:
        return self.next == len(self.starts) and not session.ready()


class _Fast(_Chunks):
    """Each pull adds the next chunk, the clock set to its arrival."""

    def __init__(self, audio: np.ndarray, chunk_s: float, clock: "SimulatedClock"):
        super().__init__(audio, chunk_s)
        self.clock = clock

    def pull(self, session: LiveSession) -> None:
        if self.next < len(self.starts):
            self.clock.now = self.arrivals[self.next]
            self.add_next(session)


def feed_fast(model, options, audio: np.ndarray, chunk_s: float, config: LiveConfig) -> FeedResult:
    """Every chunk added, then the updates drained: the session's clock is the stream
    position, so a commit's time less a word's end is the policy's own delay."""
    clock = SimulatedClock()
    return _run("fast", model_session(model, options, config, clock=clock), _Fast(audio, chunk_s, clock))


class SimulatedClock:
    """Stream seconds, moved on by the paced feed (chunk arrivals, decode costs)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class DecodeCosts:
    encoder_s: float  # one encoder pass
    step_s: float  # one decoder forward (a step, or a pass confirming draft tokens)

    @classmethod
    def measured(cls, result: FeedResult) -> "DecodeCosts":
        """The averages of a feed's re-decodes, rounded to the millisecond."""
        steps = result.draft.get("decoded", 0) + result.draft.get("passes", 0)
        return cls(round(result.encoder_ms / max(1, result.with_result)) / 1000,
                   round(result.decode_ms / max(1, steps)) / 1000)


def paced_decoder(decoder, clock: SimulatedClock, costs: DecodeCosts):
    """`decoder` on a simulated clock: its first token comes an encoder pass and one step
    after the decode starts, each later token one step after the one before (a run of
    draft tokens one step for the pass that confirmed them), and a decode that ends costs
    what its result counts: an encoder pass and one step per decoder forward. A decode
    stopped early (a loop) has been charged token by token up to where it stopped."""

    def decode(audio, prompt, *given):  # given: (draft, prefix), or the final pass's Given
        started, forwards, in_draft_pass = clock.now, 0, False
        for item in decoder(audio, prompt, *given):
            if isinstance(item, TokenEvent):
                if not item.from_draft or not in_draft_pass:
                    forwards += 1
                in_draft_pass = item.from_draft
                clock.now = started + costs.encoder_s + costs.step_s * forwards
            else:
                forwards = item.n_tokens - item.draft_accepted + item.draft_passes
                clock.now = started + costs.encoder_s + costs.step_s * max(1, forwards)
            yield item

    decode.options = getattr(decoder, "options", None)
    return decode


class _Paced(_Chunks):
    """Chunks arrive on the simulated clock, which the decodes move on: a pull adds those
    that came meanwhile; with nothing decoded, the clock moves to the next arrival."""

    def __init__(self, audio: np.ndarray, chunk_s: float, clock: SimulatedClock):
        super().__init__(audio, chunk_s)
        self.clock = clock

    def pull(self, session: LiveSession) -> None:
        while self.next < len(self.starts) and self.arrivals[self.next] <= self.clock.now + 1e-9:
            now, self.clock.now = self.clock.now, self.arrivals[self.next]
            self.add_next(session)
            self.clock.now = max(now, self.clock.now)

    def wait(self) -> None:
        if self.next < len(self.starts):
            self.clock.now = max(self.clock.now, self.arrivals[self.next])


def feed_paced(model, options, audio: np.ndarray, chunk_s: float, config: LiveConfig,
               costs: DecodeCosts) -> FeedResult:
    clock = SimulatedClock()
    final_decoder = model_final_decoder(model, options, config.final_precision)
    session = LiveSession(paced_decoder(live_decoder(model, options, config), clock, costs), config, clock=clock,
                          final_decoder=paced_decoder(final_decoder, clock, costs))
    return _run("paced", session, _Paced(audio, chunk_s, clock))


class _Microphone(_Chunks):
    """A thread adds a chunk every chunk-length of wall time, as a microphone does."""

    def __init__(self, audio: np.ndarray, chunk_s: float, session: LiveSession):
        super().__init__(audio, chunk_s)
        self.fed = threading.Event()
        self.t0 = time.monotonic()
        threading.Thread(target=self._play, args=(session, chunk_s), daemon=True).start()

    def _play(self, session: LiveSession, chunk_s: float) -> None:
        for i in range(len(self.starts)):
            delay = self.t0 + (i + 1) * chunk_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.add_next(session)
        self.fed.set()

    def ended(self, session: LiveSession) -> bool:
        return self.fed.is_set()

    def wait(self) -> None:
        time.sleep(0.01)


def feed_realtime(model, options, audio: np.ndarray, chunk_s: float, config: LiveConfig) -> FeedResult:
    session = model_session(model, options, config)
    microphone = _Microphone(audio, chunk_s, session)
    return _run("realtime", session, microphone, clock_zero=microphone.t0)
