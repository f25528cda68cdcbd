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
from ..live.decoder import model_decoder
from ..live.config import LiveConfig
from ..live.final_pass import model_final_decoder
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
    looped: int = 0  # re-decodes that looped (no vote; see session.py)
    with_result: int = 0  # decodes that reported a result, and with it their costs
    revisions: List[Revision] = field(default_factory=list)  # one per final pass
    final_delays_s: List[float] = field(default_factory=list)  # pause heard -> final text, at each pause
    final_passes: int = 0

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


def _record(update: LiveUpdate, result: FeedResult) -> None:
    result.committed = update.committed
    result.looped = update.stats.loops
    if update.revision is not None:
        result.revisions.append(update.revision)
    if update.decoded and update.result is not None:
        result.with_result += 1
        result.encoder_ms += update.result.encoder_ms
        result.decode_ms += update.result.decode_seconds * 1000
        confirmed = update.result.draft_accepted
        result.draft["confirmed"] = result.draft.get("confirmed", 0) + confirmed
        result.draft["decoded"] = result.draft.get("decoded", 0) + update.result.n_tokens - confirmed
        result.draft["passes"] = result.draft.get("passes", 0) + update.result.draft_passes
        result.draft["given"] = result.draft.get("given", 0) + update.result.prefix_given


def _drain(items, result: FeedResult) -> bool:
    """Record the LiveUpdates of an updates()/finish() call; whether one ran a decode."""
    decoded = False
    for item in items:
        if isinstance(item, LiveUpdate):
            _record(item, result)
            decoded = decoded or item.decoded
    return decoded


def _finish(session: LiveSession, result: FeedResult, started: float, clock_zero: float = 0.0) -> FeedResult:
    """What the session committed, with each word's commit time in the feed's clock."""
    _drain(session.finish(), result)
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
    result.wall_seconds = time.perf_counter() - started
    return result


def live_decoder(model, options, config: LiveConfig):
    """The model as the session's decoder, as the policy reads it."""
    return model_decoder(model, options, alignatt=config.reads_attention)


def feed_fast(model, options, audio: np.ndarray, chunk_s: float, config: LiveConfig) -> FeedResult:
    """Every chunk added, then the updates drained: the session's clock is the stream
    position, so a commit's time less a word's end is the policy's own delay."""
    clock = SimulatedClock()
    session = model_session(model, options, config, clock=clock)
    result = FeedResult("fast", "", [], [], [], 0, 0.0, 0.0, 0.0)
    step = int(chunk_s * SAMPLE_RATE)
    started = time.perf_counter()
    for start in range(0, audio.size, step):
        clock.now = min(audio.size, start + step) / SAMPLE_RATE
        session.add_samples(audio[start:start + step])
        _drain(session.updates(), result)
    return _finish(session, result, started)


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


def feed_paced(model, options, audio: np.ndarray, chunk_s: float, config: LiveConfig,
               costs: DecodeCosts) -> FeedResult:
    clock = SimulatedClock()
    session = LiveSession(paced_decoder(live_decoder(model, options, config), clock, costs), config, clock=clock,
                          final_decoder=paced_decoder(model_final_decoder(model, options, config.final_precision), clock, costs))
    result = FeedResult("paced", "", [], [], [], 0, 0.0, 0.0, 0.0)
    step = int(chunk_s * SAMPLE_RATE)
    starts = range(0, audio.size, step)
    arrivals = [min(audio.size, start + step) / SAMPLE_RATE for start in starts]
    started = time.perf_counter()
    i = 0
    while i < len(starts):
        while i < len(starts) and arrivals[i] <= clock.now + 1e-9:  # what came meanwhile
            now, clock.now = clock.now, arrivals[i]
            session.add_samples(audio[starts[i]:starts[i] + step])
            clock.now, i = max(now, arrivals[i]), i + 1
        decoded = session.ready() and _drain(session.updates(), result)  # as the worker polls
        if not decoded and i < len(starts):
            clock.now = max(clock.now, arrivals[i])  # wait for the next chunk
    return _finish(session, result, started)


def feed_realtime(model, options, audio: np.ndarray, chunk_s: float, config: LiveConfig) -> FeedResult:
    session = model_session(model, options, config)
    result = FeedResult("realtime", "", [], [], [], 0, 0.0, 0.0, 0.0)
    step = int(chunk_s * SAMPLE_RATE)
    fed = threading.Event()
    t0 = time.monotonic()

    def microphone():
        for i, start in enumerate(range(0, audio.size, step)):
            delay = t0 + (i + 1) * chunk_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            session.add_samples(audio[start:start + step])
        fed.set()

    started = time.perf_counter()
    threading.Thread(target=microphone, daemon=True).start()
    while not fed.is_set():
        if not (session.ready() and _drain(session.updates(), result)):
            time.sleep(0.01)
    return _finish(session, result, started, clock_zero=t0)
