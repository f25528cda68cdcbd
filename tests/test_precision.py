"""Precision decided in one place: which names run where, and what each means on a model."""

from types import SimpleNamespace

import pytest
import torch

import whisper_demo.precision as precision_module
from whisper_demo.events import DecodeOptions
from whisper_demo.options import decode_options
from whisper_demo.precision import PRECISIONS, check_precision, precision_for, precision_with_cache


def _model(dtype=torch.float32, device="cpu"):
    """Just what precision_for reads of a Whisper model: its encoder's first weight."""
    weight = SimpleNamespace(dtype=dtype, device=torch.device(device))
    return SimpleNamespace(encoder=SimpleNamespace(conv1=SimpleNamespace(weight=weight)))


def test_every_refusal_is_one_message_from_one_place():
    with pytest.raises(ValueError, match=r"precision must be one of \('exact', 'int8'\), not 'fp8'"):
        DecodeOptions(precision="fp8")
    with pytest.raises(ValueError, match="hooks mode .* exact precision only"):
        DecodeOptions(cache="hooks", precision="int8")
    with pytest.raises(ValueError, match="int8 precision runs on the CPU only"):
        precision_for(_model(torch.float16, "cuda"), "int8")
    for name in PRECISIONS:
        check_precision(name, "static", "cpu")


def test_the_hooks_mode_runs_exact_whatever_was_asked():
    assert precision_with_cache("int8", "hooks") == "exact"
    assert precision_with_cache("int8", "static") == "int8"
    assert decode_options(DecodeOptions(precision="int8"), mode="hooks").precision == "exact"


def test_the_fast_mode_encodes_in_bfloat16_only_on_a_cpu_that_has_it(monkeypatch):
    monkeypatch.setattr(precision_module, "bf16_supported", lambda: True)
    monkeypatch.setattr(precision_module, "int8_matmul_supported", lambda: True)
    assert precision_for(_model(), "int8").encoder_dtype == "bfloat16"
    assert precision_for(_model(), "exact").encoder_dtype == "float32"
    assert precision_for(_model(torch.float16, "cuda"), "exact").encoder_dtype == "float16"
    monkeypatch.setattr(precision_module, "bf16_supported", lambda: False)
    assert precision_for(_model(), "int8").encoder_dtype == "int8"  # int8 linears instead, where fast
    monkeypatch.setattr(precision_module, "int8_matmul_supported", lambda: False)
    assert precision_for(_model(), "int8").encoder_dtype == "float32"


def test_what_each_precision_asks_of_the_decoder():
    exact, fast = precision_for(_model(), "exact"), precision_for(_model(), "int8")
    assert exact.exact and exact.exact_cross_kv
    assert not fast.exact and not fast.exact_cross_kv
    assert (exact.step_weights, fast.step_weights) == ("f16", "i8")
    assert exact.packs_steps and fast.packs_steps
    assert not precision_for(_model(torch.float16, "cuda"), "exact").packs_steps
