"""The benchmarks' one entry point: it lists every benchmark, runs each by name, and the
product never imports from the benchmark package."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from whisper_demo.bench import BENCHMARKS
from whisper_demo.bench.__main__ import main

PACKAGE = Path(__file__).resolve().parent.parent / "whisper_demo"


def test_no_name_lists_every_benchmark_with_a_line(capsys):
    assert main([]) == 0
    printed = capsys.readouterr().out
    for name, what in BENCHMARKS.items():
        assert re.search(rf"^\s+{name}\s+{re.escape(what)}$", printed, re.M), name


def test_every_listed_benchmark_is_a_module_with_main():
    for name in BENCHMARKS:
        assert callable(importlib.import_module(f"whisper_demo.bench.{name}").main), name


def test_an_unknown_name_is_refused_with_the_list(capsys):
    assert main(["no_such_bench"]) == 2
    assert "decode_speed" in capsys.readouterr().err


@pytest.mark.process
def test_the_eval_folder_comes_from_the_environment_when_set(tmp_path):
    # a fresh interpreter: the setting is read once, when data.py is imported
    code = "from whisper_demo.bench.data import DEFAULT_EVAL_DIR; print(DEFAULT_EVAL_DIR)"
    env = {**os.environ, "WHISPER_KV_EVAL_DIR": str(tmp_path)}
    printed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True, cwd=PACKAGE.parent).stdout.strip()
    assert printed == str(tmp_path)


@pytest.mark.process
def test_a_benchmark_measures_with_openmp_threads_waiting_passively():
    # set by the package before any benchmark module loads torch, however it is run
    code = "import os, whisper_demo.bench.draft; print(os.environ.get('OMP_WAIT_POLICY'))"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    printed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True, cwd=PACKAGE.parent).stdout.strip()
    assert printed == "PASSIVE"


def test_the_product_never_imports_the_benchmarks():
    importers = []
    for path in PACKAGE.rglob("*.py"):
        if "bench" in path.relative_to(PACKAGE).parts[:1]:
            continue
        if re.search(r"^\s*(from|import)\s+(whisper_demo\.bench|\.+bench)\b", path.read_text(), re.M):
            importers.append(str(path.relative_to(PACKAGE)))
    assert importers == []


def test_the_manifest_is_read_in_one_place(tmp_path):
    from whisper_demo.bench.data import manifest

    assert manifest(tmp_path) == [] and manifest(None) == []
    with pytest.raises(FileNotFoundError, match="WHISPER_KV_EVAL_DIR"):
        manifest(tmp_path, required=True)
    (tmp_path / "manifest.jsonl").write_text('{"id": "a", "audio": "a.wav", "reference": "hi"}\n\n')
    assert manifest(tmp_path) == [{"id": "a", "audio": "a.wav", "reference": "hi"}]
