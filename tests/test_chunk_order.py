"""The browser microphone's chunks are fed in the order they were recorded, whatever order
their uploads reach the server in (whisper_demo/ui/chunk_order.py). The browser side (the
page numbering its uploads) is checked by test_live_browser.py through Chromium."""

import types
from pathlib import Path

import numpy as np
import soundfile as sf

from whisper_demo.ui.chunk_order import NUMBERING_JS, ChunkSequencer, chunk_number


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_chunk_number_reads_the_pages_number_and_nothing_else():
    assert chunk_number("/tmp/gradio/ab12/audio.seq00000042.wav") == 42
    assert chunk_number("audio.seq00000000.wav") == 0
    assert chunk_number("/tmp/gradio/ab12/audio.wav") is None
    assert chunk_number("/tmp/gradio/ab12/my.seq12.wav.mp3") is None
    assert chunk_number("") is None
    # the page names what chunk_number reads
    assert "audio.seq${n}.wav" in NUMBERING_JS and 'name === "audio.wav"' in NUMBERING_JS


def test_chunks_that_overtake_each_other_are_put_back_in_order():
    order = ChunkSequencer(clock=Clock())
    released = []
    for number in [2, 3, 1, 0, 4, 6, 5, 7]:  # what the server saw at the start of a recording
        released += order.add(number, f"chunk{number}")
    assert released == [f"chunk{n}" for n in range(8)]
    assert order.reordered == 3 and order.late == 0 and order.skipped == 0 and order.waiting == 0


def test_in_order_chunks_pass_at_once():
    order = ChunkSequencer(clock=Clock())
    for number in range(5):
        assert order.add(number, number) == [number]


def test_a_missing_chunk_is_waited_for_briefly_then_given_up():
    clock = Clock()
    order = ChunkSequencer(max_wait_s=0.4, clock=clock)
    assert order.add(0, "a") == ["a"]
    assert order.add(2, "c") == []  # 1 is on its way
    clock.now += 0.2
    assert order.add(3, "d") == []
    assert order.ready() == []
    clock.now += 0.25  # "c" has waited 0.45 s: 1 is not coming
    assert order.ready() == ["c", "d"]
    assert order.skipped == 1
    # it came after all: fed late rather than dropped
    assert order.add(1, "b") == ["b"]
    assert order.late == 1
    assert order.add(4, "e") == ["e"]


def test_the_end_of_a_recording_flushes_what_waits():
    order = ChunkSequencer(clock=Clock())
    assert order.add(0, 0) == [0]
    assert order.add(3, 3) == [] and order.add(2, 2) == []
    assert order.ready(flush=True) == [2, 3]
    # the page keeps counting: the next recording goes on from 4
    order.new_recording()
    assert order.add(4, 4) == [4] and order.numbered == 1


def test_unnumbered_chunks_keep_arrival_order():
    order = ChunkSequencer(clock=Clock())
    assert order.add(None, "x") == ["x"] and order.add(None, "y") == ["y"]
    assert order.unnumbered == 2 and order.numbered == 0


def test_the_tap_feeds_numbered_chunks_in_recording_order(tmp_path):
    """Through the Live tab's tap, as Gradio hands the chunks over: shuffled in, in order out."""
    from gradio import queueing
    from gradio import utils as gr_utils

    from whisper_demo.ui import live_tab
    from whisper_demo.ui.chunk_tap import install_chunk_tap

    tab = live_tab.LiveTab(store=None, defaults=None)
    assert install_chunk_tap()
    fn = types.SimpleNamespace(fn=tab.chunk, concurrency_id="live", connection="stream")
    event = queueing.Event("numbered", fn, request=None, username=None)
    upload = Path(gr_utils.get_upload_folder()) / "test_chunk_order"
    upload.mkdir(parents=True, exist_ok=True)
    paths = {}
    for i in range(7):
        path = upload / f"audio.seq{i:08d}.wav"
        sf.write(path, np.full(4800, (i + 1) * 1000, dtype=np.int16), 48000, subtype="PCM_16")
        paths[i] = path
    fed = []
    session = types.SimpleNamespace(worker=types.SimpleNamespace(
        feed=lambda sr, data, arrived: fed.append(int(np.asarray(data).reshape(-1)[0]) // 1000 - 1)))
    for i in [1, 0, 3, 2, 4, 6]:  # 5 is still on its way
        event.data = types.SimpleNamespace(data=[{"path": str(paths[i])}, True, "static"])
    assert tab._feed_inbox("numbered", session) == 5
    assert fed == [0, 1, 2, 3, 4]
    assert tab._feed_inbox("numbered", session, flush=True) == 1  # the recording ended
    assert fed == [0, 1, 2, 3, 4, 6]
