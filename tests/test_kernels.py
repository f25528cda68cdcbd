"""whisper_demo/kernels: the compact-weight matmuls and the attention kernel against
PyTorch's, and the decoder without them (no compiler) giving the same tokens."""

import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from whisper_demo import kernels
from whisper_demo.kernels import build

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def test_kernels_build_where_a_compiler_is():
    # CI installs g++ (scripts/test); elsewhere the fallback below is what runs
    if IN_CI or shutil.which("g++"):
        assert kernels.available(), kernels.unavailable_reason()


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 11])
def test_float16_matmul_is_pytorchs_up_to_float_rounding(rows):
    if not kernels.available():
        return  # covered by test_decoder_without_kernels_gives_the_same_tokens
    torch.manual_seed(0)
    weight = torch.randn(1000, 384).half().float()  # float16 values, as Whisper's
    bias = torch.randn(1000)
    x = torch.randn(rows, 384)
    packed = kernels.PackedLinear(weight, bias, "f16")
    out = packed(x)
    torch.testing.assert_close(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-4)
    # a row gives the same numbers alone or in a batch (decode steps vs a draft's forward)
    assert torch.equal(torch.cat([packed(x[i : i + 1]) for i in range(rows)]), out)
    assert packed.nbytes < weight.nbytes * 0.55


def test_float16_packing_refuses_weights_it_would_change():
    if not kernels.available():
        return
    with pytest.raises(ValueError, match="float16"):
        kernels.PackedLinear(torch.full((64, 64), 0.1), None, "f16")


# 1-8 rows: a step (greedy, beams, a batch); more: a prompt's prefill or a draft. Past a
# register tile's rows (3 on AVX2, 8 on AVX-512) the panel is widened once and read by tiles.
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 8, 11, 200])
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_int8_matmul_is_close_and_row_independent(rows, activation):
    if not kernels.available():
        return
    torch.manual_seed(0)
    weight, bias, x = torch.randn(500, 1536), torch.randn(500), torch.randn(rows, 1536)
    packed = kernels.PackedLinear(weight, bias, "i8", activation)
    out = packed(x)
    reference = F.linear(x, weight, bias)
    if activation == "gelu":
        reference = F.gelu(reference)
    assert (out - reference).abs().max() < 0.02 * reference.abs().max()
    # each row the same numbers alone as in any batch, bit for bit: batched pieces decode
    # as alone, and a draft's forward as the steps it stands for
    assert torch.equal(torch.cat([packed(x[i : i + 1]) for i in range(rows)]), out)
    assert torch.equal(torch.cat([packed(x[i : i + 3]) for i in range(0, rows, 3)]), out)


@pytest.mark.parametrize("kind", ["f16", "i8"])
def test_a_matmul_of_no_rows_gives_no_rows(kind):
    if not kernels.available():
        return
    # word timing asks the vocabulary projection for the logits of no position
    packed = kernels.PackedLinear(torch.randn(100, 64).half().float(), None, kind)
    assert packed(torch.empty(1, 0, 64)).shape == (1, 0, 100)


@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("length, dim", [(1500, 64), (437, 64), (437, 128)])
def test_attention_kernel_is_sdpa(rows, dtype, length, dim):
    """Cross-attention of a step's rows (beams): torch's attention up to rounding, at a
    window's 1500 frames and at a streamed decode's fewer (not a multiple of the panel
    width), with Whisper's head size and another; each row's numbers are those it gets
    alone (a beam's logits do not depend on the other beams)."""
    if not kernels.available():
        return
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 6, rows, dim), torch.randn(1, 6, length, dim), torch.randn(1, 6, length, dim)
    k_stored, v_stored = kernels.cross_key_layout(k, dtype), v.to(dtype).contiguous()
    assert kernels.can_attend(q, k_stored, v_stored)
    assert torch.equal(k_stored.float(), k.to(dtype).float())  # a view that still reads as K
    reference = F.scaled_dot_product_attention(q, k_stored.float(), v_stored.float())
    together = kernels.attend(q, k_stored, v_stored)
    torch.testing.assert_close(together, reference, rtol=1e-4, atol=1e-5)
    alone = torch.cat([kernels.attend(q[:, :, r:r + 1], k_stored, v_stored) for r in range(rows)], dim=2)
    assert torch.equal(together, alone)
    # K transposed with lines that end mid-panel would be read past their end: not taken
    unpadded = k.to(dtype).transpose(-1, -2).contiguous().transpose(-1, -2)
    assert kernels.can_attend(q, unpadded, v_stored) == (length % kernels.panel_width() == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_batch_of_audios_attends_in_one_call_as_each_row_alone(dtype):
    """attend_rows (a batch of pieces, batched.py): row r against its own audio's K/V gives
    exactly what `attend` gives that row alone, so a piece's numbers do not depend on the
    batch; and it is attention (torch's, up to rounding)."""
    if not kernels.available():
        return
    torch.manual_seed(0)
    rows = 5
    ks = [torch.randn(1, 6, 1500, 64) for _ in range(rows)]
    vs = [torch.randn(1, 6, 1500, 64) for _ in range(rows)]
    k_stored = [kernels.cross_key_layout(k, dtype) for k in ks]
    v_stored = [v.to(dtype).contiguous() for v in vs]
    q = torch.randn(1, 6, rows, 64)
    together = kernels.attend_rows(q, k_stored, v_stored)
    alone = torch.cat([kernels.attend(q[:, :, r:r + 1], k_stored[r], v_stored[r]) for r in range(rows)], dim=2)
    assert torch.equal(together, alone)
    reference = torch.cat([F.scaled_dot_product_attention(q[:, :, r:r + 1], k_stored[r].float(), v_stored[r].float())
                           for r in range(rows)], dim=2)
    torch.testing.assert_close(together, reference, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError):
        kernels.attend_rows(q, k_stored[:-1], v_stored[:-1])  # a row without its audio


@pytest.mark.parametrize("kind", ["f16", "i8"])
def test_gelu_is_fused_into_the_matmul(kind):
    if not kernels.available():
        return
    torch.manual_seed(0)
    weight, bias, x = torch.randn(1536, 384).half().float(), torch.randn(1536), torch.randn(1, 384)
    plain = kernels.PackedLinear(weight, bias, kind)
    fused = kernels.PackedLinear(weight, bias, kind, activation="gelu")
    torch.testing.assert_close(fused(x), F.gelu(plain(x)), rtol=1e-6, atol=1e-6)


def test_int8_gelu_is_the_erf_form_within_float32_rounding():
    if not kernels.available():
        return
    # identity weights (int8 scale 1/127: x * 127 * (1/127)), so the output is gelu(x) alone,
    # against the erf in double precision: the int8 path's rational erf (gelu_rational in
    # matmul.cpp) and libm's in the float16 path, across the range and past the clamp at 4
    x = torch.linspace(-10, 10, 96 * 1024).view(-1, 96)
    exact = x.double() * 0.5 * (1 + torch.special.erf(x.double() / math.sqrt(2)))
    for kind, bound in (("f16", 1e-6), ("i8", 2e-6)):
        packed = kernels.PackedLinear(torch.eye(96), None, kind, activation="gelu")
        if packed.scale is not None:
            packed.scale.fill_(1 / 127)  # exactly what x * 127 undoes, to float32 rounding
        error = (packed(x).double() - exact).abs()
        # float32's own rounding of outputs up to 10 is ~5e-7
        assert error.max() < bound, (kind, error.max().item())
    # and it is gelu, not the identity or a tanh form: far from both where they differ
    assert (packed(x) - x).abs().max() > 1
    tanh_form = F.gelu(x, approximate="tanh").double()
    assert (tanh_form - exact).abs().max() > 10 * bound


@pytest.mark.parametrize("beams,length", [(1, 1), (1, 37), (5, 200)])
def test_self_attention_kernel_is_sdpa_over_the_filled_positions(beams, length):
    if not kernels.available():
        return
    torch.manual_seed(0)
    q = torch.randn(beams, 6, 1, 64)
    k_cache, v_cache = torch.randn(beams, 6, 448, 64), torch.randn(beams, 6, 448, 64)
    k_cache[:, :, length:] = float("nan")  # never read: positions not written yet
    assert kernels.can_self_attend(q, k_cache, v_cache)
    reference = F.scaled_dot_product_attention(q, k_cache[:, :, :length], v_cache[:, :, :length])
    torch.testing.assert_close(kernels.self_attend(q, k_cache, v_cache, length), reference,
                               rtol=1e-5, atol=1e-5)


def test_kernel_calls_from_many_threads_at_once_give_each_its_own_numbers():
    """The team serves one call at a time; calls that find it busy run on their own thread.
    Either way a call's numbers are the ones it gets alone (a panel is summed in one order
    whichever thread runs it)."""
    if not kernels.available():
        return
    import threading

    torch.manual_seed(0)
    packed = kernels.PackedLinear(torch.randn(4096, 384).half().float(), None, "f16")
    packed.threads = 2  # through the team even on a one-core machine
    inputs = [torch.randn(1, 384) for _ in range(8)]
    alone = [packed(x) for x in inputs]
    results, errors = {}, []

    def worker(i):
        try:
            for _ in range(50):
                out = packed(inputs[i])
                if not torch.equal(out, alone[i]):
                    errors.append(i)
            results[i] = out
        except Exception as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(torch.equal(results[i], alone[i]) for i in range(len(inputs)))


def test_step_threads_gives_torch_one_thread_and_the_kernels_the_rest():
    if not kernels.available():
        return
    import threading

    outer = torch.get_num_threads()
    seen_elsewhere = []
    with kernels.step_threads():
        assert torch.get_num_threads() == 1  # torch's operators: this thread alone
        assert kernels.threads_for(kernels.PARALLEL_MIN_BYTES) == outer
        assert kernels.threads_for(kernels.PARALLEL_MIN_BYTES - 1) == 1
        with kernels.torch_threads():  # a prompt's matrix products
            assert torch.get_num_threads() == outer
        assert torch.get_num_threads() == 1
        with kernels.torch_threads(when=False):  # a step's few rows
            assert torch.get_num_threads() == 1
        other = threading.Thread(target=lambda: seen_elsewhere.append(torch.get_num_threads()))
        other.start()
        other.join()
    assert seen_elsewhere == [outer]  # another decode's thread keeps torch's count
    assert torch.get_num_threads() == outer


def test_step_threads_gives_mkls_vector_math_one_thread_too():
    """torch's exp and log1p thread by MKL's count, not OpenMP's: inside a step MKL's count
    for this thread is 1 (a sampled step's draw then leaves the other core to the kernels'
    helper), a prompt's matrix products get torch's count back, and another thread and
    the code after the step keep theirs."""
    if not kernels.available() or kernels.mkl_threads.max_threads() is None:
        return  # a torch without MKL: nothing to set
    import threading

    torch_before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        outer = kernels.mkl_threads.max_threads()
        assert outer == 2
        seen_elsewhere = []
        with kernels.step_threads():
            assert kernels.mkl_threads.max_threads() == 1
            with kernels.torch_threads():
                assert kernels.mkl_threads.max_threads() == outer
            assert kernels.mkl_threads.max_threads() == 1
            with kernels.step_threads():  # nested: still one, and the outer step's count after
                assert kernels.mkl_threads.max_threads() == 1
            assert kernels.mkl_threads.max_threads() == 1
            other = threading.Thread(target=lambda: seen_elsewhere.append(kernels.mkl_threads.max_threads()))
            other.start()
            other.join()
        assert seen_elsewhere == [outer]
        assert kernels.mkl_threads.max_threads() == outer
    finally:
        torch.set_num_threads(torch_before)


@pytest.mark.model  # and in a child process
def test_decoder_without_kernels_gives_the_same_tokens():
    """WHISPER_KV_NO_KERNELS=1 (as on a machine without a compiler): PyTorch's float32 path,
    and the exact mode's tokens are the kernels' (and openai-whisper's). The fast mode's
    vocabulary projection is then exact's float32 one, not torch's dynamic int8 (which
    made long files loop: runner.py)."""
    code = ("import sys; from whisper_demo import kernels; from whisper_demo.models import load_model;"
            "from whisper_demo.audio import load_audio; from whisper_demo.decode import transcribe;"
            "from whisper_demo.examples import clip_path;"
            "from whisper_demo.runner import decoder_runner;"
            "m = load_model('tiny.en', device='cpu', progress=False);"
            "import torch; x = torch.randn(3, 384);"
            "print(kernels.available(), decoder_runner(m).kind, decoder_runner(m, 'int8').kind,"
            " torch.equal(decoder_runner(m, 'int8').logits(x), decoder_runner(m).logits(x)));"
            "print(transcribe(m, load_audio(clip_path('jfk.wav'))).tokens)")
    env = {**os.environ, "WHISPER_KV_NO_KERNELS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300, check=True)
    status, tokens = done.stdout.strip().splitlines()[-2:]
    assert status == "False None None True"
    from whisper_demo.audio import load_audio
    from whisper_demo.decode import transcribe
    from whisper_demo.examples import clip_path
    from whisper_demo.models import load_model

    model = load_model("tiny.en", device="cpu", progress=False)
    assert str(transcribe(model, load_audio(clip_path("jfk.wav"))).tokens) == tokens


def test_the_idle_panel_says_which_path_decoder_steps_take(monkeypatch):
    from types import SimpleNamespace

    from whisper.model import ModelDimensions

    from whisper_demo.ui.render import panel

    dims = ModelDimensions(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4)
    model = SimpleNamespace(dims=dims, decoder=SimpleNamespace(token_embedding=SimpleNamespace(weight=torch.zeros(1))))
    assert "Decoder steps" not in panel.panel_html(None, model)  # nothing to say when the kernels load
    monkeypatch.setattr(build, "_lib", None)
    monkeypatch.setattr(build, "_error", "RuntimeError: no C++ compiler (g++) found")
    assert "PyTorch&#x27;s float32 matmul" in panel.panel_html(None, model)
    assert "no C++ compiler (g++) found" in panel.panel_html(None, model)


def test_kernels_are_not_built_where_the_cpu_cannot_run_them(monkeypatch):
    """On ARM (or an x86 without AVX2/F16C) the build is not tried: PyTorch's path runs and
    the reason says why."""
    import platform

    assert kernels.unsupported_cpu() is None  # this machine runs them
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert "aarch64" in kernels.unsupported_cpu()
    monkeypatch.setattr(build, "_lib", None)
    monkeypatch.setattr(build, "_error", None)
    monkeypatch.setattr(build, "_compile", lambda *a: pytest.fail("compiled on a CPU it cannot run on"))
    assert kernels.library() is None
    assert "x86-64" in kernels.unavailable_reason() and "aarch64" in kernels.describe_path()
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(build, "cpu_flags", lambda: "flags : fpu sse sse2 avx")
    assert kernels.unsupported_cpu() == "this CPU lacks avx2 and f16c"
