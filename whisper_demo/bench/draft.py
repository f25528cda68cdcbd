"""What a draft saves a live session: re-decodes of a growing buffer, with and without it.

    python -m whisper_demo.bench draft [--model tiny.en] [--audio clip.wav] [--precision exact]
                                       [--first 3] [--step 1] [--repeats 3] [--threads 2]

A live session re-decodes its buffer as it grows. Here the buffer grows by --step seconds
from --first seconds to the whole clip; each buffer is decoded greedily with the static
cache without a draft ("plain") and with the previous buffer's tokens as the draft
(DecodeOptions.draft_tokens), the two in alternating order, --repeats times, and the
median is kept. Reported per re-decode: decoder ms (decode_seconds: the steps, the
verifying pass included; the encoder excluded), tokens decoded, draft tokens offered and
accepted, decoder forwards run, encoder ms, and the encoder's share of the re-decode
(encoder / (encoder + decoder)); then the totals. The tokens of the two are checked equal.
"""

import argparse
import json
import statistics
from dataclasses import asdict, dataclass, replace
from typing import List, Optional

import numpy as np
import torch

from ..decode import transcribe
from ..events import DecodeOptions, DecodeResult
from ..precision import PRECISIONS

SAMPLE_RATE = 16000


@dataclass
class Redecode:
    seconds: float  # buffer length
    tokens: int  # decoder steps (tokens decoded, end of text included)
    draft_offered: int
    draft_accepted: int
    forwards_plain: int  # decoder forwards: one per step
    forwards_draft: int  # one pass for the verified steps, then one per step
    decoder_ms_plain: float
    decoder_ms_draft: float
    encoder_ms: float  # median of all runs of this buffer (the draft does not touch it)
    same_tokens: bool

    @property
    def encoder_share_plain(self) -> float:
        return self.encoder_ms / (self.encoder_ms + self.decoder_ms_plain)

    @property
    def encoder_share_draft(self) -> float:
        return self.encoder_ms / (self.encoder_ms + self.decoder_ms_draft)


def _forwards(result: DecodeResult) -> int:
    # A verifying pass serves the accepted steps and the step after them in one forward.
    return result.n_tokens - result.draft_accepted if result.draft_offered else result.n_tokens


def measure_growing(model, audio: np.ndarray, first_s: float = 3.0, step_s: float = 1.0,
                    repeats: int = 3, options: Optional[DecodeOptions] = None) -> List[Redecode]:
    """Re-decode audio[:3 s], audio[:4 s], ... with and without the previous tokens as the
    draft; one Redecode per buffer after the first (which has no previous decode)."""
    options = options or DecodeOptions(temperature_fallback=False)  # a draft serves greedy decoding
    transcribe(model, audio[: int(first_s * SAMPLE_RATE)], options)  # warm-up
    rows, previous = [], None
    seconds = first_s
    while seconds <= len(audio) / SAMPLE_RATE + 1e-9:
        buffer = audio[: int(seconds * SAMPLE_RATE)]
        plain_runs, draft_runs = [], []
        for repeat in range(repeats if previous is not None else 1):
            drafted = replace(options, draft_tokens=previous)
            order = [(options, plain_runs), (drafted, draft_runs)] if previous is not None else [(options, plain_runs)]
            for chosen, runs in order if repeat % 2 == 0 else order[::-1]:
                runs.append(transcribe(model, buffer, chosen))
        plain = plain_runs[0]
        if previous is not None:
            drafted = draft_runs[0]
            rows.append(Redecode(
                seconds=seconds, tokens=plain.n_tokens,
                draft_offered=drafted.draft_offered, draft_accepted=drafted.draft_accepted,
                forwards_plain=_forwards(plain), forwards_draft=_forwards(drafted),
                decoder_ms_plain=statistics.median(r.decode_seconds * 1000 for r in plain_runs),
                decoder_ms_draft=statistics.median(r.decode_seconds * 1000 for r in draft_runs),
                encoder_ms=statistics.median(r.encoder_ms for r in plain_runs + draft_runs),
                same_tokens=all(r.tokens == plain.tokens for r in plain_runs + draft_runs),
            ))
        previous = tuple(plain.tokens)
        seconds += step_s
    return rows


def summary(rows: List[Redecode]) -> dict:
    total = lambda name: sum(getattr(r, name) for r in rows)  # noqa: E731
    encoder = total("encoder_ms")
    return dict(
        redecodes=len(rows),
        all_same_tokens=all(r.same_tokens for r in rows),
        redecodes_with_accepted=sum(r.draft_accepted > 0 for r in rows),
        tokens=total("tokens"), draft_offered=total("draft_offered"),
        draft_accepted=total("draft_accepted"),
        forwards_plain=total("forwards_plain"), forwards_draft=total("forwards_draft"),
        decoder_ms_plain=round(total("decoder_ms_plain"), 1),
        decoder_ms_draft=round(total("decoder_ms_draft"), 1),
        decoder_speedup=round(total("decoder_ms_plain") / total("decoder_ms_draft"), 2),
        encoder_ms=round(encoder, 1),
        encoder_share_plain=round(encoder / (encoder + total("decoder_ms_plain")), 3),
        encoder_share_draft=round(encoder / (encoder + total("decoder_ms_draft")), 3),
    )


def main(argv=None):
    from ..audio import load_audio
    from ..examples import EXAMPLES_DIR
    from ..models import load_model

    parser = argparse.ArgumentParser(prog="python -m whisper_demo.bench draft", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--audio", default=str(EXAMPLES_DIR / "speech_25s.wav"))
    parser.add_argument("--first", type=float, default=3.0)
    parser.add_argument("--step", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=PRECISIONS, default="exact")
    parser.add_argument("--json", action="store_true", help="print the rows and summary as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_model(args.model, device="cpu", progress=False)
    rows = measure_growing(model, load_audio(args.audio), args.first, args.step, args.repeats,
                           DecodeOptions(precision=args.precision))
    if args.json:
        print(json.dumps(dict(rows=[asdict(r) for r in rows], summary=summary(rows)), indent=1))
        return
    print(f"{'buffer':>6} {'tokens':>6} {'offered':>7} {'accepted':>8} {'fwd':>9} "
          f"{'plain ms':>8} {'draft ms':>8} {'enc ms':>6} {'enc share':>11} same")
    for r in rows:
        print(f"{r.seconds:5.1f}s {r.tokens:6d} {r.draft_offered:7d} {r.draft_accepted:8d} "
              f"{r.forwards_plain:4d}>{r.forwards_draft:<4d} {r.decoder_ms_plain:8.1f} "
              f"{r.decoder_ms_draft:8.1f} {r.encoder_ms:6.1f} "
              f"{r.encoder_share_plain:5.2f}>{r.encoder_share_draft:<5.2f} {r.same_tokens}")
    print(json.dumps(summary(rows), indent=1))


if __name__ == "__main__":
    main()
