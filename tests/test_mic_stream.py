"""The browser microphone's recordings, server side (ui/microphone/mic_stream.py): each chunk's samples are
fed once, in recording order, whatever was sent again or never came; a chunk that cannot
be audio is refused with a reason for the page; audio comes only with a live ticket. What
the route itself refuses, and when, is test_mic_route.py."""

import numpy as np
import pytest

from whisper_demo.audio import AudioError, read_pcm_chunk
from whisper_demo.limits import Limits
from whisper_demo.ui.microphone.mic_stream import MicStream, MicStreams


def ramp(start, n):
    """Samples numbered by their place in the recording, so what was fed can be read back."""
    return np.arange(start, start + n, dtype=np.int16)


class Sink:
    def __init__(self):
        self.fed, self.why_not = [], None

    def feed(self, rate, samples, arrived):
        self.fed.append((rate, samples.copy(), arrived))

    def accepting(self):
        return self.why_not

    def samples(self):
        return np.concatenate([s for _, s, _ in self.fed]) if self.fed else np.zeros(0, np.int16)


def test_a_chunk_sent_again_is_taken_once_and_audio_that_never_came_is_silence():
    sink = Sink()
    stream = MicStream("tab", sink.feed, sink.accepting, max_chunk_seconds=1.0)
    stream.take(0, 1000, ramp(1, 100), arrived=1.0)
    stream.take(50, 1000, ramp(51, 100), arrived=2.0)  # a retry that overlaps: its first 50 were fed
    stream.take(100, 1000, ramp(101, 50), arrived=3.0)  # wholly sent before: nothing new
    stream.take(200, 1000, ramp(201, 10), arrived=4.0)  # 50 samples never came
    fed = sink.samples()
    assert list(fed[:150]) == list(range(1, 151))
    assert list(fed[150:200]) == [0] * 50 and list(fed[200:]) == list(range(201, 211))
    assert (stream.received, stream.repeated, stream.missing, stream.chunks) == (210, 100, 50, 4)
    assert [arrived for *_, arrived in sink.fed] == [1.0, 2.0, 4.0]  # the wholly repeated one fed nothing
    assert "0.1 s of the microphone's audio never reached the server" in stream.note()
    assert "sent twice" in stream.note()


def test_a_stream_refuses_a_gap_longer_than_a_chunk_and_a_change_of_rate():
    sink = Sink()
    stream = MicStream("tab", sink.feed, sink.accepting, max_chunk_seconds=1.0)
    stream.take(0, 1000, ramp(0, 10), arrived=0.0)
    with pytest.raises(AudioError, match="never reached the server"):
        stream.take(2000, 1000, ramp(0, 10), arrived=0.0)
    # the silence for a gap counts against the chunk's limit: 0.6 s missing + 0.6 s sent > 1 s
    with pytest.raises(AudioError, match="0.6 s of the live audio never reached the server.*--max-chunk-seconds"):
        stream.take(610, 1000, ramp(0, 600), arrived=5.0)
    stream.take(610, 1000, ramp(0, 400), arrived=5.0)  # 0.6 + 0.4: within it
    assert (stream.received, stream.missing) == (1010, 600)
    with pytest.raises(AudioError, match="changed its sample rate from 1000 to 2000"):
        stream.take(10, 2000, ramp(0, 10), arrived=0.0)
    assert stream.received == 1010


def test_pcm_chunks_are_checked_before_they_are_read():
    rate, samples = read_pcm_chunk(np.array([1, -2, 3], "<i2").tobytes(), "48000", 1000, 5)
    assert rate == 48000 and list(samples) == [1, -2, 3]
    assert read_pcm_chunk(b"", 48000, 1000, 5)[1].size == 0  # the page's last chunk may be empty
    with pytest.raises(AudioError, match="0.0 MB; this server takes chunks up to"):
        read_pcm_chunk(bytes(2000), 48000, 1000, 5)
    with pytest.raises(AudioError, match="not whole 16-bit samples"):
        read_pcm_chunk(bytes(3), 48000, 1000, 5)
    with pytest.raises(AudioError, match="10.0 s long.*--max-chunk-seconds"):
        read_pcm_chunk(bytes(2 * 10_000), 1000, 100_000, 5)
    with pytest.raises(AudioError, match="not a real audio rate"):
        read_pcm_chunk(bytes(2), 8, 1000, 5)
    with pytest.raises(AudioError, match="not a number"):
        read_pcm_chunk(bytes(2), "abc", 1000, 5)


def test_audio_comes_only_with_a_live_ticket_and_refusals_reach_the_page():
    streams = MicStreams(Limits(max_chunk_bytes=10_000, max_chunk_seconds=2), clock=lambda: 0.0)
    sink = Sink()
    stream = streams.open("tab", sink.feed, sink.accepting)
    status, reply = streams.receive(stream.ticket, 0, 1000, ramp(0, 100).tobytes(), False, 1.0)
    assert status == 200 and reply["received_seconds"] == 0.1
    assert streams.receive("made-up", 100, 1000, bytes(20), False, 1.0)[0] == 410
    status, reply = streams.receive(stream.ticket, "x", 1000, bytes(20), False, 1.0)
    assert status == 400 and "not a sample number" in reply["error"]
    status, reply = streams.receive(stream.ticket, 100, 1000, bytes(2 * 3000), False, 1.0)  # 3 s > 2 s
    assert status == 400 and "3.0 s long" in reply["error"]
    assert streams.too_large(stream, 20_000)[0] == 413
    assert [m.split(";")[0] for m in streams.refusals("tab")] == [
        "the live audio chunk's position 'x' is not a sample number",
        "The live audio chunk is 3.0 s long", "the live audio chunk is 0.0 MB"]
    assert streams.refusals("tab") == []  # said once
    # the last chunk marks the end; once the session takes no more audio, the page is told why
    assert streams.receive(stream.ticket, 100, 1000, b"", True, 2.0)[0] == 200 and stream.ended.is_set()
    sink.why_not = "closed: only silence for too long"
    status, reply = streams.receive(stream.ticket, 100, 1000, bytes(20), False, 3.0)
    assert status == 410 and "only silence" in reply["error"]
    assert streams.of("tab") is None  # and its ticket is forgotten at once
    # Record again: a new ticket; the old one is refused, and the tab's open stream is the new one
    again = streams.open("tab", sink.feed, lambda: None)
    assert streams.receive(stream.ticket, 100, 1000, bytes(20), False, 3.0)[0] == 410
    assert streams.of("tab") is again and again.ticket != stream.ticket
    assert streams.close("tab") is again and streams.of("tab") is None
    assert streams.receive(again.ticket, 0, 1000, bytes(20), False, 3.0)[0] == 410


def test_the_page_is_told_to_send_chunks_within_both_limits():
    assert MicStreams(Limits()).page_chunk_seconds() == pytest.approx(0.9)
    assert MicStreams(Limits(max_chunk_seconds=0.5)).page_chunk_seconds() == pytest.approx(0.45)
    # 48 kHz int16 is 96 kB a second: a 64 kB limit allows about 0.67 s
    assert MicStreams(Limits(max_chunk_bytes=64_000)).page_chunk_seconds() == pytest.approx(0.6, abs=0.01)
