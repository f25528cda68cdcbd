"""What a visitor may make the server do, decided once from where the app listens.

At the machine (the app bound to a loopback address, no share link) the person using the
page is the person who started it: every feature is on. Beyond loopback (`--host 0.0.0.0`,
a Space, a container, `--share`) anyone who can reach the port is a visitor, so two things
that act on the machine itself are off unless the operator opts in:

- this computer's microphone (a visitor would hear the room the server stands in);
- models other than the ones already on disk (a visitor could make the server download
  and hold gigabytes of weights).

    policy = sharing_policy(host="0.0.0.0", share=False, startup_model="tiny.en")
    policy.server_mic         # False
    policy.allows("large-v3") # False: not offline, not named by --models
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterable, Optional, Tuple

ALL_MODELS = "all"  # --models all: any name, downloads included


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from this computer (127.x, ::1, localhost).
    An empty host, 0.0.0.0 and :: listen on every interface."""
    name = (host or "").strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


@dataclass(frozen=True)
class SharingPolicy:
    """shared: visitors other than the operator can reach the page.
    server_mic: the Live tab may record this computer's microphone.
    models: the model names a visitor may load (None: any, as at the machine)."""

    shared: bool = False
    server_mic: bool = True
    models: Optional[Tuple[str, ...]] = None

    def allows(self, name: str) -> bool:
        return self.models is None or name in self.models

    def refusal(self, name: str) -> str:
        """The message for a model this server does not offer."""
        offered = ", ".join(self.models or ())
        return (f"Model {name!r} is not offered on this server (offered: {offered}). "
                f"The operator can add it with --models.")


def parse_models(text: Optional[str]) -> Optional[Tuple[str, ...]]:
    """--models: "tiny.en,base" -> ("tiny.en", "base"); "all" -> None (any model)."""
    if text is None:
        return None
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise ValueError("--models needs at least one name (or 'all')")
    if ALL_MODELS in names:
        return None
    return names


def offline_models() -> Tuple[str, ...]:
    """The models that load without a download on this machine."""
    from .model_sources import list_models

    return tuple(info.name for info in list_models() if info.available_offline)


def sharing_policy(host: str, share: bool, startup_model: str, allow_server_mic: bool = False,
                   models: Optional[str] = None,
                   offline: Optional[Iterable[str]] = None) -> SharingPolicy:
    """The policy for a server listening on `host` (share: a public link too).

    models: the --models flag as given (None: not given). offline: the offline model
    names (looked up when None). The startup model is always offered: it is loaded."""
    shared = share or not is_loopback(host)
    if models is not None:
        chosen = parse_models(models)  # None: --models all
    elif shared:
        chosen = tuple(offline if offline is not None else offline_models())
    else:
        chosen = None  # at the machine: any model, as before
    if chosen is not None:
        chosen = tuple(dict.fromkeys((startup_model, *chosen)))
    return SharingPolicy(shared=shared, server_mic=allow_server_mic or not shared, models=chosen)
