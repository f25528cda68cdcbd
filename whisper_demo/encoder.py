"""The audio encoder, over a 30 s window or over only the audio there is.

Whisper's encoder always sees 30 s of log-mel: a 3 s utterance is encoded with 27 s of
padding, and the encoder's cost (quadratic attention over 1500 positions) is the same for
both. whisper.cpp's `audio_ctx` encodes fewer positions instead. That is what a live
re-decode of a short buffer wants: its encoder took ~70 % of each re-decode (live bench).

It is not exact: the decoder then cross-attends to fewer positions than it was trained on,
so the tokens may differ from a full-window decode. A margin of encoded silence after the
audio keeps what the decoder sees at the end of speech close to training (padding follows
speech there too); the live benchmark measures the word error rate both ways.

The fast precision ("int8") also encodes in bfloat16 where the CPU multiplies it natively
(bf16_encoder.py), else with int8 block linears where that is fast (int8_encoder.py);
precision.py decides which. The exact precision always runs the model's own float32 encoder.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from whisper.audio import N_FRAMES

from .bf16_encoder import bf16_encoder
from .int8_encoder import int8_encoder
from .precision import precision_for

FRAMES_PER_SECOND = 100  # log-mel frames (10 ms hop)
# Encoded padding after the audio (see above). Live's streamed pass, tiny.en, real-time
# feed (docs/live-notebook.md): 8 s made fewer streamed words wrong than 2 s (4.0 % against
# 8.5 % on read speech) for a first token 80 ms later; a 30 s window, 10.6 % (the decodes
# fall behind the speech).
MARGIN_SECONDS = 8.0
STEP_SECONDS = 1.0  # input lengths come in whole seconds: fewer distinct shapes


def encoder_frames(audio_frames: int, audio_only: bool) -> int:
    """Mel frames to encode for a window holding `audio_frames` frames of audio."""
    if not audio_only:
        return N_FRAMES
    seconds = audio_frames / FRAMES_PER_SECOND + MARGIN_SECONDS
    seconds = math.ceil(seconds / STEP_SECONDS) * STEP_SECONDS
    return min(N_FRAMES, int(seconds * FRAMES_PER_SECOND))


def encoder_dtype(model, precision: str = "exact") -> str:
    """What the encoder computes in for a decode at `precision`: in the fast mode on a float32
    model "bfloat16" or "int8" where the CPU suits one (precision.fast_encoder_dtype), else
    the model's own dtype."""
    return precision_for(model, precision).encoder_dtype


def encode(model, mel: Tensor, precision: str = "exact") -> Tensor:
    """Audio features [batch, frames // 2, d] for a mel [batch, n_mels, frames], frames <= 3000.

    Exact: for 3000 frames this is the model's own encoder; for fewer it is the same
    computation with the positional embedding cut to the positions present (openai-whisper's
    encoder asserts a full window). The fast precision runs it in bfloat16 when
    encoder_dtype says so, or with int8 block linears (float32 features either way)."""
    dtype = encoder_dtype(model, precision)
    if dtype == "bfloat16":
        return bf16_encoder(model)(mel)
    if dtype == "int8":
        return int8_encoder(model)(mel)
    encoder = model.encoder
    with torch.inference_mode():
        if mel.shape[-1] == N_FRAMES:
            return encoder(mel)
        x = F.gelu(encoder.conv1(mel))
        x = F.gelu(encoder.conv2(x))
        x = x.permute(0, 2, 1)
        x = (x + encoder.positional_embedding[: x.shape[1]]).to(x.dtype)
        for block in encoder.blocks:
            x = block(x)
        return encoder.ln_post(x)
