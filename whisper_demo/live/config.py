"""A live session's settings (LiveConfig), the policy they make (which words are final),
and the check that a decoder gives what that policy reads."""

from __future__ import annotations

from dataclasses import dataclass

from .alignatt import AlignAttPolicy
from .decoder import Decoder
from .policy import AgreementPolicy, CommittedWords


@dataclass(frozen=True)
class LiveConfig:
    # Which words are final: "alignatt" (the model's attention has passed them,
    # alignatt.py; its decoder must be asked for attention: model_session, or
    # model_decoder(..., alignatt=True)) or "agreement" (two decodes agree, policy.py).
    # AlignAtt commits within a WER point of offline over the dev sessions, one session per
    # recording, at half agreement's delay (docs/live.md)
    policy: str = "alignatt"
    frame_seconds: float = 0.4  # alignatt: a token read this close to the buffer's end waits
    # alignatt: below this much buffer a word needs more audio after it (alignatt.py, rule 5)
    start_seconds: float = 2.0
    # alignatt: a word the model gives less is doubted (rule 8). Words written where the
    # speaker had stopped came out at 0.00-0.07, most words heard at 0.2-0.95; at 0.1
    # the dev sessions lost 13 % of AlignAtt's errors, at 0.2 no more (docs/live-notebook.md)
    min_word_probability: float = 0.1
    min_new_seconds: float = 0.5  # new audio that makes a re-decode worth running
    right_context_seconds: float = 0.6  # see policy.py, rule 3
    min_vote_seconds: float = 2.0  # see policy.py, rule 3
    pause_seconds: float = 0.5  # silence after speech that ends an utterance
    min_speech_seconds: float = 0.2  # voiced audio needed before anything is decoded
    long_pause_seconds: float = 1.0  # once all is committed, a pause this long is cut
    lead_in_seconds: float = 0.3  # silence kept before the next speech after such a cut
    # past this, cut at a committed sentence or segment end. Late, because a cut costs words
    # (the decodes after it hear less of what came before) and a long buffer costs little
    # (its committed words are given, not decoded): 20 s made 47 errors where 15 s made 52
    # over the running speech of sessions_bench (docs/live-notebook.md, seventh session).
    cut_after_seconds: float = 20.0
    max_buffer_seconds: float = 25.0  # past this, cut at the last committed word
    hard_limit_seconds: float = 29.5  # one Whisper window: older audio is dropped (counted)
    max_backlog_seconds: float = 120.0  # audio waiting for a stalled decoder
    prompt_chars: int = 200  # committed text given as the prompt (whisper_streaming's 200)
    # This many looped decodes in a row and the buffer is decoded without a prompt until
    # it is cut: the prompt is what they loop on. 0: never. (openai-whisper's transcribe
    # drops the prompt for good after one failed window; live, that cost more than it
    # saved: the committed text is what gets the next short utterances right.)
    loop_reset_after: int = 5
    history: int = 2000  # latency samples kept for the medians

    @property
    def reads_attention(self) -> bool:
        """The policy reads the decoder's attention: model_decoder(..., alignatt=True)."""
        return self.policy == "alignatt"


def make_policy(config: LiveConfig) -> CommittedWords:
    """The policy the config names, with the session's buffer limits."""
    limits = dict(cut_after_seconds=config.cut_after_seconds, max_buffer_seconds=config.max_buffer_seconds)
    if config.policy == "alignatt":
        return AlignAttPolicy(frame_seconds=config.frame_seconds, start_seconds=config.start_seconds,
                              min_probability=config.min_word_probability, **limits)
    if config.policy != "agreement":
        raise ValueError(f"unknown live policy {config.policy!r}: agreement or alignatt")
    return AgreementPolicy(right_context_seconds=config.right_context_seconds,
                           min_vote_seconds=config.min_vote_seconds, **limits)


def check_decoder(decoder: Decoder, config: LiveConfig) -> None:
    """ValueError if the decoder cannot give what the policy reads (a decoder that says
    nothing of its options, a test's stand-in, is taken as it is)."""
    options = getattr(decoder, "options", None)
    if config.reads_attention and options is not None and not options.attention:
        # it would commit nothing before a pause: no attention to read
        raise ValueError("the AlignAtt policy needs a decoder that gives the attention: "
                         "model_decoder(model, options, alignatt=True)")
