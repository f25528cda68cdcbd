"""The sessions `live_eval` feeds, in the layouts people make: each recording as recorded
(speech from the first sample to the last), padded with a microphone's silence, at lead
offsets, chained into long sessions with pauses (seeded orders), or joined with none."""

from __future__ import annotations

import random
from itertools import zip_longest
from pathlib import Path
from typing import List, Optional

import numpy as np

from ..audio import SAMPLE_RATE, load_audio
from .data import manifest

LEAD_SECONDS, TAIL_SECONDS = 0.5, 1.0
LAYOUTS = ("recorded", "padded", "lead0", "lead40", "lead90", "lead250", "lead500", "chained", "pauseless")
CHAIN_SEED, CHAIN_PAUSES = 7, (0.3, 2.0)
PAUSELESS_SECONDS = 120.0
PAUSE_COUNTED = 1.0  # words written inside a pause this long are inserted


def load_sessions(eval_dir: Path, every: int = 1, subset: Optional[str] = None, start: int = 0,
                  layout: str = "padded", chains: int = 7) -> List[dict]:
    """The manifest's recordings (every `every`-th from `start`, of one subset if named) as
    sessions in one layout:

    - padded: with a microphone's silence before (0.5 s) and after (1 s) each;
    - recorded: as recorded, speech from the first sample to the last (Stop right after
      the last word);
    - leadN: N ms of silence before, none after;
    - chained: the sketch's groups (../shared/tools/two_pass_sketch.py: 4 sessions of 10
      hard clips, 3 of 5 read recordings, seeded orders), joined with 0.3-2 s pauses, no
      padding (`chains` of them; --every/--start do not apply);
    - pauseless: each subset's recordings in a seeded order joined with no pause, in
      sessions of ~2 minutes (up to `chains` of each subset).

    Each session says where its silence lies (`pauses`, stream seconds): the words the
    final text writes inside those of >= 1 s are counted as inserted."""
    items = [item for item in manifest(eval_dir, required=True) if subset is None or item.get("subset") == subset]
    if layout in ("chained", "pauseless"):
        return _chained(eval_dir, items, layout, chains)
    items = items[start::every]
    lead_s, tail_s = _lead_tail(layout)
    lead, tail = np.zeros(int(lead_s * SAMPLE_RATE), np.float32), np.zeros(int(tail_s * SAMPLE_RATE), np.float32)
    sessions = []
    for item in items:
        audio = load_audio(eval_dir / item["audio"])
        pauses = [p for p in ((0.0, lead_s), (lead_s + audio.size / SAMPLE_RATE, lead_s + audio.size / SAMPLE_RATE
                                                + tail_s)) if p[1] > p[0]]
        sessions.append(dict(id=_session_id(layout, item["id"]), subset=item.get("subset", ""), layout=layout,
                             reference=item["reference"], audio=np.concatenate([lead, audio, tail]), pauses=pauses))
    return sessions


def _session_id(layout: str, name: str) -> str:
    return name if layout == "padded" else f"{layout}:{name}"


def _lead_tail(layout: str):
    if layout == "padded":
        return LEAD_SECONDS, TAIL_SECONDS
    if layout == "recorded":
        return 0.0, 0.0
    if layout.startswith("lead") and layout[4:].isdigit():
        return int(layout[4:]) / 1000, 0.0
    raise ValueError(f"unknown layout {layout!r}: {', '.join(LAYOUTS)} (or leadN, N ms)")


def _chained(eval_dir: Path, items: List[dict], layout: str, chains: int) -> List[dict]:
    """The chained sessions (see load_sessions), each with its reference and pauses."""
    from ..text import words as norm_words

    rows = [r for r in items if norm_words(r["reference"])]
    rng = random.Random(CHAIN_SEED)
    hard = [r for r in rows if r.get("subset") == "dev"]
    read = [r for r in rows if r.get("subset") == "dev_ordinary"]
    rng.shuffle(hard)
    rng.shuffle(read)
    if layout == "chained":
        groups = ([("dev", hard[i:i + 10]) for i in range(0, min(40, len(hard)), 10)]
                  + [("dev_ordinary", read[i:i + 5]) for i in range(0, min(15, len(read)), 5)])
        groups = [g for g in groups if g[1]]
        # as many of each subset as asked, hard and read alternating
        hard_groups, read_groups = [g for g in groups if g[0] == "dev"], [g for g in groups if g[0] != "dev"]
        groups = [g for pair in zip_longest(hard_groups, read_groups) for g in pair if g is not None][:chains]
    else:  # each subset's recordings in ~2-minute runs, up to `chains` of each
        groups = [("dev_ordinary", chain) for chain in _pauseless_runs(read)[:chains]]
        groups += [("dev", chain) for chain in _pauseless_runs(hard)[:chains]]
    sessions = []
    for subset, members in groups:
        parts, pauses, t = [], [], 0.0
        for i, r in enumerate(members):
            audio = load_audio(eval_dir / r["audio"])
            parts.append(audio)
            t += audio.size / SAMPLE_RATE
            if layout == "chained" and i < len(members) - 1:
                gap = rng.uniform(*CHAIN_PAUSES)
                parts.append(np.zeros(int(gap * SAMPLE_RATE), np.float32))
                pauses.append((t, t + gap))
                t += gap
        name = f"{layout}:{subset}:" + "+".join(r["id"] for r in members[:2]) + f"+{len(members) - 2}"
        sessions.append(dict(id=name, subset=subset, layout=layout, reference=" ".join(r["reference"] for r in members),
                             audio=np.concatenate(parts), pauses=pauses))
    return sessions


def _pauseless_runs(rows: List[dict]) -> List[List[dict]]:
    """Consecutive recordings joined into runs of at least PAUSELESS_SECONDS (a shorter
    last run is kept if it is at least half that)."""
    runs, chain, seconds = [], [], 0.0
    for r in rows:
        chain.append(r)
        seconds += float(r.get("duration_s", 0.0))
        if seconds >= PAUSELESS_SECONDS:
            runs.append(chain)
            chain, seconds = [], 0.0
    if chain and seconds >= PAUSELESS_SECONDS / 2:
        runs.append(chain)
    return runs


def words_in_pauses(words, pauses, reference: Optional[str] = None, longest: float = PAUSE_COUNTED) -> List[str]:
    """Final words (text, start, end) whose middle lies inside a pause of >= `longest` s;
    given the `reference`, only those the alignment against it calls inserted (a word that
    was said, whose word timing runs on into the pause after it, was not written there)."""
    long = [(a, b) for a, b in pauses if b - a >= longest]
    inside = [i for i, (_, start, end) in enumerate(words) if any(a + 0.1 < (start + end) / 2 < b - 0.1 for a, b in long)]
    if inside and reference is not None:
        inserted = inserted_words([text for text, _, _ in words], reference)
        inside = [i for i in inside if i in inserted]
    return [f"{words[i][0]}@{words[i][1]:.1f}" for i in inside]


def inserted_words(texts: List[str], reference: str) -> set:
    """Indices of the words (as written) that the alignment against `reference` (jiwer, on
    normalized words) calls inserted: a word is inserted when every normalized word it
    makes is."""
    import jiwer

    from ..text import words as normalized

    owner = [i for i, text in enumerate(texts) for _ in normalized(text)]
    hypothesis, ref = [w for text in texts for w in normalized(text)], normalized(reference)
    if not hypothesis:
        return set()
    if not ref:
        return set(owner)
    aligned = jiwer.process_words(" ".join(ref), " ".join(hypothesis)).alignments[0]
    inserted = {k for chunk in aligned if chunk.type == "insert" for k in range(chunk.hyp_start_idx, chunk.hyp_end_idx)}
    made = {}
    for k, i in enumerate(owner):
        made.setdefault(i, []).append(k in inserted)
    return {i for i, flags in made.items() if all(flags)}
