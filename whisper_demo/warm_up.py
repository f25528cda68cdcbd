"""The first decode's one-time costs, paid at start: the first transcription is then as
quick as the second.

A fresh process builds or loads, on its first decode, what every later decode reuses: the
C++ kernels of decoder steps (kernels/; bf16_attention.py for the fast encoder), built or
loaded from their cache; openai-whisper's DTW for word timing, compiled by numba (3-9 s);
the tokenizer's vocabulary and its special-token pattern (tiktoken compiles a regex of
every special token the first time a text is encoded: 0.4-0.6 s here); each precision's
decoder weights, packed for the kernels (runner.decoder_runner); the fast encoder's
weights (bf16_encoder.py or int8_encoder.py, by the CPU); and torch's first run of each operator.
Measured through the API (jfk.wav, 11 s, exact, 2 cores): the first transcription took
3.9 s and the next ones 1.0 and 1.1 s.

Rather than list those (and miss the next one added), warm_up decodes two seconds of an
example clip with each set of options the app decodes with, and live_session runs those
seconds through one live session (the voice detector's model, the streamed decoder's
options: another precision, attention, a shorter encoder input; the final pass's).

    warmed = warm_up(model, {"transcribe": options},
                     also={"live session (int8)": live_session(model, live_options),
                           "the page's first event": ui.warm_up_events})
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from . import bf16_attention, kernels, timing
from .audio import SAMPLE_RATE, load_audio
from .decode import transcribe
from .events import DecodeOptions
from .examples import clip_path

log = logging.getLogger(__name__)

WARM_UP_CLIP = "jfk.wav"
WARM_UP_SECONDS = 2.0  # real speech: a few tokens, word timing on them (any length encodes 30 s)


@dataclass(frozen=True)
class Warmed:
    what: str
    seconds: float


def warm_up_audio():
    return load_audio(clip_path(WARM_UP_CLIP))[: int(WARM_UP_SECONDS * SAMPLE_RATE)]


def live_session(model, options: DecodeOptions) -> Callable[[], object]:
    """A warm-up step: WARM_UP_SECONDS of speech through one live session, then Stop, as a
    user's first session runs (its first live decode took 1.1 s where the next took 0.5)."""
    def run():
        from .live import LiveConfig, drain, model_session

        session = model_session(model, options, LiveConfig())
        session.add_samples(warm_up_audio())
        drain(session.updates())
        return drain(session.finish())

    return run


def warm_up(model, decodes: Dict[str, DecodeOptions],
            also: Optional[Dict[str, Callable[[], object]]] = None) -> List[Warmed]:
    """Pay the one-time costs before the first user does: the kernels, word timing's
    compile, then one decode of WARM_UP_SECONDS of real speech with each of `decodes`
    (name -> options; the same options twice are decoded once), then `also` (name -> a
    call: what a caller's own first use loads, such as the page's). Logs what was warmed
    and how long each took, in one line, and returns it."""
    steps: Dict[str, Callable[[], object]] = {
        "kernels": kernels.library,  # logs which path decoder steps take, and why
        "bf16 attention": bf16_attention.library,  # the fast encoder's attention
        "word timing (DTW compile)": timing.warm_up,
    }
    audio = warm_up_audio()
    seen = set()
    for name, options in decodes.items():
        if options not in seen:
            seen.add(options)
            steps[f"{name} decode ({options.precision})"] = lambda o=options: transcribe(model, audio, o)
    steps.update(also or {})
    started = time.perf_counter()
    warmed = []
    for what, step in steps.items():
        began = time.perf_counter()
        try:
            step()
        except Exception:  # a cost not paid now is paid by the first decode, as before
            log.exception("warm-up: %s failed", what)
            continue
        warmed.append(Warmed(what, time.perf_counter() - began))
    log.info("warm-up done in %.1f s: %s", time.perf_counter() - started,
             ", ".join(f"{w.what} {w.seconds:.2f} s" for w in warmed))
    return warmed
