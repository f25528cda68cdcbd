"""The folder CTranslate2 loads a bundled model from: its package's folder, or for a model
split in parts (base) a temporary folder with the parts joined. Light to import (no torch),
for every benchmark that runs CTranslate2 as a peer."""

import atexit
import shutil
import tempfile
from pathlib import Path

from ..model_sources import package_model_paths


def ctranslate2_model_dir(model_name: str) -> str:
    """The package's model folder; for a model split in parts (base), a temporary folder
    (removed at exit) with the parts joined, since CTranslate2 reads one model.bin."""
    paths = package_model_paths(model_name)
    if len(paths) == 1:
        return str(paths[0].parent)
    folder = Path(tempfile.mkdtemp(prefix="whisper-kv-ct2-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    with open(folder / "model.bin", "wb") as joined:
        for part in paths:
            with open(part, "rb") as piece:
                shutil.copyfileobj(piece, joined)
    for extra in paths[0].parent.iterdir():  # config.json, vocabulary, tokenizer
        if not extra.name.startswith("model.bin"):
            shutil.copy(extra, folder / extra.name)
    return str(folder)
