"""Live transcription in two passes: streamed words as audio arrives (committed, and
tentative ones that may still change), then each utterance's final text from one decode
that heard all of it.

    from whisper_demo.live import LiveConfig, model_session
    session = model_session(model, DecodeOptions(cache="static"), LiveConfig())
    session.add_audio(48000, chunk)            # any thread
    for item in session.updates(): ...         # TokenEvents, then a LiveUpdate
    for item in session.finish(): ...          # the rest, made final
    print(session.final_text)

alignatt.py pure, the default: streamed words committed once the attention has passed them
policy.py   pure: the other policy (LocalAgreement), and the committed words both share
config.py   LiveConfig, the policy it makes, the check that a decoder gives what it reads
hypotheses.py a decode's result as the policies read it; attempt.py one call to the decoder
final_pass.py the final pass's decoder, which of its words are new, where a long buffer is cut
revision.py what a final pass changed of the words the page showed (pure)
vad.py      is there speech, where did an utterance end (Silero VAD)
utterances.py where utterances end (a final pass is due) and where the one in progress starts
inbox.py    the audio other threads hand a session, and when each part arrived
session.py  one session: the buffer, both passes, what each is given, stats; model_session()
snapshots.py what it publishes: LiveStats and LiveUpdate, immutable
decoder.py  the model as the streamed pass's callable; a decode that looped
worker.py   the thread that drives a session and publishes immutable views
registry.py sessions by key, idle ones closed
mic.py      this computer's microphone: the terminal mode and the page's desktop source
mic_device.py the device itself (sounddevice, imported lazily)
(its benchmarks are in whisper_demo/bench/: live_stream, live_sessions, live_eval)
"""

from .alignatt import AlignAttPolicy
from .policy import AgreementPolicy, Decision, Hypothesis, TimedWord
from .registry import SessionRegistry
from .decoder import Decoder, model_decoder
from .config import LiveConfig
from .session import LiveSession, model_session
from .snapshots import LiveStats, LiveUpdate
from .vad import VoiceDetector
from .worker import LiveView, LiveWorker

__all__ = [
    "AgreementPolicy", "AlignAttPolicy", "Decision", "Hypothesis", "TimedWord", "SessionRegistry", "Decoder",
    "LiveConfig", "LiveSession", "LiveStats", "LiveUpdate", "model_decoder", "model_session", "VoiceDetector",
    "LiveView", "LiveWorker", "drain",
]


def drain(items):
    """Run an updates()/finish() generator to its end; its last LiveUpdate (or None)."""
    last = None
    for item in items:
        if isinstance(item, LiveUpdate):
            last = item
    return last
