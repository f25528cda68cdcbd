"""Long audio in batches (whisper_demo/batched.py, pieces.py, batch_decode.py, batch_cache.py).

- the cutting (pieces.speech_regions, pieces.cut_pieces) on tables: no model;
- each piece's tokens in a batch equal decoding that piece alone (decode_window, the same
  options) on real speech from ../shared/eval-dev with tiny.en, exact precision;
- the stitched result: segments in order, inside the audio, through stream_transcribe.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from whisper.tokenizer import get_tokenizer

from whisper_demo import pieces
from whisper_demo.batched import batch_features, piece_features
from whisper_demo.events import DecodeOptions

EVAL_DEV = Path(__file__).resolve().parents[2] / "shared" / "eval-dev"
SR = 16000
S = SR  # one second in samples, for the tables


# --- the cutting: pure ----------------------------------------------------------------------

def test_voice_starts_above_the_threshold_and_holds_until_it_falls_below_the_lower_one():
    # live/vad.py's THRESHOLD 0.3 and NEG_THRESHOLD 0.15
    assert pieces.voiced_frames([0.1, 0.35, 0.2, 0.16, 0.1, 0.29, 0.3]) == [
        False, True, True, True, False, False, True]


def test_voiced_runs_become_padded_regions_and_short_pauses_join():
    # frames of 1 s: voice, a 1-frame pause (under min_pause) joins, a 2-frame pause splits
    voiced = [True, True, False, True, False, False, True, False]
    regions = pieces.speech_regions(voiced, S, n_samples=8 * S, min_pause=2 * S, pad=S // 10, min_speech=1)
    assert regions == [(0, 4 * S + S // 10), (6 * S - S // 10, 7 * S + S // 10)]


def test_a_click_is_not_speech_and_padding_stays_in_the_audio_and_off_the_neighbour():
    voiced = [False, True, False, False, True, True, True]
    regions = pieces.speech_regions(voiced, 100, n_samples=700, min_pause=150, pad=80, min_speech=200)
    assert regions == [(320, 700)]  # the 1-frame click dropped; the pad stops at the end
    close = pieces.speech_regions([True, False, False, True], 100, 400, min_pause=150, pad=150, min_speech=1)
    assert close == [(0, 200), (200, 400)]  # each pad stops at the middle of the pause


def _cut(regions, max_length, **kwargs):
    """cut_pieces as spans of the file (each piece one part: no pause shortened)."""
    cut = pieces.cut_pieces(regions, max_length, **kwargs)
    assert all(len(p.parts) == 1 for p in cut)
    return [(p.start, p.end) for p in cut]


def test_regions_merge_greedily_up_to_the_limit():
    regions = [(0, 5), (6, 10), (12, 20), (21, 29), (40, 45)]
    assert _cut(regions, 30) == [(0, 29), (40, 45)]
    assert _cut(regions, 100) == [(0, 45)]
    assert _cut([], 30) == []


def test_a_full_piece_ends_in_the_pause_before_the_first_region_that_does_not_fit():
    # pauses inside the first 30: 1 (at 10), 5 (at 20), 1 (at 26); (31, 40) does not fit
    regions = [(0, 10), (11, 20), (25, 26), (27, 29), (31, 40)]
    assert _cut(regions, 30) == [(0, 29), (31, 40)]  # not at the longer pause at 20
    # a region that ends exactly at the limit fits
    assert _cut([(0, 10), (12, 30), (31, 35)], 30) == [(0, 30), (31, 35)]


def test_a_region_longer_than_the_limit_is_cut_into_parts():
    assert _cut([(0, 70), (75, 80)], 30) == [(0, 30), (30, 60), (60, 80)]


def test_a_long_pause_inside_a_piece_is_shortened_and_more_speech_fits():
    regions = [(0, 10), (30, 40), (60, 70)]
    assert _cut(regions, 30) == [(0, 10), (30, 40), (60, 70)]  # pauses whole: one region each
    cut = pieces.cut_pieces(regions, 30, max_pause=4)
    # 10 + 4 + 10 = 24 fits, + 4 + 10 does not: half the kept pause after the speech, half before
    assert [p.parts for p in cut] == [((0, 12), (28, 40)), ((60, 70),)]
    assert cut[0].length == 24 and (cut[0].start, cut[0].end) == (0, 40)
    # a pause at or under the kept length stays whole
    assert [p.parts for p in pieces.cut_pieces([(0, 10), (13, 20)], 30, max_pause=4)] == [((0, 20),)]


def test_a_time_in_a_piece_is_put_back_in_the_file():
    piece = pieces.Piece(((0, 12 * S), (28 * S, 40 * S)))
    assert piece.file_seconds(5.0) == 5.0
    assert piece.file_seconds(12.0) == 28.0  # the seam: the later part's start,
    assert piece.file_seconds(12.0, is_end=True) == 12.0  # or for an end the earlier part's end
    assert piece.file_seconds(13.5) == 29.5
    assert piece.file_seconds(24.0) == piece.file_seconds(30.0) == 40.0  # the end, and past it
    audio = np.arange(40 * S, dtype=np.float32)
    samples = piece.samples(audio)
    assert len(samples) == piece.length == 24 * S and samples[12 * S] == 28 * S


@pytest.mark.parametrize("seed", range(5))
def test_pieces_cover_every_region_in_order_and_none_is_over_the_limit(seed):
    rng = np.random.default_rng(seed)
    edges = np.cumsum(rng.integers(1, 20 * S, size=40))
    regions = [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]
    limit = 30 * S
    cut = _cut(regions, limit)
    assert all(0 < end - start <= limit for start, end in cut)
    assert all(a[1] <= b[0] for a, b in zip(cut, cut[1:]))
    for start, end in regions:  # every region starts in a piece, and ends in one
        assert any(s <= start < e for s, e in cut) and any(s < end <= e for s, e in cut)


def test_speech_no_segment_covers_is_found_and_kept_under_the_limit():
    regions = [(0, 10 * S), (12 * S, 50 * S)]
    heard = [(1 * S, 3 * S), (5 * S, 9 * S), (12 * S, 14 * S)]  # segments' times
    margin = S // 5
    unheard = pieces.unheard_speech(regions, heard, min_length=S, margin=margin, max_length=30 * S)
    # 3-5 s: a sentence skipped between two segments; 9-10 s: under a second, not a skip;
    # 0-1 s: under a second; 14-50 s: a whole stretch unwritten, in parts of at most 30 s
    assert unheard == [(3 * S + margin, 5 * S - margin), (14 * S + margin, 44 * S + margin),
                       (44 * S + margin, 50 * S)]
    assert pieces.unheard_speech(regions, [(0, 50 * S)], S, margin, 30 * S) == []  # all heard
    assert pieces.unheard_speech([], heard, S, margin, 30 * S) == []


def test_a_segment_with_too_few_words_for_its_speech_did_not_hear_it():
    regions = [(0, 10 * S), (12 * S, 40 * S)]
    assert pieces.voiced_length(regions, (5 * S, 20 * S)) == 13 * S
    # " for a stilliner." (5 tokens) over 25 s of speech; the same over 5 s is a slow speaker
    assert pieces.too_few_tokens(5, 25 * S)
    assert not pieces.too_few_tokens(5, 5 * S)
    assert not pieces.too_few_tokens(40, 25 * S)  # 1.6 tokens a second: speech, heard
    assert not pieces.too_few_tokens(1, 3 * S)  # under 4 s of speech: not judged


def test_batch_size_is_an_option_and_not_below_zero():
    assert DecodeOptions().batch_size == 0
    assert DecodeOptions(batch_size=8).batch_size == 8
    with pytest.raises(ValueError, match="batch_size"):
        DecodeOptions(batch_size=-1)


def test_batches_only_where_they_apply():
    from whisper_demo.batched import applies

    long = 31 * SR
    assert applies(DecodeOptions(batch_size=8), long)
    assert not applies(DecodeOptions(batch_size=8), 29 * SR)  # one window: the seek loop
    assert not applies(DecodeOptions(batch_size=1), long)
    assert not applies(DecodeOptions(batch_size=8, beam_size=5), long)
    assert not applies(DecodeOptions(batch_size=8, cache="hooks"), long)


# --- on real speech -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def speech():
    """About 100 s of the shared dev recordings, joined with half-second pauses."""
    from whisper_demo.audio import load_audio

    manifest = EVAL_DEV / "manifest.jsonl"
    if not manifest.exists():
        pytest.skip(f"no {manifest}: the shared dev recordings sit next to the checkout")
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    pause = np.zeros(SR // 2, np.float32)
    parts, seconds = [], 0.0
    for row in rows:
        if seconds >= 100:
            break
        parts += [load_audio(EVAL_DEV / row["audio"]), pause]
        seconds += row["duration_s"] + 0.5
    return np.concatenate(parts)


def test_silero_scores_a_file_as_the_live_detector_s_model_scores_it_frame_by_frame(speech):
    """The whole file's probabilities (silero-vad's sequence model, a block of frames a
    call) are those of the streaming model the live detector calls frame after frame, over
    the same audio: the same voice decisions on every frame; the same scores misplaced by a
    few frames would not give them."""
    from whisper_demo.live.vad import FRAME, load_silero

    together = pieces.speech_probabilities(speech)
    n = len(speech) // FRAME
    assert together.shape == (n,)
    model = load_silero()
    with torch.inference_mode():
        model.reset_states()
        frames = torch.from_numpy(speech[: n * FRAME].copy()).view(n, 1, FRAME)
        alone = np.array([float(model(frame, SR)[0, 0]) for frame in frames])
    assert np.abs(together - alone).max() < 1e-3
    decisions = np.array(pieces.voiced_frames(together))
    assert (decisions == np.array(pieces.voiced_frames(alone))).all()
    assert (decisions != np.array(pieces.voiced_frames(np.roll(alone, 3)))).mean() > 0.04


def _alone_and_batched(model, audio, options, spans):
    """Each piece decoded in a batch (encoded in one call, as batched.py does) and alone
    (encoded alone, decode_window): the batch's outcomes, the alone ones, the batch's rows
    per step."""
    from whisper_demo.batch_decode import BatchDecode
    from whisper_demo.window_decode import decode_window

    tokenizer = get_tokenizer(False, language="en", task="transcribe")
    features = [piece_features(model, audio, span, options.precision) for span in spans]
    together = batch_features(model, audio, spans, options.precision)
    decoding = BatchDecode(model, together, tokenizer, options, "en").steps()
    rows = []
    try:
        while True:
            rows.append(next(decoding).rows)
    except StopIteration as done:
        batched = done.value
    alone = []
    for f in features:
        window = decode_window(model, f, tokenizer, options, "en", 0.0, previous_tokens=[])
        try:
            while True:
                next(window)
        except StopIteration as done:
            alone.append(done.value)
    return batched, alone, rows


@pytest.mark.parametrize("timestamps", [True, False])
def test_each_piece_in_a_batch_decodes_as_it_does_alone(tiny_model, speech, timestamps):
    options = DecodeOptions(batch_size=8, timestamps=timestamps, language="en")
    # short pieces: a full batch of 8 from this audio, ending at different steps
    spans = pieces.audio_pieces(speech, max_seconds=8)[:8]
    assert len(spans) == 8
    batched, alone, rows = _alone_and_batched(tiny_model, speech, options, spans)
    assert rows[0] == 8 and rows[-1] < 8  # rows left the batch as their pieces ended
    assert sum(len(a.tokens) for a in alone) > 50 and all(a.tokens for a in alone)
    together = batch_features(tiny_model, speech, spans, "exact")
    assert all(torch.equal(t, piece_features(tiny_model, speech, s, "exact")) for t, s in zip(together, spans))
    for b, a in zip(batched, alone):
        assert b.tokens == a.tokens
        assert b.avg_logprob == a.avg_logprob  # the same numbers, not close ones
        assert b.no_speech_prob == a.no_speech_prob


def test_in_int8_a_full_batch_decodes_each_piece_as_alone(tiny_model, speech):
    """int8 projects with int8 weights and float32 activations, row by row in the packed
    kernels (runner.py): a row's logits do not depend on the rows beside it, as in exact."""
    options = DecodeOptions(batch_size=8, precision="int8", language="en")
    spans = pieces.audio_pieces(speech, max_seconds=8)[:8]
    batched, alone, _ = _alone_and_batched(tiny_model, speech, options, spans)
    assert len(batched) == len(spans) > 2
    for b, a in zip(batched, alone):
        assert b.tokens == a.tokens and b.avg_logprob == a.avg_logprob


def test_the_stitched_result_is_in_order_and_inside_the_audio(tiny_model, speech):
    from whisper_demo.decode import stream_transcribe
    from whisper_demo.events import DecodeResult, TokenEvent

    items = list(stream_transcribe(tiny_model, speech, DecodeOptions(batch_size=8, language="en")))
    result = items[-1]
    events = items[:-1]
    assert isinstance(result, DecodeResult) and all(isinstance(e, TokenEvent) for e in events)
    assert events[0].batch_rows > 1 and events[0].batch_pieces >= events[0].batch_rows
    assert events[0].cross_cache_bytes == events[0].batch_rows * 2 * 4 * 1500 * 384 * 4  # tiny.en, float32
    assert len(result.segments) > 5 and "Montreal" in result.text
    duration = len(speech) / SR
    starts = [s.start for s in result.segments]
    assert starts == sorted(starts)
    for a, b in zip(result.segments, result.segments[1:]):
        assert a.end <= b.start + 1e-9
    assert all(0 <= s.start <= s.end <= duration for s in result.segments)
    assert result.text == "".join(s.text for s in result.segments).strip()


def _decoded_with_a_skip(model, speech, monkeypatch):
    """A batched decode of `speech` in which one piece's decode skips a middle segment
    (one of 1.5 s and 4 words or more between two others): the run and the skipped segment."""
    from whisper_demo import batched

    dropped = []

    def skipping(piece, segments, tokenizer):
        middle = [k for k in range(1, len(segments) - 1)
                  if segments[k].end - segments[k].start >= 1.5 and len(segments[k].text.split()) >= 4]
        if not dropped and middle:
            dropped.append(segments.pop(middle[0]))
            batched.file_times(piece, dropped)  # in the piece's time until then
        return segments

    run = _run_changing_segments(model, speech, monkeypatch, skipping)
    assert dropped, "no piece had a middle segment to skip"
    return run, dropped[0]


def _run_changing_segments(model, speech, monkeypatch, change, events=None):
    """A batched decode of `speech` in which each piece's segments (in the piece's time)
    pass through `change(piece, segments, tokenizer)` before they are kept: the run (and
    into `events`, if given, each batch's first TokenEvent)."""
    from whisper_demo import batched
    from whisper_demo.batched import BatchedTranscription

    real_piece_segments = batched.piece_segments
    monkeypatch.setattr(batched, "piece_segments", lambda outcome, piece, tokenizer: change(
        piece, real_piece_segments(outcome, piece, tokenizer), tokenizer))
    run = BatchedTranscription(model, speech, DecodeOptions(batch_size=8, language="en"))
    for index, batch in enumerate(run.batches()):
        for step, event in enumerate(run.decode(index, batch)):
            if events is not None and step == 0:
                events.append(event)
    return run


def _words_back(result, skipped):
    """The skipped segment's words that the result has around its time."""
    from whisper_demo.text import words

    around = [s for s in result.segments if skipped.start - 1.0 <= s.start and s.end <= skipped.end + 1.0]
    return set(words(" ".join(s.text for s in around))) & set(words(skipped.text))


def test_speech_a_decode_skipped_is_decoded_again_and_put_in_its_place(tiny_model, speech, monkeypatch):
    """A decode that closes a segment and opens the next seconds later leaves the words
    between unwritten. Here one piece's decode is made to skip its middle segment; the
    stretch is found (its speech under no segment), decoded again on its own, and its
    words come back between the segments around it."""
    from whisper_demo.text import words

    run, skipped = _decoded_with_a_skip(tiny_model, speech, monkeypatch)
    result = run.result()
    # the stretch: the skipped segment's speech (a shortened pause inside it is not speech)
    assert any(p.start <= skipped.start * SR + SR // 2 and skipped.start * SR < p.end for p in run.unheard)
    assert len(_words_back(result, skipped)) >= 0.6 * len(set(words(skipped.text)))
    starts = [s.start for s in result.segments]
    assert starts == sorted(starts)
    assert result.text == "".join(s.text for s in result.segments).strip()


def test_skipped_stretches_are_encoded_over_their_audio_not_30_seconds(tiny_model, speech, monkeypatch):
    """A skipped stretch is a few seconds of speech: its batch is encoded over its longest
    stretch's audio and encoder.py's margin (a 30 s window each cost as much as a full
    piece), every row alike, and the panel's cross K/V formula counts those positions."""
    from whisper_demo import batched
    from whisper_demo.batched import piece_mel
    from whisper_demo.encoder import encode, encoder_frames
    from whisper_demo.ui.render.panel import panel_html

    events = []
    monkeypatch.setattr(batched, "unheard_speech", lambda *args: [(3 * SR, 5 * SR), (9 * SR, 12 * SR + 80)])
    run = _run_changing_segments(tiny_model, speech, monkeypatch, lambda piece, segments, tokenizer: segments,
                                 events)
    stretch_batch = events[-1]
    assert len(run.unheard) == 2 and stretch_batch.batch_pieces == 2
    frames = encoder_frames((3 * SR + 80) // 160, audio_only=True)  # the longer stretch's audio + margin
    positions = frames // 2
    assert positions < 1500
    assert stretch_batch.cross_cache_bytes == stretch_batch.batch_rows * 2 * 4 * positions * 384 * 4
    together = batch_features(tiny_model, speech, run.unheard, "exact", audio_only=True)
    assert [f.shape[1] for f in together] == [positions, positions]
    # the shorter stretch's row is its own audio encoded alone over the same frames
    alone = encode(tiny_model, piece_mel(tiny_model, speech, run.unheard[0], frames), "exact")
    assert torch.equal(together[0], alone)
    shown = panel_html(stretch_batch, tiny_model, latencies_ms=[stretch_batch.latency_ms])
    assert f"{positions} frames (audio + 8 s)" in shown and "≠ formula" not in shown


def test_a_segment_that_wrote_a_few_words_over_seconds_of_speech_is_replaced_by_a_decode_that_heard_it(
        tiny_model, speech, monkeypatch):
    """A decode can also write a few words with timestamps around seconds of speech (" for a
    stilliner." over a 25 s piece of read speech). Here one piece's decode is made to write
    only its first two tokens, timed over all its segments: that speech is decoded again as
    skipped, and the decode that heard it replaces the few words."""
    from whisper_demo.events import Segment
    from whisper_demo.text import words

    shortened = []

    def few_words(piece, segments, tokenizer):
        said = [t for s in segments for t in s.tokens if t < tokenizer.eot]
        if not shortened and len(said) > 15 and segments[-1].end - segments[0].start >= 8.0:
            heard = " ".join(s.text for s in segments)
            few = Segment(start=segments[0].start, end=segments[-1].end, text=tokenizer.decode(said[:2]),
                          tokens=said[:2])
            shortened.append((piece, few, heard))
            return [few]
        return segments

    run = _run_changing_segments(tiny_model, speech, monkeypatch, few_words)
    assert shortened, "no piece had 8 s of segments to shorten"
    piece, few, heard = shortened[0]
    assert run.sparse == [few] and any(piece.start <= p.start < piece.end for p in run.unheard)
    result = run.result()
    assert not any(s is few for s in result.segments)  # replaced
    around = " ".join(s.text for s in result.segments if few.start - 0.5 <= s.start and s.end <= few.end + 0.5)
    assert len(set(words(around)) & set(words(heard))) >= 0.6 * len(set(words(heard)))


def test_a_few_words_over_much_speech_stay_when_the_decode_again_writes_nothing(tiny_model, speech, monkeypatch):
    """Nothing shown is lost: the few words leave only for a decode that heard their audio
    and wrote something else there."""
    from whisper_demo.events import Segment

    shortened = []

    def few_then_nothing(piece, segments, tokenizer):
        said = [t for s in segments for t in s.tokens if t < tokenizer.eot]
        if not shortened and len(said) > 15 and segments[-1].end - segments[0].start >= 8.0:
            few = Segment(start=segments[0].start, end=segments[-1].end, text=tokenizer.decode(said[:2]),
                          tokens=said[:2])
            shortened.append((piece, few))
            return [few]
        if shortened and shortened[0][0].start <= piece.start < shortened[0][0].end:
            return []  # the decode of its speech again writes nothing
        return segments

    run = _run_changing_segments(tiny_model, speech, monkeypatch, few_then_nothing)
    piece, few = shortened[0]
    assert any(piece.start <= p.start < piece.end for p in run.unheard)  # decoded again
    assert any(s is few for s in run.result().segments)  # and kept


def test_a_skipped_stretch_s_decode_that_fails_transcribe_s_tests_is_not_written(tiny_model, speech, monkeypatch):
    """Decoded alone, with no context, a second or two of audio is where Whisper invents:
    a skipped stretch's decode is written only if it passes transcribe()'s tests."""
    from whisper_demo import batched

    monkeypatch.setattr(batched, "fails_tests", lambda outcome, tokenizer, options: True)
    run, skipped = _decoded_with_a_skip(tiny_model, speech, monkeypatch)
    assert run.unheard  # decoded again, and not kept
    assert not any(s.start >= skipped.start - 0.5 and s.end <= skipped.end + 0.5 for s in run.result().segments)


def test_a_piece_called_silent_is_not_decoded_again(tiny_model, speech, monkeypatch):
    """transcribe's no-speech rule heard a piece and called it silent: its speech is not
    "skipped", so no second decode of it writes words the rule dropped."""
    from whisper_demo import batched
    from whisper_demo.batched import BatchedTranscription

    monkeypatch.setattr(batched, "is_silent", lambda outcome, options: True)
    run = BatchedTranscription(tiny_model, speech, DecodeOptions(batch_size=8, language="en"))
    batches = 0
    for index, batch in enumerate(run.batches()):
        batches += 1
        for _ in run.decode(index, batch):
            pass
    assert run.unheard == [] and batches == run.n_batches == -(-len(run.pieces) // 8)
    assert run.result().segments == [] and run.stats.skipped_windows == len(run.pieces)


def test_audio_without_speech_gives_an_empty_result(tiny_model):
    from whisper_demo.decode import transcribe

    rng = np.random.default_rng(0)
    hiss = (rng.standard_normal(40 * SR) * 1e-4).astype(np.float32)
    result = transcribe(tiny_model, hiss, DecodeOptions(batch_size=8, language="en"))
    assert result.text == "" and result.segments == [] and result.n_tokens == 0


def test_the_panel_shows_the_batch_and_its_cache_bytes(tiny_model, speech):
    from whisper_demo.decode import stream_transcribe
    from whisper_demo.ui.render.panel import panel_html

    stream = stream_transcribe(tiny_model, speech, DecodeOptions(batch_size=8, language="en"))
    event = next(iter(stream))
    stream.close()
    shown = panel_html(event, tiny_model, latencies_ms=[event.latency_ms])
    rows = event.batch_rows
    assert f"batch of {rows}" in shown and f"{rows} of its {event.batch_pieces} pieces at once" in shown
    assert f"× {rows} pieces × 4 B" in shown  # the self K/V formula, a row per piece
    assert f"✓ formula × {rows} pieces (one audio each)" in shown  # the cross K/V
    assert "≠ formula" not in shown


class _Session:
    """What Gradio passes as gr.Request, as far as the handlers read it."""

    def __init__(self, session_hash):
        self.session_hash = session_hash


def test_the_page_switch_decodes_in_batches_and_the_subtitles_follow(tiny_model, speech, tmp_path):
    import soundfile

    from whisper_demo.ui import Defaults, ModelStore, build_app
    from whisper_demo.ui.session_files import remove_session_files

    store = ModelStore(device="cpu")
    store.put("tiny.en", tiny_model)
    app = build_app(store, Defaults(model="tiny.en", max_audio_seconds=300))
    path = tmp_path / "long.wav"
    soundfile.write(path, speech, SR)
    session = _Session("batched0test")
    try:
        updates = list(app.transcribe_tab.transcribe(str(path), True, "static", 1, "auto", True, "tiny.en",
                                                     batched=True, request=session))
        transcript, final_panel, files = updates[-1][0], updates[-1][1], updates[-1][7]
        assert "Montreal" in transcript
        assert any("pieces at once" in u[1] for u in updates[:-1])  # streamed: the batch in the panel
        assert "batch of" in final_panel
        srt = open(next(p for p in files["value"] if p.endswith(".srt")), encoding="utf-8").read()
        assert srt.count(" --> ") > 5
    finally:
        remove_session_files(session)
