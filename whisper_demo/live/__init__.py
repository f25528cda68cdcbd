"""Live transcription: audio arriving in chunks, re-decoded as it comes, with the words
that become final (committed) separated from those that may still change (tentative).

    from whisper_demo.live import LiveConfig, model_session
    session = model_session(model, DecodeOptions(cache="static"), LiveConfig())
    session.add_audio(48000, chunk)            # any thread
    for item in session.updates(): ...         # TokenEvents, then a LiveUpdate
    for item in session.finish(): ...          # the rest, committed
    print(session.committed_text)

alignatt.py pure, the default: words committed once the attention has passed them (AlignAtt)
policy.py   pure: the other policy (LocalAgreement), and the committed words both share
config.py   LiveConfig, the policy it makes, the check that a decoder gives what it reads
hypotheses.py a decode's result as the policies read it; attempt.py one call to the decoder
vad.py      is there speech, where did it end (Silero VAD)
session.py  one session: audio buffer, when to re-decode, prompt, stats; model_session()
snapshots.py what it publishes: LiveStats and LiveUpdate, immutable
decoder.py  the model as the callable a session decodes with
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
