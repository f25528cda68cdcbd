"""Live through the real page: Chromium's fake microphone plays each recording into the Live tab.

    python -m whisper_demo.bench live_page [--model tiny.en] [--policy agreement|alignatt]
        [--recordings N | --audio a.wav b.wav ...] [--runs N] [--eval-dir DIR] [--no-examples]

The app (app.py) serves on 127.0.0.1 at a free port; for each recording Chromium starts
with the recording as its microphone, opens the Live tab, presses Record, lets the file
play (with the silence a microphone gives: 0.5 s before the speech, 1 s after) and
presses Stop: one session each, app and browser on the same cores, as a user has it.

Printed per session and over all of them:

- chunk end -> first token (median / p95): the session's own figures, as its stats tile
  shows them (the server times it; the page shows no raw values, so "all" is the median of
  the sessions' medians and the largest p95);
- speech -> commit (median / p95), as the page shows it: from each word's end in the
  played audio to the moment the page began to show that word committed at its place for
  good (a word the final pass corrected counts from the correction, not from the streamed
  word it replaced; a word stays shown when the final pass inserts or removes words before
  it: shown_since). Word ends are those of the offline decode of the same
  audio (word timestamps); a committed word counts when it matches an offline word (the
  others have no end to time from). The file plays from
  the moment the page gets the microphone, which the page notes, and the page notes each
  change of the committed text: both on the page's clock. Words committed after Stop (the
  final decode) are left out, as the session's own stats leave them out; the session's
  own figure (server side: from the audio's arrival to the commit, by the live decode's
  own word times) is printed beside it;
- errors of the committed text against the reference, and of the offline decode of the
  same audio (the Transcribe tab's default decode, seeded), and the words live got
  otherwise than offline.

With --runs N each recording is played N times, each its own session: the page must hold
steady, so for each recording the worst run is reported against the targets (its final
text within 2 WER points of the offline decode, speech -> commit median <= 1.5 s and p95
<= 3.0 s), with whether every run ended with the same final text.

The targets are marked met, NOT met, or not measured (no word timed, no reference word:
it fails the target). Without --audio the recordings are a spread of the eval folder's
dev_ordinary subset (by speaker, then evenly through the manifest: not chosen by score)
and the package's examples jfk.wav and speech_25s.wav; --audio takes your
files, with a reference read from NAME.txt beside each, or from the eval folder's manifest
for its own recordings (without one, the offline decode stands in for it).
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..audio import SAMPLE_RATE, load_audio
from ..examples import clip_path, reference_transcripts
from ..live.snapshots import percentile
from ..text import word_edits, words as normalized_words
from .cli import bench_parser
from .data import add_eval_dir_argument, manifest
from .page_mic import PageSession
from .report import judged, verdict

LEAD_SECONDS, TAIL_SECONDS = 0.5, 1.0  # a microphone's silence around the speech (as live_eval)
EXAMPLES = ("jfk.wav", "speech_25s.wav")
DEFAULT_RECORDINGS = 6
# Through Chromium's fake microphone, app and browser on the same 2 cores
COMMIT_MEDIAN_TARGET_S, COMMIT_P95_TARGET_S, WER_GAP_TARGET = 1.5, 3.0, 1.0
WORST_RUN_GAP_TARGET = 2.0  # one recording played several times: its worst run's final text


@dataclass
class Recording:
    name: str
    audio: np.ndarray  # 16 kHz mono, with the silence before and after
    reference: Optional[str]


@dataclass
class Offline:
    text: str  # the default decode
    word_ends: List[Tuple[str, float]]  # (word, end s) of a decode with word timestamps


@dataclass
class SessionResult:
    recording: Recording
    offline: Offline
    page: PageSession
    delays: List[float]  # speech -> commit as the page showed it, per timed word
    at_stop: List[bool]  # per timed word: first shown after Stop (by the final decode)
    untimed: int  # committed words with no offline word to time them from

    @property
    def before_stop(self) -> List[float]:
        return [d for d, late in zip(self.delays, self.at_stop) if not late]


def spread(eval_dir: Path, n: int, subset: str = "dev_ordinary") -> List[dict]:
    """n manifest items of `subset`: speakers (source packages) taken in turn, and each
    speaker's picks evenly spaced through its recordings in manifest order."""
    items = manifest(eval_dir, required=True)
    groups: Dict[str, List[dict]] = {}
    for item in items:
        if item.get("subset") == subset:
            groups.setdefault(item.get("source_package", ""), []).append(item)
    counts = dict.fromkeys(groups, 0)
    for k in range(min(n, sum(map(len, groups.values())))):
        open_groups = [g for g in groups if counts[g] < len(groups[g])]
        counts[open_groups[k % len(open_groups)]] += 1
    picked = [groups[g][round(i * len(groups[g]) / c)] for g, c in counts.items() for i in range(c)]
    return sorted(picked, key=items.index)


def padded(audio: np.ndarray) -> np.ndarray:
    lead, tail = (np.zeros(int(s * SAMPLE_RATE), np.float32) for s in (LEAD_SECONDS, TAIL_SECONDS))
    return np.concatenate([lead, audio.astype(np.float32), tail])


def default_recordings(eval_dir: Path, n: int, examples: bool) -> List[Recording]:
    found = [Recording(item["id"], padded(load_audio(eval_dir / item["audio"])), item["reference"])
             for item in spread(eval_dir, n)]
    if examples:
        references = reference_transcripts()
        found += [Recording(name, padded(load_audio(clip_path(name))), references[name]) for name in EXAMPLES]
    return found


def file_recordings(paths: Sequence[str], eval_dir: Optional[Path] = None) -> List[Recording]:
    """Your files, each with its reference: NAME.txt beside it, or the eval folder's
    manifest entry when it is one of the folder's recordings; None without either."""
    listed = {(Path(eval_dir) / item["audio"]).resolve(): item["reference"]
              for item in manifest(eval_dir)} if eval_dir is not None else {}
    found = []
    for path in map(Path, paths):
        beside = path.with_suffix(".txt")
        reference = beside.read_text().strip() if beside.exists() and beside != path else listed.get(path.resolve())
        found.append(Recording(path.name, padded(load_audio(path, max_seconds=None)), reference))
    return found


def write_wav(path: Path, audio: np.ndarray) -> Path:
    """16-bit PCM, what Chromium's fake microphone plays."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def offline_decodes(model, recording: Recording) -> Offline:
    from ..decode import transcribe
    from ..events import DecodeOptions

    text = transcribe(model, recording.audio, DecodeOptions(seed=0)).text
    timed = transcribe(model, recording.audio, DecodeOptions(seed=0, word_timestamps=True))
    return Offline(text, [(w.text, w.end) for segment in timed.segments for w in segment.words])


def plain(word: str) -> str:
    return re.sub(r"[^\w']", "", word.lower())


def shown_since(versions: Sequence[Tuple[float, str]], final: str) -> List[Optional[float]]:
    """For each word of the final committed text: when the page began to show it for good,
    i.e. the first version from which every later version showed that word (case and
    punctuation aside) where it stands in the final text. Each version is aligned with the
    final text word by word (difflib), not compared position by position: a word the
    final pass inserted or removed earlier in the text moves the words after it, and a
    reader still had them on screen. A word the final pass corrected is timed by the
    correction, not by the streamed word it replaced. None: the last version did not show it."""
    wanted = [plain(w) for w in final.split()]
    since: List[Optional[float]] = [None] * len(wanted)
    held = set(range(len(wanted)))  # words every version from here to the last shows
    for at, text in reversed(versions):
        held &= aligned_words(text, wanted)
        for i in held:
            since[i] = at
    return since


def aligned_words(text: str, wanted: Sequence[str]) -> Set[int]:
    """The positions of `wanted` (the final text's plain words) that `text` shows at their
    place: its words aligned with them by difflib's longest matching blocks."""
    shown = [plain(w) for w in text.split()]
    matcher = difflib.SequenceMatcher(None, shown, list(wanted), autojunk=False)
    return {block.b + i for block in matcher.get_matching_blocks() for i in range(block.size)}


def commit_delays(page: PageSession, word_ends: List[Tuple[str, float]]) -> Tuple[List[float], List[bool], int]:
    """(speech -> commit per timed word, whether the page showed it only after Stop, words
    with no offline word to time them from). Each committed word is timed by the moment
    the page began to show it for good (shown_since)."""
    shown = [(plain(w), at) for w, at in zip(page.final.split(), shown_since(page.versions, page.final))
             if at is not None]
    committed, shown_at = [w for w, _ in shown], [at for _, at in shown]
    matcher = difflib.SequenceMatcher(None, committed, [plain(w) for w, _ in word_ends], autojunk=False)
    pairs = [(block.a + i, block.b + i) for block in matcher.get_matching_blocks() for i in range(block.size)]
    opened = page.mic_opened_s or 0.0
    delays = [round(shown_at[i] - opened - word_ends[j][1], 3) for i, j in pairs]
    return delays, [shown_at[i] >= page.stopped_s for i, _ in pairs], len(committed) - len(pairs)


def tile_figures(details: Sequence[str], label: str) -> Tuple[Optional[float], Optional[float]]:
    """(median, p95) in seconds from the stats tile whose tooltip starts with `label`."""
    for text in details:
        if text.startswith(label):
            found = re.search(r"Median ([\d.]+) (ms|s), p95 ([\d.]+) (ms|s)", text)
            if found:
                a, ua, b, ub = found.groups()
                return float(a) / (1000 if ua == "ms" else 1), float(b) / (1000 if ub == "ms" else 1)
    return None, None


FIRST_TOKEN_TILE, COMMIT_TILE = "From the end of each audio chunk", "From the end of each word"


def fmt(value: Optional[float], unit: str = "s") -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f}" if unit == "ms" else f"{value:.2f}"


def judged_s(value: Optional[float], target: float, target_unit: str = " s") -> str:
    """Seconds against their target: "1.00 s (target <= 1.5 s: met)"; an empty measure
    (None) is "— (target <= 1.5 s: not measured)", which fails the target."""
    figure = "—" if value is None else f"{value:.2f} s"
    return f"{figure} (target <= {target}{target_unit}: {verdict(judged(value, target))})"


def worst(values: Sequence[Optional[float]]) -> Optional[float]:
    """The largest, or None when any run measured nothing: the worst run is then unknown."""
    return None if any(v is None for v in values) else max(values)


def joined(values: Sequence[Optional[float]], spec: str) -> str:
    return ", ".join("—" if v is None else format(v, spec) for v in values)


def report(results: List[SessionResult], policy: str) -> str:
    shown = sorted({r.page.policy for r in results if r.page.policy})
    if shown:
        policy += f"; the page's choice at Record: {', '.join(shown)}"
    header = (f"{'session':<28} {'audio':>6} {'1st tok ms':>11} {'commit s, page':>15} {'words':>5} "
              f"{'stop':>4} {'<stop':>6} {'server':>11} {'errs live/off':>13} {'refw':>4} {'≠off':>4}")
    lines = [f"policy: {policy}", header, "-" * len(header)]
    medians, p95s = [], []
    for r in results:
        ft = tile_figures(r.page.stats_details, FIRST_TOKEN_TILE)
        server = tile_figures(r.page.stats_details, COMMIT_TILE)
        medians += [ft[0]] if ft[0] is not None else []
        p95s += [ft[1]] if ft[1] is not None else []
        ref = r.recording.reference
        errors = f"{word_edits(r.page.final, ref)}/{word_edits(r.offline.text, ref)}" if ref is not None else "—"
        lines.append(
            f"{r.recording.name[:28]:<28} {r.recording.audio.size / SAMPLE_RATE:>5.1f}s "
            f"{fmt(ft[0], 'ms'):>5}/{fmt(ft[1], 'ms'):>5} "
            f"{fmt(percentile(r.delays, 50)):>6}/{fmt(percentile(r.delays, 95)):>8} {len(r.delays):>5} "
            f"{sum(r.at_stop):>4} {fmt(percentile(r.before_stop, 50)):>6} "
            f"{fmt(server[0]):>5}/{fmt(server[1]):>5} {errors:>13} "
            f"{len(normalized_words(ref)) if ref is not None else '—':>4} {word_edits(r.page.final, r.offline.text):>4}")
        notes = [f"{r.untimed} committed words not in the offline decode (not timed)"] if r.untimed else []
        lost = re.search(r"audio lost [\d.]+ s", r.page.stats_text)  # arrived slower than real time
        notes += [lost.group(0)] if lost else []
        notes += [f"page errors: {r.page.errors}"] if r.page.errors else []
        if notes:
            lines.append(f"{'':<28}   " + "; ".join(notes))
    delays = [d for r in results for d in r.delays]
    early = [d for r in results for d in r.before_stop]
    median, p95 = percentile(delays, 50), percentile(delays, 95)
    lines += [
        "-" * len(header),
        "1st tok: chunk end -> first token, the session's own median/p95 (its stats tile); commit s, page: "
        "speech -> commit as the page drew it, median/p95 over the timed words, of which 'stop' came with "
        "the final decode after Stop; <stop: the median of the others; server: the session's own "
        "speech -> commit median/p95 (its stats tile: words committed before Stop, timed from the "
        "audio's arrival); errs: against the reference; ≠off: words live got otherwise than offline",
        f"chunk end -> first token (server): the sessions' medians' median {fmt(percentile(medians, 50), 'ms')} ms, "
        f"their largest p95 {fmt(max(p95s) if p95s else None, 'ms')} ms",
        f"speech -> commit through the page, {len(delays)} words ({len(delays) - len(early)} at Stop): "
        f"median {judged_s(median, COMMIT_MEDIAN_TARGET_S)}, p95 {judged_s(p95, COMMIT_P95_TARGET_S)}; "
        f"words committed before Stop only: median {fmt(percentile(early, 50))} s, p95 {fmt(percentile(early, 95))} s",
        accuracy_line(results)]
    return "\n".join(lines + worst_runs(results))


def worst_runs(results: List[SessionResult]) -> List[str]:
    """For each recording played more than once: every run's final text against offline's
    and its speech -> commit, and the worst run against the targets."""
    out = []
    names = [r.recording.name for r in results]
    for name in sorted(set(names), key=names.index):
        runs = [r for r in results if r.recording.name == name]
        if len(runs) < 2:
            continue
        reference = runs[0].recording.reference or runs[0].offline.text
        words = len(normalized_words(reference))  # none: no gap measured
        gaps = [100 * (word_edits(r.page.final, reference) - word_edits(r.offline.text, reference)) / words
                if words else None for r in runs]
        medians = [percentile(r.delays, 50) for r in runs]  # None: the run timed no word
        p95s = [percentile(r.delays, 95) for r in runs]
        same = len({r.page.final for r in runs}) == 1
        gap = worst(gaps)
        out += [f"{name}, {len(runs)} runs: final text {'the same in every run' if same else 'differs between runs'}; "
                f"gap to offline {joined(gaps, '+.1f')} points; speech -> commit median "
                f"{joined(medians, '.2f')} s, p95 {joined(p95s, '.2f')} s",
                f"  worst run: gap {'—' if gap is None else f'{gap:+.1f}'} points (target <= "
                f"{WORST_RUN_GAP_TARGET:.0f}: {verdict(judged(gap, WORST_RUN_GAP_TARGET))}), "
                f"median {judged_s(worst(medians), COMMIT_MEDIAN_TARGET_S, '')}, "
                f"p95 {judged_s(worst(p95s), COMMIT_P95_TARGET_S, '')}"]
        out += [f"  run {i + 1}: {r.page.final}" for i, r in enumerate(runs)]
    return out


def accuracy_line(results: List[SessionResult]) -> str:
    """Committed WER against the references next to offline's; without a reference for
    every session, the words live got otherwise than offline, as a share of offline's."""
    if all(r.recording.reference is not None for r in results):
        words = sum(len(normalized_words(r.recording.reference)) for r in results)
        live = sum(word_edits(r.page.final, r.recording.reference) for r in results)
        offline = sum(word_edits(r.offline.text, r.recording.reference) for r in results)
        if not words:
            return f"committed errors {live}, offline {offline} of 0 reference words: gap — ({gap_verdict(None)})"
        gap = 100 * (live - offline) / words
        return (f"committed errors {live}, offline {offline} of {words} reference words: WER "
                f"{100 * live / words:.1f} % vs {100 * offline / words:.1f} %, gap {gap:+.1f} points "
                f"({gap_verdict(gap)})")
    words = sum(len(normalized_words(r.offline.text)) for r in results)
    differ = sum(word_edits(r.page.final, r.offline.text) for r in results)
    gap = 100 * differ / words if words else None
    return (f"no reference for every session: live differs from offline in {differ} of {words} words, "
            f"{'—' if gap is None else f'{gap:.1f}'} points ({gap_verdict(gap)})")


def gap_verdict(gap: Optional[float]) -> str:
    """The WER gap's target; no words to count the gap over is not measured (and fails)."""
    return f"target <= {WER_GAP_TARGET:.0f}: {verdict(judged(gap, WER_GAP_TARGET))}"


def main(argv=None) -> int:
    parser = bench_parser("live_page", __doc__)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--policy", choices=["agreement", "alignatt"],
                        help="the Live tab's 'A word is final when' (default: the page's default)")
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--recordings", type=int, default=DEFAULT_RECORDINGS,
                        help=f"how many dev_ordinary recordings (default {DEFAULT_RECORDINGS})")
    chosen.add_argument("--audio", nargs="+", metavar="FILE", help="your recordings instead")
    parser.add_argument("--no-examples", action="store_true", help="leave out jfk.wav and speech_25s.wav")
    parser.add_argument("--runs", type=int, default=1, help="play each recording this many times (default 1)")
    add_eval_dir_argument(parser)
    args = parser.parse_args(argv)

    from .page_mic import CHROMIUM

    if not Path(CHROMIUM).exists():
        parser.error(f"{CHROMIUM} is not installed (apt-get install chromium)")
    from ..audio import AudioError

    try:
        recordings = (file_recordings(args.audio, Path(args.eval_dir)) if args.audio
                      else default_recordings(Path(args.eval_dir), args.recordings, not args.no_examples))
    except AudioError as error:  # a path mistyped: say so, not a traceback
        parser.error(str(error))
    recordings = [r for r in recordings for _ in range(max(1, args.runs))]
    print(f"load average {load()}; {len(recordings)} sessions, {sum(r.audio.size for r in recordings) / SAMPLE_RATE:.0f} s of audio",
          flush=True)
    offline = offline_all(args.model, recordings)
    results = run_sessions(args.model, args.policy, recordings, offline)
    from ..live.config import LiveConfig

    print(report(results, args.policy or f"{LiveConfig().policy} (the page's default)"))
    if len(results) < len(recordings):
        print(f"{len(recordings) - len(results)} of {len(recordings)} sessions FAILED (see above): left out")
    print(f"load average at the end {load()}")
    return 0 if len(results) == len(recordings) else 1


def load() -> str:
    """The machine's load, for reading the figures: they are inflated on a busy machine."""
    return f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} (1/5/15 min) on {os.cpu_count()} cores"


def offline_all(model_name: str, recordings: List[Recording]) -> List[Offline]:
    """The offline decodes, done before the app starts so they do not take its cores."""
    import torch

    from ..models import load_model

    torch.set_num_threads(min(2, torch.get_num_threads()))
    model = load_model(model_name, device="cpu", progress=False)
    decoded: Dict[str, Offline] = {}  # a recording played several times is decoded once
    for r in recordings:
        if r.name not in decoded:
            decoded[r.name] = offline_decodes(model, r)
    return [decoded[r.name] for r in recordings]


def run_sessions(model_name: str, policy: Optional[str], recordings: List[Recording],
                 offline: List[Offline]) -> List[SessionResult]:
    from .app_process import running_app
    from .page_mic import live_browser, record_session

    results = []
    with running_app(model_name) as app, tempfile.TemporaryDirectory(prefix="live_page_") as folder:
        for recording, off in zip(recordings, offline):
            wav = write_wav(Path(folder) / f"{len(results)}.wav", recording.audio)
            try:
                with live_browser(wav) as browser:
                    page = record_session(browser, app.url, recording.audio.size / SAMPLE_RATE + 0.3, policy)
            except RuntimeError as error:  # said, and left out of the figures (which say how many)
                print(f"{recording.name}: FAILED: {error}", flush=True)
                continue
            results.append(SessionResult(recording, off, page, *commit_delays(page, off.word_ends)))
            print(f"{recording.name}: {page.final}", flush=True)
    return results


if __name__ == "__main__":
    raise SystemExit(main())
