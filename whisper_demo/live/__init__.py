"""Live transcription in two passes: streamed words as audio arrives (committed, and
tentative ones that may still change), then each utterance's final text from one decode
that heard all of it.

    from whisper_demo.live import LiveConfig, model_session
    session = model_session(model, DecodeOptions(cache="static"), LiveConfig())
    session.add_audio(48000, chunk)            # any thread
    for item in session.updates(): ...         # TokenEvents, then a LiveUpdate
    for item in session.finish(): ...          # the rest, made final
    print(session.final_text)

The session and how it is driven
session.py    one session: audio in, the passes in their order, LiveUpdates out; model_session()
driver.py     the one loop from any source: feed -> updates -> finish (drive, Source)
worker.py     the thread that drives a session for the page and publishes immutable views
registry.py   sessions by key, idle ones closed
config.py     LiveConfig, the policy it makes, the check that a decoder gives what it reads
parts.py      what both passes share (SessionParts) and what a step of one reports (PassStep)
snapshots.py  what a session publishes: LiveStats and LiveUpdate, immutable; meter.py keeps the figures

The two passes
streamed_pass.py when the utterance in progress is re-decoded, with what, and what is committed
final_pass.py the final pass: when it runs, which decodes it makes, what it makes final
final_words.py pure: which words a final pass's decodes write, where a long buffer is cut
decoders.py   both decoders, from two named option presets, and the one token limit
attempt.py    one call to a decoder; hypotheses.py its result as the policies read it
context.py    what a streamed decode is given: prompt, prefix, draft; loops.py a decode that looped

The words
words.py      the vocabulary: TimedWord, Hypothesis, Decision, the start slack
transcript.py the committed words, one record each (final or not, when shown, by which pass)
alignatt.py   pure, the default policy: committed once the attention has passed them
agreement.py  pure, the other policy: committed once two decodes agree (LocalAgreement)
revision.py   what a final pass changed of the words the page showed (pure)

The audio
buffer.py     the audio since the last cut, and the one place samples become seconds
inbox.py      the audio other threads hand a session, and when each part arrived
vad.py        is there speech, where did an utterance end (Silero VAD)
utterances.py where utterances end (a final pass is due) and where the one in progress starts
mic.py        this computer's microphone: the terminal mode and the page's desktop source
mic_device.py the device itself (sounddevice, imported lazily)

(its benchmarks are in whisper_demo/bench/: live_stream, live_sessions, live_eval, fed by feeds.py)
"""

from .agreement import AgreementPolicy
from .alignatt import AlignAttPolicy
from .config import LiveConfig
from .decoders import Decoder, model_decoder
from .driver import Source, drain, drive
from .registry import SessionRegistry
from .session import LiveSession, model_session
from .snapshots import LiveStats, LiveUpdate
from .transcript import Transcript
from .vad import VoiceDetector
from .words import Decision, Hypothesis, TimedWord
from .worker import LiveView, LiveWorker

__all__ = [
    "AgreementPolicy", "AlignAttPolicy", "Decision", "Hypothesis", "TimedWord", "Transcript", "SessionRegistry",
    "Decoder", "LiveConfig", "LiveSession", "LiveStats", "LiveUpdate", "model_decoder", "model_session",
    "VoiceDetector", "LiveView", "LiveWorker", "Source", "drain", "drive",
]
