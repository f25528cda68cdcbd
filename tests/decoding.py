"""A helper the decoder tests share: one decode, its events and its result."""

from whisper_demo.decode import stream_transcribe
from whisper_demo.events import DecodeOptions, DecodeResult, TokenEvent


def decode_all(model, audio, **options):
    """(TokenEvents, DecodeResult) of stream_transcribe with DecodeOptions(**options)."""
    return drain(stream_transcribe(model, audio, DecodeOptions(**options)))


def drain(decoding):
    """(TokenEvents, DecodeResult) of a decode's items (stream_transcribe, a live decoder)."""
    events, result = [], None
    for item in decoding:
        if isinstance(item, TokenEvent):
            events.append(item)
        else:
            result = item
    assert isinstance(result, DecodeResult)
    return events, result
