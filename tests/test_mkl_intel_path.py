"""MKL's Intel kernels on any x86-64 CPU (``make mkl-intel-path``, ``make repro
MKL_INTEL_PATH=1``): the library switches MKL's kernels where the CPU is not Intel's and changes
nothing where it is; the benchmark compares the two sides."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from twirls.bench import mkl_intel_path
from twirls.train.cpu import mkl_code_path

REPO = Path(__file__).resolve().parents[1]
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="no `make` on the PATH")


def make(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "-C", str(REPO), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def intel_cpu() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.is_file() and "GenuineIntel" in cpuinfo.read_text()


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    if mkl_code_path() is None:
        pytest.skip("torch has no MKL here (x86-64 Linux has it)")
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler to build the library with")
    venv = tmp_path_factory.mktemp("venv")
    done = make("mkl-intel-path", f"VENV={venv}")
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "lib" / "libmkl_intel_path.so"


@needs_make
def test_make_repro_preloads_the_library_only_when_asked(tmp_path):
    lib = tmp_path / "lib" / "libmkl_intel_path.so"
    asked = make("-n", "repro", "MKL_INTEL_PATH=1", f"VENV={tmp_path}").stdout
    assert f'LD_PRELOAD="{lib}" ' in asked
    assert f"-o {tmp_path}/lib/libmkl_intel_path.so -" in asked  # built first, where missing
    for off in ([], ["MKL_INTEL_PATH=0"]):
        plain = make("-n", "repro", *off, f"VENV={tmp_path}").stdout
        assert "dvc repro" in plain and "LD_PRELOAD" not in plain and "mkl_serv" not in plain


@needs_make
def test_without_a_compiler_make_says_what_to_do(tmp_path):
    done = make("mkl-intel-path", f"VENV={tmp_path}", "CC=no-such-compiler")
    assert done.returncode != 0
    assert "needs a C compiler (no-such-compiler)" in done.stdout
    assert "leave MKL_INTEL_PATH out" in done.stdout


@needs_make
def test_the_library_switches_mkl_on_other_vendors_cpus_only(library, tmp_path):
    out = tmp_path / "mkl.json"
    assert mkl_intel_path.main(["--lib", str(library), "--configs", "--repeats", "1",
                                "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    intel = intel_cpu()
    assert record["sides"]["generic"]["mkl"] == ("intel" if intel else "generic")
    assert record["sides"]["intel"]["mkl"] == "intel"
    same = [kernel["same_bits"] for kernel in record["kernels"].values()]
    assert len(same) == len(mkl_intel_path.DENSE) + len(mkl_intel_path.CSR_WIDTHS)
    if intel:  # MKL already ran its Intel kernels: the same products, bit for bit
        assert all(same)
    else:  # other kernels, other rounding: proof that MKL switched
        assert not all(same)


def test_child_processes_preload_the_library_or_not(monkeypatch):
    lib = Path("/x/libmkl_intel_path.so")
    monkeypatch.setenv("LD_PRELOAD", f"/y/other.so {lib}")
    assert mkl_intel_path.child_env("generic", lib)["LD_PRELOAD"] == "/y/other.so"
    assert mkl_intel_path.child_env("intel", lib)["LD_PRELOAD"] == f"/y/other.so {lib}"
    monkeypatch.delenv("LD_PRELOAD")
    assert "LD_PRELOAD" not in mkl_intel_path.child_env("generic", lib)


def test_the_benchmark_without_the_library_says_how_to_build_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        mkl_intel_path.main(["--lib", str(tmp_path / "missing.so"), "--out",
                             str(tmp_path / "out.json")])
    assert stop.value.code == 2
    assert "build it with `make mkl-intel-path`" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_a_process_knows_its_kernels_and_its_journal_keys_them(library):
    code = ("from twirls.train.cpu import mkl_code_path; from twirls.train import journal; "
            "print(mkl_code_path(), f'mkl={mkl_code_path()}' in journal.machine())")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    preloaded = subprocess.run([sys.executable, "-c", code], env={**env, "LD_PRELOAD":
                                                                 str(library)},
                               capture_output=True, text=True, check=True).stdout.strip()
    assert plain == ("intel True" if intel_cpu() else "generic True")
    assert preloaded == "intel True"  # and a stopped stage's journal keeps the kernels apart
