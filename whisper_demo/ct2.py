"""Read CTranslate2 Whisper model.bin files and map them onto openai-whisper's state_dict.

The offline models ship as faster-whisper (CTranslate2) conversions. We only need the
tensors, so this is a small numpy reader of the binary format, not a ctranslate2
dependency. The file layout is read by read_model and _read_variable, the names are mapped
onto openai-whisper's by _map_names; the comments there say why each step is as it is.

    model = read_model([Path("model.bin.part1"), Path("model.bin.part2")])
    checkpoint = to_whisper_checkpoint(model.variables, config)   # {"dims", "model_state_dict", ...}
"""

import base64
import gzip
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

PathLike = Union[str, Path]

# binary_version 6 is what current CTranslate2 writes; older files only lack fields,
# which the reader skips by version, so anything from 1 to 6 can be read.
SUPPORTED_BINARY_VERSIONS = range(1, 7)

# dtype ids as in CTranslate2's model_spec.py. bfloat16 has no numpy type: it is
# widened to float32 on read (exact, since bf16 is the top half of an f32).
_DTYPES = {
    0: np.dtype("<f4"),
    1: np.dtype("i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f2"),
    5: "bfloat16",
}

# Sanity bounds: a wrong file (or the parts in the wrong order) makes the header
# decode as nonsense, and we would rather say so than try to allocate 4 GB.
_MAX_RANK = 8
_MAX_VARIABLES = 100_000
_MAX_NAME_BYTES = 4096


class Ct2FormatError(ValueError):
    """model.bin is not a CTranslate2 file we can read (truncated, wrong version, ...)."""


@dataclass
class Ct2Model:
    binary_version: int
    spec_name: str
    spec_revision: int
    variables: Dict[str, np.ndarray]  # aliases included, pointing at their targets' arrays
    aliases: Dict[str, str] = field(default_factory=dict)  # alias -> target name


class _Stream:
    """Several part files read as one byte stream, so split models need no concatenation on disk."""

    def __init__(self, paths: Sequence[PathLike]):
        self.paths = [Path(p) for p in paths]
        if not self.paths:
            raise Ct2FormatError("no model.bin file given")
        self._index = 0
        self._file: Optional[BinaryIO] = None
        self.offset = 0  # bytes consumed across all parts, for error messages

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._file is not None:
            self._file.close()
            self._file = None

    def _describe(self) -> str:
        names = " + ".join(str(p) for p in self.paths)
        return f"{names} (at byte {self.offset})"

    def read(self, n: int, what: str) -> memoryview:
        """Exactly n bytes, crossing part boundaries; Ct2FormatError if the stream ends first."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            if self._file is None:
                if self._index >= len(self.paths):
                    raise Ct2FormatError(
                        f"model file is truncated: needed {n} bytes for {what} but only "
                        f"{got} were left in {self._describe()}"
                    )
                self._file = open(self.paths[self._index], "rb")
                self._index += 1
            k = self._file.readinto(view[got:])
            if not k:  # end of this part: carry on into the next one
                self._file.close()
                self._file = None
                continue
            got += k
            self.offset += k
        return view

    def at_end(self) -> bool:
        while True:
            if self._file is None:
                if self._index >= len(self.paths):
                    return True
                self._file = open(self.paths[self._index], "rb")
                self._index += 1
            if self._file.read(1):
                return False
            self._file.close()
            self._file = None

    def u8(self, what: str) -> int:
        return self.read(1, what)[0]

    def u16(self, what: str) -> int:
        return struct.unpack("<H", self.read(2, what))[0]

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.read(4, what))[0]

    def string(self, what: str) -> str:
        # u16 length that counts a trailing NUL, then the bytes and the NUL
        length = self.u16(what)
        if length == 0 or length > _MAX_NAME_BYTES:
            raise Ct2FormatError(f"implausible string length {length} for {what} in {self._describe()}")
        raw = bytes(self.read(length, what))
        if raw[-1] != 0:
            raise Ct2FormatError(f"string for {what} is not NUL-terminated in {self._describe()}")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise Ct2FormatError(f"string for {what} is not UTF-8 in {self._describe()}") from None


def read_model(paths: Union[PathLike, Sequence[PathLike]]) -> Ct2Model:
    """Read a CTranslate2 model.bin, given as one path or as its parts in order."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    with _Stream(paths) as s:
        version = s.u32("binary_version")
        if version not in SUPPORTED_BINARY_VERSIONS:
            raise Ct2FormatError(
                f"not a CTranslate2 model.bin we can read: binary_version {version} "
                f"(expected 1 to {SUPPORTED_BINARY_VERSIONS[-1]}) in {s.paths[0]}; "
                "is this the first part, and is it a model.bin at all?"
            )
        spec_name, spec_revision = "", 1
        if version >= 2:
            spec_name = s.string("spec_name")
            spec_revision = s.u32("spec_revision")

        count = s.u32("num_variables")
        if count > _MAX_VARIABLES:
            raise Ct2FormatError(f"implausible variable count {count} in {s._describe()}")
        variables = {}
        for i in range(count):
            name, array = _read_variable(s, version, i)
            variables[name] = array

        aliases = {}
        if version >= 3:
            for i in range(s.u32("num_aliases")):
                alias = s.string(f"alias {i}")
                aliases[alias] = s.string(f"target of alias {alias!r}")

        if not s.at_end():
            raise Ct2FormatError(
                f"unexpected bytes after the last alias in {s._describe()}: "
                "the parts may be in the wrong order or from different models"
            )

    _resolve_aliases(variables, aliases)
    return Ct2Model(version, spec_name, spec_revision, variables, aliases)


def _read_variable(s: _Stream, version: int, index: int) -> Tuple[str, np.ndarray]:
    name = s.string(f"name of variable {index}")
    rank = s.u8(f"rank of {name}")
    if rank > _MAX_RANK:
        raise Ct2FormatError(f"implausible rank {rank} for {name} in {s._describe()}")
    shape = tuple(s.u32(f"shape of {name}") for _ in range(rank))
    dtype_id = s.u8(f"dtype of {name}") if version >= 4 else 0  # before v4 all were float32
    if dtype_id not in _DTYPES:
        raise Ct2FormatError(
            f"unknown dtype id {dtype_id} for {name} in {s._describe()} "
            f"(known: 0=float32 1=int8 2=int16 3=int32 4=float16 5=bfloat16)"
        )
    num_bytes = s.u32(f"byte count of {name}")
    dtype = _DTYPES[dtype_id]
    itemsize = 2 if dtype == "bfloat16" else dtype.itemsize
    expected = int(np.prod(shape, dtype=np.int64)) * itemsize
    if num_bytes != expected:
        raise Ct2FormatError(
            f"{name}: {num_bytes} bytes stored but shape {shape} needs {expected} in {s._describe()}"
        )
    data = s.read(num_bytes, f"data of {name} ({num_bytes} bytes)")
    if dtype == "bfloat16":
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        array = bits.view(np.float32)
    else:
        array = np.frombuffer(data, dtype=dtype)
    return name, array.reshape(shape)


def _resolve_aliases(variables: Dict[str, np.ndarray], aliases: Dict[str, str]) -> None:
    """Make every alias (e.g. decoder/projection/weight) a name for its target's array."""
    for alias in aliases:
        target, seen = aliases[alias], {alias}
        while target in aliases and target not in variables:  # alias of an alias
            if target in seen:
                raise Ct2FormatError(f"alias cycle through {alias!r}")
            seen.add(target)
            target = aliases[target]
        if target not in variables:
            raise Ct2FormatError(f"alias {alias!r} points at missing variable {target!r}")
        variables[alias] = variables[target]


# ---------------------------------------------------------------------------------------
# CTranslate2 names -> openai-whisper state_dict


def infer_dims(variables: Dict[str, np.ndarray]) -> Dict[str, int]:
    """ModelDimensions as a dict, from tensor shapes and the num_heads scalars."""
    _require(variables, "encoder/conv1/weight", "encoder/position_encodings/encodings",
             "decoder/embeddings/weight", "decoder/position_encodings/encodings",
             "encoder/num_heads", "decoder/num_heads")
    n_audio_ctx, n_audio_state = variables["encoder/position_encodings/encodings"].shape
    n_vocab, n_text_state = variables["decoder/embeddings/weight"].shape
    n_text_ctx = variables["decoder/position_encodings/encodings"].shape[0]
    return dict(
        n_mels=int(variables["encoder/conv1/weight"].shape[1]),
        n_audio_ctx=int(n_audio_ctx),
        n_audio_state=int(n_audio_state),
        n_audio_head=int(variables["encoder/num_heads"].reshape(-1)[0]),
        n_audio_layer=_count_layers(variables, "encoder"),
        n_vocab=int(n_vocab),
        n_text_ctx=int(n_text_ctx),
        n_text_state=int(n_text_state),
        n_text_head=int(variables["decoder/num_heads"].reshape(-1)[0]),
        n_text_layer=_count_layers(variables, "decoder"),
    )


def _count_layers(variables, side: str) -> int:
    pattern = re.compile(rf"^{side}/layer_(\d+)/")
    layers = {int(m.group(1)) for name in variables if (m := pattern.match(name))}
    if not layers or layers != set(range(len(layers))):
        raise Ct2FormatError(f"{side} layers are missing or not numbered 0..N-1: {sorted(layers)}")
    return len(layers)


def _require(variables, *names):
    missing = [n for n in names if n not in variables]
    if missing:
        raise Ct2FormatError(f"not a Whisper model.bin: missing {', '.join(missing)}")


def _split(array: np.ndarray, parts: int, name: str) -> List[np.ndarray]:
    if array.shape[0] % parts:
        raise Ct2FormatError(f"{name}: first dimension {array.shape[0]} does not split into {parts}")
    return np.split(array, parts, axis=0)


def _map_names(variables: Dict[str, np.ndarray], dims: Dict[str, int]) -> Dict[str, np.ndarray]:
    """openai-whisper state_dict name -> array, plus the set of ct2 names we used."""
    out: Dict[str, np.ndarray] = {}
    used = set()

    def take(name: str) -> np.ndarray:
        _require(variables, name)
        used.add(name)
        return variables[name]

    def linear(dst: str, src: str, bias: bool = True):
        out[f"{dst}.weight"] = take(f"{src}/weight")
        if bias:
            out[f"{dst}.bias"] = take(f"{src}/bias")

    def layer_norm(dst: str, src: str):
        out[f"{dst}.weight"] = take(f"{src}/gamma")
        out[f"{dst}.bias"] = take(f"{src}/beta")

    def fused(dst: str, src: str, names: Sequence[str]):
        # CTranslate2 fuses q,k,v (self-attention) or k,v (cross-attention) into one
        # Linear with the rows stacked in that order. openai-whisper's key has no bias:
        # q.(k + b) = q.k + q.b, and q.b is the same for every key, so softmax ignores
        # it; CTranslate2 stores zeros there, and dropping them loses nothing.
        weights = _split(take(f"{src}/weight"), len(names), f"{src}/weight")
        biases = _split(take(f"{src}/bias"), len(names), f"{src}/bias")
        for part, w, b in zip(names, weights, biases):
            out[f"{dst}.{part}.weight"] = w
            if part != "key":
                out[f"{dst}.{part}.bias"] = b

    def block(dst: str, src: str, cross: bool):
        layer_norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
        fused(f"{dst}.attn", f"{src}/self_attention/linear_0", ("query", "key", "value"))
        linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
        if cross:
            layer_norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
            linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
            fused(f"{dst}.cross_attn", f"{src}/attention/linear_1", ("key", "value"))
            linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
        layer_norm(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")
        linear(f"{dst}.mlp.0", f"{src}/ffn/linear_0")
        linear(f"{dst}.mlp.2", f"{src}/ffn/linear_1")

    linear("encoder.conv1", "encoder/conv1")
    linear("encoder.conv2", "encoder/conv2")
    out["encoder.positional_embedding"] = take("encoder/position_encodings/encodings")
    for i in range(dims["n_audio_layer"]):
        block(f"encoder.blocks.{i}", f"encoder/layer_{i}", cross=False)
    layer_norm("encoder.ln_post", "encoder/layer_norm")

    # The output projection is tied to the token embedding in openai-whisper
    # (logits = x @ token_embedding.T); ct2 names the same array twice.
    out["decoder.token_embedding.weight"] = take("decoder/embeddings/weight")
    used.add("decoder/projection/weight")
    out["decoder.positional_embedding"] = take("decoder/position_encodings/encodings")
    for i in range(dims["n_text_layer"]):
        block(f"decoder.blocks.{i}", f"decoder/layer_{i}", cross=True)
    layer_norm("decoder.ln", "decoder/layer_norm")

    # Scalars (num_heads, activation flags, ...) carry no weights: ignore unknown ones.
    # An unknown *tensor* means a layout we do not understand (e.g. int8 "*_scale"
    # variables of a quantized model), and mapping around it would give a broken model.
    leftover = [n for n, a in variables.items() if n not in used and a.size > 1]
    if leftover:
        raise Ct2FormatError(
            f"model.bin has tensors this converter does not know: {', '.join(sorted(leftover)[:5])}"
            + (" ..." if len(leftover) > 5 else "")
        )
    return out


def alignment_heads_dump(heads: Sequence[Sequence[int]], n_text_layer: int, n_text_head: int) -> bytes:
    """Encode [[layer, head], ...] the way openai-whisper stores them: base85(gzip(bool mask))."""
    mask = np.zeros((n_text_layer, n_text_head), dtype=bool)
    for layer, head in heads:
        if not (0 <= layer < n_text_layer and 0 <= head < n_text_head):
            raise Ct2FormatError(
                f"alignment head [{layer}, {head}] outside {n_text_layer} layers x {n_text_head} heads"
            )
        mask[layer, head] = True
    # mtime=0 so the same heads always encode to the same bytes
    return base64.b85encode(gzip.compress(mask.tobytes(), mtime=0))


def to_whisper_checkpoint(variables: Dict[str, np.ndarray], config: Optional[dict] = None) -> dict:
    """{"dims", "model_state_dict", "alignment_heads"} ready for whisper.model.Whisper.

    The state_dict holds torch tensors in the stored dtype (float16 for our packages):
    Whisper(dims).load_state_dict copies them into its float32 parameters, exactly as
    it does with OpenAI's own float16 checkpoints. alignment_heads is the list of
    [layer, head] pairs from config.json (None if absent); encode it for
    Whisper.set_alignment_heads with alignment_heads_dump.
    """
    import torch  # only the conversion needs torch; reading model.bin is numpy only

    dims = infer_dims(variables)
    arrays = _map_names(variables, dims)
    state_dict = {
        # copy: q, k and v are views of one fused array, and torch.save writes a view's
        # whole storage, so without the copy the cache file would carry the fused
        # tensors (dropped key biases included) instead of just the parts we keep
        name: torch.from_numpy(np.ascontiguousarray(a).copy())
        for name, a in arrays.items()
    }
    heads = None
    if config and config.get("alignment_heads") is not None:
        heads = [[int(layer), int(head)] for layer, head in config["alignment_heads"]]
        alignment_heads_dump(heads, dims["n_text_layer"], dims["n_text_head"])  # validates
    return {"dims": dims, "model_state_dict": state_dict, "alignment_heads": heads}
