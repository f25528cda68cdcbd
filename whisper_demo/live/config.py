"""A live session's settings (LiveConfig), the policy they make (which words are final),
and the check that a decoder gives what that policy reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from .agreement import AgreementPolicy
from .alignatt import AlignAttPolicy
from .decoders import Decoder

Policy = Union[AlignAttPolicy, AgreementPolicy]  # update(transcript, hypothesis) -> Decision


@dataclass(frozen=True)
class LiveConfig:
    # Which streamed words are committed before their utterance's final pass: "alignatt"
    # (the model's attention has passed them, alignatt.py; its decoder must be asked for
    # attention: model_session, or model_decoder(..., alignatt=True)) or "agreement" (two
    # decodes agree, agreement.py), about twice AlignAtt's delay (docs/live.md)
    policy: str = "alignatt"
    frame_seconds: float = 0.4  # alignatt: a token read this close to the buffer's end waits
    # alignatt: below this much buffer a word needs more audio after it (alignatt.py, rule 4)
    start_seconds: float = 2.0
    min_new_seconds: float = 0.5  # new audio that makes a re-decode worth running
    # A streamed decode hears the utterance in progress; past this much audio its start
    # moves to the end of a committed word (a sentence's, if one fits), leaving at least
    # `streamed_keep_seconds` after it (utterances.trimmed_start): its encoder then costs
    # what ~18 s of input do (with encoder.MARGIN_SECONDS), not a whole window
    streamed_window_seconds: float = 10.0
    streamed_keep_seconds: float = 4.0
    right_context_seconds: float = 0.6  # see agreement.py, rule 3
    min_vote_seconds: float = 2.0  # see agreement.py, rule 3
    # silence after speech that ends an utterance: its final pass runs then (final_pass.py)
    pause_seconds: float = 0.5
    # The final pass's precision: None, the streamed pass's (the fast mode on a CPU: int8
    # decoder, bfloat16 encoder), or "exact" (openai-whisper's own arithmetic). Exact was
    # the default while the fast mode projected the vocabulary with a dynamically quantized
    # matmul that wrote other words on hard speech; with the int8-weight projection the fast
    # final pass writes about as well over the dev set's feeds (better in sessions that do
    # not pause, 3 more errors of 241 on the padded hard clips: docs/live.md) at 0.72-0.75x
    # an exact decode's time (8-25 s of speech), which every final pass, and the streamed
    # words waiting behind it, pays: what makes the interim passes below affordable here.
    final_precision: Optional[str] = None
    min_speech_seconds: float = 0.2  # voiced audio needed before anything is decoded
    lead_in_seconds: float = 0.3  # silence kept before the first voice of a buffer
    # a final decode's audio opens with lead_in_seconds before its first voice: silence is
    # put in where the microphone gave less (a recording that starts on its first word)
    pad_lead_in: bool = True
    # The buffer holds everything since its last cut, pauses included, as an offline window
    # does: each final pass hears the utterances before its own. A buffer this long gets a
    # final pass of these seconds and is cut where it says (final_words.cut_point), before
    # it outgrows Whisper's 30 s window. Late, because a cut costs words (the decodes after
    # it hear less of what came before) and a long buffer costs little (the words the last
    # pass wrote are its draft, checked in a few forwards).
    cut_after_seconds: float = 25.0
    # ... and at least this much of those seconds' end stays unfinal, in the buffer: the
    # words there were heard with little audio after them
    cut_keep_seconds: float = 3.0
    # Speech that does not pause (read text, a fast talker) gets an interim final pass once
    # its utterance has run this long after its first voice, and again every
    # (interim_final_seconds - cut_keep_seconds) after that: its words up to a boundary
    # cut_keep_seconds before the audio's end become final, and the buffer is kept (not cut).
    # Without it, a streamed word that only the final pass corrects ("two" for "2", "and
    # enter" for "an inter") shows wrong until the buffer's 25 s cut. 0: never. (With exact
    # final passes the extra decodes held up the streamed words through the page on this
    # 2-core CPU: speech -> commit median 1.3 -> 1.9 s; in the fast mode 1.4 s, docs/live.md.)
    interim_final_seconds: float = 8.0
    # A final pass hears again the buffer's final words said in its audio's last this many
    # seconds (the last pass's tokens as its draft; 30: the whole buffer) and writes a
    # stretch of them otherwise where it is surer of it than the pass that wrote it
    # (revision.surer_words); those before are settled, given as its transcript's start.
    # 0: every final word is given, and a word heard wrong early is given to every later
    # pass of the buffer ("DOW 1 ... DOW 2 ... DOW 3" where offline writes "Dial"). Over the
    # lead offsets 5 and 10 s kept such words (read lead90 59-61 errors, offline 51);
    # without the surer rule words of utterances long past flipped back and forth (docs/live.md)
    rewrite_final_seconds: float = 30.0
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


def make_policy(config: LiveConfig) -> Policy:
    """The streamed pass's policy the config names."""
    if config.policy == "alignatt":
        return AlignAttPolicy(frame_seconds=config.frame_seconds, start_seconds=config.start_seconds)
    if config.policy != "agreement":
        raise ValueError(f"unknown live policy {config.policy!r}: agreement or alignatt")
    return AgreementPolicy(right_context_seconds=config.right_context_seconds,
                           min_vote_seconds=config.min_vote_seconds)


def check_decoder(decoder: Decoder, config: LiveConfig) -> None:
    """ValueError if the decoder cannot give what the policy reads (a decoder that says
    nothing of its options, a test's stand-in, is taken as it is)."""
    options = getattr(decoder, "options", None)
    if config.reads_attention and options is not None and not options.attention:
        # it would commit nothing before a pause: no attention to read
        raise ValueError("the AlignAtt policy needs a decoder that gives the attention: "
                         "model_decoder(model, options, alignatt=True)")
