"""Controls that more than one tab shares, wired the same way in each."""

import gradio as gr

from ..options import effective_mode


def link_cache_controls(cache_on: gr.Checkbox, mode: gr.Radio) -> None:
    """The "KV cache" checkbox and the cache-mode radio say the same thing two ways; keep
    them in step (the rule itself is options.effective_mode). Browser-side only: no queue,
    no API endpoint."""
    cache_on.input(effective_mode, [cache_on, mode], mode, queue=False, api_name=False)
    mode.input(lambda m: m != "off", mode, cache_on, queue=False, api_name=False)
