"""The benchmarks: what the app's choices cost and buy, measured on this machine.

    python -m whisper_demo.bench                 lists them
    python -m whisper_demo.bench NAME [--help]   runs one

Each runnable module below has a main(argv); data.py names what they read (the eval folder:
--eval-dir, or the environment variable WHISPER_KV_EVAL_DIR). The product never imports
from here: a benchmark may import anything of the app, not the other way round.
"""

import os

# Here, before any benchmark module loads torch, whichever way it is run: as app.py does,
# OpenMP's threads wait passively, else the numbers would measure idle threads spinning.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# name: what it measures (one line each, as `python -m whisper_demo.bench` prints them)
BENCHMARKS = {
    "decode_speed": "ms per token of every cache strategy, int8, openai-whisper and CTranslate2; targets",
    "encoder_speed": "the encoder in both precisions and CTranslate2's; its share of a live re-decode",
    "accuracy": "word error rate of the fast mode against the exact mode over the eval folder",
    "e2e": "whole files end to end (a long file, then each recording) against openai-whisper and faster-whisper",
    "step_profile": "where one decoder step's time goes (torch.profiler over real steps)",
    "draft": "what a draft saves a live re-decode of a growing buffer",
    "live_stream": "a long stream of real speech through one live session, fed three ways",
    "live_sessions": "live against offline, one session per recording (or your own files)",
    "live_eval": "live per session over the eval folder, each policy and feed, against the references",
    "live_page": "live through the page: Chromium's fake microphone into the Live tab, one session a recording",
    "live_load": "k visitors speaking at once through the route: the largest k that keeps live's targets",
}
