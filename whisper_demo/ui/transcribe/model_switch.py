"""Switching the page's model: the dropdown's entries, loading a model once into the shared
store, and saying why one cannot load.

    switch = ModelSwitch(store, defaults)
    switch.load_model(model_name, in_use, panel_html)
        -> (model status markdown, language dropdown update, model dropdown, model in use,
            idle panel); a model that cannot load leaves `in_use` selected
    switch.load_or_refuse(name) -> the model, or ModelUnavailable with a message for the page

A model this machine cannot download is refused before anyone waits for it (model_sources
says which models are available offline).
"""

from __future__ import annotations

import html
import logging
from typing import List, Optional, Tuple

import gradio as gr

from ..render import panel
from ..store import Defaults, ModelStore

log = logging.getLogger(__name__)


def model_choices() -> List[Tuple[str, str]]:
    """Dropdown entries from model_sources.list_models(): offline ones first, the rest marked."""
    try:
        from ...model_sources import list_models

        infos = list_models()
    except Exception as exc:  # a broken models module must not take the page down
        log.warning("list_models failed: %s", exc)
        return []
    from ...model_sources import can_download

    # a model this machine cannot download is said to be unusable before anyone picks it
    missing = "needs download" if can_download() else "unavailable offline (needs a download)"
    choices = []
    for info in infos:
        size = f"{info.n_params / 1e6:.0f} M params" if info.n_params else ""
        where = "offline" if info.available_offline else missing
        choices.append((f"{info.name} · {size} · {where}".replace(" ·  ·", " ·"), info.name))
    return choices


class ModelUnavailable(Exception):
    """A model the page cannot switch to; the message is for the person who picked it."""


def _is_idle(panel_html: Optional[str]) -> bool:
    """Whether the cache panel shows no run (so it describes the model, and can follow it)."""
    return not panel_html or "wk-empty" in panel_html


class ModelSwitch:
    """The Transcribe tab's model choice, bound to the shared store and the app's defaults."""

    def __init__(self, store: ModelStore, defaults: Defaults):
        self.store = store
        self.defaults = defaults

    def load_model(self, model_name, in_use=None, panel_html="", progress=gr.Progress(track_tqdm=True)):
        """Switch to `model_name`: (header status, language, model dropdown, model in use,
        idle panel). A model that cannot load leaves `in_use` selected and working, with one
        message that says why and which models work offline (a toast, as plain text: the
        message quotes errors such as "<urlopen error ...>" that would read as HTML)."""
        name = model_name or self.defaults.model
        in_use = in_use or self.defaults.model
        try:
            model = self.load_or_refuse(name, progress)
        except ModelUnavailable as exc:
            gr.Warning(html.escape(str(exc)), title="Model unavailable", duration=None)
            return gr.skip(), gr.skip(), gr.update(value=in_use), in_use, gr.skip()
        idle_panel = panel.panel_html(None, model) if _is_idle(panel_html) else gr.skip()
        return self.model_status(name), self.language_update(model), gr.skip(), name, idle_panel

    def load_or_refuse(self, name: str, progress=None):
        """The model, loaded once; ModelUnavailable when it needs a download this machine
        cannot make (said without trying) or when loading fails."""
        from ...model_sources import can_download, list_models

        if self.store.is_loaded(name):
            return self.store.get(name)
        infos = {info.name: info for info in list_models()}
        offline = ", ".join(n for n, info in infos.items() if info.available_offline)
        info = infos.get(name)
        if info is not None and not info.available_offline and not can_download():
            raise ModelUnavailable(f"{name} needs a download from OpenAI, and this machine cannot "
                                   f"reach it. Models available offline: {offline}.")
        if progress is not None and not self.store.is_loaded(name):
            progress(0, desc=f"Loading {name} (once; then shared by every session)…")
        try:
            return self.store.get(name)
        except Exception as exc:  # ModelError, or a download that failed
            log.warning("model %s failed to load: %s", name, exc)
            message = str(exc)
            if "available offline" not in message:
                message += f" Models available offline: {offline}."
            raise ModelUnavailable(f"{name} could not be loaded: {message}") from exc

    def model_status(self, name: Optional[str] = None) -> str:
        from ...models import model_label

        entry = self.store.get_entry(name or self.defaults.model)
        model = entry.model
        loaded = f" · loaded in {entry.load_seconds:.1f} s" if entry.load_seconds else ""
        kind = "multilingual" if model.is_multilingual else "English-only"
        return f"**{model_label(model)}** · {kind} · {model.device}{loaded}"

    @staticmethod
    def language_update(model):
        if model.is_multilingual:
            return gr.update(interactive=True, info="for multilingual models; auto-detect by default")
        return gr.update(value="auto", interactive=False, info="this model is English-only")
