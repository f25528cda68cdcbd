"""whisper-kv: watch Whisper's decoder KV cache at work, token by token."""

import os

# A decoder step is ~100 tiny kernels. With OpenMP's default (active, spinning) wait, any
# other busy thread on a small machine (a second decode, the web server, another process)
# makes every parallel region wait for a descheduled spinner: measured here, 2 threads
# went from 10 to 60-100 ms per token under load. Passive waiting keeps 10 ms with or
# without load. It must be set before torch (libgomp) loads, so this package sets it on
# import; import whisper_demo before torch. An explicit setting by the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
